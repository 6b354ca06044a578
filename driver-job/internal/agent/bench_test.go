package agent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/minio/minio-go/v7"

	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// benchTree writes a 256 MiB tree (benchTreeOf).
func benchTree(b *testing.B, kind string) string { return benchTreeOf(b, kind, 256) }

// benchTreeOf writes a tree of mib files of 1 MiB, 32 to a directory (dir-00/file-000 on): random
// bytes (incompressible), or JSON log lines with varying values (compressible, as application data
// and logs are).
func benchTreeOf(b *testing.B, kind string, mib int) string {
	const perDir, fileSize = 32, 1 << 20
	dir := b.TempDir()
	rng := rand.New(rand.NewChaCha8([32]byte{42}))
	data := make([]byte, 0, fileSize+512)
	for d := 0; d*perDir < mib; d++ {
		sub := filepath.Join(dir, fmt.Sprintf("dir-%02d", d))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range min(perDir, mib-d*perDir) {
			data = data[:0]
			if kind == "random" {
				data = data[:fileSize]
				for i := 0; i < fileSize; i += 8 {
					v := rng.Uint64()
					for j := range 8 {
						data[i+j] = byte(v >> (8 * j))
					}
				}
			} else {
				data = appendJSONLines(data, rng, fileSize)
			}
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("file-%03d", f)), data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	return dir
}

// appendJSONLines appends size bytes of JSON log lines with varying values to data (the last
// line cut).
func appendJSONLines(data []byte, rng *rand.Rand, size int) []byte {
	paths := []string{"/api/v1/orders", "/api/v1/customers", "/api/v1/invoices", "/healthz", "/api/v1/orders/search"}
	levels := []string{"info", "info", "info", "debug", "warn", "error"}
	end := len(data) + size
	for n := 0; len(data) < end; n++ {
		data = fmt.Appendf(data, `{"ts":"2026-12-01T07:%02d:%02d.%06dZ","level":%q,"tenant":"tenant-%d","user":%d,"method":"GET","path":"%s/%d","status":%d,"bytes":%d,"latency_ms":%.3f,"trace":"%016x"}`+"\n",
			n/60%60, n%60, rng.IntN(1000000), levels[rng.IntN(len(levels))], rng.IntN(40), rng.IntN(100000),
			paths[rng.IntN(len(paths))], rng.IntN(1000000), []int{200, 200, 200, 201, 404, 500}[rng.IntN(6)], rng.IntN(65536), rng.Float64()*250, rng.Uint64())
	}
	return data[:end]
}

// benchKeys makes a new age key pair: the recipients and key reference a backup encrypts to, and
// the identities its restore decrypts with.
func benchKeys(b *testing.B) ([]age.Recipient, string, *Identities) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		b.Fatal(err)
	}
	ids, err := ParseIdentities(id.String())
	if err != nil {
		b.Fatal(err)
	}
	recipients, keyRef, err := ParseRecipients(id.Recipient().String())
	if err != nil {
		b.Fatal(err)
	}
	return recipients, keyRef, ids
}

// peakRSS reads the process's peak resident set (VmHWM) in bytes; resetPeakRSS restarts it
// (Linux: writing 5 to clear_refs). ok is false where either is unavailable.
func peakRSS() (int64, bool) {
	return procStatus("VmHWM:")
}

// currentRSS reads the process's resident set (VmRSS) in bytes.
func currentRSS() (int64, bool) {
	return procStatus("VmRSS:")
}

// procStatus reads a size field of /proc/self/status in bytes.
func procStatus(field string) (int64, bool) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

func resetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// heapSampler samples the Go heap in use every 10 ms until stop, and returns the peak.
func heapSampler() (stop func() uint64) {
	done := make(chan uint64)
	quit := make(chan struct{})
	go func() {
		var peak uint64
		var m runtime.MemStats
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
			select {
			case <-quit:
				done <- peak
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 { close(quit); return <-done }
}

// BenchmarkBackupRestore backs up a 256 MiB tree to a real MinIO on loopback and restores it into
// an empty directory, for incompressible and compressible trees: without compression (with
// parallel and with sequential part uploads), with zstd at level 1 and at the default level, and
// with zstd and age. It reports the throughput of each direction in MB/s
// of tar (the data, not the stored bytes), the stored size and ratio, the peak Go heap and, on
// Linux, the process's peak RSS during the runs (MinIO is another process, not counted). The
// process runs under the memory limit coffer-agent sets (ApplyMemoryLimit), and returns its
// free memory to the kernel before each run, as a fresh agent would start; base-RSS is its
// resident set then, which is mostly the benchmark binary's code (37 MiB, or up to 56 MiB when the
// binary was just linked and its pages are still cached in large folios; coffer-agent's is
// 10 MiB). The same 2 cores run MinIO, the agent and the file system.
func BenchmarkBackupRestore(b *testing.B) {
	ApplyMemoryLimit(os.Getenv)
	ctx := context.Background()
	recipients, keyRef, ids := benchKeys(b)
	parent := b
	for _, kind := range []string{"random", "json"} {
		var tree string
		for _, format := range []string{"plain", "plain-1-upload", "zstd-1", "zstd", "zstd+age"} {
			b.Run(kind+"/"+format, func(b *testing.B) {
				if tree == "" {
					tree = benchTree(parent, kind) // kept for the other formats
				}
				bucket := newBucket(b)
				e := env(b, jobv1.ModeBackup, bucket, tree)
				client, err := NewClient(e[jobv1.ParamEnvName("endpoint")], "", e[EnvAccessKeyID], e[EnvSecretAccessKey])
				if err != nil {
					b.Fatal(err)
				}
				a := &Agent{S3: client, Log: io.Discard, Identities: ids}
				switch format {
				case "plain-1-upload":
					a.UploadThreads = 1 // parts go up one after the other
				case "zstd-1":
					a.CompressionLevel = 1
				case "zstd", "zstd+age":
					a.CompressionLevel = DefaultCompressionLevel
				}
				if format == "zstd+age" {
					a.Recipients, a.KeyRef = recipients, keyRef
				}
				var tarBytes, stored int64
				var backupTime, restoreTime time.Duration
				var peakHeap uint64
				var peakRSSBytes, baseRSS int64
				rssOK := true
				b.ResetTimer()
				for i := range b.N {
					b.StopTimer()
					target := b.TempDir()
					debug.FreeOSMemory()
					if rss, ok := currentRSS(); ok {
						baseRSS = max(baseRSS, rss)
					}
					rssOK = rssOK && resetPeakRSS()
					stop := heapSampler()
					b.StartTimer()

					key := fmt.Sprintf("bench/%d.tar", i)
					start := time.Now()
					report, err := a.Backup(ctx, tree, bucket, key)
					if err != nil {
						b.Fatal(err)
					}
					backupTime += time.Since(start)
					start = time.Now()
					if _, err := a.Restore(ctx, target, Artifact{Bucket: bucket, Key: key, Checksum: report.Checksum, SizeBytes: report.SizeBytes}); err != nil {
						b.Fatal(err)
					}
					restoreTime += time.Since(start)

					b.StopTimer()
					peakHeap = max(peakHeap, stop())
					if rss, ok := peakRSS(); ok {
						peakRSSBytes = max(peakRSSBytes, rss)
					}
					n, _ := strconv.ParseInt(report.Metadata[MetaUncompressedBytes], 10, 64)
					tarBytes += n
					stored += report.SizeBytes
					if err := client.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{}); err != nil {
						b.Fatal(err)
					}
					if err := removeAll(target); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				b.ReportMetric(float64(tarBytes)/1e6/backupTime.Seconds(), "backup-MB/s")
				b.ReportMetric(float64(tarBytes)/1e6/restoreTime.Seconds(), "restore-MB/s")
				b.ReportMetric(float64(stored)/float64(b.N)/(1<<20), "stored-MiB")
				b.ReportMetric(float64(tarBytes)/float64(stored), "ratio")
				b.ReportMetric(float64(peakHeap)/(1<<20), "peak-heap-MiB")
				if rssOK {
					b.ReportMetric(float64(peakRSSBytes)/(1<<20), "peak-RSS-MiB")
					b.ReportMetric(float64(baseRSS)/(1<<20), "base-RSS-MiB")
				}
			})
		}
	}
}

// sizedTree writes size bytes of files under dir, and returns how many: files of 16 MiB (the last
// one shorter), 64 to a directory, of random bytes (ChaCha8, incompressible) or of JSON log lines
// (compressible).
func sizedTree(b *testing.B, dir, kind string, size int64) int {
	const fileSize, perDir, chunk = 16 << 20, 64, 1 << 20
	stream := rand.NewChaCha8([32]byte{43})
	rng := rand.New(rand.NewChaCha8([32]byte{44}))
	buf := make([]byte, 0, chunk+512)
	files := 0
	for written := int64(0); written < size; files++ {
		sub := filepath.Join(dir, fmt.Sprintf("dir-%03d", files/perDir))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		f, err := os.Create(filepath.Join(sub, fmt.Sprintf("file-%03d", files%perDir)))
		if err != nil {
			b.Fatal(err)
		}
		for left := min(fileSize, size-written); left > 0; {
			n := int(min(left, chunk))
			if kind == "random" {
				buf = buf[:n]
				_, _ = stream.Read(buf) // never fails
			} else {
				buf = appendJSONLines(buf[:0], rng, n)
			}
			if _, err := f.Write(buf); err != nil {
				b.Fatal(err)
			}
			left -= int64(n)
			written += int64(n)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
	return files
}

// BenchmarkPeakRSSBySize backs up and restores trees of 100 MiB, 1 GiB and 10 GiB of random bytes,
// and of 100 MiB and 1 GiB of JSON log lines, with zstd at the default level and age, to show
// that the agent's memory does not grow with the data. It reports the peak RSS (VmHWM) of the
// backup and of the restore separately, each reset after the process returned its free memory to
// the kernel, the resident set at that point (base-RSS: the benchmark binary itself, much larger
// than coffer-agent's), the peak Go heap, and the throughputs. The process runs under the memory
// limit coffer-agent sets (ApplyMemoryLimit). Each tree is removed once backed up, and the restored
// tree and the object once the restore is checked (file count and bytes), so that the 10 GiB
// case needs about 20 GiB of free disk.
func BenchmarkPeakRSSBySize(b *testing.B) {
	ApplyMemoryLimit(os.Getenv)
	if !resetPeakRSS() {
		b.Skip("peak RSS cannot be measured here: /proc/self/clear_refs is not writable")
	}
	ctx := context.Background()
	recipients, keyRef, ids := benchKeys(b)
	for _, tc := range []struct {
		kind, name string
		size       int64
	}{
		{"random", "100MiB", 100 << 20},
		{"random", "1GiB", 1 << 30},
		{"random", "10GiB", 10 << 30},
		{"json", "100MiB", 100 << 20},
		{"json", "1GiB", 1 << 30},
	} {
		b.Run(tc.kind+"/"+tc.name, func(b *testing.B) {
			bucket := newBucket(b)
			e := env(b, jobv1.ModeBackup, bucket, "")
			client, err := NewClient(e[jobv1.ParamEnvName("endpoint")], "", e[EnvAccessKeyID], e[EnvSecretAccessKey])
			if err != nil {
				b.Fatal(err)
			}
			a := &Agent{S3: client, Log: io.Discard, CompressionLevel: DefaultCompressionLevel, Recipients: recipients, KeyRef: keyRef, Identities: ids}
			var tarBytes int64
			var backupTime, restoreTime time.Duration
			var backupRSS, restoreRSS, baseRSS int64
			var peakHeap uint64
			// measure runs f from a fresh peak, and returns the peak RSS and the time f took.
			measure := func(f func()) (int64, time.Duration) {
				debug.FreeOSMemory()
				if rss, ok := currentRSS(); ok {
					baseRSS = max(baseRSS, rss)
				}
				resetPeakRSS()
				stop := heapSampler()
				b.StartTimer()
				start := time.Now()
				f()
				elapsed := time.Since(start)
				b.StopTimer()
				peakHeap = max(peakHeap, stop())
				rss, _ := peakRSS()
				return rss, elapsed
			}
			b.StopTimer()
			b.ResetTimer()
			for i := range b.N {
				var st syscall.Statfs_t
				if err := syscall.Statfs(os.TempDir(), &st); err == nil && int64(st.Bavail)*st.Bsize < 2*tc.size+(2<<30) {
					b.Fatalf("%s has %d GiB free; the %s case needs about %d GiB", os.TempDir(), int64(st.Bavail)*st.Bsize>>30, tc.name, (2*tc.size+(2<<30))>>30)
				}
				tree := filepath.Join(b.TempDir(), "tree")
				files := sizedTree(b, tree, tc.kind, tc.size)
				key := fmt.Sprintf("bench/%d.tar", i)
				var report *jobv1.ArtifactReport
				rss, elapsed := measure(func() {
					if report, err = a.Backup(ctx, tree, bucket, key); err != nil {
						b.Fatal(err)
					}
				})
				backupRSS, backupTime = max(backupRSS, rss), backupTime+elapsed
				n, _ := strconv.ParseInt(report.Metadata[MetaUncompressedBytes], 10, 64)
				tarBytes += n
				if err := removeAll(tree); err != nil {
					b.Fatal(err)
				}

				target := b.TempDir()
				var status *RestoreStatus
				rss, elapsed = measure(func() {
					if status, err = a.Restore(ctx, target, Artifact{Bucket: bucket, Key: key, Checksum: report.Checksum, SizeBytes: report.SizeBytes}); err != nil {
						b.Fatal(err)
					}
				})
				restoreRSS, restoreTime = max(restoreRSS, rss), restoreTime+elapsed
				var restored int64
				err := filepath.WalkDir(target, func(p string, d fs.DirEntry, err error) error {
					if err == nil && d.Type().IsRegular() {
						fi, err := d.Info()
						if err != nil {
							return err
						}
						restored += fi.Size()
					}
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				if status.Files != int64(files) || restored != tc.size {
					b.Fatalf("restored %d files, %d bytes; want %d files, %d bytes", status.Files, restored, files, tc.size)
				}
				if err := removeAll(target); err != nil {
					b.Fatal(err)
				}
				if err := client.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(tarBytes)/1e6/backupTime.Seconds(), "backup-MB/s")
			b.ReportMetric(float64(tarBytes)/1e6/restoreTime.Seconds(), "restore-MB/s")
			b.ReportMetric(float64(backupRSS)/(1<<20), "backup-peak-RSS-MiB")
			b.ReportMetric(float64(restoreRSS)/(1<<20), "restore-peak-RSS-MiB")
			b.ReportMetric(float64(baseRSS)/(1<<20), "base-RSS-MiB")
			b.ReportMetric(float64(peakHeap)/(1<<20), "peak-heap-MiB")
		})
	}
}
