package agent

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"filippo.io/age"
	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"

	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// stagingPrefix starts the name of a restore's staging directory; backups skip such top-level
// directories, left over by an interrupted restore.
const stagingPrefix = ".coffer-restore-"

// errUploadEnded stops the archiver when the upload stopped reading.
var errUploadEnded = errors.New("the upload ended")

// ObjectKey is where a run's backup is stored: <prefix>/<runName>-<first 8 characters of runUID>.tar.
// Empty segments of the prefix (leading, trailing or doubled slashes) are dropped; an empty prefix
// puts the object at the top of the bucket.
func ObjectKey(prefix, runName, runUID string) string {
	var segments []string
	for _, s := range strings.Split(prefix, "/") {
		if s != "" {
			segments = append(segments, s)
		}
	}
	if len(runUID) > 8 {
		runUID = runUID[:8]
	}
	return strings.Join(append(segments, runName+"-"+runUID+".tar"), "/")
}

// Backup streams dir as one artifact (docs/artifact-format.md: a header, then the tar, compressed
// with zstd at a.CompressionLevel and encrypted with age to a.Recipients when set) to bucket/key
// and returns the artifact's report. It refuses to replace an existing object. Nothing is stored
// unless the whole archive was uploaded: the object appears when the multipart upload completes.
//
// Three stages overlap: the archiver (walk, tar, zstd, age) writes into a pipe; the upload reads
// it, hashing and counting on the way, into part buffers; a.UploadThreads parts go up at once.
// Memory is the part buffers and the codecs' windows, whatever the size of the tree: at the
// defaults 2 × 16 MiB of parts, 8 MiB of zstd history and 1.3 MiB of its match tables (levels
// 10 and above: 34 MiB), 2 MiB of buffers.
func (a *Agent) Backup(ctx context.Context, dir, bucket, key string) (*jobv1.ArtifactReport, error) {
	uri := ArtifactURI(bucket, key)
	root, err := realDir(dir)
	if err != nil {
		return nil, fmt.Errorf("the directory to back up: %w", err)
	}
	hdr, err := a.header()
	if err != nil {
		return nil, err
	}
	until := a.clock().Add(a.RetainFor) // the lock of what this backup stores
	if err := a.checkLockable(ctx, bucket); err != nil {
		return nil, err
	}
	putOpts := a.locked(a.putOptions(), until)
	if a.Chunked {
		// A chunked artifact is an index, a few hundred bytes a file: S3's smallest parts, one
		// at a time, rather than two parts of the data's size held in memory.
		putOpts.PartSize, putOpts.NumThreads, putOpts.ConcurrentStreamParts = 5<<20, 1, false
	}
	_, err = a.S3.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
	switch code := minio.ToErrorResponse(err).Code; {
	case err == nil:
		return nil, fmt.Errorf("%s already exists; refusing to overwrite it", uri)
	case code == "AccessDenied" || code == "Forbidden":
		// Credentials that may put and not read (BackupPolicy): the store refuses the upload
		// if the object exists.
		putOpts.SetMatchETagExcept("*")
	case code != minio.NoSuchKey:
		return nil, fmt.Errorf("checking whether %s exists: %w", uri, err)
	}

	var chunks *chunkStore
	if a.Chunked {
		if chunks, err = a.openChunkStore(ctx, bucket, key); err != nil {
			return nil, err
		}
		chunks.lockUntil = until
	}
	a.logf("backing up %s to %s (format %d, compression %s, encryption %s)", dir, uri, hdr.Version, a.compressionName(), a.encryptionName(hdr))
	start := time.Now()
	pr, pw := io.Pipe()
	archived := make(chan error, 1)
	var tarSize byteCounter
	go func() {
		err := a.writeArtifact(pw, root, hdr, &tarSize, chunks)
		pw.CloseWithError(err) // nil: the upload reads io.EOF
		archived <- err
	}()
	hash := sha256.New()
	var size byteCounter
	info, uploadErr := a.S3.PutObject(ctx, bucket, key, io.TeeReader(pr, io.MultiWriter(hash, &size)), -1, putOpts)
	pr.CloseWithError(errUploadEnded) // unblocks the archiver if the upload failed
	if err := <-archived; err != nil && !errors.Is(err, errUploadEnded) {
		return nil, fmt.Errorf("archiving %s: %w", dir, err)
	}
	if minio.ToErrorResponse(uploadErr).Code == "PreconditionFailed" {
		return nil, fmt.Errorf("%s already exists; refusing to overwrite it", uri)
	}
	if uploadErr != nil {
		return nil, fmt.Errorf("uploading %s: %w", uri, uploadErr)
	}
	if info.Size != int64(size) {
		return nil, fmt.Errorf("uploading %s: the store took %d bytes of %d", uri, info.Size, size)
	}
	elapsed := time.Since(start)
	a.logf("uploaded %d bytes (a tar of %d bytes) in %s (%.1f MB/s of tar)", size, tarSize, elapsed.Round(time.Millisecond), float64(tarSize)/1e6/elapsed.Seconds())
	report := &jobv1.ArtifactReport{
		URI: uri, SizeBytes: int64(size), Checksum: "sha256:" + hex.EncodeToString(hash.Sum(nil)),
		Metadata: map[string]string{
			MetaFormat:            strconv.Itoa(int(hdr.Version)),
			MetaCompression:       a.compressionName(),
			MetaUncompressedBytes: strconv.FormatInt(int64(tarSize), 10),
			MetaEncryption:        a.encryptionName(hdr),
		},
	}
	if chunks != nil {
		st := &chunks.stats
		a.logf("chunked: %d files read (%d bytes), %d unchanged files not read; %d new chunks (%d bytes) in %d packs of %d bytes, %d chunks already stored, %d compressed",
			st.filesRead, st.bytesRead, st.filesSkipped, st.chunksNew, st.bytesNew, st.packs, st.stored, st.chunksKnown, st.compressed.Load())
		report.Metadata[MetaUncompressedBytes] = strconv.FormatInt(st.bytesRead, 10)
		report.Metadata[MetaRepository] = ArtifactURI(bucket, chunks.repo)
		report.Metadata[MetaStoredBytes] = strconv.FormatInt(st.stored, 10)
		report.Metadata[jobv1.MetaPackList] = chunks.packList
		if st.stored > 0 {
			report.Metadata[MetaCompressionRatio] = strconv.FormatFloat(float64(st.bytesNew)/float64(st.stored), 'f', 2, 64)
		}
	} else if size > 0 {
		report.Metadata[MetaCompressionRatio] = strconv.FormatFloat(float64(tarSize)/float64(size), 'f', 2, 64)
	}
	if hdr.KeyRef != "" {
		report.Metadata[MetaKeyRef] = hdr.KeyRef
	}
	if a.RetainFor > 0 {
		report.Metadata[MetaLockedUntil] = until.UTC().Format(time.RFC3339)
	}
	if err := report.Validate(); err != nil {
		return nil, err
	}
	if a.Record != nil {
		if err := a.writeRecord(ctx, bucket, key, report, start, until); err != nil {
			// An artifact without its record could not be found again from storage alone: the
			// backup fails, and takes its artifact back rather than leave it to nobody.
			if rerr := a.S3.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{}); rerr != nil {
				return nil, fmt.Errorf("%w; deleting the artifact it describes failed too (%v): delete %s by hand", err, rerr, uri)
			}
			return nil, fmt.Errorf("%w; the artifact was deleted", err)
		}
	}
	return report, nil
}

// Keys of a backup report's metadata (the Backup's driverMetadata, prefixed with "artifact.").
const (
	MetaFormat            = "format"
	MetaCompression       = "compression"
	MetaUncompressedBytes = "uncompressedBytes"
	MetaCompressionRatio  = "compressionRatio"
	MetaEncryption        = "encryption"
	MetaKeyRef            = "keyRef"
	// MetaRepository is a chunked artifact's repository (s3://bucket/prefix), MetaStoredBytes the
	// bytes of the packs its backup added to it; MetaUncompressedBytes is then what it read.
	MetaRepository  = "repository"
	MetaStoredBytes = "storedBytes"
	// MetaLockedUntil is when the object lock of what the backup stored ends (RFC 3339, UTC; a
	// chunked backup's packs are held longer): set only when the backup locks.
	MetaLockedUntil = "lockedUntil"
)

// header is the header of the agent's next backup.
func (a *Agent) header() (Header, error) {
	h := Header{Version: FormatVersion}
	if a.Chunked {
		h.Version = chunkedVersion
	}
	if a.CompressionLevel < 0 || a.CompressionLevel > MaxCompressionLevel {
		return h, fmt.Errorf("compression level %d is not 0 (none) to %d", a.CompressionLevel, MaxCompressionLevel)
	}
	if a.CompressionLevel > 0 {
		h.Compression = CompressionZstd
	}
	if len(a.Recipients) > 0 {
		h.Encryption, h.KeyRef = EncryptionAge, a.KeyRef
	}
	return h, h.check()
}

func (a *Agent) compressionName() string {
	if a.CompressionLevel == 0 {
		return "none"
	}
	return fmt.Sprintf("zstd-%d", a.CompressionLevel)
}

func (a *Agent) encryptionName(h Header) string {
	if h.Encryption == EncryptionAge {
		return "age"
	}
	return "none"
}

// writeArtifact writes the header and the payload: the tar of root, through zstd, through age.
// tarSize counts the tar's bytes. With chunks, the tar is a chunked index (format 4).
func (a *Agent) writeArtifact(w io.Writer, root string, h Header, tarSize *byteCounter, chunks *chunkStore) (err error) {
	b, err := h.MarshalBinary()
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		return err
	}
	out := w
	var closers []io.Closer // innermost last
	if h.Encryption == EncryptionAge {
		// age writes 64 KiB chunks; a buffer gives the pipe fewer, larger writes.
		bw := bufio.NewWriterSize(out, 1<<20)
		defer func() {
			if ferr := bw.Flush(); err == nil {
				err = ferr
			}
		}()
		ew, err := age.Encrypt(bw, a.Recipients...)
		if err != nil {
			return fmt.Errorf("encrypting: %w", err)
		}
		out = ew
		closers = append(closers, ew)
	}
	if h.Compression == CompressionZstd {
		level := zstd.EncoderLevelFromZstd(a.CompressionLevel)
		opts := []zstd.EOption{zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(a.codecThreads())}
		if level != zstd.SpeedFastest { // which has this window already, and smaller blocks that a window set would undo
			opts = append(opts, zstd.WithWindowSize(encoderWindow))
		}
		zw, err := zstd.NewWriter(out, opts...)
		if err != nil {
			return fmt.Errorf("compressing: %w", err)
		}
		out = zw
		closers = append(closers, zw)
	}
	closed := false
	defer func() {
		if !closed { // stops the encoders' goroutines; the stream is abandoned anyway
			for i := len(closers) - 1; i >= 0; i-- {
				_ = closers[i].Close()
			}
		}
	}()
	if err := writeTar(io.MultiWriter(out, tarSize), root, a.logf, true, chunks); err != nil {
		return err
	}
	closed = true
	for i := len(closers) - 1; i >= 0; i-- {
		if err := closers[i].Close(); err != nil {
			return err
		}
	}
	return nil
}

// encoderWindow is the zstd window of backups. The encoder holds twice its window as history (so
// that it moves the history down once per window, not once per block): 8 MiB with this window,
// 16 MiB with the 8 MiB its levels 3 and above would use. On the benchmark's JSON logs the ratio
// is the same (the reference zstd uses 2 MiB at level 3 on large inputs); restores also need less
// (the window plus 64 KiB).
const encoderWindow = 4 << 20

// putOptions are the upload's: parts of a.PartSize, a.UploadThreads of them in flight. The
// payload is not signed chunk by chunk (over plain HTTP minio-go would hash it a second time);
// each part carries a CRC32C the store checks, and the agent's SHA-256 covers the whole object.
func (a *Agent) putOptions() minio.PutObjectOptions {
	threads := a.UploadThreads
	if threads == 0 {
		threads = DefaultUploadThreads
	}
	return minio.PutObjectOptions{
		ContentType:           ContentType,
		PartSize:              a.partSize(),
		NumThreads:            uint(threads),
		ConcurrentStreamParts: threads > 1,
		DisableContentSha256:  true,
	}
}

// ContentType is the artifacts' media type.
const ContentType = "application/vnd.coffer.artifact"

func (a *Agent) partSize() uint64 {
	if a.PartSize == 0 {
		return DefaultPartSize
	}
	return a.PartSize
}

// byteCounter counts what is written to it.
type byteCounter int64

func (c *byteCounter) Write(p []byte) (int, error) {
	*c += byteCounter(len(p))
	return len(p), nil
}

// writeTar writes the tree under dir to w as a tar, in lexical order, without the root itself,
// and then, withManifest, the manifest of its files (format 3). With chunks, regular files are
// written as their chunk lists (format 4), and the tar ends only once every pack they name is
// stored.
// Symbolic links are stored, not followed; sockets, devices and FIFOs are skipped with a warning,
// as are entries removed while the walk runs, a top-level lost+found and restore staging
// directories.
func writeTar(w io.Writer, dir string, warnf func(string, ...any), withManifest bool, chunks *chunkStore) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	tw := tar.NewWriter(bw)
	buf := make([]byte, 256<<10)
	var m *manifest // nil: files are neither hashed nor listed
	if withManifest {
		m = newManifest()
	}
	emit := func(path, name string, fi fs.FileInfo) error { return addEntry(tw, m, path, name, fi, buf, warnf) }
	var pipe *chunkPipeline
	if chunks != nil {
		pipe = chunks.startPipeline(tw, m, buf, warnf)
		emit = pipe.submit
	}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path != dir && errors.Is(err, fs.ErrNotExist) {
				warnf("warning: skipping %s: removed during the backup", path)
				return nil
			}
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		if d.IsDir() && !strings.ContainsRune(rel, filepath.Separator) {
			switch {
			case rel == "lost+found":
				// The file system's, not the application's; root-only on ext4, so unreadable to
				// a non-root agent, and a fresh volume has its own.
				warnf("warning: skipping lost+found")
				return filepath.SkipDir
			case strings.HasPrefix(rel, stagingPrefix):
				warnf("warning: skipping %s: staging directory of an interrupted restore", rel)
				return filepath.SkipDir
			}
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			warnf("warning: skipping %s: removed during the backup", rel)
			return nil
		} else if err != nil {
			return err
		}
		return emit(path, filepath.ToSlash(rel), fi)
	})
	if pipe != nil {
		err = pipe.close(err)
	}
	if err != nil {
		return err
	}
	if m != nil {
		if err := m.write(tw); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

// addEntry writes one file, directory or symbolic link, and records a file in the manifest m
// unless m is nil.
func addEntry(tw *tar.Writer, m *manifest, path, name string, fi fs.FileInfo, buf []byte, warnf func(string, ...any)) error {
	var link string
	var f *os.File
	switch mode := fi.Mode(); {
	case mode.IsDir():
		name += "/"
	case mode&fs.ModeSymlink != 0:
		var err error
		if link, err = os.Readlink(path); err != nil {
			return err
		}
	case mode.IsRegular():
		// Opened first, so that a file that cannot be read leaves no header behind; O_NOFOLLOW
		// keeps a file replaced by a link meanwhile from being followed.
		var err error
		f, err = os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if errors.Is(err, fs.ErrNotExist) {
			warnf("warning: skipping %s: removed during the backup", name)
			return nil
		} else if err != nil {
			return err
		}
		defer f.Close()
	default:
		warnf("warning: skipping %s: a %s is not a regular file, directory or symbolic link", name, typeName(mode))
		return nil
	}
	hdr, err := tar.FileInfoHeader(noNames{fi}, link)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	hdr.Name = name
	// Whole-second modification times only: the USTAR header keeps the archive compact and the
	// same tree gives the same bytes.
	hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if f == nil {
		return nil
	}
	var dst io.Writer = tw
	if m != nil {
		m.hash.Reset()
		dst = io.MultiWriter(tw, m.hash)
	}
	n, err := io.CopyBuffer(dst, io.LimitReader(f, hdr.Size), buf)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if n != hdr.Size {
		return fmt.Errorf("%s shrank from %d to %d bytes while it was read", name, hdr.Size, n)
	}
	if m == nil {
		return nil
	}
	return m.add(name, n)
}

// noNames keeps tar.FileInfoHeader from looking owners up by name: restores use the numeric ids,
// and a volume's ids are seldom in the agent's /etc/passwd.
type noNames struct{ fs.FileInfo }

func (noNames) Uname() (string, error) { return "", nil }
func (noNames) Gname() (string, error) { return "", nil }

func typeName(m fs.FileMode) string {
	switch {
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	}
	return "special file (" + m.Type().String() + ")"
}
