package agent

import (
	"context"
	"fmt"

	"github.com/minio/minio-go/v7"

	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// Check looks the artifact up (a HEAD request) and reports whether it exists and its size. It
// returns an error when it cannot tell: the store does not answer, access is denied, or the bucket
// itself is missing (a wrong endpoint or bucket would otherwise mark every artifact missing).
// sizeBytes, when not negative, is the size the backup stored: a different size is reported (and
// logged), not an error, since the agent could tell.
func (a *Agent) Check(ctx context.Context, bucket, key string, sizeBytes int64) (*jobv1.CheckReport, error) {
	uri := ArtifactURI(bucket, key)
	stat, err := a.S3.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
	if err == nil {
		if sizeBytes >= 0 && stat.Size != sizeBytes {
			a.logf("%s exists with %d bytes, but the backup stored %d", uri, stat.Size, sizeBytes)
		} else {
			a.logf("%s exists (%d bytes)", uri, stat.Size)
		}
		return &jobv1.CheckReport{Exists: true, SizeBytes: stat.Size}, nil
	}
	if minio.ToErrorResponse(err).Code != minio.NoSuchKey {
		return nil, fmt.Errorf("looking up %s: %w", uri, err)
	}
	// A HEAD answer has no body: a missing bucket looks like a missing key. Tell them apart.
	found, berr := a.S3.BucketExists(ctx, bucket)
	switch {
	case berr != nil:
		return nil, fmt.Errorf("%s was not found, and whether bucket %s exists could not be told: %w", uri, bucket, berr)
	case !found:
		return nil, fmt.Errorf("bucket %s does not exist at this endpoint; check the endpoint and the bucket before taking %s for gone", bucket, uri)
	}
	a.logf("%s does not exist", uri)
	return &jobv1.CheckReport{Exists: false}, nil
}
