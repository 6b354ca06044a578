package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// recordTemplate is a driver's COFFER_RECORD for the run of env().
func recordTemplate(t *testing.T, namespace string) string {
	t.Helper()
	group := jobv1.GroupVersion.Group
	r := backupsv1.ArtifactRecord{
		APIVersion: backupsv1.RecordAPIVersion, Kind: backupsv1.RecordKind, Format: backupsv1.RecordFormat,
		SourceCluster: backupsv1.SourceCluster{ID: "c0ffee00-0000-4000-8000-000000000001", Name: "cluster-a"},
		Namespace:     namespace, Name: "nightly", UID: "1a2b3c4d-5e6f-4a5b-8c9d-0e1f2a3b4c5d",
		Labels: map[string]string{backupsv1.LabelPlan: "nightly"},
		Spec: backupsv1.BackupSpec{
			ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Database", Name: "orders"},
			StrategyRef:    corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "JobBackupStrategy", Name: "files"},
			DriverMetadata: map[string]string{"jobName": "nightly-backup"},
		},
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func readRecord(t *testing.T, bucket, key string) (*backupsv1.ArtifactRecord, error) {
	t.Helper()
	obj, err := store(t).S3.GetObject(context.Background(), bucket, RecordKey(key), minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	data, err := io.ReadAll(obj)
	if err != nil {
		return nil, err
	}
	return backupsv1.ParseArtifactRecord(data)
}

// TestBackupStoresItsRecord: given the driver's record template, a backup stores next to its
// artifact a record that names the artifact exactly as the report does, with the report's
// metadata as the Backup's driverMetadata has it; a cleanup deletes the record after the artifact.
func TestBackupStoresItsRecord(t *testing.T) {
	bucket := newBucket(t)
	dir := filepath.Join(t.TempDir(), "data")
	makeTree(t, dir, 0)
	e := env(t, jobv1.ModeBackup, bucket, dir)
	e[jobv1.EnvRecord] = recordTemplate(t, "tenant-a")
	report := backup(t, e)
	_, key := keyOf(t, report)

	r, err := readRecord(t, bucket, key)
	if err != nil {
		t.Fatal(err)
	}
	if r.Artifact.URI != report.URI || r.Artifact.SizeBytes != report.SizeBytes || r.Artifact.Checksum != report.Checksum {
		t.Errorf("the record's artifact %+v is not the report's %+v", r.Artifact, report)
	}
	if r.Namespace != "tenant-a" || r.Name != "nightly" || r.SourceCluster.Name != "cluster-a" || r.Spec.TakenAt.IsZero() {
		t.Errorf("the record lost the template's identity or has no takenAt: %+v", r)
	}
	if r.Spec.DriverMetadata["jobName"] != "nightly-backup" || r.Spec.DriverMetadata[jobv1.MetadataPrefix+MetaFormat] != report.Metadata[MetaFormat] {
		t.Errorf("driverMetadata %v lacks the template's or the report's entries", r.Spec.DriverMetadata)
	}

	if res := run(t, restoreEnv(t, jobv1.ModeCleanup, bucket, "", report)); res.code != 0 {
		t.Fatalf("cleanup exited %d: %s", res.code, res.stderr)
	}
	for _, k := range []string{key, RecordKey(key)} {
		if _, err := store(t).S3.StatObject(context.Background(), bucket, k, minio.StatObjectOptions{}); minio.ToErrorResponse(err).Code != minio.NoSuchKey {
			t.Errorf("after the cleanup %s stats %v, want NoSuchKey", k, err)
		}
	}
}

// TestBackupRecordFailures: a template that would make an invalid record fails the backup before
// anything is uploaded; a record that cannot be stored fails it and takes the artifact back, so
// no artifact is left that storage alone could not name.
func TestBackupRecordFailures(t *testing.T) {
	bucket := newBucket(t)
	dir := filepath.Join(t.TempDir(), "data")
	makeTree(t, dir, 0)
	e := env(t, jobv1.ModeBackup, bucket, dir)
	e[jobv1.EnvRecord] = recordTemplate(t, "../kube-system")
	if r := run(t, e); r.code != 2 || !strings.Contains(r.termLog, "not a namespace name") {
		t.Errorf("a bad template exited %d with %q, want 2 and the reason", r.code, r.termLog)
	}
	assertEmptyBucket(t, bucket)

	put := putRecordHook
	t.Cleanup(func() { putRecordHook = put })
	putRecordHook = func(context.Context, *minio.Client, string, string, []byte, minio.PutObjectOptions) error {
		return errors.New("the store refused")
	}
	e[jobv1.EnvRecord] = recordTemplate(t, "tenant-a")
	if r := run(t, e); r.code != 1 || !strings.Contains(r.termLog, "the store refused; the artifact was deleted") {
		t.Errorf("a failed record store exited %d with %q, want 1 and the reason", r.code, r.termLog)
	}
	assertEmptyBucket(t, bucket)
}

func assertEmptyBucket(t *testing.T, bucket string) {
	t.Helper()
	for obj := range store(t).S3.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		t.Errorf("bucket %s holds %s", bucket, obj.Key)
	}
}
