package agent

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
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
