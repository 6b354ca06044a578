package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/minio/minio-go/v7"
)

// TestRangedRead reads objects from the real MinIO in parallel ranges: every size against a range
// boundary (empty, smaller than a range, exactly some ranges, ranges and a tail) comes back byte
// for byte, read in small steps or written out from the range buffers (WriteTo), whatever the
// number of fetches ahead, and the hasher's SHA-256 and byte count are the object's.
func TestRangedRead(t *testing.T) {
	ctx := context.Background()
	bucket := newBucket(t)
	s3 := store(t).S3
	const rangeSize = 64 << 10
	rng := rand.New(rand.NewChaCha8([32]byte{7}))
	for _, size := range []int{0, 1, rangeSize - 1, rangeSize, 3 * rangeSize, 5*rangeSize + 17} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		info, err := s3.PutObject(ctx, bucket, "object", bytes.NewReader(data), int64(size), minio.PutObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("sha256:%x", sha256.Sum256(data))
		for _, threads := range []int{1, 2, 4} {
			for _, writeTo := range []bool{false, true} {
				a := &Agent{S3: s3, DownloadThreads: threads, RangeSize: rangeSize}
				r := a.openRanged(ctx, bucket, "object", "", info.ETag, int64(size))
				var got bytes.Buffer
				var err error
				if writeTo {
					_, err = r.WriteTo(&got)
				} else {
					_, err = io.CopyBuffer(struct{ io.Writer }{&got}, struct{ io.Reader }{r}, make([]byte, 1000))
				}
				sum, n := r.sum()
				if cerr := r.Close(); cerr != nil {
					t.Fatal(cerr)
				}
				if err != nil {
					t.Fatalf("size %d, %d threads, WriteTo %v: %v", size, threads, writeTo, err)
				}
				if !bytes.Equal(got.Bytes(), data) {
					t.Fatalf("size %d, %d threads, WriteTo %v: read %d bytes that differ from the object's %d", size, threads, writeTo, got.Len(), size)
				}
				if sum != want || n != int64(size) {
					t.Fatalf("size %d, %d threads, WriteTo %v: hashed %d bytes to %s, want %d bytes, %s", size, threads, writeTo, n, sum, size, want)
				}
			}
		}
	}
}

// TestRangedReadOfAChangedObject: an object replaced while it is read in ranges is an error that
// names the failed precondition, never a mix of the two objects; a read closed half-way stops.
func TestRangedReadOfAChangedObject(t *testing.T) {
	ctx := context.Background()
	bucket := newBucket(t)
	s3 := store(t).S3
	const rangeSize = 64 << 10
	a := &Agent{S3: s3, DownloadThreads: 1, RangeSize: rangeSize}
	old := bytes.Repeat([]byte{'a'}, 16*rangeSize)
	info, err := s3.PutObject(ctx, bucket, "object", bytes.NewReader(old), int64(len(old)), minio.PutObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := a.openRanged(ctx, bucket, "object", "", info.ETag, int64(len(old)))
	first := make([]byte, rangeSize)
	if _, err := io.ReadFull(r, first); err != nil {
		t.Fatal(err)
	}
	replacement := bytes.Repeat([]byte{'b'}, len(old))
	if _, err := s3.PutObject(ctx, bucket, "object", bytes.NewReader(replacement), int64(len(replacement)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(r)
	if err == nil {
		t.Fatalf("read the whole object after it changed (%d more bytes)", len(rest))
	}
	if minio.ToErrorResponse(err).Code != "PreconditionFailed" {
		t.Errorf("the error is %v, want a failed ETag precondition", err)
	}
	if bytes.IndexByte(rest, 'b') >= 0 {
		t.Error("bytes of the new object were delivered")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	// Closed after its first range: Close returns once the fetches in flight have stopped.
	a.DownloadThreads = 4
	r = a.openRanged(ctx, bucket, "object", "", "", int64(len(replacement)))
	if _, err := io.ReadFull(r, first); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(first); err == nil {
		t.Error("a closed reader still reads")
	}
}
