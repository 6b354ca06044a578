package agent

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
	"time"

	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// BenchmarkIncremental is the nightly case, side by side in one run: the incompressible tree of
// BenchmarkPeers (256 MiB, 256 files) backed up in full, again after 2 % of its files (5) were
// rewritten, and again unchanged; then the last backup restored (peers' caches emptied first, as
// after a loss). Tools: coffer-agent's chunked format (age and a chunk key), its tar format (a
// full copy each time), restic and kopia (their defaults, encrypted). Files are a second old when
// each backup starts (the benchmark waits outside the timing): the chunked format reads again a
// file changed within a second before the last backup, which a nightly backup never meets.
// Reported: each backup's seconds, the restore's, the bytes stored after the three, and the peak
// RSS (the peers' processes; the agent's is the benchmark process's VmHWM, test harness included).
func BenchmarkIncremental(b *testing.B) {
	bin := os.Getenv(EnvPeersBin)
	if bin == "" {
		b.Skipf("%s is not set: COFFER_PEERS_BIN=$(hack/testbin.sh --peers)", EnvPeersBin)
	}
	ApplyMemoryLimit(os.Getenv) // as coffer-agent's main does
	ctx := context.Background()
	recipients, keyRef, ids := benchKeys(b)
	for _, tool := range []string{"coffer-chunked", "coffer-tar", "restic", "kopia"} {
		b.Run(tool, func(b *testing.B) {
			var full, changed, unchanged, restore time.Duration
			var stored, peak int64
			for i := range b.N {
				b.StopTimer()
				tree := benchTree(b, "random")
				bucket := newBucket(b)
				e := env(b, jobv1.ModeBackup, bucket, tree)
				client, err := NewClient(e[jobv1.ParamEnvName("endpoint")], "", e[EnvAccessKeyID], e[EnvSecretAccessKey])
				if err != nil {
					b.Fatal(err)
				}
				a := &Agent{S3: client, Log: devNull{}, CompressionLevel: DefaultCompressionLevel, Recipients: recipients, KeyRef: keyRef, Identities: ids,
					Chunked: tool == "coffer-chunked", ChunkKey: testChunkKey}
				p := &peer{bin: bin, tool: tool, bucket: bucket, host: store(b).S3Endpoint, id: e[EnvAccessKeyID], secret: e[EnvSecretAccessKey], work: b.TempDir()}
				if tool == "restic" || tool == "kopia" {
					p.init(b, i)
				}
				var last *jobv1.ArtifactReport
				resetPeakRSS()
				backup := func(n int) time.Duration {
					time.Sleep(1100 * time.Millisecond) // settled files, outside the timing
					b.StartTimer()
					start := time.Now()
					if tool == "coffer-chunked" || tool == "coffer-tar" {
						if last, err = a.Backup(ctx, tree, bucket, fmt.Sprintf("ns/backup-%d.tar", n)); err != nil {
							b.Fatal(err)
						}
					} else {
						peak = max(peak, p.backup(b, tree))
					}
					d := time.Since(start)
					b.StopTimer()
					return d
				}
				full += backup(0)
				rng := rand.New(rand.NewPCG(uint64(i), 7))
				for f := range 5 { // 5 of 256 files: 2 %
					writeRandom(b, filepath.Join(tree, fmt.Sprintf("dir-%02d", f), "file-007"), 1<<20, rng)
				}
				changed += backup(1)
				unchanged += backup(2)
				stored += bucketBytes(b, client, bucket)

				target := b.TempDir()
				p.dropCache(b)
				b.StartTimer()
				start := time.Now()
				if tool == "coffer-chunked" || tool == "coffer-tar" {
					bkt, key := keyOf(b, last)
					if _, err := a.Restore(ctx, target, Artifact{Bucket: bkt, Key: key, Checksum: last.Checksum, SizeBytes: last.SizeBytes}); err != nil {
						b.Fatal(err)
					}
				} else {
					peak = max(peak, p.restore(b, tree, target))
				}
				restore += time.Since(start)
				b.StopTimer()
				if tool == "coffer-chunked" || tool == "coffer-tar" {
					if rss, ok := peakRSS(); ok {
						peak = max(peak, rss)
					}
				}
				if err := compareTrees(tree, p.restored(tree, target)); err != nil {
					b.Fatal(err)
				}
			}
			n := float64(b.N)
			b.ReportMetric(full.Seconds()/n, "full-s")
			b.ReportMetric(changed.Seconds()/n, "changed-2%-s")
			b.ReportMetric(unchanged.Seconds()/n, "unchanged-s")
			b.ReportMetric(restore.Seconds()/n, "restore-s")
			b.ReportMetric(float64(stored)/n/1e6, "stored-MB")
			b.ReportMetric(float64(peak)/(1<<20), "peak-RSS-MiB")
		})
	}
}

type devNull struct{}

func (devNull) Write(p []byte) (int, error) { return len(p), nil }

// EnvBenchFiles sets how many small files BenchmarkManySmallFiles backs up (default 100,000).
const EnvBenchFiles = "COFFER_BENCH_FILES"

// BenchmarkManySmallFiles backs up a tree of many 1 KiB files (COFFER_BENCH_FILES, 100 per
// directory) in the tar format and twice in the chunked format (the second with nothing changed),
// under the agent's memory limit, and reports each backup's seconds, peak Go heap and the
// process's peak RSS (reset before each): what a backup's memory grows with, the manifest (both
// formats) and, for chunked backups, the last backup's files/ record and the chunks' index.
func BenchmarkManySmallFiles(b *testing.B) {
	ApplyMemoryLimit(os.Getenv)
	n := envCount(b, EnvBenchFiles, 100_000)
	ctx := context.Background()
	recipients, keyRef, ids := benchKeys(b)
	tree := b.TempDir()
	rng := rand.New(rand.NewPCG(3, 3))
	data := make([]byte, 1024)
	for i := range n {
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		p := filepath.Join(tree, fmt.Sprintf("d%05d", i/100), fmt.Sprintf("f%03d", i%100))
		if i%100 == 0 {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				b.Fatal(err)
			}
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(1100 * time.Millisecond) // settled files
	bucket := newBucket(b)
	e := env(b, jobv1.ModeBackup, bucket, tree)
	client, err := NewClient(e[jobv1.ParamEnvName("endpoint")], "", e[EnvAccessKeyID], e[EnvSecretAccessKey])
	if err != nil {
		b.Fatal(err)
	}
	for _, run := range []struct {
		name    string
		chunked bool
	}{{"tar", false}, {"chunked-first", true}, {"chunked-unchanged", true}} {
		b.Run(run.name, func(b *testing.B) {
			a := &Agent{S3: client, Log: devNull{}, CompressionLevel: DefaultCompressionLevel, Recipients: recipients, KeyRef: keyRef, Identities: ids,
				Chunked: run.chunked, ChunkKey: testChunkKey}
			var elapsed time.Duration
			var heap uint64
			var rss int64
			for i := range b.N {
				debug.FreeOSMemory()
				resetPeakRSS()
				stop := heapSampler()
				start := time.Now()
				if _, err := a.Backup(ctx, tree, bucket, fmt.Sprintf("ns/%s-%d.tar", run.name, i)); err != nil {
					b.Fatal(err)
				}
				elapsed += time.Since(start)
				heap = max(heap, stop())
				if r, ok := peakRSS(); ok {
					rss = max(rss, r)
				}
			}
			b.ReportMetric(elapsed.Seconds()/float64(b.N), "backup-s")
			b.ReportMetric(float64(heap)/(1<<20), "peak-heap-MiB")
			b.ReportMetric(float64(rss)/(1<<20), "peak-RSS-MiB")
		})
	}
}

// envCount is the positive number the environment variable name holds, or def when it is unset.
func envCount(b *testing.B, name string, def int) int {
	n := def
	if s := os.Getenv(name); s != "" {
		if _, err := fmt.Sscan(s, &n); err != nil || n < 1 {
			b.Fatalf("%s=%q is not a positive number", name, s)
		}
	}
	return n
}
