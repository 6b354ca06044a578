package agent

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/minio/minio-go/v7"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// RecordKey is where the record of the artifact at key is stored (contract rule BK-11): next to
// it, so that listing a prefix lists both, and a cleanup deletes both.
func RecordKey(key string) string { return key + jobv1.RecordSuffix }

// ParseRecordTemplate decodes and checks the driver's record template (COFFER_RECORD).
func ParseRecordTemplate(text string) (*backupsv1.ArtifactRecord, error) {
	r, err := backupsv1.ParseRecordTemplate([]byte(text))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", jobv1.EnvRecord, err)
	}
	return r, nil
}

// writeRecord completes the record template with the artifact the report describes (and the
// report's metadata, as the driver copies it into the Backup's driverMetadata) and stores it
// next to the artifact at key. takenAt is when the backup started.
func (a *Agent) writeRecord(ctx context.Context, bucket, key string, report *jobv1.ArtifactReport, takenAt, lockUntil time.Time) error {
	r := *a.Record
	r.Spec = *a.Record.Spec.DeepCopy()
	r.Spec.TakenAt = metav1.NewTime(takenAt.UTC().Truncate(time.Second))
	if r.Spec.DriverMetadata == nil {
		r.Spec.DriverMetadata = map[string]string{}
	}
	for k, v := range report.Metadata {
		r.Spec.DriverMetadata[jobv1.MetadataPrefix+k] = v
	}
	r.Artifact = backupsv1.BackupArtifact{URI: report.URI, SizeBytes: report.SizeBytes, Checksum: report.Checksum}
	data, err := r.Marshal()
	if err != nil {
		return fmt.Errorf("the record of %s: %w", report.URI, err)
	}
	rkey := RecordKey(key)
	if err := putRecordHook(ctx, a.S3, bucket, rkey, data, a.locked(minio.PutObjectOptions{ContentType: "application/json", SendContentMd5: true}, lockUntil)); err != nil {
		return fmt.Errorf("storing the record of %s at %s: %w", report.URI, ArtifactURI(bucket, rkey), err)
	}
	a.logf("stored the record of Backup %s/%s at %s", r.Namespace, r.Name, ArtifactURI(bucket, rkey))
	return nil
}

// putRecordHook stores a record; tests replace it to make the store fail.
var putRecordHook = func(ctx context.Context, s3 *minio.Client, bucket, key string, data []byte, opts minio.PutObjectOptions) error {
	_, err := s3.PutObject(ctx, bucket, key, bytes.NewReader(data), int64(len(data)), opts)
	return err
}
