package agent

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/minio/minio-go/v7"

	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// BenchmarkIncremental is the nightly case, side by side in one run: an incompressible tree
// (COFFER_BENCH_MIB files of 1 MiB, 256 by default; COFFER_BENCH_KIND=json: compressible) backed up in full, again after
// COFFER_BENCH_CHURN % of its files (2 by default; at least one) were rewritten, and again
// unchanged; then the last backup restored (peers' caches emptied first, as after a loss). Tools
// (COFFER_BENCH_TOOLS, a comma-separated subset): coffer-agent's chunked format (age and a chunk
// key), its tar format (a full copy each time), restic and kopia (their defaults, encrypted). For
// the chunked format, the first Backup is then deleted and maintenance run twice (condemn, then
// delete). Files are a second old when each backup starts (the benchmark waits outside the
// timing): the chunked format reads again a file changed within a second before the last backup,
// which a nightly backup never meets. Reported: each backup's seconds, the bytes the changed
// backup added to the store (a percentage of the tree), the restore's seconds, the bytes stored
// after the three, and peak RSS of the backups and of the restore apart (the peers' processes;
// the agent's is the benchmark process's VmHWM, reset before each) and of maintenance. Each run's
// bucket is emptied and removed after it.
func BenchmarkIncremental(b *testing.B) {
	bin := os.Getenv(EnvPeersBin)
	if bin == "" {
		b.Skipf("%s is not set: COFFER_PEERS_BIN=$(hack/testbin.sh --peers)", EnvPeersBin)
	}
	ApplyMemoryLimit(os.Getenv) // as coffer-agent's main does
	ctx := context.Background()
	keys := benchKeysOf(b)
	mib := envCount(b, "COFFER_BENCH_MIB", 256)
	churn := envCount(b, "COFFER_BENCH_CHURN", 2)
	changedFiles := max(1, mib*churn/100)
	for _, tool := range benchTools(b, "coffer-chunked", "coffer-tar", "restic", "kopia") {
		b.Run(tool, func(b *testing.B) {
			var full, changed, unchanged, restore, maint time.Duration
			var stored, added, backupRSS, restoreRSS, maintRSS int64
			for i := range b.N {
				b.StopTimer()
				tree, bucket, client, a, p := incrementalSetup(b, bin, tool, i, keys, mib)
				var err error
				var first, last *jobv1.ArtifactReport
				debug.FreeOSMemory()
				resetPeakRSS()
				backup := func(n int) time.Duration {
					settle()
					b.StartTimer()
					start := time.Now()
					if tool == "coffer-chunked" || tool == "coffer-tar" {
						if last, err = a.Backup(ctx, tree, bucket, fmt.Sprintf("ns/backup-%d.tar", n)); err != nil {
							b.Fatal(err)
						}
					} else {
						backupRSS = max(backupRSS, p.backup(b, tree))
					}
					d := time.Since(start)
					b.StopTimer()
					return d
				}
				full += backup(0)
				first = last
				before := bucketBytes(b, client, bucket)
				rng := rand.New(rand.NewPCG(uint64(i), 7))
				for f := range changedFiles { // spread over the directories
					rewrite(b, filepath.Join(tree, fmt.Sprintf("dir-%02d", f%((mib+31)/32)), fmt.Sprintf("file-%03d", (7+f/((mib+31)/32))%32)), rng)
				}
				changed += backup(1)
				added += bucketBytes(b, client, bucket) - before
				unchanged += backup(2)
				stored += bucketBytes(b, client, bucket)
				if last != nil {
					if rss, ok := peakRSS(); ok {
						backupRSS = max(backupRSS, rss)
					}
				}

				debug.FreeOSMemory()
				resetPeakRSS()
				d, rss := restoreLast(b, a, p, tree, last)
				restore += d
				restoreRSS = max(restoreRSS, rss)

				if tool == "coffer-chunked" {
					deleteBackup(b, a, first)
					debug.FreeOSMemory()
					resetPeakRSS()
					start := time.Now()
					for run := range 2 {
						if run > 0 {
							time.Sleep(1100 * time.Millisecond) // the store's clock tells the runs apart
						}
						if _, err := a.Maintain(ctx, bucket, "ns/.coffer", time.Hour); err != nil {
							b.Fatal(err)
						}
					}
					maint += time.Since(start) - 1100*time.Millisecond
					if rss, ok := peakRSS(); ok {
						maintRSS = max(maintRSS, rss)
					}
				}
			}
			n := float64(b.N)
			b.ReportMetric(full.Seconds()/n, "full-s")
			b.ReportMetric(changed.Seconds()/n, "changed-s")
			b.ReportMetric(float64(added)/n/float64(int64(mib)<<20)*100, "changed-added-%")
			b.ReportMetric(unchanged.Seconds()/n, "unchanged-s")
			b.ReportMetric(restore.Seconds()/n, "restore-s")
			b.ReportMetric(float64(stored)/n/1e6, "stored-MB")
			b.ReportMetric(float64(backupRSS)/(1<<20), "backup-RSS-MiB")
			b.ReportMetric(float64(restoreRSS)/(1<<20), "restore-RSS-MiB")
			if tool == "coffer-chunked" {
				b.ReportMetric(maint.Seconds()/n, "maintain-s")
				b.ReportMetric(float64(maintRSS)/(1<<20), "maintain-RSS-MiB")
			}
		})
	}
}

// benchTools is the tools of all that COFFER_BENCH_TOOLS names (comma-separated), or all.
func benchTools(b *testing.B, all ...string) []string {
	s := os.Getenv("COFFER_BENCH_TOOLS")
	if s == "" {
		return all
	}
	var out []string
	for _, t := range strings.Split(s, ",") {
		if !slices.Contains(all, t) {
			b.Fatalf("COFFER_BENCH_TOOLS names %q: not one of %v", t, all)
		}
		out = append(out, t)
	}
	return out
}

type devNull struct{}

func (devNull) Write(p []byte) (int, error) { return len(p), nil }

// EnvBenchFiles sets how many small files BenchmarkManySmallFiles backs up (default 100,000).
const EnvBenchFiles = "COFFER_BENCH_FILES"

// BenchmarkManySmallFiles backs up a tree of many 1 KiB files (COFFER_BENCH_FILES, 100 per
// directory) in the tar format and twice in the chunked format (the second with nothing changed),
// restores the last chunked backup, deletes the first and runs maintenance once, under the
// agent's memory limit, and reports each step's seconds, peak Go heap and the process's peak RSS
// (reset before each): what memory grows with, the manifest (both formats) and, for chunked
// backups, the last backup's files/ record and the chunks' index; for the restore, the index and
// the paths it created; for maintenance, the packs.
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
	reports := map[string]*jobv1.ArtifactReport{}
	measure := func(b *testing.B, f func() error) {
		var elapsed time.Duration
		var heap uint64
		var rss, base int64
		for range b.N {
			debug.FreeOSMemory()
			resetPeakRSS()
			if r, ok := currentRSS(); ok {
				base = max(base, r)
			}
			stop := heapSampler()
			start := time.Now()
			if err := f(); err != nil {
				b.Fatal(err)
			}
			elapsed += time.Since(start)
			heap = max(heap, stop())
			if r, ok := peakRSS(); ok {
				rss = max(rss, r)
			}
		}
		b.ReportMetric(elapsed.Seconds()/float64(b.N), "s")
		b.ReportMetric(float64(heap)/(1<<20), "peak-heap-MiB")
		b.ReportMetric(float64(rss)/(1<<20), "peak-RSS-MiB")
		b.ReportMetric(float64(base)/(1<<20), "base-RSS-MiB")
	}
	agent := func(chunked bool) *Agent {
		return &Agent{S3: client, Log: devNull{}, CompressionLevel: DefaultCompressionLevel, Recipients: recipients, KeyRef: keyRef, Identities: ids,
			Chunked: chunked, ChunkKey: testChunkKey}
	}
	for _, run := range []struct {
		name    string
		chunked bool
	}{{"tar", false}, {"chunked-first", true}, {"chunked-unchanged", true}} {
		b.Run(run.name, func(b *testing.B) {
			a := agent(run.chunked)
			i := 0
			measure(b, func() (err error) {
				reports[run.name], err = a.Backup(ctx, tree, bucket, fmt.Sprintf("ns/%s-%d.tar", run.name, i))
				i++
				return err
			})
		})
	}
	// The last chunked backup restored into an empty directory (staged, then moved into place).
	b.Run("chunked-restore", func(b *testing.B) {
		last := reports["chunked-unchanged"]
		if last == nil {
			b.Fatal("no chunked backup to use: run it with the backups (-bench ManySmallFiles)")
		}
		bkt, key := keyOf(b, last)
		measure(b, func() error {
			_, err := agent(true).Restore(ctx, b.TempDir(), Artifact{Bucket: bkt, Key: key, Checksum: last.Checksum, SizeBytes: last.SizeBytes})
			return err
		})
	})
	// Maintenance of the repository once the first chunked Backup is gone: two runs (condemn,
	// then delete); what it deletes is little (the unchanged backup named the same chunks).
	b.Run("maintain", func(b *testing.B) {
		first := reports["chunked-first"]
		if first == nil {
			b.Fatal("no chunked backup to use: run it with the backups (-bench ManySmallFiles)")
		}
		a := agent(true)
		deleteBackup(b, a, first)
		measure(b, func() error {
			_, err := a.Maintain(ctx, bucket, "ns/.coffer", time.Hour)
			return err
		})
	})
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

// benchKeys are the age keys of the benchmarks' encrypted backups.
type benchKeySet struct {
	recipients []age.Recipient
	keyRef     string
	ids        *Identities
}

func benchKeysOf(b *testing.B) benchKeySet {
	r, k, ids := benchKeys(b)
	return benchKeySet{r, k, ids}
}

// benchKind is the kind of tree the incremental benchmarks back up: COFFER_BENCH_KIND, random
// (incompressible, the default) or json (compressible log lines).
func benchKind(b *testing.B) string {
	switch k := os.Getenv("COFFER_BENCH_KIND"); k {
	case "", "random":
		return "random"
	case "json":
		return k
	default:
		b.Fatalf("COFFER_BENCH_KIND=%q is not random or json", k)
		return ""
	}
}

// rewrite writes a new 1 MiB file at p of the benchmark's kind.
func rewrite(b *testing.B, p string, rng *rand.Rand) {
	if benchKind(b) == "random" {
		writeRandom(b, p, 1<<20, rng)
		return
	}
	if err := os.WriteFile(p, appendJSONLines(nil, rng, 1<<20), 0o644); err != nil {
		b.Fatal(err)
	}
}

// incrementalSetup makes run i of tool: a fresh tree of mib MiB (of benchKind) and bucket (removed after the run), the agent (chunked or tar,
// encrypted) and the peer (its repository created for restic and kopia).
func incrementalSetup(b *testing.B, bin, tool string, i int, keys benchKeySet, mib int) (string, string, *minio.Client, *Agent, *peer) {
	tree := benchTreeOf(b, benchKind(b), mib)
	bucket := newBucket(b)
	b.Cleanup(func() { dropBucket(b, bucket) })
	e := env(b, jobv1.ModeBackup, bucket, tree)
	client, err := NewClient(e[jobv1.ParamEnvName("endpoint")], "", e[EnvAccessKeyID], e[EnvSecretAccessKey])
	if err != nil {
		b.Fatal(err)
	}
	a := &Agent{S3: client, Log: devNull{}, CompressionLevel: DefaultCompressionLevel, Recipients: keys.recipients, KeyRef: keys.keyRef, Identities: keys.ids,
		Chunked: tool == "coffer-chunked", ChunkKey: testChunkKey}
	p := &peer{bin: bin, tool: tool, bucket: bucket, host: store(b).S3Endpoint, id: e[EnvAccessKeyID], secret: e[EnvSecretAccessKey], work: b.TempDir()}
	if tool == "restic" || tool == "kopia" {
		p.init(b, i)
	}
	return tree, bucket, client, a, p
}

// restoreLast restores the last backup (the agent's report last, or the peer's latest snapshot)
// with the peers' caches emptied, checks it against tree, and returns how long it took and the
// peak RSS seen (the peer's, or the benchmark process's for the agent).
func restoreLast(b *testing.B, a *Agent, p *peer, tree string, last *jobv1.ArtifactReport) (time.Duration, int64) {
	target := b.TempDir()
	p.dropCache(b)
	settle()
	var peak int64
	b.StartTimer()
	start := time.Now()
	if last != nil {
		bkt, key := keyOf(b, last)
		if _, err := a.Restore(context.Background(), target, Artifact{Bucket: bkt, Key: key, Checksum: last.Checksum, SizeBytes: last.SizeBytes}); err != nil {
			b.Fatal(err)
		}
	} else {
		peak = p.restore(b, tree, target)
	}
	d := time.Since(start)
	b.StopTimer()
	if last != nil {
		if rss, ok := peakRSS(); ok {
			peak = rss
		}
	}
	if err := compareTrees(tree, p.restored(tree, target)); err != nil {
		b.Fatal(err)
	}
	return d, peak
}

// BenchmarkDailies is a month of nightly backups side by side: the tree of BenchmarkIncremental
// (256 MiB, 256 files; COFFER_BENCH_KIND=json: compressible, rewritten files too) backed up COFFER_BENCH_DAILIES times (30 by default), 1 % of its bytes
// rewritten before each backup after the first (3 files of 1 MiB, a different 3 each night), then
// the last backup restored (caches emptied). Reported: the mean nightly backup's seconds, the
// restore's, and the bytes stored after all of them (what a month of dailies costs with no
// retention), and for the chunked format what of it is not packs (artifacts and records). The tar
// format is left out: it stores a full copy a night (BenchmarkIncremental). COFFER_BENCH_TOOLS
// picks tools.
func BenchmarkDailies(b *testing.B) {
	bin := os.Getenv(EnvPeersBin)
	if bin == "" {
		b.Skipf("%s is not set: COFFER_PEERS_BIN=$(hack/testbin.sh --peers)", EnvPeersBin)
	}
	ApplyMemoryLimit(os.Getenv)
	ctx := context.Background()
	keys := benchKeysOf(b)
	days := envCount(b, "COFFER_BENCH_DAILIES", 30)
	for _, tool := range benchTools(b, "coffer-chunked", "restic", "kopia") {
		b.Run(tool, func(b *testing.B) {
			var nightly, restore time.Duration
			var stored, records, peak int64
			for i := range b.N {
				b.StopTimer()
				tree, bucket, client, a, p := incrementalSetup(b, bin, tool, i, keys, 256)
				rng := rand.New(rand.NewPCG(uint64(i), 30))
				var last *jobv1.ArtifactReport
				for day := range days {
					if day > 0 {
						for k := range 3 {
							f := (day*3 + k) % 256
							rewrite(b, filepath.Join(tree, fmt.Sprintf("dir-%02d", f/32), fmt.Sprintf("file-%03d", f%32)), rng)
						}
					}
					settle()
					b.StartTimer()
					start := time.Now()
					if tool == "coffer-chunked" {
						var err error
						if last, err = a.Backup(ctx, tree, bucket, fmt.Sprintf("ns/day-%02d.tar", day)); err != nil {
							b.Fatal(err)
						}
					} else {
						peak = max(peak, p.backup(b, tree))
					}
					if day > 0 {
						nightly += time.Since(start)
					}
					b.StopTimer()
				}
				all := bucketBytes(b, client, bucket)
				stored += all
				if tool == "coffer-chunked" {
					records += all - prefixBytes(b, client, bucket, "ns/.coffer/packs/")
				}
				d, rss := restoreLast(b, a, p, tree, last)
				restore += d
				peak = max(peak, rss)
			}
			n := float64(b.N)
			b.ReportMetric(nightly.Seconds()/n/float64(max(days-1, 1)), "nightly-s")
			b.ReportMetric(restore.Seconds()/n, "restore-last-s")
			b.ReportMetric(float64(stored)/n/1e6, "stored-MB")
			if tool == "coffer-chunked" {
				b.ReportMetric(float64(records)/n/1e6, "not-packs-MB")
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-RSS-MiB")
		})
	}
}

// settle, outside the timing, writes back what the benchmark and the tool before wrote (the
// tree, the store's objects) so that no tool's time includes writing back another's, and waits
// until the tree's files are a second old (as a nightly backup finds them).
func settle() {
	syscall.Sync()
	time.Sleep(1100 * time.Millisecond)
}
