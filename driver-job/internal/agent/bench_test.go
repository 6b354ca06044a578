package agent

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// BenchmarkBackup streams a generated 256 MiB tree (8 directories of 32 incompressible 1 MiB
// files) to a real MinIO on loopback. It reports the throughput, the allocations per backup and
// the peak heap, which the 16 MiB part size bounds whatever the tree's size.
func BenchmarkBackup(b *testing.B) {
	const dirs, files, fileSize = 8, 32, 1 << 20
	ctx := context.Background()
	bucket := newBucket(b)
	dir := b.TempDir()
	rng := rand.NewChaCha8([32]byte{42})
	data := make([]byte, fileSize)
	for d := range dirs {
		if err := os.MkdirAll(filepath.Join(dir, fmt.Sprintf("dir-%02d", d)), 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range files {
			_, _ = rng.Read(data)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("dir-%02d", d), fmt.Sprintf("file-%03d", f)), data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	e := env(b, jobv1.ModeBackup, bucket, dir)
	client, err := NewClient(e[jobv1.ParamEnvName("endpoint")], "", e[EnvAccessKeyID], e[EnvSecretAccessKey])
	if err != nil {
		b.Fatal(err)
	}
	a := &Agent{S3: client, Log: io.Discard}

	var bytes int64
	var peak uint64
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		runtime.GC()
		stop := make(chan uint64)
		go func() { // samples the heap during the backup
			var peakNow uint64
			var m runtime.MemStats
			for {
				select {
				case stop <- peakNow:
					return
				case <-time.After(20 * time.Millisecond):
					runtime.ReadMemStats(&m)
					peakNow = max(peakNow, m.HeapInuse)
				}
			}
		}()
		key := fmt.Sprintf("bench/%d.tar", i)
		report, err := a.Backup(ctx, dir, bucket, key)
		peak = max(peak, <-stop)
		if err != nil {
			b.Fatal(err)
		}
		bytes += report.SizeBytes
		b.StopTimer()
		if err := client.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(bytes)/1e6/b.Elapsed().Seconds(), "MB/s")
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
}
