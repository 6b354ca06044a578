package agent

import (
	"context"
	"fmt"

	"github.com/minio/minio-go/v7"
)

// Cleanup deletes the artifact, then its record (RecordKey): a record never outlives its artifact
// but by a failed cleanup, which is retried. An object that is already gone is success, so that a
// retried cleanup succeeds. In a versioned bucket, S3 keeps the objects' versions behind delete
// markers.
func (a *Agent) Cleanup(ctx context.Context, bucket, key string) error {
	for _, k := range []string{key, RecordKey(key)} {
		uri := ArtifactURI(bucket, k)
		if err := a.S3.RemoveObject(ctx, bucket, k, minio.RemoveObjectOptions{}); err != nil && minio.ToErrorResponse(err).Code != minio.NoSuchKey {
			return fmt.Errorf("deleting %s: %w", uri, err)
		}
		a.logf("deleted %s", uri)
	}
	return nil
}
