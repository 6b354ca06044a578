package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
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
// mix of two) by up to threads goroutines ahead of the reader, and delivered in order. A goroutine
// of its own hashes each range (SHA-256) as it arrives, beside the reader rather than in its way,
// so that hashing runs in parallel with what the reader does with the bytes. Memory is threads+1
// buffers of rangeSize.
//
// It is deliberately only a Reader and a WriterTo: were it an io.Seeker, tar.Reader would seek
// over data it skips. The hash covers every range fetched, whatever the reader consumed.
type rangedObject struct {
	cancel context.CancelFunc
	queue  chan *rangeFetch // in object order; closed after the last range
	free   chan []byte
	cur    *rangeFetch
	off    int // read offset in cur.buf
	err    error

	hash     hash.Hash
	hashed   int64         // bytes hashed; read only once hashDone is closed
	hashDone chan struct{} // closed when the hasher has hashed the last range, or stopped
}

type rangeFetch struct {
	buf    []byte
	err    error
	done   chan struct{} // closed when buf holds the range or err is set
	hashed chan struct{} // closed when the hasher is done with buf
}

// openRanged starts reading bucket/key (its version version, "" for the latest), size bytes long, whose ETag is etag ("" for none), with
// a.DownloadThreads fetches of a.RangeSize bytes ahead.
func (a *Agent) openRanged(ctx context.Context, bucket, key, version, etag string, size int64) *rangedObject {
	threads, rangeSize := a.DownloadThreads, a.RangeSize
	if threads <= 0 {
		threads = DefaultDownloadThreads
	}
	if rangeSize <= 0 {
		rangeSize = DefaultRangeSize
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &rangedObject{cancel: cancel, queue: make(chan *rangeFetch, threads), free: make(chan []byte, threads+1),
		hash: sha256.New(), hashDone: make(chan struct{})}
	for range threads + 1 {
		r.free <- nil // allocated on first use, so a small object costs only its size
	}
	toHash := make(chan *rangeFetch, threads+1)
	go r.hasher(toHash)
	go func() {
		defer close(r.queue)
		defer close(toHash)
		for off := int64(0); off < size && ctx.Err() == nil; off += int64(rangeSize) {
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
			f := &rangeFetch{buf: buf[:n], done: make(chan struct{}), hashed: make(chan struct{})}
			toHash <- f // never blocks: at most threads+1 ranges exist at once
			select {
			case r.queue <- f:
			case <-ctx.Done():
				f.err = ctx.Err() // never fetched: the hasher stops at it
				close(f.done)
				<-f.hashed
				putRangeBuffer(f.buf)
				return
			}
			go func(off int64) {
				defer close(f.done)
				f.err = a.fetchRange(ctx, bucket, key, version, etag, off, f.buf)
			}(off)
		}
	}()
	return r
}

// fetchRange reads len(buf) bytes of the object from off into buf.
func (a *Agent) fetchRange(ctx context.Context, bucket, key, version, etag string, off int64, buf []byte) error {
	opts := minio.GetObjectOptions{VersionID: version}
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

// hasher hashes each range in object order once it is fetched, and stops at the first that
// failed: the reader stops there too.
func (r *rangedObject) hasher(toHash <-chan *rangeFetch) {
	defer close(r.hashDone)
	failed := false
	for f := range toHash {
		if !failed {
			<-f.done
			if f.err == nil {
				r.hash.Write(f.buf)
				r.hashed += int64(len(f.buf))
			} else {
				failed = true
			}
		}
		close(f.hashed)
	}
}

// next makes the next range current, once the reader is done with the current one; it returns
// false, with r.err set, at the end of the object or at an error.
func (r *rangedObject) next() bool {
	for r.err == nil && (r.cur == nil || r.off == len(r.cur.buf)) {
		if r.cur != nil {
			<-r.cur.hashed
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
	return r.cur != nil && r.off < len(r.cur.buf)
}

func (r *rangedObject) Read(p []byte) (int, error) {
	if !r.next() {
		return 0, r.err
	}
	n := copy(p, r.cur.buf[r.off:])
	r.off += n
	return n, nil
}

// WriteTo writes the rest of the object to w straight from the range buffers, without the copy
// a Read makes.
func (r *rangedObject) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for r.next() {
		n, err := w.Write(r.cur.buf[r.off:])
		r.off += n
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	if r.err == io.EOF {
		return total, nil
	}
	return total, r.err
}

// sum is the SHA-256 of the ranges fetched and how many bytes they hold. Call it after the reader
// reached the end of the object, or after Close.
func (r *rangedObject) sum() (string, int64) {
	<-r.hashDone
	return "sha256:" + hex.EncodeToString(r.hash.Sum(nil)), r.hashed
}

// Close stops the fetches in flight and waits for them, so no goroutine outlives the read, and
// gives the buffers back for the next read.
func (r *rangedObject) Close() error {
	r.cancel()
	for f := range r.queue {
		<-f.done
		<-f.hashed
		putRangeBuffer(f.buf)
	}
	if r.cur != nil {
		<-r.cur.hashed
		putRangeBuffer(r.cur.buf)
	}
	<-r.hashDone
	for len(r.free) > 0 {
		putRangeBuffer(<-r.free)
	}
	r.cur = nil
	if r.err == nil {
		r.err = errors.New("read after close")
	}
	return nil
}

// rangeBuffers keeps the buffers of finished reads for the next read in the same process (the
// benchmarks and tests restore many artifacts), rather than leaving them as garbage beside new
// ones.
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
