package artifact

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/minio/minio-go/v7"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/velerokit/download"
)

// A chunked Backup (driver-job's artifact format 4) is an index whose chunks live in packs shared
// with the namespace's other Backups. Its pack list (apis/jobdriver: PackList), whose SHA-256 the
// Backup records in driverMetadata, names every pack with the SHA-256 of its stored bytes, so the
// packs can be checked with no key. A checksum-only run checks every listed pack's existence and
// size, reads in full the packs the Backup added, and of the older ones the slice whose slot is the
// Backup's sequence number modulo the slices: verifying the Backups of a repository one after the
// other re-reads every older pack within that many runs.

// Keys of a chunked Backup's driverMetadata (driver-job copies its agent's report there).
const (
	MetaFormat     = jobv1.MetadataPrefix + "format"
	MetaRepository = jobv1.MetadataPrefix + "repository"
	MetaPackList   = jobv1.MetadataPrefix + jobv1.MetaPackList
	ChunkedFormat  = "4"
)

// DefaultPackSlices is the number of runs within which consecutive checksum-only runs of a
// repository's Backups re-read every older pack (prime: Backups verified every 2nd, 7th or 30th
// one still reach every slot).
const DefaultPackSlices = 11

// packProblemsShown bounds the problems a check reports one by one.
const packProblemsShown = 20

// PackChecker checks the packs of chunked Backups.
type PackChecker interface {
	CheckPacks(ctx context.Context, b *backupsv1.Backup, slices int) (*PackCheck, error)
}

// PackCheck is what a check of a Backup's packs found.
type PackCheck struct {
	Repository string
	// Sequence is the Backup's number in its repository; Slice the slot of the older packs read.
	Sequence      int64
	Slice, Slices int
	Listed, Read  int
	BytesRead     int64
	// Problems are facts about the Backup (a missing pack, a pack of another size or digest, a
	// pack list that is not the one recorded), Code a finding code; at most packProblemsShown, and
	// Unshown counts the rest.
	Problems []PackProblem
	Unshown  int
	// Unlocked are the listed packs without an object lock in force (lock.go).
	Unlocked []string
}

// PackProblem is one problem with a Backup's packs.
type PackProblem struct {
	Code, Message string
}

// Slot is the slice of the older packs a pack belongs to.
func Slot(name string, slices int) int {
	b, err := hex.DecodeString(name[:16])
	if err != nil || slices <= 1 {
		return 0
	}
	return int(binary.BigEndian.Uint64(b) % uint64(slices))
}

// Repository is the repository a chunked Backup's packs must be in: beside its artifact, in a
// namespace's directory (driver-job's layout: <prefix>/.coffer/<namespace>; an imported Backup may
// live in another namespace than the one that made it). A Backup that records another (its
// driverMetadata comes from a pod in the tenant's namespace) is not read: the verifier reads no
// key a tenant chose outside the artifact's own prefix.
func Repository(b *backupsv1.Backup) (bucket, repo string, err error) {
	if bucket, repo, err = jobv1.RepositoryBeside(b.Status.Artifact.URI, b.Spec.DriverMetadata[MetaRepository], ""); err != nil {
		return "", "", fmt.Errorf("%w: its packs are not read", err)
	}
	return bucket, repo, nil
}

// CheckPacks checks the packs of chunked Backup b (see above). An error is trouble reading them
// (retried), or a terminal one saying why they cannot be checked.
func (s *Store) CheckPacks(ctx context.Context, b *backupsv1.Backup, n int) (*PackCheck, error) {
	if n <= 0 {
		n = DefaultPackSlices
	}
	bucket, repo, err := Repository(b)
	if err != nil {
		return nil, reconcile.TerminalError(err)
	}
	_, key, _ := backupsv1.ParseS3URI(b.Status.Artifact.URI)
	c := &PackCheck{Repository: "s3://" + bucket + "/" + repo}
	listKey := repo + "/" + jobv1.PackListDir + "/" + strings.TrimSuffix(path.Base(key), ".tar")
	listURI := "s3://" + bucket + "/" + listKey
	data, err := s.read(ctx, bucket, listKey, jobv1.MaxPackListBytes)
	switch {
	case errors.Is(err, errObjectMissing):
		c.problem(securityv1.CodeArtifactMissing, fmt.Sprintf("the pack list %s does not exist at %s: which packs the Backup needs cannot be told", listURI, s.Endpoint))
		return c, nil
	case err != nil:
		return nil, err
	}
	sum := sha256.Sum256(data)
	if got, want := "sha256:"+hex.EncodeToString(sum[:]), b.Spec.DriverMetadata[MetaPackList]; got != want {
		c.problem(securityv1.CodeChecksumMismatch, fmt.Sprintf("the pack list %s has SHA-256 %s, but the Backup records %s", listURI, got, want))
		return c, nil
	}
	l, err := jobv1.ParsePackList(strings.NewReader(string(data)))
	if err != nil {
		return nil, reconcile.TerminalError(fmt.Errorf("%s matches its recorded SHA-256 but does not parse: %w", listURI, err))
	}
	c.Sequence, c.Listed = l.Sequence, len(l.Packs)
	c.Slice, c.Slices = int(l.Sequence%int64(n)), n

	var mu sync.Mutex
	problems := map[int]PackProblem{}
	work := make(chan int)
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				p := l.Packs[i]
				read := p.SHA256 != "" && (p.Added || Slot(p.Name, n) == c.Slice)
				prob, n, locked, err := s.checkPack(ctx, bucket, repo+"/packs/"+p.Name, p, read)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if prob != nil {
					problems[i] = *prob
				} else if !locked {
					c.Unlocked = append(c.Unlocked, "s3://"+bucket+"/"+repo+"/packs/"+p.Name)
				}
				if read {
					c.Read++
					c.BytesRead += n
				}
				mu.Unlock()
			}
		}()
	}
	var failed error
feed:
	for i := range l.Packs {
		select {
		case work <- i:
		case failed = <-errs:
			break feed
		case <-ctx.Done():
			failed = ctx.Err()
			break feed
		}
	}
	close(work)
	wg.Wait()
	if failed == nil {
		select {
		case failed = <-errs:
		default:
		}
	}
	if failed != nil {
		return nil, failed
	}
	for _, i := range slices.Sorted(maps.Keys(problems)) {
		c.problem(problems[i].Code, problems[i].Message)
	}
	return c, nil
}

func (c *PackCheck) problem(code, msg string) {
	if len(c.Problems) >= packProblemsShown {
		c.Unshown++
		return
	}
	c.Problems = append(c.Problems, PackProblem{Code: code, Message: msg})
}

// checkPack looks a pack up, or reads it and hashes it: a problem is a fact about it, an error
// trouble reading it; locked says whether an object lock holds it.
func (s *Store) checkPack(ctx context.Context, bucket, key string, p jobv1.ListedPack, read bool) (*PackProblem, int64, bool, error) {
	uri := "s3://" + bucket + "/" + key
	missing := &PackProblem{securityv1.CodeArtifactMissing, fmt.Sprintf("pack %s does not exist: the chunks of the Backup it holds are lost", uri)}
	if !read {
		info, err := s.client.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
		switch {
		case err != nil && errors.Is(s.storeError(err), errObjectMissing):
			return missing, 0, false, nil
		case err != nil:
			return nil, 0, false, s.storeError(err)
		case info.Size != p.Size:
			return &PackProblem{securityv1.CodeSizeMismatch, fmt.Sprintf("pack %s holds %d bytes, but the pack list says %d", uri, info.Size, p.Size)}, 0, false, nil
		}
		return nil, 0, lockedNow(info), nil
	}
	d, info, err := s.hash(ctx, bucket, key)
	switch {
	case errors.Is(err, errObjectMissing):
		return missing, 0, false, nil
	case err != nil:
		return nil, 0, false, err
	case d.SizeBytes != p.Size:
		return &PackProblem{securityv1.CodeSizeMismatch, fmt.Sprintf("pack %s holds %d bytes, but the pack list says %d", uri, d.SizeBytes, p.Size)}, d.SizeBytes, false, nil
	case d.Checksum() != "sha256:"+p.SHA256:
		return &PackProblem{securityv1.CodeChecksumMismatch, fmt.Sprintf("pack %s has SHA-256 %s, but the pack list says sha256:%s: the chunks it holds are damaged", uri, d.Checksum(), p.SHA256)}, d.SizeBytes, false, nil
	}
	return nil, d.SizeBytes, lockedNow(info), nil
}

// read reads a whole object of at most max bytes.
func (s *Store) read(ctx context.Context, bucket, key string, max int64) ([]byte, error) {
	obj, err := s.client.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, s.storeError(err)
	}
	defer obj.Close()
	info, err := obj.Stat()
	if err != nil {
		return nil, s.storeError(err)
	}
	if info.Size > max {
		return nil, reconcile.TerminalError(fmt.Errorf("s3://%s/%s holds %d bytes, more than %d", bucket, key, info.Size, max))
	}
	data, err := io.ReadAll(download.Counted(obj, info.Size))
	if err != nil {
		return nil, fmt.Errorf("reading %s/%s from S3 endpoint %s: %w", bucket, key, s.Endpoint, err)
	}
	return data, nil
}
