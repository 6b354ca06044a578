package realstack

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
	"github.com/coffer-backup/coffer/verifier/internal/kopiarepo"
)

// BenchmarkVolumeDataChecksum compares checksum-only's reading of a volume's data (package
// kopiarepo: every file of the snapshot read whole from the store, each content verified, each
// file's SHA-256 computed) with kopia's own verification of the same snapshot (the kopia v0.22.3
// CLI, `snapshot verify --verify-files-percent=100`, which reads every file too), in the same run,
// against the same repository in the shared MinIO: 256 MiB in 64 files, half random, half
// compressible, in Velero's layout. Both start without a cache. Peers come from
// COFFER_PEERS_BIN=$(hack/testbin.sh --peers), as make bench sets it.
func BenchmarkVolumeDataChecksum(b *testing.B) {
	bin := os.Getenv("COFFER_PEERS_BIN")
	if bin == "" {
		b.Skip("COFFER_PEERS_BIN is not set: COFFER_PEERS_BIN=$(hack/testbin.sh --peers), as make bench sets it")
	}
	ctx := context.Background()
	dir := b.TempDir()
	const files, fileSize = 64, 4 << 20
	rng := rand.NewChaCha8([32]byte{7})
	for i := range files {
		data := make([]byte, fileSize)
		if i%2 == 0 {
			_, _ = io.ReadFull(rng, data)
		} else {
			copy(data, bytes.Repeat([]byte(fmt.Sprintf("row %d of a compressible table;", i)), fileSize/24+1))
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d", i)), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	ns := uniq("bench-vd")
	loc, snap := volumeRepo(b, ns, dir)
	work := b.TempDir()
	kopia := func(args ...string) []byte {
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "kopia"), args...)
		cmd.Env = append(os.Environ(), "KOPIA_PASSWORD="+loc.Password, "KOPIA_CONFIG_PATH="+filepath.Join(work, "kopia.config"),
			"KOPIA_CACHE_DIRECTORY="+filepath.Join(work, "kopia-cache"), "KOPIA_LOG_DIR="+filepath.Join(work, "kopia-logs"), "KOPIA_CHECK_FOR_UPDATES=false")
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("kopia %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	kopia("repository", "connect", "s3", "--bucket="+velerostack.Bucket, "--prefix="+loc.Prefix, "--endpoint="+loc.Endpoint, "--disable-tls",
		"--access-key="+loc.AccessKey, "--secret-access-key="+loc.SecretKey, "--readonly")
	const total = files * fileSize
	for range b.N {
		t0 := time.Now()
		r, err := kopiarepo.Open(ctx, loc)
		if err != nil {
			b.Fatal(err)
		}
		st, err := r.Read(ctx, snap, func(kopiarepo.File) error { return nil })
		r.Close(ctx)
		coffer := time.Since(t0)
		if err != nil || st.Bytes != total || st.Files != files {
			b.Fatalf("reading the snapshot: %v (%d files, %d bytes)", err, st.Files, st.Bytes)
		}
		if err := os.RemoveAll(filepath.Join(work, "kopia-cache")); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		kopia("snapshot", "verify", "--verify-files-percent=100", snap)
		peer := time.Since(t1)
		b.ReportMetric(coffer.Seconds(), "coffer-s")
		b.ReportMetric(peer.Seconds(), "kopia-verify-s")
		mib := float64(total) / (1 << 20)
		fmt.Fprintf(os.Stdout, "| 256 MiB volume snapshot | checksum-only (kopiarepo) %.2f s, %.0f MiB/s | kopia snapshot verify --verify-files-percent=100 %.2f s, %.0f MiB/s | ratio %.2f |\n",
			coffer.Seconds(), mib/coffer.Seconds(), peer.Seconds(), mib/peer.Seconds(), coffer.Seconds()/peer.Seconds())
	}
}
