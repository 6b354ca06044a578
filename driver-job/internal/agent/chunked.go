package agent

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/gob"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	mrand "math/rand/v2"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"filippo.io/age"
	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"
	"github.com/restic/chunker"

	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// Format 4, the chunked format (docs/artifact-format.md). The artifact is a Backup's index: a
// format 2 envelope (header, zstd, age) around a tar whose regular files carry, instead of their
// bytes, the list of the chunks that make them up. Chunks live in packs, objects shared by every
// Backup of one repository (a key prefix per namespace), so a chunk that an earlier Backup stored
// is not stored again; each Backup's index names every chunk of every file, so a restore reads one
// index and its chunks, never a chain of Backups.
//
// Repository layout, below the repository's prefix:
//
//	packs/<32 hex>   chunks, each sealed on its own (see sealChunk), about DefaultPackSize bytes
//	index/<name>     what one backup wrote: its packs, their wrapped keys and their chunks' places
//	files/<name>     the files one backup saw (path, size, times, inode, chunks): the next backup
//	                 skips reading a file whose metadata did not change
//
// index/ and files/ are sealed with a key derived from the repository's chunk key (the backup side
// needs them and has no age identity); packs are sealed with a random key per pack, wrapped with
// age to the strategy's recipients. Chunk IDs are HMAC-SHA256 of the chunk's plaintext under a key
// derived from the chunk key, so a listing reveals nothing about content, and the content-defined
// boundaries come from a polynomial derived from it too.
const (
	// chunkedVersion is the format version of chunked artifacts.
	chunkedVersion = 4
	// DefaultPackSize is the size at which a pack is closed and uploaded.
	DefaultPackSize = 8 << 20
	// typePack is the tar entry that introduces a pack to the index: its name is the pack's object
	// key, its content the pack's wrapped key (empty without encryption). Files refer to packs by
	// their order of introduction.
	typePack = 'P'
	// PAX records of a chunked file entry: its size and SHA-256 (the entry's own size is that of
	// its chunk list).
	paxSize   = "COFFER.size"
	paxSHA256 = "COFFER.sha256"
	// maxChunkList bounds a file's chunk list a restore reads (about 1.5 million chunks).
	maxChunkList = 64 << 20
	// maxRepoObject bounds an index/ or files/ object a backup reads.
	maxRepoObject = 1 << 30
	// chunkFlagZstd marks a chunk stored compressed (its first plaintext byte).
	chunkFlagZstd = 1
	// repoObjectMagic starts index/ and files/ objects.
	repoObjectMagic   = "COFFERRP"
	repoObjectVersion = 1
)

type chunkID [sha256.Size]byte

// repoKeys are what a chunk key gives a repository.
type repoKeys struct {
	id   []byte      // HMAC key of chunk IDs
	seal cipher.AEAD // seals index/ and files/
	pol  chunker.Pol // content-defined chunking
}

// publicChunkKey is the chunk key of repositories whose backups are not encrypted, when none is
// given: their chunks are plaintext in the store anyway.
const publicChunkKey = "coffer public chunk key: the backups of this repository are not encrypted"

func deriveRepoKeys(secret string) (repoKeys, error) {
	var k repoKeys
	expand := func(label string, n int) ([]byte, error) {
		return hkdf.Key(sha256.New, []byte(secret), nil, "coffer chunked format 4: "+label, n)
	}
	var err error
	if k.id, err = expand("chunk ids", 32); err != nil {
		return k, err
	}
	sealKey, err := expand("repository objects", 32)
	if err != nil {
		return k, err
	}
	block, err := aes.NewCipher(sealKey)
	if err != nil {
		return k, err
	}
	if k.seal, err = cipher.NewGCM(block); err != nil {
		return k, err
	}
	polSeed, err := expand("chunker polynomial", 32)
	if err != nil {
		return k, err
	}
	k.pol, err = chunker.DerivePolynomial(mrand.NewChaCha8([32]byte(polSeed)))
	return k, err
}

// runIndex is an index/ object: the packs one backup wrote, and the artifact it wrote them for.
type runIndex struct {
	Artifact string
	Packs    []runPack
	// Extended are the older packs whose lock the backup extended, and until when (lock.go).
	Extended []packLock
}

type runPack struct {
	Key string
	// KeyRef names the recipients the pack's key is wrapped to; empty for an unencrypted pack.
	KeyRef  string
	Wrapped []byte
	Size    int64
	// SHA256 is the digest of the pack's stored bytes (zero in packs written before pack lists).
	SHA256 [sha256.Size]byte
	// RetainUntil is the pack's object lock when it was stored (zero: none).
	RetainUntil time.Time
	Chunks      []runChunk
}

type runChunk struct {
	ID                 chunkID
	Off, Sealed, Plain uint32
}

// cachedFile is an item of a files/ record (filesrecord.go): a regular file a backup saw.
type cachedFile struct {
	Path                   string
	Size, MtimeNs, CtimeNs int64
	Ino                    uint64
	SHA256                 [sha256.Size]byte
	Chunks                 []chunkID
}

// chunkLoc is where a known chunk is: packs[pack] at off.
type chunkLoc struct {
	pack               int32
	off, sealed, plain uint32
}

// knownPack is a pack a backup may refer to.
type knownPack struct {
	key     string
	wrapped []byte
	size    int64
	sha256  [sha256.Size]byte
	rec     *runPack  // a pack this backup writes: size and digest are known once it is uploaded
	until   time.Time // the latest lock the repository's records know of
	// emitted is the pack's position in this backup's index, or -1 before it was introduced.
	emitted int
}

// chunkStore is the backup side of a chunked backup: it chunks files, stores new chunks in packs
// and answers each file with its chunk list.
type chunkStore struct {
	a             *Agent
	ctx           context.Context
	bucket, repo  string
	name          string // the backup's name in index/ and files/
	keys          repoKeys
	start         time.Time
	packs         []knownPack
	known         map[chunkID]chunkLoc // the chunks the repository held at the start; read-only after load
	fresh         map[chunkID]chunkLoc // the chunks this backup stored
	prev          *filesReader         // the last backup's files/ record, read beside the walk
	previousStart time.Time
	filesOut      *filesWriter // this backup's
	seen          []cachedFile
	written       runIndex
	emittedKeys   []string // the packs the artifact names, in order
	emittedPacks  []int32  // the same, as indexes of packs
	uploaded      []*runPack
	sequence      int64     // this backup's number in the repository
	packList      string    // the "sha256:<hex>" of the stored pack list
	lockUntil     time.Time // the lock of what this backup stores, when a.RetainFor is set
	nextEmit      int
	cur           *packBuilder
	chunker       *chunker.Chunker
	buf           []byte
	zenc          *zstd.Encoder
	sealBuf       []byte      // a chunk's plaintext to seal
	free          chan []byte // buffers of uploaded packs, for the next packs
	uploads       sync.WaitGroup
	slots         chan struct{}
	mu            sync.Mutex
	uploadErr     error
	stats         chunkStats
}

type chunkStats struct {
	filesRead, filesSkipped int64
	bytesRead               int64
	chunksNew, chunksKnown  int64
	bytesNew                int64 // plaintext of new chunks
	packs                   int64
	stored                  int64        // bytes of the packs uploaded
	compressed              atomic.Int64 // chunks the codec workers compressed
}

// packBuilder fills one pack.
type packBuilder struct {
	idx  int32
	key  []byte // nil without encryption
	aead cipher.AEAD
	data []byte
	rec  *runPack
}

// openChunkStore reads the repository's index/ objects and its newest files/ object.
func (a *Agent) openChunkStore(ctx context.Context, bucket, key string) (*chunkStore, error) {
	secret := a.ChunkKey
	if secret == "" {
		if len(a.Recipients) > 0 {
			return nil, fmt.Errorf("an encrypted chunked backup needs a chunk key (%s): without one, chunk IDs would tell which content the backups hold", EnvChunkKey)
		}
		secret = publicChunkKey
	}
	keys, err := deriveRepoKeys(secret)
	if err != nil {
		return nil, err
	}
	repo := a.repository(key)
	s := &chunkStore{
		a: a, ctx: ctx, bucket: bucket, repo: repo, name: strings.TrimSuffix(path.Base(key), ".tar"), keys: keys, start: a.clock(),
		known: map[chunkID]chunkLoc{}, fresh: map[chunkID]chunkLoc{}, buf: make([]byte, chunker.MaxSize),
	}
	threads := a.UploadThreads
	if threads <= 0 {
		threads = DefaultUploadThreads
	}
	s.slots = make(chan struct{}, threads)
	s.free = make(chan []byte, threads+1)
	s.chunker = chunker.New(bytes.NewReader(nil), keys.pol)
	level := a.CompressionLevel
	if level > 0 {
		if s.zenc, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(level)), zstd.WithEncoderConcurrency(a.codecThreads()), zstd.WithWindowSize(1<<20)); err != nil {
			return nil, err
		}
	}
	s.written.Artifact = key
	// The session marker comes first: maintenance condemns no pack this backup may have learnt of
	// while the backup may still run (maintain.go).
	if err := s.putRepoObject("sessions", s.name, &session{Artifact: key}); err != nil {
		return nil, err
	}
	if err := s.load(); err != nil {
		return nil, err
	}
	if s.a.afterLoad != nil {
		s.a.afterLoad()
	}
	if s.filesOut, err = s.newFilesWriter(); err != nil {
		s.end()
		return nil, err
	}
	return s, nil
}

// EnvChunkKey is the environment variable holding a chunked repository's chunk key: any secret
// text of at least minChunkKey characters (e.g. 32 random bytes in base64), the same for every
// backup of the repository.
const EnvChunkKey = jobv1.EnvChunkKey

const minChunkKey = 32

// repository is the key prefix of the repository a chunked backup at key belongs to: the
// directory of key, then jobv1.RepositoryDir.
func (a *Agent) repository(key string) string {
	if a.Repository != "" {
		return strings.TrimSuffix(a.Repository, "/")
	}
	dir := path.Dir(key)
	if dir == "." {
		return jobv1.RepositoryDir
	}
	return dir + "/" + jobv1.RepositoryDir
}

func (s *chunkStore) load() error {
	type listed struct {
		key  string
		time time.Time
	}
	var newestFiles *listed
	for o := range s.a.S3.ListObjects(s.ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.repo + "/files/"}) {
		if o.Err != nil {
			return fmt.Errorf("listing %s: %w", ArtifactURI(s.bucket, s.repo+"/files/"), o.Err)
		}
		if newestFiles == nil || o.LastModified.After(newestFiles.time) {
			newestFiles = &listed{o.Key, o.LastModified}
		}
	}
	keyRef := ""
	if len(s.a.Recipients) > 0 {
		keyRef = s.a.KeyRef
	}
	extended := map[string]time.Time{}
	var keys []string
	for o := range s.a.S3.ListObjects(s.ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.repo + "/index/"}) {
		if o.Err != nil {
			return fmt.Errorf("listing %s: %w", ArtifactURI(s.bucket, s.repo+"/index/"), o.Err)
		}
		keys = append(keys, o.Key)
	}
	// One record per backup: read indexReadAhead at once (a nightly backup of a repository of a
	// year of dailies would otherwise wait for 365 reads one after the other), used in order.
	type loaded struct {
		idx  runIndex
		err  error
		done chan struct{}
	}
	records := make([]*loaded, len(keys))
	for i := range records {
		records[i] = &loaded{done: make(chan struct{})}
	}
	ahead := make(chan struct{}, indexReadAhead)
	go func() {
		for i, key := range keys {
			ahead <- struct{}{} // released once record i is used
			r := records[i]
			go func() {
				r.err = s.readRepoObject(key, &r.idx)
				close(r.done)
			}()
		}
	}()
	for i, key := range keys {
		r := records[i]
		<-r.done
		idx, err := r.idx, r.err
		records[i] = nil // its chunks go into s.known: the record itself can be collected
		<-ahead
		if err != nil {
			s.a.logf("warning: ignoring %s: %v", key, err)
			continue
		}
		for _, e := range idx.Extended {
			if e.Until.After(extended[e.Key]) {
				extended[e.Key] = e.Until
			}
		}
		for _, p := range idx.Packs {
			if p.KeyRef != keyRef {
				continue // written with other keys (or none): not this backup's to refer to
			}
			n := int32(len(s.packs))
			s.packs = append(s.packs, knownPack{key: p.Key, wrapped: p.Wrapped, size: p.Size, sha256: p.SHA256, until: p.RetainUntil, emitted: -1})
			for _, c := range p.Chunks {
				s.known[c.ID] = chunkLoc{pack: n, off: c.Off, sealed: c.Sealed, plain: c.Plain}
			}
		}
	}
	for i := range s.packs {
		if u := extended[s.packs[i].key]; u.After(s.packs[i].until) {
			s.packs[i].until = u
		}
	}
	if newestFiles != nil {
		var err error
		if s.prev, s.previousStart, err = s.openFilesRecord(s.ctx, newestFiles.key); err != nil {
			s.a.logf("warning: every file is read: %s: %v", newestFiles.key, err)
			s.prev = nil
		} else {
			s.sequence = s.prev.sequence + 1
		}
	}
	s.a.logf("repository %s: %d packs and %d chunks known; the last backup's files record: %v", ArtifactURI(s.bucket, s.repo), len(s.packs), len(s.known), s.prev != nil)
	return nil
}

// indexReadAhead is how many index/ records a backup reads at once.
const indexReadAhead = 8

// readRepoObject reads and opens an index/ or maintenance/ object into v (files/ is a stream:
// filesrecord.go).
func (s *chunkStore) readRepoObject(key string, v any) error {
	obj, err := s.a.S3.GetObject(s.ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return err
	}
	defer obj.Close()
	// Read into a buffer of the object's size, and open it in place: one copy of an object that
	// can hold a million chunks' places, not three.
	info, err := obj.Stat()
	if err != nil {
		return err
	}
	if info.Size > maxRepoObject {
		return fmt.Errorf("larger than %d bytes", maxRepoObject)
	}
	buf := bytes.NewBuffer(make([]byte, 0, info.Size+bytes.MinRead))
	if _, err := buf.ReadFrom(io.LimitReader(obj, maxRepoObject+1)); err != nil {
		return err
	}
	sealed := buf.Bytes()
	if len(sealed) > maxRepoObject {
		return fmt.Errorf("larger than %d bytes", maxRepoObject)
	}
	plain, err := openRepoObject(s.keys.seal, key, sealed)
	if err != nil {
		return err
	}
	dec, err := zstd.NewReader(bytes.NewReader(plain), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxRepoObject))
	if err != nil {
		return err
	}
	defer dec.Close()
	return gob.NewDecoder(dec).Decode(v)
}

// sealRepoObject seals an index/ or files/ object, bound to its key so that one cannot stand in
// for another: magic, version, nonce, then AES-GCM of the compressed gob.
func sealRepoObject(aead cipher.AEAD, key string, v any) ([]byte, error) {
	var plain bytes.Buffer
	zw, err := zstd.NewWriter(&plain, zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	if err := gob.NewEncoder(zw).Encode(v); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	out := append([]byte(repoObjectMagic), repoObjectVersion)
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	out = append(out, nonce...)
	return aead.Seal(out, nonce, plain.Bytes(), []byte(key)), nil
}

// openRepoObject opens a sealed repository object in place: the plaintext overwrites sealed.
func openRepoObject(aead cipher.AEAD, key string, sealed []byte) ([]byte, error) {
	head := len(repoObjectMagic) + 1
	if len(sealed) < head+aead.NonceSize() || string(sealed[:len(repoObjectMagic)]) != repoObjectMagic {
		return nil, errors.New("not a repository object")
	}
	if sealed[len(repoObjectMagic)] != repoObjectVersion {
		return nil, fmt.Errorf("repository object version %d is not %d", sealed[len(repoObjectMagic)], repoObjectVersion)
	}
	nonce, ciphertext := sealed[head:head+aead.NonceSize()], sealed[head+aead.NonceSize():]
	plain, err := aead.Open(ciphertext[:0], nonce, ciphertext, []byte(key)) // in place
	if err != nil {
		return nil, errors.New("does not open with this repository's chunk key")
	}
	return plain, nil
}

func statTimes(fi fs.FileInfo) (ctime time.Time, ino uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return time.Unix(st.Ctim.Sec, st.Ctim.Nsec), st.Ino
	}
	return fi.ModTime(), 0
}

// unchanged tells whether a file can be taken from the last backup without reading it: same
// size, times and inode, and not changed after that backup started (a change within the clock's
// resolution of its read would leave the times as they were).
func (s *chunkStore) unchanged(prev, now *cachedFile) bool {
	return prev.Size == now.Size && prev.MtimeNs == now.MtimeNs && prev.CtimeNs == now.CtimeNs && prev.Ino == now.Ino &&
		now.Ino != 0 && time.Unix(0, now.CtimeNs).Before(s.previousStart.Add(-time.Second)) &&
		time.Unix(0, now.MtimeNs).Before(s.previousStart.Add(-time.Second))
}

// store seals a new chunk (data, and z its compressed form when that is smaller, else nil) into
// the current pack, and uploads the pack when it is full.
func (s *chunkStore) store(id chunkID, data, z []byte) (chunkLoc, error) {
	if s.cur == nil {
		if err := s.newPack(); err != nil {
			return chunkLoc{}, err
		}
	}
	p := s.cur
	off := len(p.data)
	flag := byte(0)
	body := data
	if z != nil {
		flag, body = chunkFlagZstd, z
	}
	if p.aead == nil {
		p.data = append(append(p.data, flag), body...)
	} else {
		var nonce [12]byte
		if _, err := rand.Read(nonce[:]); err != nil {
			return chunkLoc{}, err
		}
		p.data = append(p.data, nonce[:]...)
		s.sealBuf = append(append(s.sealBuf[:0], flag), body...)
		p.data = p.aead.Seal(p.data, nonce[:], s.sealBuf, id[:])
	}
	sealed := len(p.data) - off
	loc := chunkLoc{pack: p.idx, off: uint32(off), sealed: uint32(sealed), plain: uint32(len(data))}
	p.rec.Chunks = append(p.rec.Chunks, runChunk{ID: id, Off: loc.off, Sealed: loc.sealed, Plain: loc.plain})
	s.stats.chunksNew++
	s.stats.bytesNew += int64(len(data))
	if len(p.data) >= s.a.packSize() {
		s.upload()
	}
	return loc, nil
}

func (a *Agent) clock() time.Time {
	if a.now != nil {
		return a.now()
	}
	return time.Now()
}

func (a *Agent) packSize() int {
	if a.PackSize > 0 {
		return a.PackSize
	}
	return DefaultPackSize
}

func (s *chunkStore) newPack() error {
	var name [16]byte
	if _, err := rand.Read(name[:]); err != nil {
		return err
	}
	p := &packBuilder{idx: int32(len(s.packs)), rec: &runPack{Key: s.repo + "/packs/" + hex.EncodeToString(name[:])}}
	select {
	case p.data = <-s.free:
	default:
		p.data = make([]byte, 0, s.a.packSize()+1<<20) // a pack ends after the chunk that fills it
	}
	if len(s.a.Recipients) > 0 {
		p.key = make([]byte, 32)
		if _, err := rand.Read(p.key); err != nil {
			return err
		}
		block, err := aes.NewCipher(p.key)
		if err != nil {
			return err
		}
		if p.aead, err = cipher.NewGCM(block); err != nil {
			return err
		}
		var wrapped bytes.Buffer
		w, err := age.Encrypt(&wrapped, s.a.Recipients...)
		if err != nil {
			return err
		}
		if _, err := w.Write(p.key); err != nil {
			return err
		}
		if err := w.Close(); err != nil {
			return err
		}
		p.rec.Wrapped, p.rec.KeyRef = wrapped.Bytes(), s.a.KeyRef
	}
	s.packs = append(s.packs, knownPack{key: p.rec.Key, wrapped: p.rec.Wrapped, rec: p.rec, emitted: -1})
	s.cur = p
	return nil
}

// upload sends the current pack in the background, at most UploadThreads at once.
func (s *chunkStore) upload() {
	p := s.cur
	s.cur = nil
	if p == nil || len(p.data) == 0 {
		return
	}
	p.rec.Size = int64(len(p.data))
	if s.a.RetainFor > 0 {
		p.rec.RetainUntil = s.packLock()
	}
	s.uploaded = append(s.uploaded, p.rec)
	s.stats.packs++
	s.stats.stored += p.rec.Size
	s.slots <- struct{}{}
	s.uploads.Add(1)
	go func() {
		defer func() {
			select {
			case s.free <- p.data[:0]: // the buffer of a pack to come
			default:
			}
			<-s.slots
			s.uploads.Done()
		}()
		p.rec.SHA256 = sha256.Sum256(p.data) // for the pack list; read after s.uploads.Wait
		_, err := s.a.S3.PutObject(s.ctx, s.bucket, p.rec.Key, bytes.NewReader(p.data), int64(len(p.data)),
			s.a.locked(minio.PutObjectOptions{ContentType: ContentType, DisableContentSha256: true, AutoChecksum: minio.ChecksumCRC32C}, s.packLock()))
		if err != nil {
			s.mu.Lock()
			if s.uploadErr == nil {
				s.uploadErr = fmt.Errorf("uploading pack %s: %w", p.rec.Key, err)
			}
			s.mu.Unlock()
		}
	}()
}

// finish uploads the last pack and waits for every upload, then stores what this backup wrote
// (index/) and referred to (files/): the artifact may only complete once every chunk it names is
// stored and maintenance can see that it names them.
func (s *chunkStore) finish() error {
	s.upload()
	s.uploads.Wait()
	if s.zenc != nil {
		s.zenc.Close()
	}
	if s.uploadErr != nil {
		return s.uploadErr
	}
	for _, p := range s.uploaded {
		s.written.Packs = append(s.written.Packs, *p)
	}
	if err := s.extendLocks(); err != nil {
		return err
	}
	if err := s.putRepoObject("index", s.name, &s.written); err != nil {
		return err
	}
	if err := s.filesOut.close(s.emittedKeys); err != nil {
		return err
	}
	return s.putPackList()
}

// putPackList stores the pack list of the packs the artifact names (apis/jobdriver: what
// checksum-only verification checks without keys), and keeps its digest for the report.
func (s *chunkStore) putPackList() error {
	l := jobv1.PackList{Sequence: s.sequence, Packs: make([]jobv1.ListedPack, 0, len(s.emittedPacks))}
	for _, i := range s.emittedPacks {
		pk := &s.packs[i]
		size, sum := pk.size, pk.sha256
		if pk.rec != nil {
			size, sum = pk.rec.Size, pk.rec.SHA256
		}
		lp := jobv1.ListedPack{Name: strings.TrimPrefix(pk.key, s.repo+"/packs/"), Size: size, Added: pk.rec != nil}
		if sum != ([sha256.Size]byte{}) {
			lp.SHA256 = hex.EncodeToString(sum[:])
		}
		l.Packs = append(l.Packs, lp)
	}
	b, err := l.Marshal()
	if err != nil {
		return err
	}
	key := s.repo + "/" + jobv1.PackListDir + "/" + s.name
	if _, err := s.a.S3.PutObject(s.ctx, s.bucket, key, bytes.NewReader(b), int64(len(b)), s.a.locked(minio.PutObjectOptions{ContentType: "text/plain", SendContentMd5: true}, s.lockUntil)); err != nil {
		return fmt.Errorf("storing %s: %w", ArtifactURI(s.bucket, key), err)
	}
	sum := sha256.Sum256(b)
	s.packList = "sha256:" + hex.EncodeToString(sum[:])
	return nil
}

// end closes the last backup's files record, once the walk is done with it.
func (s *chunkStore) end() {
	if s.prev != nil {
		s.prev.close()
		s.prev = nil
	}
}

// previous is the last backup's record of the file name, if it has one.
func (s *chunkStore) previous(name string) *cachedFile {
	if s.prev == nil {
		return nil
	}
	f := s.prev.find(name)
	if s.prev.err != nil {
		s.a.logf("warning: the rest of the files is read: the last backup's files record: %v", s.prev.err)
		s.end()
		return nil
	}
	return f
}

// putRepoObject seals v and stores it as dir/name.
func (s *chunkStore) putRepoObject(dir, name string, v any) error {
	key := s.repo + "/" + dir + "/" + name
	b, err := sealRepoObject(s.keys.seal, key, v)
	if err != nil {
		return err
	}
	if _, err := s.a.S3.PutObject(s.ctx, s.bucket, key, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{ContentType: ContentType, SendContentMd5: true}); err != nil {
		return fmt.Errorf("storing %s: %w", ArtifactURI(s.bucket, key), err)
	}
	return nil
}

// chunkSource is the restore side of a chunked artifact: it reads the chunks a file's chunk list
// names from the packs the index introduced, a window of a pack at a time.
type chunkSource struct {
	a        *Agent
	ctx      context.Context
	bucket   string
	versions *versionReader
	packs    []*sourcePack
	windows  []*packWindow // most recently used last
	zdec     *zstd.Decoder
	hash     hash.Hash
	plain    []byte
	ahead    *windowRead // the window being read ahead, if one is
	spare    []byte      // a buffer for the next read ahead
	joined   []byte      // a chunk across windows
}

type sourcePack struct {
	key     string
	version string // the version written (versionReader), once looked up
	looked  bool
	wrapped []byte
	aead    cipher.AEAD // nil until first used, or for an unencrypted pack
}

type packWindow struct {
	pack int
	off  int64
	data []byte
}

// Bounds of a restore's reads from packs: windows of restoreWindow bytes, at most restoreWindows
// of them kept and one more read ahead.
const (
	restoreWindow  = 4 << 20
	restoreWindows = 4
	// maxWrappedKey bounds a pack's wrapped key: age's header for 15 post-quantum recipients.
	maxWrappedKey = 64 << 10
)

// chunkDamage is a chunk, or a file made of chunks, that is not what the index says: a finding
// about the backup, not a fault of the run.
type chunkDamage struct{ msg string }

func (d *chunkDamage) Error() string { return d.msg }

func (a *Agent) newChunkSource(ctx context.Context, bucket string, versions *versionReader) (*chunkSource, error) {
	zdec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(chunker.MaxSize+1))
	if err != nil {
		return nil, err
	}
	return &chunkSource{a: a, ctx: ctx, bucket: bucket, versions: versions, zdec: zdec, hash: sha256.New(), plain: make([]byte, 0, chunker.MaxSize)}, nil
}

func (c *chunkSource) close() {
	if c.ahead != nil {
		<-c.ahead.done
		c.ahead = nil
	}
	c.zdec.Close()
}

// addPack reads a pack entry of the index.
func (c *chunkSource) addPack(name string, r io.Reader) error {
	if name == "" || strings.Contains(name, "..") || len(name) > 1024 {
		return fmt.Errorf("pack entry %q does not name a pack", name)
	}
	wrapped, err := io.ReadAll(io.LimitReader(r, maxWrappedKey+1))
	if err != nil {
		return err
	}
	if len(wrapped) > maxWrappedKey {
		return fmt.Errorf("pack entry %q holds more than %d bytes", name, maxWrappedKey)
	}
	c.packs = append(c.packs, &sourcePack{key: name, wrapped: wrapped})
	return nil
}

// chunkRef is one element of a file's chunk list.
type chunkRef struct {
	pack          int
	off           int64
	sealed, plain int
	id            chunkID
}

func parseChunkList(list []byte, packs int) ([]chunkRef, error) {
	var refs []chunkRef
	for len(list) > 0 {
		var v [4]uint64
		for i := range v {
			x, n := binary.Uvarint(list)
			if n <= 0 {
				return nil, errors.New("its chunk list is malformed")
			}
			v[i], list = x, list[n:]
		}
		if len(list) < len(chunkID{}) {
			return nil, errors.New("its chunk list is truncated")
		}
		if v[0] >= uint64(packs) || v[1] > 1<<40 || v[2] > 2*chunker.MaxSize || v[3] > chunker.MaxSize {
			return nil, errors.New("its chunk list names a pack, place or size out of bounds")
		}
		ref := chunkRef{pack: int(v[0]), off: int64(v[1]), sealed: int(v[2]), plain: int(v[3])}
		copy(ref.id[:], list)
		refs = append(refs, ref)
		list = list[len(chunkID{}):]
	}
	return refs, nil
}

// writeFile writes the file whose entry is hdr and whose chunk list r holds to w, and checks it
// against the size and SHA-256 of the entry.
func (c *chunkSource) writeFile(w io.Writer, name string, hdr *tar.Header, r io.Reader) error {
	size, err := strconv.ParseInt(hdr.PAXRecords[paxSize], 10, 64)
	want, herr := hex.DecodeString(hdr.PAXRecords[paxSHA256])
	if err != nil || size < 0 || herr != nil || len(want) != sha256.Size {
		return fmt.Errorf("the entry of a chunked file has no valid %s and %s records", paxSize, paxSHA256)
	}
	if hdr.Size > maxChunkList {
		return fmt.Errorf("its chunk list is %d bytes, more than %d", hdr.Size, maxChunkList)
	}
	list, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	refs, err := parseChunkList(list, len(c.packs))
	if err != nil {
		return err
	}
	c.hash.Reset()
	var n int64
	for i, ref := range refs {
		data, err := c.chunk(ref)
		if err != nil {
			var d *chunkDamage
			if errors.As(err, &d) {
				d.msg = fmt.Sprintf("%s: chunk %d of %d: %s", name, i+1, len(refs), d.msg)
			}
			return err
		}
		c.hash.Write(data)
		if _, err := w.Write(data); err != nil {
			return err
		}
		n += int64(len(data))
	}
	if got := c.hash.Sum(nil); n != size || !bytes.Equal(got, want) {
		return &chunkDamage{fmt.Sprintf("%s: its chunks make %d bytes of SHA-256 %x, the index says %d bytes of SHA-256 %x", name, n, got, size, want)}
	}
	return nil
}

// chunk reads, opens and decompresses one chunk.
func (c *chunkSource) chunk(ref chunkRef) ([]byte, error) {
	p := c.packs[ref.pack]
	sealed, err := c.read(ref.pack, ref.off, ref.sealed)
	if err != nil {
		return nil, err
	}
	plain := sealed
	if len(p.wrapped) > 0 {
		if p.aead == nil {
			if p.aead, err = c.a.Identities.openPackKey(p.key, p.wrapped); err != nil {
				return nil, err
			}
		}
		ns := p.aead.NonceSize()
		if len(sealed) < ns {
			return nil, &chunkDamage{fmt.Sprintf("pack %s holds %d bytes at %d, too few for a sealed chunk", p.key, len(sealed), ref.off)}
		}
		if plain, err = p.aead.Open(c.plain[:0], sealed[:ns], sealed[ns:], ref.id[:]); err != nil {
			return nil, &chunkDamage{fmt.Sprintf("the chunk at %d of pack %s does not authenticate: it is damaged or not the chunk the index names", ref.off, p.key)}
		}
	}
	if len(plain) == 0 {
		return nil, &chunkDamage{fmt.Sprintf("the chunk at %d of pack %s is empty", ref.off, p.key)}
	}
	flag, body := plain[0], plain[1:]
	switch flag {
	case 0:
	case chunkFlagZstd:
		out, err := c.zdec.DecodeAll(body, make([]byte, 0, ref.plain))
		if err != nil {
			return nil, &chunkDamage{fmt.Sprintf("the chunk at %d of pack %s does not decompress: %v", ref.off, p.key, err)}
		}
		body = out
	default:
		return nil, &chunkDamage{fmt.Sprintf("the chunk at %d of pack %s has the unknown flag %d", ref.off, p.key, flag)}
	}
	if len(body) != ref.plain {
		return nil, &chunkDamage{fmt.Sprintf("the chunk at %d of pack %s is %d bytes, the index says %d", ref.off, p.key, len(body), ref.plain)}
	}
	return body, nil
}

// read returns n bytes of a pack at off. A pack is read in windows of restoreWindow bytes at
// multiples of restoreWindow, the last restoreWindows of them kept; a chunk across windows is
// copied out of them. While the caller works on a window, the next one is read (the same pack's
// next window, or the next pack's first once a pack's last window is read), so the store's
// latency overlaps the decrypting, hashing and writing of what came before.
func (c *chunkSource) read(pack int, off int64, n int) ([]byte, error) {
	first := off / restoreWindow
	last := (off + int64(max(n, 1)) - 1) / restoreWindow
	if first == last { // most chunks: a slice of one window, no copy
		w, err := c.window(pack, first)
		if err != nil {
			return nil, err
		}
		at := off - w.off
		if have := int64(len(w.data)) - at; have < int64(n) {
			return nil, c.shortPack(pack, off, n, max(have, 0))
		}
		return w.data[at : at+int64(n)], nil
	}
	c.joined = c.joined[:0]
	for k := first; k <= last; k++ {
		w, err := c.window(pack, k)
		if err != nil {
			return nil, err
		}
		from, to := max(off-w.off, 0), min(off+int64(n)-w.off, int64(len(w.data)))
		c.joined = append(c.joined, w.data[min(from, to):to]...)
		if len(w.data) < restoreWindow {
			break // the pack's end
		}
	}
	if len(c.joined) < n {
		return nil, c.shortPack(pack, off, n, int64(len(c.joined)))
	}
	return c.joined, nil
}

func (c *chunkSource) shortPack(pack int, off int64, n int, have int64) error {
	return &chunkDamage{fmt.Sprintf("pack %s ends %d bytes into the %d-byte chunk at %d", c.packs[pack].key, have, n, off)}
}

// held is the index of the window of a pack at off among those held, or -1.
func (c *chunkSource) held(pack int, off int64) int {
	return slices.IndexFunc(c.windows, func(w *packWindow) bool { return w.pack == pack && w.off == off })
}

// window returns the k-th window of a pack: held, read ahead, or read now. It starts the read of
// the window after it.
func (c *chunkSource) window(pack int, k int64) (*packWindow, error) {
	off := k * restoreWindow
	if i := c.held(pack, off); i >= 0 {
		w := c.windows[i]
		c.windows = append(append(c.windows[:i:i], c.windows[i+1:]...), w)
		return w, nil
	}
	var w *packWindow
	if len(c.windows) >= restoreWindows {
		w, c.windows = c.windows[0], c.windows[1:]
	} else {
		w = &packWindow{}
	}
	w.pack, w.off, w.data = pack, off, w.data[:0]
	if f := c.ahead; f != nil {
		if f.pack == pack && f.off == off {
			<-f.done
			c.ahead = nil
			if f.err == nil { // else read again below: a fault of the read ahead is not the pack's
				w.data, c.spare = f.data, w.data
			}
		} else { // another window was read ahead: dropped once read
			select {
			case <-f.done:
				c.ahead, c.spare = nil, f.data[:0]
			default:
			}
		}
	}
	if len(w.data) == 0 {
		err := c.look(pack)
		if err == nil {
			w.data, err = c.get(c.ctx, c.packs[pack].key, c.packs[pack].version, off, w.data)
		}
		if err != nil {
			if code := minio.ToErrorResponse(err).Code; code == minio.NoSuchKey || code == "InvalidRange" {
				return nil, &chunkDamage{fmt.Sprintf("pack %s has no bytes at %d: %s", c.packs[pack].key, off, code)}
			}
			return nil, fmt.Errorf("reading pack %s: %w", c.packs[pack].key, err)
		}
	}
	c.windows = append(c.windows, w)
	switch {
	case len(w.data) == restoreWindow:
		c.readAhead(pack, off+restoreWindow)
	case pack+1 < len(c.packs):
		c.readAhead(pack+1, 0)
	}
	return w, nil
}

// look finds the version of a pack that a restore reads (versionReader), once.
func (c *chunkSource) look(pack int) error {
	p := c.packs[pack]
	if !p.looked {
		v, err := c.versions.written(p.key)
		if err != nil {
			return err
		}
		p.version, p.looked = v, true
	}
	return nil
}

// get reads the window of a pack's version at off into buf.
func (c *chunkSource) get(ctx context.Context, key, version string, off int64, buf []byte) ([]byte, error) {
	opts := minio.GetObjectOptions{VersionID: version}
	if err := opts.SetRange(off, off+restoreWindow-1); err != nil {
		return buf, err
	}
	obj, err := c.a.S3.GetObject(ctx, c.bucket, key, opts)
	if err != nil {
		return buf, err
	}
	defer obj.Close()
	b := bytes.NewBuffer(buf[:0])
	_, err = b.ReadFrom(obj)
	return b.Bytes(), err
}

// readAhead starts reading a window unless one is being read, the window is held, or the pack's
// version cannot be found now (the read on demand will say why).
func (c *chunkSource) readAhead(pack int, off int64) {
	if c.ahead != nil || c.held(pack, off) >= 0 || c.look(pack) != nil {
		return
	}
	f := &windowRead{pack: pack, off: off, done: make(chan struct{})}
	c.ahead = f
	key, version, buf := c.packs[pack].key, c.packs[pack].version, c.spare
	c.spare = nil
	go func() {
		defer close(f.done)
		f.data, f.err = c.get(c.ctx, key, version, off, buf)
	}()
}

// windowRead is a window being read ahead.
type windowRead struct {
	pack int
	off  int64
	done chan struct{}
	data []byte
	err  error
}

// openPackKey unwraps a pack's key.
func (ids *Identities) openPackKey(pack string, wrapped []byte) (cipher.AEAD, error) {
	if ids == nil || len(ids.ids) == 0 {
		return nil, fmt.Errorf("pack %s is encrypted, and the agent was given no identity", pack)
	}
	r, err := age.Decrypt(bytes.NewReader(wrapped), ids.ids...)
	if err != nil {
		var noMatch *age.NoIdentityMatchError
		if errors.As(err, &noMatch) {
			return nil, fmt.Errorf("wrong key: none of the identities given (keys %s) opens the key of pack %s", strings.Join(ids.fingerprints, ","), pack)
		}
		return nil, &chunkDamage{fmt.Sprintf("the key of pack %s does not open: %v", pack, err)}
	}
	key, err := io.ReadAll(io.LimitReader(r, 33))
	if err != nil || len(key) != 32 {
		return nil, &chunkDamage{fmt.Sprintf("the key of pack %s is not 32 bytes", pack)}
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}
