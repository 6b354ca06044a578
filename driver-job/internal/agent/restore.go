package agent

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"

	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// Artifact is an object to restore: where it is and what it must hash to.
type Artifact struct {
	Bucket, Key string
	// Checksum is "sha256:" and 64 lower-case hex digits.
	Checksum string
	// SizeBytes is the expected size, or -1 when unknown.
	SizeBytes int64
	// version is the version read, "" for the latest; versions finds the chunked format's packs'.
	version  string
	versions *versionReader
}

// RestoreStatus is what a restore reports in its termination message; it is informative only.
type RestoreStatus struct {
	URI         string `json:"uri"`
	SizeBytes   int64  `json:"sizeBytes"`
	Format      int    `json:"format"`
	Files       int64  `json:"files"`
	Directories int64  `json:"directories"`
	Symlinks    int64  `json:"symlinks"`

	// damaged describes the files of a chunked artifact a verify could not restore because their
	// chunks are damaged or missing.
	damaged []string
}

// Restore restores the artifact into dir in one pass. Before it writes anything, it checks what
// can be checked without reading the whole object: the size, the format, and (for an encrypted
// artifact) that a key opens it. Then it decrypts, decompresses and extracts the object into a
// staging directory inside dir while hashing it, and moves what it extracted into place only once
// the whole object hashed to the Backup's checksum and the payload authenticated to its end. Any
// failure removes the staging directory: dir is never written to by a restore that fails its
// checks. Each top-level entry of the backup replaces the entry of the same name in dir, as a
// whole; entries of dir the backup does not hold are left alone.
func (a *Agent) Restore(ctx context.Context, dir string, art Artifact) (*RestoreStatus, error) {
	status, _, err := a.restore(ctx, dir, art, false)
	return status, err
}

// Verify restores the artifact as Restore does, into a staging directory inside dir (a scratch
// volume), and instead of moving the result into place reads back every restored file and
// compares it with the manifest inside the artifact (format 3; older artifacts have none, and the
// report then says nothing was compared). The staging directory is removed either way. An artifact
// that does not restore is an error, as for Restore; differences are the report's.
func (a *Agent) Verify(ctx context.Context, dir string, art Artifact) (*jobv1.VerifyReport, error) {
	_, report, err := a.restore(ctx, dir, art, true)
	return report, err
}

func (a *Agent) restore(ctx context.Context, dir string, art Artifact, verify bool) (*RestoreStatus, *jobv1.VerifyReport, error) {
	uri := ArtifactURI(art.Bucket, art.Key)
	dir, err := realDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("the directory to restore into: %w", err)
	}
	art.versions = a.versionReader(ctx, art.Bucket)
	if art.version, err = art.versions.written(art.Key); err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", uri, err)
	}
	stat, err := a.S3.StatObject(ctx, art.Bucket, art.Key, minio.StatObjectOptions{VersionID: art.version})
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", uri, err)
	}
	if art.SizeBytes >= 0 && stat.Size != art.SizeBytes {
		return nil, nil, fmt.Errorf("%s is %d bytes, expected %d; nothing was restored", uri, stat.Size, art.SizeBytes)
	}
	head := make([]byte, min(stat.Size, maxPrefix))
	if len(head) > 0 {
		if err := a.fetchRange(ctx, art.Bucket, art.Key, art.version, stat.ETag, 0, head); err != nil {
			return nil, nil, fmt.Errorf("reading %s: %w", uri, readError(err))
		}
	}
	hdr, err := a.checkFormat(head)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w; nothing was restored", uri, err)
	}
	if a.afterHeader != nil {
		a.afterHeader()
	}

	staging, err := os.MkdirTemp(dir, stagingPrefix)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the staging directory: %w", err)
	}
	keep := false
	defer func() {
		if keep {
			return // it holds originals a failed rollback could not put back
		}
		if err := removeAll(staging); err != nil {
			a.logf("warning: removing the staging directory: %v", err)
		}
	}()
	data := filepath.Join(staging, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		return nil, nil, err
	}
	verb := "restoring"
	if verify {
		verb = "verifying"
	}
	a.logf("%s %s (%d bytes) into %s (format %d, compression %s, encryption %s)", verb, uri, stat.Size, dir, hdr.Version, hdr.Compression, hdr.Encryption)
	status := &RestoreStatus{URI: uri, SizeBytes: stat.Size, Format: int(hdr.Version)}
	want, err := a.extract(ctx, art, stat.ETag, data, status, verify)
	if err != nil {
		var mismatch *checksumMismatch
		if errors.As(err, &mismatch) {
			return nil, nil, fmt.Errorf("%s has checksum %s (%d bytes), expected %s; nothing was restored", uri, mismatch.sum, mismatch.n, art.Checksum)
		}
		return nil, nil, fmt.Errorf("extracting %s: %w; nothing was restored", uri, err)
	}
	if verify {
		report, err := a.compare(data, status, want)
		return status, report, err
	}
	if keep, err = moveIntoPlace(dir, staging); err != nil {
		return nil, nil, err
	}
	a.logf("restored %s: %d files, %d directories, %d symbolic links", uri, status.Files, status.Directories, status.Symlinks)
	return status, nil, nil
}

// compare compares the files restored under data with the artifact's manifest (nil for an
// artifact older than format 3).
func (a *Agent) compare(data string, status *RestoreStatus, want map[string]ManifestEntry) (*jobv1.VerifyReport, error) {
	if a.afterExtract != nil {
		a.afterExtract(data)
	}
	report := &jobv1.VerifyReport{}
	if status.Format >= 3 {
		var err error
		if report, err = compareWithManifest(data, want, make([]byte, 256<<10)); err != nil {
			return nil, fmt.Errorf("comparing the restored files with the manifest: %w", err)
		}
		if len(status.damaged) > 0 { // damage first: it says why a file is missing
			d := append(slices.Clone(status.damaged), report.Differences...)
			report.Differences = d[:min(len(d), jobv1.MaxVerifyDifferences)]
		}
		a.logf("verified %s: %d files restored, %d identical to the manifest, %d differences", status.URI, status.Files, report.Compared, report.Mismatched)
		for _, d := range report.Differences {
			a.logf("  %s", d)
		}
	} else {
		a.logf("verified %s: %d files restored; format %d has no manifest, so no file was compared", status.URI, status.Files, status.Format)
	}
	report.URI, report.Format, report.Files = status.URI, status.Format, status.Files
	return report, nil
}

// checksumMismatch is an object that did not hash to the Backup's checksum: it is not the
// artifact that was backed up, whatever else its extraction ran into.
type checksumMismatch struct {
	sum string
	n   int64
}

func (c *checksumMismatch) Error() string { return fmt.Sprintf("checksum %s (%d bytes)", c.sum, c.n) }

// maxPrefix is how much of an artifact a restore reads first to check its headers: the agent's
// header and age's (a few hundred bytes per recipient).
const maxPrefix = 256 << 10

// checkFormat reads the header of an artifact from its first bytes and checks that the
// agent can read it: a version and codecs it knows, and a key that opens it.
func (a *Agent) checkFormat(head []byte) (Header, error) {
	h, payload, err := ReadHeader(bytes.NewReader(head))
	if err != nil {
		return h, err
	}
	if h.Encryption == EncryptionNone {
		if a.Identities != nil {
			a.logf("the artifact is not encrypted (format %d)", h.Version)
		}
		return h, nil
	}
	rest, err := io.ReadAll(payload)
	if err != nil {
		return h, err
	}
	return h, a.Identities.checkKey(h, rest)
}

// extract unpacks the object into data while hashing it. The checksum speaks first: an object
// that does not hash to the Backup's is reported as a checksumMismatch, whatever its unpacking ran
// into, so the rest of the object is read (and hashed) after an unpacking error. Directories get
// their modes only once the checksum matched, so that a failed pass can be removed.
func (a *Agent) extract(ctx context.Context, art Artifact, etag, data string, status *RestoreStatus, wantManifest bool) (map[string]ManifestEntry, error) {
	obj := a.open(ctx, art, etag, status.SizeBytes)
	defer obj.Close()
	root, err := os.OpenRoot(data)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	x := &extractor{root: root, warnf: a.logf, chown: os.Geteuid() == 0, kinds: map[string]kind{}, buf: make([]byte, 256<<10), status: status, readManifest: wantManifest}
	if status.Format >= chunkedVersion {
		if x.chunks, err = a.newChunkSource(ctx, art.Bucket, art.versions); err != nil {
			return nil, err
		}
		defer x.chunks.close()
	}
	err = a.unpack(obj, x)
	if err != nil {
		_, _ = obj.WriteTo(discard) // a failed range stops the hash short: no mismatch is claimed then
	}
	if sum, n := obj.sum(); n == status.SizeBytes && sum != art.Checksum {
		return nil, &checksumMismatch{sum: sum, n: n}
	}
	if err != nil {
		return nil, err
	}
	if wantManifest && status.Format >= 3 && !x.manifestSeen {
		return nil, errNoManifest
	}
	return x.manifest, x.finish()
}

// unpack reads the artifact's header and payload from obj and gives the archive's entries to x.
func (a *Agent) unpack(obj io.Reader, x *extractor) error {
	raw := bufio.NewReaderSize(obj, 1<<20)
	h, payload, err := ReadHeader(raw)
	if err != nil {
		return fmt.Errorf("reading the artifact's header: %w", readError(err))
	}
	plain := payload
	if h.Encryption == EncryptionAge {
		if plain, err = a.Identities.decrypt(h, plain); err != nil {
			return readError(err)
		}
	}
	if h.Compression == CompressionZstd {
		// lowMem (the default, said for clarity) keeps the history at the window plus 64 KiB;
		// WithDecoderMaxMemory bounds the window of single-segment frames too, whose window is
		// their content size.
		zr, err := zstd.NewReader(plain, zstd.WithDecoderConcurrency(a.codecThreads()), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(maxWindow), zstd.WithDecoderMaxMemory(maxWindow))
		if err != nil {
			return fmt.Errorf("decompressing: %w", err)
		}
		defer zr.Close()
		plain = zr
	}
	plain = payloadReader{plain}
	tr := tar.NewReader(plain)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil && !errors.Is(err, tar.ErrInsecurePath) { // insecure names are refused below
			return fmt.Errorf("reading the archive: %w", readError(err))
		}
		if err := x.add(hdr, tr); err != nil {
			return err
		}
	}
	// The archive may be followed by padding, which the checksum covers. Reading the payload to
	// its end also checks zstd's frame checksums and age's final chunk.
	if _, err := io.CopyBuffer(discard, plain, x.buf); err != nil {
		return fmt.Errorf("reading the archive: %w", readError(err))
	}
	if _, err := io.CopyBuffer(discard, raw, x.buf); err != nil {
		return fmt.Errorf("reading the archive: %w", readError(err))
	}
	return nil
}

// payloadReader says that its errors are the artifact's, not the volume's: with a checksum that
// matched, they mean an artifact damaged before its checksum was taken, or a wrong checksum.
type payloadReader struct{ r io.Reader }

func (p payloadReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	switch {
	case err == nil || err == io.EOF:
	case errors.Is(err, zstd.ErrWindowSizeExceeded) || errors.Is(err, zstd.ErrDecoderSizeExceeded):
		err = fmt.Errorf("the artifact's zstd window is larger than the %d MiB this agent decodes (coffer-agent never wrote larger ones): %w", maxWindow>>20, err)
	default:
		err = fmt.Errorf("the artifact is damaged or truncated: %w", err)
	}
	return n, err
}

// maxWindow bounds the zstd window a restore accepts, and so the decoder's memory (the window plus
// 64 KiB). The agent writes 4 MiB windows, and wrote 8 MiB ones (4 MiB at level 1) before; the
// reference zstd stays within 8 MiB up to level 19. A larger window (zstd --ultra or --long) is
// refused.
const maxWindow = 8 << 20

// open reads the object, size bytes long, in parallel ranges (ranged.go), each on the condition
// that the object still has the ETag the restore started with, and hashes it.
func (a *Agent) open(ctx context.Context, art Artifact, etag string, size int64) *rangedObject {
	return a.openRanged(ctx, art.Bucket, art.Key, art.version, etag, size)
}

// discard is io.Discard without its ReadFrom, so that io.CopyBuffer reads with the given buffer
// rather than in 8 KiB steps.
var discard = struct{ io.Writer }{io.Discard}

// readError names a failed ETag precondition for what it is.
func readError(err error) error {
	if minio.ToErrorResponse(err).Code == "PreconditionFailed" {
		return fmt.Errorf("the object changed since the restore started: %w", err)
	}
	return err
}

// kind is what the extractor made of a path.
type kind byte

const (
	kindDir         kind = iota + 1 // a directory entry
	kindImplicitDir                 // a parent directory without its own entry
	kindFile
	kindSymlink
)

// extractor creates a tar's entries below root. It refuses names that are absolute or hold "..",
// entries below anything but a directory it created, and hard links; so nothing is written
// outside root and no symbolic link is followed. os.Root enforces the first property again.
type extractor struct {
	root   *os.Root
	warnf  func(string, ...any)
	chown  bool
	kinds  map[string]kind
	dirs   []*tar.Header // in creation order; nil Header fields mean an implicit directory
	buf    []byte
	status *RestoreStatus

	// readManifest asks for the manifest of a format 3 archive, its last entry, in manifest.
	readManifest bool
	manifestSeen bool
	manifest     map[string]ManifestEntry

	// chunks reads the files of a chunked artifact (format 4).
	chunks *chunkSource
}

func (x *extractor) add(hdr *tar.Header, r io.Reader) error {
	if x.manifestSeen {
		return fmt.Errorf("entry %q follows the manifest, which must be the archive's last", hdr.Name)
	}
	if hdr.Typeflag == typeManifest && x.status.Format >= 3 {
		x.manifestSeen = true
		if !x.readManifest {
			return nil // restores do not need it: the tar reader skips its content
		}
		var err error
		x.manifest, err = readManifest(r)
		return err
	}
	if hdr.Typeflag == typePack && x.chunks != nil {
		return x.chunks.addPack(hdr.Name, r)
	}
	name, err := entryName(hdr.Name)
	if err != nil || name == "." { // "./", the archive's root, carries nothing to restore
		return err
	}
	if err := x.parents(name); err != nil {
		return err
	}
	if k, ok := x.kinds[name]; ok {
		if k == kindImplicitDir && hdr.Typeflag == tar.TypeDir {
			x.kinds[name] = kindDir
			x.dirs = append(x.dirs, named(hdr, name))
			x.status.Directories++
			return nil
		}
		return fmt.Errorf("entry %q appears twice", hdr.Name)
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := x.root.Mkdir(name, 0o700); err != nil {
			return err
		}
		x.kinds[name] = kindDir
		x.dirs = append(x.dirs, named(hdr, name))
		x.status.Directories++
	case tar.TypeReg:
		if err := x.file(name, hdr, r); err != nil {
			var damage *chunkDamage
			if x.readManifest && errors.As(err, &damage) {
				// A verify reports it, with the other differences: the file is left out, and
				// so is found missing.
				if len(x.status.damaged) < jobv1.MaxVerifyDifferences { // the rest is counted missing
					x.status.damaged = append(x.status.damaged, cutDifference(damage.msg))
				}
				return x.root.Remove(name)
			}
			return fmt.Errorf("%s: %w", name, err)
		}
		x.kinds[name] = kindFile
		x.status.Files++
	case tar.TypeSymlink:
		if err := x.root.Symlink(hdr.Linkname, name); err != nil {
			return err
		}
		if x.chown {
			if err := x.root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
				return err
			}
		}
		x.kinds[name] = kindSymlink
		x.status.Symlinks++
	case tar.TypeLink:
		return fmt.Errorf("entry %q is a hard link to %q; hard links are not restored", hdr.Name, hdr.Linkname)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		x.warnf("warning: skipping %s: devices and FIFOs are not restored", name)
	default:
		return fmt.Errorf("entry %q has the unsupported type %q", hdr.Name, hdr.Typeflag)
	}
	return nil
}

// file creates a regular file, which must not exist, with the entry's content, owner, mode and
// modification time.
func (x *extractor) file(name string, hdr *tar.Header, r io.Reader) error {
	f, err := x.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if x.chunks != nil {
		err = x.chunks.writeFile(f, name, hdr, r)
	} else {
		// struct{ io.Writer } hides (*os.File).ReadFrom, which would allocate a buffer per file.
		_, err = io.CopyBuffer(struct{ io.Writer }{f}, r, x.buf)
	}
	if err == nil && x.chown {
		err = f.Chown(hdr.Uid, hdr.Gid) // before Chmod: chown clears set-id bits
	}
	if err == nil {
		err = f.Chmod(mode(hdr))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return x.root.Chtimes(name, hdr.ModTime, hdr.ModTime)
}

// parents creates the missing parent directories of name, and refuses a name below anything but
// a directory.
func (x *extractor) parents(name string) error {
	var missing []string
walk:
	for p := path.Dir(name); p != "."; p = path.Dir(p) {
		switch x.kinds[p] {
		case kindDir, kindImplicitDir:
			break walk
		case 0:
			missing = append(missing, p)
		default:
			return fmt.Errorf("entry %q is below %q, which is not a directory", name, p)
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := x.root.Mkdir(missing[i], 0o700); err != nil {
			return err
		}
		x.kinds[missing[i]] = kindImplicitDir
		x.dirs = append(x.dirs, &tar.Header{Name: missing[i], Mode: 0o755})
	}
	return nil
}

// finish gives directories their owners, modes and times, children first, so that neither a
// read-only parent nor a new child gets in the way.
func (x *extractor) finish() error {
	for i := len(x.dirs) - 1; i >= 0; i-- {
		hdr := x.dirs[i]
		if x.kinds[hdr.Name] == kindImplicitDir {
			if err := x.root.Chmod(hdr.Name, mode(hdr)); err != nil {
				return err
			}
			continue
		}
		if x.chown {
			if err := x.root.Lchown(hdr.Name, hdr.Uid, hdr.Gid); err != nil {
				return err
			}
		}
		if err := x.root.Chmod(hdr.Name, mode(hdr)); err != nil {
			return err
		}
		if err := x.root.Chtimes(hdr.Name, hdr.ModTime, hdr.ModTime); err != nil {
			return err
		}
	}
	return nil
}

func named(hdr *tar.Header, name string) *tar.Header {
	h := *hdr
	h.Name = name
	return &h
}

// mode is an entry's permission, set-id and sticky bits.
func mode(hdr *tar.Header) fs.FileMode {
	return hdr.FileInfo().Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
}

// entryName cleans an entry's name, and refuses one that is absolute or has a ".." component.
func entryName(raw string) (string, error) {
	if raw == "" {
		return "", fmt.Errorf("the archive has an entry without a name")
	}
	if strings.HasPrefix(raw, "/") {
		return "", fmt.Errorf("entry %q has an absolute path; refusing to restore it", raw)
	}
	for _, s := range strings.Split(raw, "/") {
		if s == ".." {
			return "", fmt.Errorf("entry %q has a \"..\" component that could escape the directory; refusing to restore it", raw)
		}
	}
	name := path.Clean(raw)
	if name != "." && !filepath.IsLocal(name) {
		return "", fmt.Errorf("entry %q is not a path inside the directory; refusing to restore it", raw)
	}
	return name, nil
}

// moveIntoPlace moves each entry of staging/data into dir, moving an entry it replaces to
// staging/replaced first. It is all or nothing: when a move fails, the entries already moved are
// moved back (the restored ones into staging/data, the originals into dir), so dir is as it was.
// Only when that rollback fails too does it return keep=true: the caller must then keep staging,
// which holds the originals the error names.
func moveIntoPlace(dir, staging string) (keep bool, err error) {
	data, replaced := filepath.Join(staging, "data"), filepath.Join(staging, "replaced")
	entries, err := os.ReadDir(data)
	if err != nil {
		return false, err
	}
	if err := os.Mkdir(replaced, 0o700); err != nil {
		return false, err
	}
	type moved struct {
		name     string
		replaced bool
	}
	var done []moved
	fail := func(err error) (bool, error) {
		var lost []string
		for i := len(done) - 1; i >= 0; i-- {
			m, dst := done[i], filepath.Join(dir, done[i].name)
			if rerr := renameHook(dst, filepath.Join(data, m.name)); rerr != nil {
				lost = append(lost, fmt.Sprintf("%s (%v)", m.name, rerr))
				continue
			}
			if m.replaced {
				if rerr := renameHook(filepath.Join(replaced, m.name), dst); rerr != nil {
					lost = append(lost, fmt.Sprintf("%s (%v)", m.name, rerr))
				}
			}
		}
		if len(lost) > 0 {
			return true, fmt.Errorf("%w; rolling back failed for %s: the originals are kept in %s", err, strings.Join(lost, ", "), replaced)
		}
		return false, fmt.Errorf("%w; the %d entries already moved were put back: %s is as it was", err, len(done), dir)
	}
	for i, e := range entries {
		dst := filepath.Join(dir, e.Name())
		_, err := os.Lstat(dst)
		exists := err == nil
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fail(fmt.Errorf("restore stopped at %d of %d top-level entries: %w", i, len(entries), err))
		}
		if exists {
			if err := renameHook(dst, filepath.Join(replaced, e.Name())); err != nil {
				return fail(fmt.Errorf("restore stopped at %d of %d top-level entries: moving the existing %s aside: %w", i, len(entries), e.Name(), err))
			}
		}
		if err := renameHook(filepath.Join(data, e.Name()), dst); err != nil {
			if exists {
				if rerr := renameHook(filepath.Join(replaced, e.Name()), dst); rerr != nil {
					done = append(done, moved{name: e.Name()}) // unreachable original: reported below
					return true, fmt.Errorf("restore stopped at %d of %d top-level entries: moving %s into place: %w; putting the original back failed (%v): it is kept in %s",
						i, len(entries), e.Name(), err, rerr, replaced)
				}
			}
			return fail(fmt.Errorf("restore stopped at %d of %d top-level entries: moving %s into place: %w", i, len(entries), e.Name(), err))
		}
		done = append(done, moved{name: e.Name(), replaced: exists})
	}
	return false, nil
}

// renameHook is os.Rename; tests replace it to make a rename fail.
var renameHook = os.Rename

// removeAll removes a tree, making its directories writable first if it must.
func removeAll(p string) error {
	if os.RemoveAll(p) == nil {
		return nil
	}
	_ = filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(q, 0o700)
		}
		return nil
	})
	return os.RemoveAll(p)
}

// realDir resolves dir's symbolic links and checks it is a directory.
func realDir(dir string) (string, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory", dir)
	}
	return real, nil
}
