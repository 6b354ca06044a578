package agent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/minio/minio-go/v7"

	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// benchTree writes a 256 MiB tree, 8 directories of 32 files of 1 MiB: random bytes
// (incompressible), or JSON log lines with varying values (compressible, as application data and
// logs are).
func benchTree(b *testing.B, kind string) string {
	const dirs, files, fileSize = 8, 32, 1 << 20
	dir := b.TempDir()
	rng := rand.New(rand.NewChaCha8([32]byte{42}))
	data := make([]byte, 0, fileSize+512)
	paths := []string{"/api/v1/orders", "/api/v1/customers", "/api/v1/invoices", "/healthz", "/api/v1/orders/search"}
	levels := []string{"info", "info", "info", "debug", "warn", "error"}
	for d := range dirs {
		sub := filepath.Join(dir, fmt.Sprintf("dir-%02d", d))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range files {
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
				for n := 0; len(data) < fileSize; n++ {
					data = fmt.Appendf(data, `{"ts":"2026-12-01T07:%02d:%02d.%06dZ","level":%q,"tenant":"tenant-%d","user":%d,"method":"GET","path":"%s/%d","status":%d,"bytes":%d,"latency_ms":%.3f,"trace":"%016x"}`+"\n",
						n/60%60, n%60, rng.IntN(1000000), levels[rng.IntN(len(levels))], rng.IntN(40), rng.IntN(100000),
						paths[rng.IntN(len(paths))], rng.IntN(1000000), []int{200, 200, 200, 201, 404, 500}[rng.IntN(6)], rng.IntN(65536), rng.Float64()*250, rng.Uint64())
				}
				data = data[:fileSize]
			}
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("file-%03d", f)), data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	return dir
}

// peakRSS reads the process's peak resident set (VmHWM) in bytes; resetPeakRSS restarts it
// (Linux: writing 5 to clear_refs). ok is false where either is unavailable.
func peakRSS() (int64, bool) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
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
// same 2 cores run MinIO, the agent and the file system.
func BenchmarkBackupRestore(b *testing.B) {
	ctx := context.Background()
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
				var peakRSSBytes int64
				rssOK := true
				b.ResetTimer()
				for i := range b.N {
					b.StopTimer()
					target := b.TempDir()
					runtime.GC()
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
				}
			})
		}
	}
}
