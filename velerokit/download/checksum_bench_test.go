package download_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
	"github.com/coffer-backup/coffer/velerokit/download"
)

// BenchmarkChecksumVsOpenSSL streams a 1 GiB object from MinIO through a presigned URL and hashes
// it, as checksum-only verification does, against `curl URL | openssl dgst -sha256` on the same
// URL, in the same run. Peak heap during the Go pass is reported to show memory stays flat.
func BenchmarkChecksumVsOpenSSL(b *testing.B) {
	const size = 1 << 30
	ctx := context.Background()
	dir := b.TempDir()
	s3, err := velerostack.StartMinIO(ctx, dir)
	if err != nil {
		b.Fatal(err)
	}
	defer s3.Stop()
	if err := s3.S3.MakeBucket(ctx, "bench", minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		b.Fatal(err)
	}
	src := io.LimitReader(rand.NewChaCha8([32]byte{1}), size)
	if _, err := s3.S3.PutObject(ctx, "bench", "artifact.tar.gz", src, size, minio.PutObjectOptions{}); err != nil {
		b.Fatal(err)
	}
	u, err := s3.S3.PresignedGetObject(ctx, "bench", "artifact.tar.gz", time.Hour, nil)
	if err != nil {
		b.Fatal(err)
	}
	url := u.String()
	b.ResetTimer()
	for range b.N {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		stop := make(chan uint64)
		go func() { // sample the heap while hashing
			var peak uint64
			var m runtime.MemStats
			for {
				select {
				case stop <- peak:
					return
				case <-time.After(20 * time.Millisecond):
					runtime.ReadMemStats(&m)
					peak = max(peak, m.HeapInuse)
				}
			}
		}()
		t0 := time.Now()
		d, err := download.HashURL(ctx, http.DefaultClient, url)
		goTime := time.Since(t0)
		peak := <-stop
		if err != nil || d.SizeBytes != size {
			b.Fatalf("hash: %v (%d bytes)", err, d.SizeBytes)
		}
		t1 := time.Now()
		out, err := exec.Command("sh", "-c", fmt.Sprintf("curl -sf '%s' | openssl dgst -sha256", url)).Output()
		peerTime := time.Since(t1)
		if err != nil {
			b.Fatalf("curl | openssl: %v", err)
		}
		if !strings.Contains(string(out), d.SHA256) {
			b.Fatalf("digests differ: go %s, openssl %s", d.SHA256, out)
		}
		b.ReportMetric(goTime.Seconds(), "coffer-s")
		b.ReportMetric(peerTime.Seconds(), "curl|openssl-s")
		b.ReportMetric(goTime.Seconds()/peerTime.Seconds(), "ratio")
		b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
		fmt.Fprintf(os.Stdout, "| 1 GiB | %.2f s (%.0f MB/s) | %.2f s (%.0f MB/s) | %.2f | %.1f MiB |\n",
			goTime.Seconds(), size/goTime.Seconds()/1e6, peerTime.Seconds(), size/peerTime.Seconds()/1e6,
			goTime.Seconds()/peerTime.Seconds(), float64(peak)/(1<<20))
	}
}
