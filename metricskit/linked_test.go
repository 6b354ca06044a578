package metricskit_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkLinkedRSS builds and starts two programs that serve metrics behind a filter,
// controller-runtime's (filters.WithAuthenticationAndAuthorization) and metricskit's, and reports
// each one's resident memory once it serves (after a collection): anonymous, file-backed (the
// binary's pages it touched) and in all, and the binary's size. What a component pays for its
// filter is the difference.
func BenchmarkLinkedRSS(b *testing.B) {
	for _, prog := range []string{"controllerruntime", "metricskit"} {
		b.Run(prog, func(b *testing.B) {
			bin := filepath.Join(b.TempDir(), prog)
			build := exec.Command("go", "build", "-o", bin, "./internal/linked/"+prog)
			build.Stderr = os.Stderr
			require.NoError(b, build.Run())
			st, err := os.Stat(bin)
			require.NoError(b, err)
			var anon, file, all float64
			for b.Loop() {
				a, f, r := startedRSS(b, bin)
				anon, file, all = anon+a, file+f, all+r
			}
			n := float64(b.N)
			b.ReportMetric(anon/n, "anon-MiB")
			b.ReportMetric(file/n, "file-MiB")
			b.ReportMetric(all/n, "rss-MiB")
			b.ReportMetric(float64(st.Size())/(1<<20), "binary-MiB")
		})
	}
}

// startedRSS starts bin, waits for its "ready" and returns its RssAnon, RssFile and VmRSS in MiB.
func startedRSS(b *testing.B, bin string) (anon, file, rss float64) {
	cmd := exec.Command(bin)
	in, err := cmd.StdinPipe()
	require.NoError(b, err)
	out, err := cmd.StdoutPipe()
	require.NoError(b, err)
	cmd.Stderr = os.Stderr
	require.NoError(b, cmd.Start())
	defer func() { _ = in.Close(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(b, err)
	require.Equal(b, "ready\n", line)
	status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "status"))
	require.NoError(b, err)
	kib := map[string]float64{}
	for l := range strings.SplitSeq(string(status), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if f := strings.Fields(v); ok && len(f) == 2 && f[1] == "kB" {
			n, err := strconv.ParseFloat(f[0], 64)
			require.NoError(b, err)
			kib[k] = n
		}
	}
	require.Contains(b, kib, "RssAnon")
	return kib["RssAnon"] / 1024, kib["RssFile"] / 1024, kib["VmRSS"] / 1024
}
