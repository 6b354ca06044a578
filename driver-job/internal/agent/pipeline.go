package agent

import (
	"archive/tar"
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// A chunked backup runs in three stages, so that reading and chunking, hashing and compressing,
// and sealing and writing the index overlap, also across files:
//
//   - the walk (the caller of submit) reads and chunks each file whose chunks are not known from
//     the last backup, hashes the file, and hands each chunk to the workers;
//   - codecThreads workers give each chunk its ID (HMAC-SHA256) and compress it;
//   - the finisher, one goroutine, takes the walk's entries in order, looks each chunk up, seals
//     the new ones into packs (uploaded in the background) and writes the tar entries.
//
// At most maxChunksInFlight chunks, and maxBytesInFlight bytes of them (one chunk, whatever its
// size, may always go), are between the walk and the finisher, whatever the tree.
type chunkPipeline struct {
	s     *chunkStore
	tw    *tar.Writer
	m     *manifest
	buf   []byte
	warnf func(string, ...any)

	queue chan *pendingEntry
	work  chan *chunkJob
	// flight counts the chunks read and not yet sealed, and keeps the buffers of those done
	// with, so that the collector has no garbage to chase.
	flight struct {
		sync.Mutex
		cond          *sync.Cond
		chunks, bytes int
		free          []*chunkBuffer
		failed        bool
	}
	workers  sync.WaitGroup
	finished chan struct{}
	// failed is closed when the finisher fails; err is its error, set before.
	failed chan struct{}
	err    error

	fileHash hash.Hash // the walk's
}

// Bounds of the chunks read and not yet sealed: many small files' chunks keep the stages busy, a
// large file's few fill the bytes.
const (
	maxChunksInFlight = 64
	maxBytesInFlight  = 16 << 20
)

// chunkBuffer holds a chunk and its compressed form.
type chunkBuffer struct {
	data, z []byte
	n       int // the bytes it counts for in flight
}

// pendingEntry is an entry of the walk, for the finisher: a regular file (file set) or anything
// else.
type pendingEntry struct {
	path, name string
	fi         fs.FileInfo
	file       *pendingFile
}

// pendingFile is a regular file: its record, and either the chunk IDs of the last backup (jobs
// nil) or the chunks the walk reads, in order, on jobs, which the walk closes once it set
// rec.SHA256, or err.
type pendingFile struct {
	rec  cachedFile
	jobs chan *chunkJob
	err  error
}

// chunkJob is a chunk on its way: its bytes, then its ID and compressed form (nil when not smaller).
type chunkJob struct {
	buf  *chunkBuffer
	data []byte
	id   chunkID
	z    []byte
	done chan struct{}
}

func (s *chunkStore) startPipeline(tw *tar.Writer, m *manifest, buf []byte, warnf func(string, ...any)) *chunkPipeline {
	p := &chunkPipeline{s: s, tw: tw, m: m, buf: buf, warnf: warnf,
		queue: make(chan *pendingEntry, 64), work: make(chan *chunkJob, maxChunksInFlight),
		finished: make(chan struct{}), failed: make(chan struct{}), fileHash: sha256.New()}
	p.flight.cond = sync.NewCond(&p.flight)
	for range s.a.codecThreads() {
		p.workers.Add(1)
		go p.worker()
	}
	go p.finisher()
	return p
}

func (p *chunkPipeline) worker() {
	defer p.workers.Done()
	mac := hmac.New(sha256.New, p.s.keys.id)
	for j := range p.work {
		mac.Reset()
		mac.Write(j.data)
		mac.Sum(j.id[:0])
		// A chunk the repository held at the start is not stored again: no need to compress it
		// (most of a large file rewritten in place, a file touched but not changed).
		if _, stored := p.s.known[j.id]; p.s.zenc != nil && !stored {
			p.s.stats.compressed.Add(1)
			j.buf.z = p.s.zenc.EncodeAll(j.data, j.buf.z[:0])
			if len(j.buf.z) < len(j.data) {
				j.z = j.buf.z
			}
		}
		close(j.done)
	}
}

// submit is the walk's: it gives the finisher the next entry, then reads a regular file's
// chunks unless the last backup's record of the file can stand. The finisher takes a file's
// chunks while the walk reads them, so a file of any size goes through maxChunksInFlight buffers.
func (p *chunkPipeline) submit(path, name string, fi fs.FileInfo) error {
	e := &pendingEntry{path: path, name: name, fi: fi}
	var file *os.File
	if fi.Mode().IsRegular() {
		var err error
		if e.file, file, err = p.prepare(path, name, fi); errors.Is(err, fs.ErrNotExist) {
			p.warnf("warning: skipping %s: removed during the backup", name)
			return nil
		} else if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if file != nil {
		defer file.Close()
	}
	select {
	case p.queue <- e:
	case <-p.failed:
		return p.err
	}
	if file == nil {
		return nil
	}
	err := p.read(file, e.file)
	e.file.err = err
	close(e.file.jobs)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// prepare opens a regular file to be read, or returns it with the last backup's record of it.
func (p *chunkPipeline) prepare(path, name string, fi fs.FileInfo) (*pendingFile, *os.File, error) {
	s := p.s
	ctime, ino := statTimes(fi)
	f := &pendingFile{rec: cachedFile{Path: name, Size: fi.Size(), MtimeNs: fi.ModTime().UnixNano(), CtimeNs: ctime.UnixNano(), Ino: ino}}
	if prev := s.previous(name); prev != nil && s.unchanged(prev, &f.rec) {
		all := true
		for _, id := range prev.Chunks {
			if _, ok := s.known[id]; !ok {
				all = false
				break
			}
		}
		if all {
			f.rec.SHA256, f.rec.Chunks = prev.SHA256, prev.Chunks
			s.stats.filesSkipped++
			return f, nil, nil
		}
	}
	// O_NOFOLLOW keeps a file replaced by a link meanwhile from being followed.
	file, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, nil, err
	}
	f.jobs = make(chan *chunkJob, 8) // the finisher takes them as they come
	return f, file, nil
}

// read chunks a file onto f.jobs, and hashes it.
func (p *chunkPipeline) read(file *os.File, f *pendingFile) error {
	s := p.s
	p.fileHash.Reset()
	s.chunker.Reset(io.LimitReader(file, f.rec.Size), s.keys.pol)
	var n int64
	for {
		c, err := s.chunker.Next(s.buf)
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		n += int64(c.Length)
		p.fileHash.Write(c.Data)
		b := p.take(len(c.Data))
		if b == nil {
			return p.err
		}
		b.data = append(b.data[:0], c.Data...)
		j := &chunkJob{buf: b, data: b.data, done: make(chan struct{})}
		p.work <- j
		f.jobs <- j // never blocks for long: the finisher takes them as they come
	}
	if n != f.rec.Size {
		return fmt.Errorf("shrank from %d to %d bytes while it was read", f.rec.Size, n)
	}
	p.fileHash.Sum(f.rec.SHA256[:0])
	s.stats.filesRead++
	s.stats.bytesRead += n
	return nil
}

// drain gives back the buffers of a file's chunks the finisher will not seal.
func (p *chunkPipeline) drain(f *pendingFile) {
	if f == nil || f.jobs == nil {
		return
	}
	for j := range f.jobs {
		<-j.done
		p.give(j.buf)
	}
}

// take waits until a chunk of n bytes may be read, and returns a buffer for it; nil once the
// finisher failed.
func (p *chunkPipeline) take(n int) *chunkBuffer {
	f := &p.flight
	f.Lock()
	defer f.Unlock()
	for !f.failed && f.chunks > 0 && (f.chunks >= maxChunksInFlight || f.bytes+n > maxBytesInFlight) {
		f.cond.Wait()
	}
	if f.failed {
		return nil
	}
	f.chunks, f.bytes = f.chunks+1, f.bytes+n
	b := &chunkBuffer{}
	if k := len(f.free); k > 0 {
		b, f.free = f.free[k-1], f.free[:k-1]
	}
	b.n = n
	return b
}

// give returns a chunk's buffer once its chunk is sealed or dropped.
func (p *chunkPipeline) give(b *chunkBuffer) {
	f := &p.flight
	f.Lock()
	f.chunks, f.bytes = f.chunks-1, f.bytes-b.n
	if cap(b.data)+cap(b.z) <= maxBytesInFlight/4 && len(f.free) < maxChunksInFlight { // a rare 8 MiB chunk is not kept
		f.free = append(f.free, b)
	}
	f.Unlock()
	f.cond.Signal()
}

// fail stops the walk's waits once the finisher failed.
func (p *chunkPipeline) fail() {
	p.flight.Lock()
	p.flight.failed = true
	p.flight.Unlock()
	p.flight.cond.Broadcast()
}

// finisher writes the entries in the walk's order.
func (p *chunkPipeline) finisher() {
	defer close(p.finished)
	for e := range p.queue {
		if p.err != nil {
			p.drain(e.file) // after a failure
			continue
		}
		var err error
		if e.file == nil {
			err = addEntry(p.tw, p.m, e.path, e.name, e.fi, p.buf, p.warnf)
		} else {
			err = p.complete(e)
		}
		if err != nil {
			p.err = err
			close(p.failed)
			p.fail()
		}
	}
}

// complete stores a file's new chunks and writes its entry: the packs its chunk list introduces
// first, then the file, whose content is its chunk list and whose PAX records hold its size and
// SHA-256.
func (p *chunkPipeline) complete(e *pendingEntry) error {
	s, f := p.s, e.file
	defer p.drain(f) // what is left after a failure
	s.mu.Lock()
	err := s.uploadErr
	s.mu.Unlock()
	if err != nil {
		return err
	}
	var locs []chunkLoc
	if f.jobs == nil { // unchanged since the last backup
		locs = make([]chunkLoc, 0, len(f.rec.Chunks))
		for _, id := range f.rec.Chunks {
			locs = append(locs, s.known[id])
		}
	} else {
		for j := range f.jobs {
			<-j.done
			loc, ok := s.known[j.id]
			if !ok {
				loc, ok = s.fresh[j.id]
			}
			if ok {
				s.stats.chunksKnown++
			} else if loc, err = s.store(j.id, j.data, j.z); err != nil {
				p.give(j.buf)
				return fmt.Errorf("%s: %w", e.name, err)
			} else {
				s.fresh[j.id] = loc
			}
			p.give(j.buf)
			locs = append(locs, loc)
			f.rec.Chunks = append(f.rec.Chunks, j.id)
		}
		if f.err != nil {
			return nil // the walk fails with it
		}
	}
	if err := s.filesOut.add(&f.rec); err != nil {
		return fmt.Errorf("the files record: %w", err)
	}
	var list []byte
	for i, loc := range locs {
		pk := &s.packs[loc.pack]
		if pk.emitted < 0 {
			pk.emitted = s.nextEmit
			s.nextEmit++
			s.emittedKeys = append(s.emittedKeys, pk.key)
			s.emittedPacks = append(s.emittedPacks, loc.pack)
			hdr := &tar.Header{Typeflag: typePack, Name: pk.key, Size: int64(len(pk.wrapped)), Mode: 0o400, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
			if err := p.tw.WriteHeader(hdr); err != nil {
				return fmt.Errorf("pack %s: %w", pk.key, err)
			}
			if _, err := p.tw.Write(pk.wrapped); err != nil {
				return err
			}
		}
		list = binary.AppendUvarint(list, uint64(pk.emitted))
		list = binary.AppendUvarint(list, uint64(loc.off))
		list = binary.AppendUvarint(list, uint64(loc.sealed))
		list = binary.AppendUvarint(list, uint64(loc.plain))
		list = append(list, f.rec.Chunks[i][:]...)
	}
	hdr, err := tar.FileInfoHeader(noNames{e.fi}, "")
	if err != nil {
		return fmt.Errorf("%s: %w", e.name, err)
	}
	hdr.Name, hdr.Size = e.name, int64(len(list))
	hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
	hdr.PAXRecords = map[string]string{paxSize: strconv.FormatInt(f.rec.Size, 10), paxSHA256: hex.EncodeToString(f.rec.SHA256[:])}
	hdr.Format = tar.FormatPAX
	if err := p.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("%s: %w", e.name, err)
	}
	if _, err := p.tw.Write(list); err != nil {
		return fmt.Errorf("%s: %w", e.name, err)
	}
	if p.m == nil {
		return nil
	}
	return p.m.addSum(e.name, f.rec.Size, f.rec.SHA256[:])
}

// close ends the walk's side, waits for the finisher and the workers, and then, unless the walk
// failed (walkErr) or the finisher did, for the packs' uploads and the backup's records
// (chunkStore.finish). A failed backup leaves no records: only packs nobody names, which
// maintenance deletes.
func (p *chunkPipeline) close(walkErr error) error {
	close(p.queue)
	<-p.finished
	close(p.work)
	p.workers.Wait()
	p.s.end()
	if walkErr != nil || p.err != nil {
		p.s.uploads.Wait()
		p.s.filesOut.abort(cmp.Or(walkErr, p.err))
		if walkErr != nil {
			return walkErr
		}
		return p.err
	}
	return p.s.finish()
}
