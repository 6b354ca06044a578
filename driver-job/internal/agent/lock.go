package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
)

// Object lock. With Agent.RetainFor set, a backup stores what a restore needs (the artifact, its
// record, and for the chunked format its packs and pack list) with an S3 Object Lock retention
// until RetainFor after it started: in a bucket created with object lock, nobody can delete or
// overwrite those versions before then (in Compliance mode not even the bucket's owner). A delete
// (cleanup, maintenance) only puts a delete marker in front of them.
//
// A chunked backup names packs that older backups stored, whose locks may end before its own: it
// extends them (PutObjectRetention, which in Compliance mode can only lengthen a lock) to its own
// lock plus lockSlack before its artifact completes, and records the extension in its index/
// object, so that the next backups know the packs' locks without asking the store. Packs are
// locked with the slack from the start too: a daily backup extends a pack once per slack, not
// every day.

// lockSlack is how much further than needed an extension goes: an eighth of the retention, at
// most a week.
func lockSlack(retainFor time.Duration) time.Duration {
	return min(retainFor/8, 7*24*time.Hour)
}

// checkLockable refuses a backup that should lock into a bucket without object lock, where the
// store would refuse every locked object or, worse, store it unlocked.
func (a *Agent) checkLockable(ctx context.Context, bucket string) error {
	if a.RetainFor <= 0 {
		return nil
	}
	enabled, _, _, _, err := a.S3.GetObjectLockConfig(ctx, bucket)
	switch {
	case minio.ToErrorResponse(err).Code == "ObjectLockConfigurationNotFoundError" || err == nil && enabled != "Enabled":
		return fmt.Errorf("the strategy locks backups for %s, but bucket %s has no object lock: create the bucket with object lock enabled, or remove artifact.objectLock", a.RetainFor, bucket)
	case err != nil:
		return fmt.Errorf("reading the object lock configuration of bucket %s: %w", bucket, err)
	}
	return nil
}

// packLock is a pack's lock as a backup extended it.
type packLock struct {
	Key   string
	Until time.Time
}

// locked returns o with the agent's object lock until until, if the agent locks.
func (a *Agent) locked(o minio.PutObjectOptions, until time.Time) minio.PutObjectOptions {
	if a.RetainFor > 0 {
		o.Mode, o.RetainUntilDate = a.LockMode, until.UTC()
	}
	return o
}

// packLock is the lock of the packs this backup writes or extends: its own, and the slack.
func (s *chunkStore) packLock() time.Time {
	return s.lockUntil.Add(lockSlack(s.a.RetainFor)).UTC()
}

// extendLocks extends the lock of every older pack the artifact names whose known lock ends
// before this backup's.
func (s *chunkStore) extendLocks() error {
	if s.a.RetainFor <= 0 {
		return nil
	}
	target := s.packLock()
	var todo []string
	for _, i := range s.emittedPacks {
		if pk := &s.packs[i]; pk.rec == nil && pk.until.Before(s.lockUntil) {
			todo = append(todo, pk.key)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	work := make(chan string)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	mode := s.a.LockMode
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for key := range work {
				err := s.a.S3.PutObjectRetention(s.ctx, s.bucket, key, minio.PutObjectRetentionOptions{Mode: &mode, RetainUntilDate: &target})
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("extending the object lock of %s, which this backup needs, to %s: %w", ArtifactURI(s.bucket, key), target.Format(time.RFC3339), err)
				}
				mu.Unlock()
			}
		}()
	}
	for _, key := range todo {
		work <- key
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	for _, key := range todo {
		s.written.Extended = append(s.written.Extended, packLock{Key: key, Until: target})
	}
	s.a.logf("extended the object lock of %d older packs to %s", len(todo), target.Format(time.RFC3339))
	return nil
}

// versionReader finds, in a bucket that keeps versions, the version of an object a backup wrote.
// Coffer writes each artifact, record and pack once (an artifact with If-None-Match, a pack under
// a random name), so the object's oldest version that is not a delete marker is the one it
// wrote, and a newer one is somebody's overwrite: with object lock the written version outlives
// it, and a restore reads it. In a bucket without versions, or with credentials that may not ask,
// restores read the latest version, as before.
type versionReader struct {
	a         *Agent
	ctx       context.Context
	bucket    string
	versioned bool
}

func (a *Agent) versionReader(ctx context.Context, bucket string) *versionReader {
	v := &versionReader{a: a, ctx: ctx, bucket: bucket}
	cfg, err := a.S3.GetBucketVersioning(ctx, bucket)
	switch {
	case err != nil:
		a.logf("reading the latest versions: the bucket's versioning cannot be read: %v", err)
	case cfg.Status != "":
		v.versioned = true // Enabled, or Suspended with versions kept from before
	}
	return v
}

// written returns the version of key to read, "" for the latest.
func (v *versionReader) written(key string) (string, error) {
	if v == nil || !v.versioned {
		return "", nil
	}
	var oldest, latest string
	for o := range v.a.S3.ListObjects(v.ctx, v.bucket, minio.ListObjectsOptions{Prefix: key, WithVersions: true}) {
		if o.Err != nil {
			if code := minio.ToErrorResponse(o.Err).Code; code == "AccessDenied" || code == "NotImplemented" {
				v.a.logf("reading the latest version of %s: its versions cannot be listed: %v", ArtifactURI(v.bucket, key), o.Err)
				return "", nil
			}
			return "", fmt.Errorf("listing the versions of %s: %w", ArtifactURI(v.bucket, key), o.Err)
		}
		if o.Key != key || o.IsDeleteMarker {
			continue
		}
		if latest == "" {
			latest = o.VersionID
		}
		oldest = o.VersionID // versions of a key are listed newest first
	}
	if oldest != latest {
		v.a.logf("warning: %s was overwritten after it was written: reading the version written first (%s), not the latest (%s)", ArtifactURI(v.bucket, key), oldest, latest)
	}
	if oldest == "null" {
		return "", nil
	}
	return oldest, nil
}
