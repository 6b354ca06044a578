package agent

import (
	"context"
	"fmt"

	"github.com/minio/minio-go/v7"
)

// Cleanup deletes the artifact. An object that is already gone is success, so that a retried
// cleanup succeeds. In a versioned bucket, S3 keeps the object's versions behind a delete marker.
func (a *Agent) Cleanup(ctx context.Context, bucket, key string) error {
	uri := ArtifactURI(bucket, key)
	if err := a.S3.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{}); err != nil && minio.ToErrorResponse(err).Code != minio.NoSuchKey {
		return fmt.Errorf("deleting %s: %w", uri, err)
	}
	a.logf("deleted %s", uri)
	return nil
}
