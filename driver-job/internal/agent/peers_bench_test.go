package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// EnvPeersBin names the directory holding restic and kopia, built from the pinned wrapper modules
// tools/testbin/restic and tools/testbin/kopia: COFFER_PEERS_BIN=$(hack/testbin.sh --peers).
// BenchmarkPeers skips without it.
const EnvPeersBin = "COFFER_PEERS_BIN"

// BenchmarkPeers backs up and restores the trees of BenchmarkBackupRestore with coffer-agent
// (zstd level 3 and age), restic (its defaults: encrypted, compression auto) and kopia (its
// defaults: encrypted, not compressed), and a raw upload and download of the agent's plain tar
// stream (rawUpload, rawDownload: the floor of what any tool could do), each to its own bucket of
// the same MinIO, in the same run, so that they share the machine's load. Peak RSS is each peer's
// own process's (rusage) and the agent's VmHWM.
func BenchmarkPeers(b *testing.B) {
	bin := os.Getenv(EnvPeersBin)
	if bin == "" {
		b.Skipf("%s is not set: COFFER_PEERS_BIN=$(hack/testbin.sh --peers)", EnvPeersBin)
	}
	ctx := context.Background()
	recipients, keyRef, ids := benchKeys(b)
	parent := b
	for _, kind := range []string{"random", "json"} {
		var tree string
		for _, tool := range []string{"coffer-agent", "restic", "kopia", "raw"} {
			b.Run(kind+"/"+tool, func(b *testing.B) {
				if tree == "" {
					tree = benchTree(parent, kind)
				}
				bucket := newBucket(b)
				e := env(b, jobv1.ModeBackup, bucket, tree)
				client, err := NewClient(e[jobv1.ParamEnvName("endpoint")], "", e[EnvAccessKeyID], e[EnvSecretAccessKey])
				if err != nil {
					b.Fatal(err)
				}
				p := &peer{bin: bin, tool: tool, bucket: bucket, host: store(b).S3Endpoint, id: e[EnvAccessKeyID], secret: e[EnvSecretAccessKey], work: b.TempDir()}
				a := &Agent{S3: client, Log: io.Discard, CompressionLevel: DefaultCompressionLevel, Recipients: recipients, KeyRef: keyRef, Identities: ids}
				var backupTime, restoreTime time.Duration
				var peakRSSBytes int64
				b.ResetTimer()
				for i := range b.N {
					b.StopTimer()
					target := b.TempDir()
					if tool == "restic" || tool == "kopia" {
						p.init(b, i)
					}
					resetPeakRSS()
					b.StartTimer()
					start := time.Now()
					var report *jobv1.ArtifactReport
					if tool == "coffer-agent" {
						key := fmt.Sprintf("bench/%d.tar", i)
						if report, err = a.Backup(ctx, tree, bucket, key); err != nil {
							b.Fatal(err)
						}
						backupTime += time.Since(start)
						start = time.Now()
						if _, err := a.Restore(ctx, target, Artifact{Bucket: bucket, Key: key, Checksum: report.Checksum, SizeBytes: report.SizeBytes}); err != nil {
							b.Fatal(err)
						}
						restoreTime += time.Since(start)
						if rss, ok := peakRSS(); ok {
							peakRSSBytes = max(peakRSSBytes, rss)
						}
					} else if tool == "raw" {
						key := fmt.Sprintf("bench/%d.tar", i)
						rawUpload(b, client, bucket, key, tree)
						backupTime += time.Since(start)
						start = time.Now()
						rss := rawDownload(b, client, bucket, key, target)
						restoreTime += time.Since(start)
						if own, ok := peakRSS(); ok {
							rss = max(rss, own)
						}
						peakRSSBytes = max(peakRSSBytes, rss)
					} else {
						peakRSSBytes = max(peakRSSBytes, p.backup(b, tree))
						backupTime += time.Since(start)
						b.StopTimer()
						p.dropCache(b)
						b.StartTimer()
						start = time.Now()
						peakRSSBytes = max(peakRSSBytes, p.restore(b, tree, target))
						restoreTime += time.Since(start)
					}
					b.StopTimer()
					if err := compareTrees(tree, p.restored(tree, target)); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				b.StopTimer()
				stored := bucketBytes(b, client, bucket)
				const tarBytes = 256 << 20
				b.ReportMetric(float64(tarBytes)*float64(b.N)/1e6/backupTime.Seconds(), "backup-MB/s")
				b.ReportMetric(float64(tarBytes)*float64(b.N)/1e6/restoreTime.Seconds(), "restore-MB/s")
				b.ReportMetric(float64(stored)/float64(b.N)/(1<<20), "stored-MiB")
				b.ReportMetric(float64(peakRSSBytes)/(1<<20), "peak-RSS-MiB")
			})
		}
	}
}

// rawUpload is the floor of a backup's cost: the agent's tar stream of tree, uploaded as it is
// written with the agent's upload settings (parts, threads), nothing compressed, encrypted or
// hashed.
func rawUpload(b *testing.B, c *minio.Client, bucket, key, tree string) {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, tree, func(string, ...any) {}, true, nil)) }()
	opts := (&Agent{}).putOptions()
	opts.ContentType = "application/x-tar"
	if _, err := c.PutObject(context.Background(), bucket, key, pr, -1, opts); err != nil {
		b.Fatal(err)
	}
}

// rawDownload is the floor of a restore's cost: the object read in one GET and extracted by tar
// (GNU tar, a separate process whose peak RSS it returns), nothing verified first.
func rawDownload(b *testing.B, c *minio.Client, bucket, key, target string) int64 {
	obj, err := c.GetObject(context.Background(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer obj.Close()
	cmd := exec.Command("tar", "-x", "-C", target)
	cmd.Stdin = obj
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("tar -x: %v\n%s", err, out)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss << 10
	}
	return 0
}

// peer runs restic or kopia against a bucket of the shared MinIO.
type peer struct {
	bin, tool, bucket, host, id, secret, work string
	repo                                      string
}

func (p *peer) env() []string {
	return append(os.Environ(),
		"AWS_ACCESS_KEY_ID="+p.id, "AWS_SECRET_ACCESS_KEY="+p.secret,
		"RESTIC_PASSWORD=benchmark", "RESTIC_CACHE_DIR="+filepath.Join(p.work, "restic-cache"),
		"KOPIA_PASSWORD=benchmark", "KOPIA_CONFIG_PATH="+filepath.Join(p.work, "kopia.config"),
		"KOPIA_CACHE_DIRECTORY="+filepath.Join(p.work, "kopia-cache"), "KOPIA_LOG_DIR="+filepath.Join(p.work, "kopia-logs"),
		"KOPIA_CHECK_FOR_UPDATES=false")
}

// run runs the peer and returns its stdout and its peak RSS.
func (p *peer) run(b *testing.B, args ...string) ([]byte, int64) {
	b.Helper()
	cmd := exec.Command(filepath.Join(p.bin, p.tool), args...)
	cmd.Env = p.env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("%s %s: %v\n%s", p.tool, strings.Join(args, " "), err, stderr.String())
	}
	var rss int64
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		rss = ru.Maxrss << 10
	}
	return stdout.Bytes(), rss
}

func (p *peer) init(b *testing.B, i int) {
	p.repo = fmt.Sprintf("%s-%d", p.tool, i)
	switch p.tool {
	case "restic":
		p.run(b, "-r", p.resticRepo(), "init")
	case "kopia":
		p.run(b, "repository", "create", "s3", "--bucket="+p.bucket, "--prefix="+p.repo+"/", "--endpoint="+p.host,
			"--disable-tls", "--access-key="+p.id, "--secret-access-key="+p.secret)
	}
}

func (p *peer) resticRepo() string { return "s3:http://" + p.host + "/" + p.bucket + "/" + p.repo }

func (p *peer) backup(b *testing.B, tree string) int64 {
	if p.tool == "restic" {
		_, rss := p.run(b, "-r", p.resticRepo(), "backup", "--quiet", tree)
		return rss
	}
	_, rss := p.run(b, "snapshot", "create", tree)
	return rss
}

// dropCache empties the peer's local cache: a restore after a loss starts without one, and kopia
// otherwise restores from what its backup just cached (about twice as fast as from the store).
func (p *peer) dropCache(b *testing.B) {
	for _, dir := range []string{"kopia-cache", "restic-cache"} {
		if err := os.RemoveAll(filepath.Join(p.work, dir)); err != nil {
			b.Fatal(err)
		}
	}
}

func (p *peer) restore(b *testing.B, tree, target string) int64 {
	if p.tool == "restic" {
		_, rss := p.run(b, "-r", p.resticRepo(), "restore", "latest", "--target", target)
		return rss
	}
	out, _ := p.run(b, "snapshot", "list", tree, "--json")
	var snaps []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(out, &snaps); err != nil || len(snaps) == 0 {
		b.Fatalf("kopia snapshot list: %v: %s", err, out)
	}
	_, rss := p.run(b, "snapshot", "restore", snaps[len(snaps)-1].ID, target)
	return rss
}

// restored is where a restore put the tree: restic restores the absolute path below the target.
func (p *peer) restored(tree, target string) string {
	if p.tool == "restic" {
		return filepath.Join(target, tree)
	}
	return target
}

// compareTrees checks that every file of want has the same content in got.
func compareTrees(want, got string) error {
	return filepath.WalkDir(want, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(want, path)
		a, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		c, err := os.ReadFile(filepath.Join(got, rel))
		if err != nil {
			return err
		}
		if !bytes.Equal(a, c) {
			return fmt.Errorf("%s differs after the restore", rel)
		}
		return nil
	})
}

// dropBucket deletes a bucket's objects and the bucket: a benchmark's repositories of gigabytes
// would otherwise stay in the shared MinIO until the process ends.
func dropBucket(b *testing.B, bucket string) {
	c := store(b).S3
	ctx := context.Background()
	for err := range c.RemoveObjects(ctx, bucket, c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}), minio.RemoveObjectsOptions{}) {
		b.Errorf("emptying bucket %s: %v", bucket, err.Err)
	}
	if err := c.RemoveBucket(ctx, bucket); err != nil {
		b.Errorf("removing bucket %s: %v", bucket, err)
	}
}

// bucketBytes sums the sizes of a bucket's objects.
func bucketBytes(b *testing.B, c *minio.Client, bucket string) int64 {
	return prefixBytes(b, c, bucket, "")
}

// prefixBytes sums the sizes of a bucket's objects below prefix.
func prefixBytes(b *testing.B, c *minio.Client, bucket, prefix string) int64 {
	var n int64
	for obj := range c.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			b.Fatal(obj.Err)
		}
		n += obj.Size
	}
	return n
}

// EnvBenchPairs sets how many pairs BenchmarkRatioToKopia alternates (default 9).
const EnvBenchPairs = "COFFER_BENCH_PAIRS"

// BenchmarkRatioToKopia measures the agent's first full backup and its restore of the
// incompressible tree against kopia's, with a steadier method than BenchmarkPeers' single pass:
// the two tools alternate in pairs (who goes first alternates too), and the benchmark reports the
// median of the pairs' ratios (kopia's time over the agent's: above 1, the agent is faster),
// their extremes, and each tool's median throughput. Pairing cancels the machine's drift, which
// moves both tools by up to 2× from one minute to the next on a shared VM; the median drops the
// outliers. Each kopia backup goes into a fresh repository with a fresh configuration and cache (a
// first backup, as the agent's always is), and each restore into a fresh directory, checked and
// removed; kopia's cache is emptied before each restore, as after a loss, and its restore is
// `snapshot restore` alone (the snapshot's ID is looked up outside the timing).
func BenchmarkRatioToKopia(b *testing.B) {
	bin := os.Getenv(EnvPeersBin)
	if bin == "" {
		b.Skipf("%s is not set: COFFER_PEERS_BIN=$(hack/testbin.sh --peers)", EnvPeersBin)
	}
	n := envCount(b, EnvBenchPairs, 9)
	ctx := context.Background()
	recipients, keyRef, ids := benchKeys(b)
	tree := benchTree(b, "random")
	bucket := newBucket(b)
	e := env(b, jobv1.ModeBackup, bucket, tree)
	client, err := NewClient(e[jobv1.ParamEnvName("endpoint")], "", e[EnvAccessKeyID], e[EnvSecretAccessKey])
	if err != nil {
		b.Fatal(err)
	}
	a := &Agent{S3: client, Log: io.Discard, CompressionLevel: DefaultCompressionLevel, Recipients: recipients, KeyRef: keyRef, Identities: ids}
	p := &peer{bin: bin, tool: "kopia", bucket: newBucket(b), host: store(b).S3Endpoint, id: e[EnvAccessKeyID], secret: e[EnvSecretAccessKey], work: b.TempDir()}

	work := b.TempDir() // kopia's configurations and caches, which outlive the backup pairs
	var art Artifact    // the newest backup of each tool is the one restored
	var snapshot string
	backups := 0
	backup := map[string]func(*testing.B) time.Duration{
		"coffer-agent": func(b *testing.B) time.Duration {
			backups++
			key := fmt.Sprintf("bench/ratio-%d.tar", backups)
			start := time.Now()
			report, err := a.Backup(ctx, tree, bucket, key)
			if err != nil {
				b.Fatal(err)
			}
			took := time.Since(start)
			art = Artifact{Bucket: bucket, Key: key, Checksum: report.Checksum, SizeBytes: report.SizeBytes}
			return took
		},
		"kopia": func(b *testing.B) time.Duration {
			backups++
			var err error
			if p.work, err = os.MkdirTemp(work, "kopia-"); err != nil { // its own config, for a fresh repository
				b.Fatal(err)
			}
			p.init(b, backups)
			start := time.Now()
			p.backup(b, tree)
			took := time.Since(start)
			out, _ := p.run(b, "snapshot", "list", tree, "--json")
			var snaps []struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(out, &snaps); err != nil || len(snaps) != 1 {
				b.Fatalf("kopia snapshot list: %v: %s", err, out)
			}
			snapshot = snaps[0].ID
			return took
		},
	}
	restore := func(tool string) func(*testing.B) time.Duration {
		return func(b *testing.B) time.Duration {
			target := filepath.Join(b.TempDir(), "restored")
			if err := os.Mkdir(target, 0o755); err != nil {
				b.Fatal(err)
			}
			if tool == "kopia" {
				p.dropCache(b)
			}
			start := time.Now()
			if tool == "kopia" {
				p.run(b, "snapshot", "restore", snapshot, target)
			} else if _, err := a.Restore(ctx, target, art); err != nil {
				b.Fatal(err)
			}
			took := time.Since(start)
			if err := compareTrees(tree, target); err != nil {
				b.Fatal(err)
			}
			if err := os.RemoveAll(target); err != nil {
				b.Fatal(err)
			}
			return took
		}
	}
	b.Run("backup", func(b *testing.B) {
		for range b.N {
			pairs(b, n, backup["coffer-agent"], backup["kopia"])
		}
	})
	b.Run("restore", func(b *testing.B) {
		for range b.N {
			pairs(b, n, restore("coffer-agent"), restore("kopia"))
		}
	})
}

// pairs runs agent and kopia n times each, alternating which goes first, and reports the median
// of kopia's time over the agent's, its extremes, and each one's median throughput on the 256 MiB
// tree.
func pairs(b *testing.B, n int, agent, kopia func(*testing.B) time.Duration) {
	var ratios, agentMBs, kopiaMBs []float64
	for i := range n {
		var ta, tk time.Duration
		if i%2 == 0 {
			ta, tk = agent(b), kopia(b)
		} else {
			tk, ta = kopia(b), agent(b)
		}
		ratios = append(ratios, tk.Seconds()/ta.Seconds())
		const tarBytes = 256 << 20
		agentMBs, kopiaMBs = append(agentMBs, tarBytes/1e6/ta.Seconds()), append(kopiaMBs, tarBytes/1e6/tk.Seconds())
	}
	slices.Sort(ratios)
	b.ReportMetric(median(ratios), "median-ratio")
	b.ReportMetric(ratios[0], "min-ratio")
	b.ReportMetric(ratios[len(ratios)-1], "max-ratio")
	b.ReportMetric(median(agentMBs), "agent-MB/s")
	b.ReportMetric(median(kopiaMBs), "kopia-MB/s")
	b.Logf("pair ratios (kopia/agent), sorted: %.2f", ratios)
}

// median of values, which it sorts.
func median(values []float64) float64 {
	slices.Sort(values)
	n := len(values)
	if n%2 == 1 {
		return values[n/2]
	}
	return (values[n/2-1] + values[n/2]) / 2
}
