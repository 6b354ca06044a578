package agent

import (
	"bufio"
	"context"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"
)

// A files/ record is read and written as a stream, in the walk's order, so that a backup holds
// none of it: the next backup reads it beside its own walk (a merge of two ordered lists), and a
// backup writes its own while it runs. The stream is gob items (filesItem: first the backup's
// start, then one per regular file, then the packs the artifact names), compressed with zstd and
// sealed in segments (sealedWriter), so that it can be checked as it is read.

// filesItem is one item of a files/ record.
type filesItem struct {
	Start time.Time
	// Sequence, in the first item, is the backup's number in its repository.
	Sequence int64
	File     *cachedFile
	Packs    []string
	End      bool
}

// Sealed streams: magic, version, an 8-byte nonce prefix, then segments of at most segmentSize
// bytes of plaintext, each a 4-byte big-endian length and the segment sealed with AES-GCM under
// the nonce prefix and the segment's number, with the object's key, the number and whether it is
// the last as associated data. A stream that ends before its last segment, or whose segments were
// reordered, cut or changed, does not open.
const (
	sealedStreamMagic   = "COFFERSS"
	sealedStreamVersion = 1
	segmentSize         = 1 << 20
)

type sealedWriter struct {
	w      io.Writer
	aead   cipher.AEAD
	key    string
	prefix [8]byte
	n      uint32
	buf    []byte
	out    []byte
}

func newSealedWriter(w io.Writer, aead cipher.AEAD, key string) (*sealedWriter, error) {
	s := &sealedWriter{w: w, aead: aead, key: key, buf: make([]byte, 0, segmentSize)}
	if _, err := rand.Read(s.prefix[:]); err != nil {
		return nil, err
	}
	head := append([]byte(sealedStreamMagic), sealedStreamVersion)
	if _, err := w.Write(append(head, s.prefix[:]...)); err != nil {
		return nil, err
	}
	return s, nil
}

func segmentNonceAndAD(prefix [8]byte, key string, n uint32, last bool) (nonce, ad []byte) {
	nonce = binary.BigEndian.AppendUint32(append([]byte(nil), prefix[:]...), n)
	ad = binary.BigEndian.AppendUint32([]byte(key), n)
	if last {
		return nonce, append(ad, 1)
	}
	return nonce, append(ad, 0)
}

func (s *sealedWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		k := min(len(p), segmentSize-len(s.buf))
		s.buf = append(s.buf, p[:k]...)
		p, written = p[k:], written+k
		if len(s.buf) == segmentSize {
			if err := s.segment(false); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

func (s *sealedWriter) segment(last bool) error {
	nonce, ad := segmentNonceAndAD(s.prefix, s.key, s.n, last)
	s.out = s.aead.Seal(binary.BigEndian.AppendUint32(s.out[:0], uint32(len(s.buf)+s.aead.Overhead())), nonce, s.buf, ad)
	s.n++
	s.buf = s.buf[:0]
	_, err := s.w.Write(s.out)
	return err
}

// Close seals the last segment (empty when the stream ended on a segment's end).
func (s *sealedWriter) Close() error { return s.segment(true) }

type sealedReader struct {
	r      *bufio.Reader
	aead   cipher.AEAD
	key    string
	prefix [8]byte
	n      uint32
	plain  []byte
	sealed []byte
	last   bool
}

func newSealedReader(r io.Reader, aead cipher.AEAD, key string) (*sealedReader, error) {
	s := &sealedReader{r: bufio.NewReaderSize(r, 64<<10), aead: aead, key: key}
	head := make([]byte, len(sealedStreamMagic)+1+len(s.prefix))
	if _, err := io.ReadFull(s.r, head); err != nil {
		return nil, fmt.Errorf("not a sealed stream: %w", err)
	}
	if string(head[:len(sealedStreamMagic)]) != sealedStreamMagic || head[len(sealedStreamMagic)] != sealedStreamVersion {
		return nil, errors.New("not a sealed stream of a version this agent reads")
	}
	copy(s.prefix[:], head[len(sealedStreamMagic)+1:])
	return s, nil
}

func (s *sealedReader) Read(p []byte) (int, error) {
	for len(s.plain) == 0 {
		if s.last {
			return 0, io.EOF
		}
		var size [4]byte
		if _, err := io.ReadFull(s.r, size[:]); err != nil {
			return 0, fmt.Errorf("the sealed stream ends before its last segment: %w", err)
		}
		n := binary.BigEndian.Uint32(size[:])
		if n < uint32(s.aead.Overhead()) || n > segmentSize+uint32(s.aead.Overhead()) {
			return 0, errors.New("the sealed stream has a segment of an impossible size")
		}
		s.sealed = append(s.sealed[:0], make([]byte, n)...)
		if _, err := io.ReadFull(s.r, s.sealed); err != nil {
			return 0, fmt.Errorf("the sealed stream ends inside a segment: %w", err)
		}
		var err error
		for _, last := range []bool{false, true} {
			nonce, ad := segmentNonceAndAD(s.prefix, s.key, s.n, last)
			if s.plain, err = s.aead.Open(s.plain[:0], nonce, s.sealed, ad); err == nil {
				s.last = last
				break
			}
		}
		if err != nil {
			return 0, errors.New("a segment of the sealed stream does not open with this repository's chunk key")
		}
		s.n++
	}
	k := copy(p, s.plain)
	s.plain = s.plain[k:]
	return k, nil
}

// filesWriter writes this backup's files/ record while the backup runs, as a multipart upload
// that completes only at close, so that a failed backup leaves none.
type filesWriter struct {
	pw     *io.PipeWriter
	sealed *sealedWriter
	zw     *zstd.Encoder
	enc    *gob.Encoder
	done   chan error
}

func (s *chunkStore) newFilesWriter() (*filesWriter, error) {
	key := s.repo + "/files/" + s.name
	pr, pw := io.Pipe()
	f := &filesWriter{pw: pw, done: make(chan error, 1)}
	go func() {
		// Parts of 5 MiB, S3's least: the record is small beside the data.
		_, err := s.a.S3.PutObject(s.ctx, s.bucket, key, pr, -1, minio.PutObjectOptions{ContentType: ContentType, PartSize: 5 << 20, DisableContentSha256: true})
		pr.CloseWithError(err)
		f.done <- err
	}()
	var err error
	if f.sealed, err = newSealedWriter(pw, s.keys.seal, key); err != nil {
		f.abort(err)
		return nil, err
	}
	if f.zw, err = zstd.NewWriter(f.sealed, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<20)); err != nil {
		f.abort(err)
		return nil, err
	}
	f.enc = gob.NewEncoder(f.zw)
	if err := f.enc.Encode(filesItem{Start: s.start, Sequence: s.sequence}); err != nil {
		f.abort(err)
		return nil, err
	}
	return f, nil
}

func (f *filesWriter) add(rec *cachedFile) error { return f.enc.Encode(filesItem{File: rec}) }

// close ends the record with the packs the artifact names and waits for the upload.
func (f *filesWriter) close(packs []string) error {
	err := f.enc.Encode(filesItem{Packs: packs, End: true})
	if err == nil {
		err = f.zw.Close()
	}
	if err == nil {
		err = f.sealed.Close()
	}
	if err != nil {
		f.abort(err)
		return err
	}
	f.pw.Close()
	if err := <-f.done; err != nil {
		return fmt.Errorf("storing the files record: %w", err)
	}
	return nil
}

// abort ends the upload without completing it.
func (f *filesWriter) abort(err error) {
	if f.zw != nil {
		f.zw.Close()
	}
	f.pw.CloseWithError(fmt.Errorf("the backup ended: %w", err))
	<-f.done
}

// filesReader reads a files/ record item by item.
type filesReader struct {
	obj  *minio.Object
	zr   *zstd.Decoder
	dec  *gob.Decoder
	next *cachedFile // the next file, in the walk's order; nil at the end
	end  *filesItem  // the last item, once read
	err  error
	// sequence is the number of the backup that wrote the record.
	sequence int64
}

func (s *chunkStore) openFilesRecord(ctx context.Context, key string) (*filesReader, time.Time, error) {
	obj, err := s.a.S3.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, time.Time{}, err
	}
	f := &filesReader{obj: obj}
	sr, err := newSealedReader(obj, s.keys.seal, key)
	if err == nil {
		f.zr, err = zstd.NewReader(sr, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(8<<20))
	}
	if err != nil {
		obj.Close()
		if code := minio.ToErrorResponse(errors.Unwrap(err)).Code; code != "" {
			return nil, time.Time{}, minio.ToErrorResponse(errors.Unwrap(err))
		}
		return nil, time.Time{}, err
	}
	f.dec = gob.NewDecoder(f.zr)
	var first filesItem
	if err := f.dec.Decode(&first); err != nil {
		f.close()
		return nil, time.Time{}, err
	}
	f.sequence = first.Sequence
	f.advance()
	return f, first.Start, f.err
}

// advance reads the next item.
func (f *filesReader) advance() {
	f.next = nil
	if f.end != nil || f.err != nil {
		return
	}
	var it filesItem
	if f.err = f.dec.Decode(&it); f.err != nil {
		if f.err == io.EOF {
			f.err = errors.New("the files record ends without its last item")
		}
		return
	}
	if it.End {
		f.end = &it
		return
	}
	if it.File == nil {
		f.err = errors.New("the files record has an item that is no file")
		return
	}
	f.next = it.File
}

// find returns the record of the file name, skipping the files before it in the walk's order, or
// nil when the record has none.
func (f *filesReader) find(name string) *cachedFile {
	for f.next != nil && walkBefore(f.next.Path, name) {
		f.advance()
	}
	if f.next != nil && f.next.Path == name {
		return f.next
	}
	return nil
}

// packs reads the record to its end and returns the packs its artifact names.
func (f *filesReader) packs() ([]string, error) {
	for f.next != nil {
		f.advance()
	}
	if f.err != nil {
		return nil, f.err
	}
	return f.end.Packs, nil
}

func (f *filesReader) close() {
	if f.zr != nil {
		f.zr.Close()
	}
	f.obj.Close()
}

// walkBefore tells whether the walk (filepath.WalkDir: each directory's entries in lexical order,
// depth first) reaches path a before path b: the first component that differs decides.
func walkBefore(a, b string) bool {
	for {
		ai, bi := strings.IndexByte(a, '/'), strings.IndexByte(b, '/')
		ac, bc := a, b
		if ai >= 0 {
			ac = a[:ai]
		}
		if bi >= 0 {
			bc = b[:bi]
		}
		if ac != bc {
			return ac < bc
		}
		if ai < 0 || bi < 0 {
			return ai < 0 && bi >= 0 // a directory's own entry before what it holds
		}
		a, b = a[ai+1:], b[bi+1:]
	}
}
