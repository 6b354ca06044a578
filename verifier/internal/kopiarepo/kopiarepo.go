// Package kopiarepo reads the kopia repositories Velero keeps its volume data in (file-system
// backups and data movement, uploader kopia), read-only, to prove a snapshot's data is intact: every
// file of the snapshot is read to its end, which makes kopia fetch each content it is made of and
// check its authentication tag (kopia's per-content hash and encryption), and its SHA-256 is
// computed on the way, which is the backup's own record of its files.
//
// It reads the store through the kopia library Velero itself uses (the project-velero fork, by
// the same replace as Velero's go.mod), opens the repository with the password Velero keeps in its
// Secret, writes nothing to the store, and caches nothing on disk: a read always comes from the
// object store. Each Open writes kopia's small connection file into a temporary directory of its
// own (os.TempDir: the verifier's Deployment mounts an emptyDir there), removed by Close.
//
// Errors are sorted by what they say of the backup: a *Damage is a fact about the data (a content
// whose tag does not verify, a content, blob, object or snapshot that does not exist); any other
// error is trouble reaching or opening the repository, which says nothing about the data.
package kopiarepo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/kopia/kopia/fs"
	"github.com/kopia/kopia/repo"
	"github.com/kopia/kopia/repo/blob"
	"github.com/kopia/kopia/repo/blob/s3"
	"github.com/kopia/kopia/repo/content"
	"github.com/kopia/kopia/repo/manifest"
	"github.com/kopia/kopia/repo/object"
	"github.com/kopia/kopia/snapshot"
	"github.com/kopia/kopia/snapshot/snapshotfs"
	"golang.org/x/sync/errgroup"
)

// Location is where a repository is and how to open it.
type Location struct {
	// Endpoint is host[:port] of the S3 API; Insecure is plain HTTP.
	Endpoint string
	Insecure bool
	// CA is a PEM bundle trusted besides the system's roots.
	CA     []byte
	Region string
	Bucket string
	// Prefix is the repository's key prefix, ending in "/" (velerokit/volumes.RepositoryPrefix for Velero's).
	Prefix                      string
	AccessKey, SecretKey, Token string
	Password                    string
}

// Repository is an open, read-only repository.
type Repository struct {
	rep repo.Repository
	dir string
}

// Open connects to the repository at loc, read-only. An error is trouble (the store, the
// password), except a *Damage when the store holds no repository there.
func Open(ctx context.Context, loc Location) (*Repository, error) {
	st, err := s3.New(ctx, &s3.Options{BucketName: loc.Bucket, Prefix: loc.Prefix, Endpoint: loc.Endpoint, DoNotUseTLS: loc.Insecure,
		RootCA: loc.CA, AccessKeyID: loc.AccessKey, SecretAccessKey: loc.SecretKey, SessionToken: loc.Token, Region: loc.Region}, false)
	if err != nil {
		return nil, fmt.Errorf("opening bucket %s at %s: %w", loc.Bucket, loc.Endpoint, err)
	}
	dir, err := os.MkdirTemp("", "coffer-kopia-")
	if err != nil {
		st.Close(ctx)
		return nil, err
	}
	fail := func(err error) (*Repository, error) {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	cfg := filepath.Join(dir, "repository.config")
	err = repo.Connect(ctx, cfg, st, loc.Password, &repo.ConnectOptions{
		ClientOptions: repo.ClientOptions{ReadOnly: true, Username: "coffer-verifier", Hostname: "coffer-verifier"},
		// No cache directory: kopia caches nothing on disk, every read comes from the store.
		CachingOptions: content.CachingOptions{},
	})
	st.Close(ctx)
	switch {
	case errors.Is(err, repo.ErrRepositoryNotInitialized):
		return fail(&Damage{Missing: true, Err: fmt.Errorf("there is no kopia repository at %s/%s", loc.Bucket, loc.Prefix)})
	case errors.Is(err, repo.ErrInvalidPassword):
		return fail(fmt.Errorf("the kopia repository at %s/%s does not open with the repository password: %w", loc.Bucket, loc.Prefix, err))
	case err != nil:
		return fail(fmt.Errorf("connecting to the kopia repository at %s/%s: %w", loc.Bucket, loc.Prefix, err))
	}
	rep, err := repo.Open(ctx, cfg, loc.Password, &repo.Options{DisableRepositoryLog: true,
		// The library's default ends the process.
		OnFatalError: func(error) {}})
	if err != nil {
		return fail(fmt.Errorf("opening the kopia repository at %s/%s: %w", loc.Bucket, loc.Prefix, err))
	}
	return &Repository{rep: rep, dir: dir}, nil
}

// Close closes the repository and removes its temporary directory.
func (r *Repository) Close(ctx context.Context) {
	_ = r.rep.Close(ctx)
	_ = os.RemoveAll(r.dir)
}

// File is one regular file of a snapshot, as the repository holds it.
type File struct {
	Path   string
	Size   int64
	SHA256 string
}

// Stats counts what a Read read.
type Stats struct {
	Files, Dirs int64
	Bytes       int64
	// RootUID and RootGID own the snapshot's root directory, as the uploader recorded them.
	RootUID, RootGID uint32
}

// Damage is a fact about the data: something the snapshot needs is missing, or does not verify.
type Damage struct {
	// Missing: the snapshot, or a content, object or blob it names, does not exist; else a
	// content does not verify (its authentication tag, its decompression).
	Missing bool
	// Path is the file or directory of the snapshot being read, when known.
	Path string
	Err  error
}

func (d *Damage) Error() string {
	what := "corrupt"
	if d.Missing {
		what = "missing"
	}
	if d.Path != "" {
		return fmt.Sprintf("%s data at %s: %v", what, d.Path, d.Err)
	}
	return fmt.Sprintf("%s data: %v", what, d.Err)
}

func (d *Damage) Unwrap() error { return d.Err }

// damage sorts err (while reading at p): a *Damage when it is one, else err.
func damage(err error, p string) error {
	var d *Damage
	switch {
	case err == nil, errors.As(err, &d):
		return err
	case errors.Is(err, snapshot.ErrSnapshotNotFound), errors.Is(err, manifest.ErrNotFound), errors.Is(err, content.ErrContentNotFound),
		errors.Is(err, object.ErrObjectNotFound), errors.Is(err, blob.ErrBlobNotFound):
		return &Damage{Missing: true, Path: p, Err: err}
	case strings.Contains(err.Error(), "invalid checksum at "):
		// kopia's wording when a content's authentication tag does not verify (or it does not
		// decompress): committed_read_manager.go, decryptContentAndVerify.
		return &Damage{Path: p, Err: err}
	}
	return err
}

// Parallelism is how many files Read reads at once: reading is bound by the store's latency more
// than by hashing, so a few in flight keep it busy.
const Parallelism = 4

// Read reads snapshot id whole: every directory listed and every regular file read to its end,
// Parallelism files at once, visit called with each file (one call at a time, in no set order).
// It returns what it read; an error is a *Damage, trouble, or visit's own.
func (r *Repository) Read(ctx context.Context, id string, visit func(File) error) (Stats, error) {
	var st Stats
	man, err := snapshot.LoadSnapshot(ctx, r.rep, manifest.ID(id))
	if err != nil {
		return st, damage(fmt.Errorf("snapshot %s: %w", id, err), "")
	}
	root, err := snapshotfs.SnapshotRoot(r.rep, man)
	if err != nil {
		return st, damage(err, "")
	}
	owner := root.Owner()
	st.RootUID, st.RootGID = owner.UserID, owner.GroupID
	type job struct {
		f fs.File
		p string
	}
	g, gctx := errgroup.WithContext(ctx)
	jobs := make(chan job)
	var mu sync.Mutex
	for range Parallelism {
		g.Go(func() error {
			buf := make([]byte, 1<<20)
			for j := range jobs {
				f, err := readFile(gctx, j.f, j.p, buf)
				if err != nil {
					return err
				}
				mu.Lock()
				st.Files++
				st.Bytes += f.Size
				err = visit(f)
				mu.Unlock()
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	var walk func(e fs.Entry, p string) error
	walk = func(e fs.Entry, p string) error {
		if err := gctx.Err(); err != nil {
			return err
		}
		switch e := e.(type) {
		case fs.Directory:
			mu.Lock()
			st.Dirs++
			mu.Unlock()
			err := fs.IterateEntries(gctx, e, func(ctx context.Context, c fs.Entry) error {
				return walk(c, path.Join(p, c.Name()))
			})
			return damage(err, p)
		case fs.File:
			if !e.Mode().IsRegular() {
				return nil
			}
			select {
			case jobs <- job{e, p}:
				return nil
			case <-gctx.Done():
				return gctx.Err()
			}
		case fs.ErrorEntry:
			return damage(e.ErrorInfo(), p)
		}
		return nil
	}
	g.Go(func() error {
		defer close(jobs)
		return walk(root, ".")
	})
	// The first error, not the cancellations it caused in the others.
	err = g.Wait()
	return st, err
}

// readFile reads file f (at p) to its end and hashes it.
func readFile(ctx context.Context, f fs.File, p string, buf []byte) (File, error) {
	rd, err := f.Open(ctx)
	if err != nil {
		return File{}, damage(err, p)
	}
	defer rd.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, rd, buf)
	if err != nil {
		return File{}, damage(err, p)
	}
	if n != f.Size() {
		return File{}, &Damage{Path: p, Err: fmt.Errorf("the file reads as %d bytes, but its directory entry records %d", n, f.Size())}
	}
	return File{Path: p, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}
