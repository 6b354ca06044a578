package agent

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// restrictedClient is a client of the shared MinIO with temporary credentials limited by policy
// (velerostack.SessionCredentials).
func restrictedClient(t *testing.T, policy string) *minio.Client {
	t.Helper()
	v, err := store(t).SessionCredentials(policy)
	if err != nil {
		t.Fatal(err)
	}
	c, err := minio.New(store(t).S3Endpoint, &minio.Options{Creds: credentials.NewStaticV4(v.AccessKeyID, v.SecretAccessKey, v.SessionToken), Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestBackupWithBackupOnlyRights: with the credentials of BackupPolicy a backup Job backs up, in
// both formats, and a chunked backup still skips what is stored; and those credentials can read
// no artifact and no pack, delete nothing, list nothing but the repository's records, and
// replace no artifact through the agent.
func TestBackupWithBackupOnlyRights(t *testing.T) {
	ctx := context.Background()
	bucket := newBucket(t)
	dir := t.TempDir()
	randomFiles(t, dir, 3, 1<<20, 11)
	want := snapshot(t, dir)
	full := settledAgent(t)
	limited := restrictedClient(t, BackupPolicy(bucket, "ns", "ns/.coffer"))
	a := *full
	a.S3 = limited

	first, err := a.Backup(ctx, dir, bucket, "ns/first.tar")
	if err != nil {
		t.Fatalf("chunked backup with backup-only rights: %v", err)
	}
	second, err := a.Backup(ctx, dir, bucket, "ns/second.tar")
	if err != nil {
		t.Fatalf("second chunked backup with backup-only rights: %v", err)
	}
	if read, stored := metaInt(t, second, MetaUncompressedBytes), metaInt(t, second, MetaStoredBytes); read != 0 || stored != 0 {
		t.Errorf("the second backup read %d bytes and stored %d: with backup-only rights it must still find what is stored", read, stored)
	}
	tarAgent := a
	tarAgent.Chunked = false
	tarReport, err := tarAgent.Backup(ctx, dir, bucket, "ns/tar.tar")
	if err != nil {
		t.Fatalf("tar backup with backup-only rights: %v", err)
	}
	if _, err := tarAgent.Backup(ctx, dir, bucket, "ns/tar.tar"); err == nil || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Errorf("a second backup to the same key with backup-only rights: %v; want it refused", err)
	}
	for _, r := range []*chunkedOrTar{{"first", first}, {"second", second}, {"tar", tarReport}} {
		assertSameTree(t, want, restoreInto(t, full, r.report))
	}

	var pack string
	for k := range objectsBelow(t, bucket, "ns/.coffer/packs/") {
		pack = k
	}
	denied := func(what string, err error) {
		t.Helper()
		if code := minio.ToErrorResponse(err).Code; code != "AccessDenied" {
			t.Errorf("%s with backup-only rights: %v (%s); want AccessDenied", what, err, code)
		}
	}
	for _, key := range []string{"ns/first.tar", pack, "ns/tar.tar"} {
		obj, err := limited.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
		if err == nil {
			_, err = io.ReadAll(obj)
		}
		denied("reading "+key, err)
		denied("deleting "+key, limited.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{}))
	}
	for _, prefix := range []string{"ns/", "ns/.coffer/packs/", ""} {
		for o := range limited.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix}) {
			denied("listing "+prefix, o.Err)
			break
		}
	}
	_, err = limited.PutObject(ctx, "another-bucket", "x", bytes.NewReader(nil), 0, minio.PutObjectOptions{})
	if err == nil {
		t.Error("backup-only rights put an object into another bucket")
	}
}

type chunkedOrTar struct {
	name   string
	report *jobv1.ArtifactReport
}

// TestBackupPolicyIsDocumented: the policy security.md shows is the one the code gives.
func TestBackupPolicyIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```json\n"+BackupPolicy("coffer", "tenant-a", "tenant-a/.coffer/tenant-a")+"\n```") {
		t.Error("docs/security.md does not show BackupPolicy(\"coffer\", \"tenant-a\", \"tenant-a/.coffer/tenant-a\") as it is")
	}
}
