package artifact

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// A bucket created with S3 Object Lock should lock every object of a Backup (driver-job's
// artifact.objectLock: the artifact, and for a chunked Backup its pack list and packs) for as long
// as the Backup exists. A checksum-only run of a Backup in such a bucket reports the objects whose
// lock is missing or over: who holds write rights to the bucket can delete them.

// LockChecker checks the object locks of a Backup's objects.
type LockChecker interface {
	// CheckLocks returns nil when the Backup's bucket does not lock (or its configuration cannot
	// be read: the Result says so); packs, when set, are the Backup's packs, already looked up.
	CheckLocks(ctx context.Context, b *backupsv1.Backup, packs *PackCheck) (*LockCheck, error)
}

// LockCheck is what a check of a Backup's object locks found.
type LockCheck struct {
	Bucket string
	// Checked counts the objects looked at; Unlocked are the URIs of those not locked now.
	Checked  int
	Unlocked []string
	// Unknown is why the bucket's lock configuration could not be read, if it could not.
	Unknown string
}

// lockedNow reports whether an object lock holds the object.
func lockedNow(info minio.ObjectInfo) bool {
	until, err := time.Parse(time.RFC3339, info.Metadata.Get("X-Amz-Object-Lock-Retain-Until-Date"))
	return err == nil && until.After(time.Now())
}

// CheckLocks checks the artifact of b, and for a chunked Backup its pack list and packs.
func (s *Store) CheckLocks(ctx context.Context, b *backupsv1.Backup, packs *PackCheck) (*LockCheck, error) {
	bucket, key, err := backupsv1.ParseS3URI(b.Status.Artifact.URI)
	if err != nil {
		return nil, nil
	}
	c := &LockCheck{Bucket: bucket}
	enabled, _, _, _, err := s.client.GetObjectLockConfig(ctx, bucket)
	switch code := minio.ToErrorResponse(err).Code; {
	case code == "ObjectLockConfigurationNotFoundError" || err == nil && enabled != "Enabled":
		return nil, nil
	case code == "AccessDenied":
		c.Unknown = fmt.Sprintf("the verifier may not read the object lock configuration of bucket %s (s3:GetBucketObjectLockConfiguration)", bucket)
		return c, nil
	case err != nil:
		return nil, s.storeError(err)
	}
	keys := []string{key}
	if packs != nil {
		_, repo, err := Repository(b)
		if err == nil {
			keys = append(keys, repo+"/"+jobv1.PackListDir+"/"+strings.TrimSuffix(path.Base(key), ".tar"))
		}
	}
	for _, k := range keys {
		info, err := s.client.StatObject(ctx, bucket, k, minio.StatObjectOptions{})
		switch {
		case err != nil && errors.Is(s.storeError(err), errObjectMissing):
			continue // a finding of its own already
		case err != nil:
			return nil, s.storeError(err)
		}
		c.Checked++
		if !lockedNow(info) {
			c.Unlocked = append(c.Unlocked, "s3://"+bucket+"/"+k)
		}
	}
	if packs != nil {
		c.Checked += packs.Listed
		c.Unlocked = append(c.Unlocked, slices.Sorted(slices.Values(packs.Unlocked))...)
	}
	return c, nil
}
