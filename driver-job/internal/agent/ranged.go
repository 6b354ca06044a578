package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/minio/minio-go/v7"
)

// DefaultDownloadThreads is how many ranges of an artifact a restore fetches at once, ahead of
// the reader that hashes or extracts them, and DefaultRangeSize the size of each: 2 × 2 MiB in
// flight plus the one being read keep two connections busy for 6 MiB, whatever the artifact's
// size. Larger ranges cost twice their size in resident memory (the collector's headroom) for
// no gain on a store near the agent; raise them (RangeSize) for a distant one.
const (
	DefaultDownloadThreads = 2
	DefaultRangeSize       = 2 << 20
)

// rangedObject reads an object of known size as consecutive ranges, each fetched by its own GET
// (with the ETag the read started with as a precondition, so a changed object is an error, never a
// mix of two) by up to threads goroutines ahead of the reader, and delivered in order. Memory is
// threads+1 buffers of rangeSize.
type rangedObject struct {
	cancel context.CancelFunc
	queue  chan *rangeFetch // in object order; closed after the last range
	free   chan []byte
	cur    *rangeFetch
	off    int // read offset in cur.buf
	err    error
}

type rangeFetch struct {
	buf  []byte
	err  error
	done chan struct{}
}

// openRanged starts reading bucket/key, size bytes long, whose ETag is etag ("" for none), with
// a.DownloadThreads fetches of a.RangeSize bytes ahead.
func (a *Agent) openRanged(ctx context.Context, bucket, key, etag string, size int64) *rangedObject {
	threads, rangeSize := a.DownloadThreads, a.RangeSize
	if threads <= 0 {
		threads = DefaultDownloadThreads
	}
	if rangeSize <= 0 {
		rangeSize = DefaultRangeSize
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &rangedObject{cancel: cancel, queue: make(chan *rangeFetch, threads), free: make(chan []byte, threads+1)}
	for range threads + 1 {
		r.free <- nil // allocated on first use, so a small object costs only its size
	}
	go func() {
		defer close(r.queue)
		for off := int64(0); off < size; off += int64(rangeSize) {
			n := min(int64(rangeSize), size-off)
			var buf []byte
			select {
			case buf = <-r.free:
			case <-ctx.Done():
				return
			}
			if int64(cap(buf)) < n {
				buf = rangeBuffer(n, rangeSize)
			}
			f := &rangeFetch{buf: buf[:n], done: make(chan struct{})}
			select {
			case r.queue <- f:
			case <-ctx.Done():
				return
			}
			go func(off int64) {
				defer close(f.done)
				f.err = a.fetchRange(ctx, bucket, key, etag, off, f.buf)
			}(off)
		}
	}()
	return r
}

// fetchRange reads len(buf) bytes of the object from off into buf.
func (a *Agent) fetchRange(ctx context.Context, bucket, key, etag string, off int64, buf []byte) error {
	opts := minio.GetObjectOptions{}
	if err := opts.SetRange(off, off+int64(len(buf))-1); err != nil {
		return err
	}
	if etag != "" {
		if err := opts.SetMatchETag(etag); err != nil {
			return err
		}
	}
	obj, err := a.S3.GetObject(ctx, bucket, key, opts)
	if err != nil {
		return err
	}
	defer obj.Close()
	if _, err := io.ReadFull(obj, buf); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("bytes %d-%d: the object ended early (truncated while being read?): %w", off, off+int64(len(buf))-1, io.ErrUnexpectedEOF)
		}
		return err
	}
	return nil
}

func (r *rangedObject) Read(p []byte) (int, error) {
	for r.err == nil && (r.cur == nil || r.off == len(r.cur.buf)) {
		if r.cur != nil {
			r.free <- r.cur.buf
			r.cur = nil
		}
		f, ok := <-r.queue
		if !ok {
			r.err = io.EOF
			break
		}
		<-f.done
		if f.err != nil {
			r.err = f.err
			break
		}
		r.cur, r.off = f, 0
	}
	if r.cur == nil || r.off == len(r.cur.buf) {
		return 0, r.err
	}
	n := copy(p, r.cur.buf[r.off:])
	r.off += n
	return n, nil
}

// Close stops the fetches in flight and waits for them, so no goroutine outlives the read, and
// gives the buffers back for the next read.
func (r *rangedObject) Close() error {
	r.cancel()
	for f := range r.queue {
		<-f.done
		putRangeBuffer(f.buf)
	}
	if r.cur != nil {
		putRangeBuffer(r.cur.buf)
	}
	for len(r.free) > 0 {
		putRangeBuffer(<-r.free)
	}
	r.cur = nil
	if r.err == nil {
		r.err = errors.New("read after close")
	}
	return nil
}

// rangeBuffers keeps the buffers of finished reads for the next: a restore reads its artifact
// twice (verify, then extract), and the second pass reuses the first one's buffers rather than
// leaving them as garbage beside new ones.
var rangeBuffers sync.Pool

// rangeBuffer returns a buffer of length n, with room for rangeSize.
func rangeBuffer(n int64, rangeSize int) []byte {
	if p, ok := rangeBuffers.Get().(*[]byte); ok && int64(cap(*p)) >= n {
		return (*p)[:n]
	}
	return make([]byte, n, max(int64(rangeSize), n))
}

func putRangeBuffer(b []byte) {
	if cap(b) > 0 {
		rangeBuffers.Put(&b)
	}
}
