package agent

import (
	"bytes"
	"context"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

// newLockedBucket creates a bucket with object lock (and so versioning) named after the test, and
// removes every version at the end, bypassing the Governance locks the tests set.
func newLockedBucket(t *testing.T) string {
	t.Helper()
	name := "locked-" + newBucketName(t)
	c := store(t).S3
	if err := c.MakeBucket(context.Background(), name, minio.MakeBucketOptions{Region: "us-east-1", ObjectLocking: true}); err != nil {
		t.Fatalf("creating bucket %s with object lock: %v", name, err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for o := range c.ListObjects(ctx, name, minio.ListObjectsOptions{Recursive: true, WithVersions: true}) {
			if o.Err == nil {
				_ = c.RemoveObject(ctx, name, o.Key, minio.RemoveObjectOptions{VersionID: o.VersionID, GovernanceBypass: true})
			}
		}
	})
	return name
}

// versionsOf lists the versions of key, newest first (delete markers included).
func versionsOf(t *testing.T, bucket, key string) []minio.ObjectInfo {
	t.Helper()
	var out []minio.ObjectInfo
	for o := range store(t).S3.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Prefix: key, WithVersions: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if o.Key == key {
			out = append(out, o)
		}
	}
	return out
}

// lockOf is the retention of the latest version of key.
func lockOf(t *testing.T, bucket, key string) time.Time {
	t.Helper()
	mode, until, err := store(t).S3.GetObjectRetention(context.Background(), bucket, key, "")
	if err != nil {
		t.Fatalf("the retention of %s: %v", key, err)
	}
	if mode == nil || *mode != minio.Governance || until == nil {
		t.Fatalf("%s is not locked in Governance mode: %v %v", key, mode, until)
	}
	return *until
}

// TestObjectLock: with a retention set, a chunked backup made with backup-only rights locks its
// artifact, pack list and packs until the retention after it started, and extends the locks of the
// older packs it names (once, with slack, not at every backup). The backup side cannot undo any
// of it: an overwritten artifact or pack, a delete or a shortened lock leaves the Backup
// restorable, from the versions it wrote. Maintenance deletes only behind delete markers.
func TestObjectLock(t *testing.T) {
	ctx := context.Background()
	bucket := newLockedBucket(t)
	dir := t.TempDir()
	randomFiles(t, dir, 4, 1<<20, 21)
	var log bytes.Buffer
	full := settledAgent(t)
	full.Log = &log
	full.RetainFor, full.LockMode = time.Hour, minio.Governance
	backupSide := *full
	backupSide.S3 = restrictedClient(t, BackupPolicy(bucket, "ns", "ns/.coffer"))

	started := time.Now()
	first, err := backupSide.Backup(ctx, dir, bucket, "ns/first.tar")
	if err != nil {
		t.Fatalf("a locked backup with backup-only rights: %v", err)
	}
	near := func(what string, got, want time.Time) {
		t.Helper()
		if got.Before(want.Add(-time.Minute)) || got.After(want.Add(time.Minute)) {
			t.Errorf("%s is locked until %s; want about %s", what, got.Format(time.RFC3339), want.Format(time.RFC3339))
		}
	}
	_, key := keyOf(t, first)
	near("the artifact", lockOf(t, bucket, key), started.Add(time.Hour))
	if reported, err := time.Parse(time.RFC3339, first.Metadata[MetaLockedUntil]); err != nil || reported.Sub(lockOf(t, bucket, key)).Abs() > time.Second {
		t.Errorf("the report says %s=%q (%v); want the artifact's lock, %s", MetaLockedUntil, first.Metadata[MetaLockedUntil], err, lockOf(t, bucket, key).Format(time.RFC3339))
	}
	near("the pack list", lockOf(t, bucket, "ns/.coffer/packlists/first"), started.Add(time.Hour))
	firstPacks := objectsBelow(t, bucket, "ns/.coffer/packs/")
	for p := range firstPacks {
		near("pack "+p, lockOf(t, bucket, p), started.Add(time.Hour+lockSlack(time.Hour)))
	}

	// Two hours later a backup that changed one file names the older packs: their locks are
	// extended past its own, with slack, once.
	backupSide.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	writeRandom(t, filepath.Join(dir, "files", "0"), 1<<20, rand.New(rand.NewPCG(22, 1)))
	want := snapshot(t, dir)
	backupSide.now = func() time.Time { return time.Now().Add(2*time.Hour + 2*time.Second) }
	second, err := backupSide.Backup(ctx, dir, bucket, "ns/second.tar")
	if err != nil {
		t.Fatal(err)
	}
	extendedTo := started.Add(3*time.Hour + lockSlack(time.Hour))
	var older string
	for _, p := range packList(t, full, second).Packs {
		if k := "ns/.coffer/packs/" + p.Name; firstPacks[k] {
			older = k
			near("older pack "+p.Name, lockOf(t, bucket, k), extendedTo)
		}
	}
	if older == "" {
		t.Fatal("the second backup names none of the first's packs")
	}
	if _, err := backupSide.Backup(ctx, dir, bucket, "ns/third.tar"); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(log.String(), "extended the object lock"); n != 1 {
		t.Errorf("%d backups extended locks; want the second only (the third finds them extended in index/):\n%s", n, log.String())
	}

	// The backup side attacks the Backup it made.
	_, secondKey := keyOf(t, second)
	garbage := bytes.Repeat([]byte("ransom"), 1000)
	for _, k := range []string{secondKey, older} {
		if _, err := backupSide.S3.PutObject(ctx, bucket, k, bytes.NewReader(garbage), int64(len(garbage)), minio.PutObjectOptions{}); err != nil {
			t.Fatalf("overwriting %s (a new version in a versioned bucket): %v", k, err)
		}
		written := versionsOf(t, bucket, k)
		if len(written) != 2 {
			t.Fatalf("%s has %d versions after an overwrite; want the written one kept", k, len(written))
		}
		if err := backupSide.S3.RemoveObject(ctx, bucket, k, minio.RemoveObjectOptions{VersionID: written[1].VersionID}); err == nil {
			t.Errorf("the backup side deleted the written version of %s", k)
		}
		if err := store(t).S3.RemoveObject(ctx, bucket, k, minio.RemoveObjectOptions{VersionID: written[1].VersionID}); err == nil {
			t.Errorf("the bucket's owner deleted the locked version of %s without bypassing governance", k)
		}
		soon := time.Now().Add(time.Minute)
		mode := minio.Governance
		if err := backupSide.S3.PutObjectRetention(ctx, bucket, k, minio.PutObjectRetentionOptions{Mode: &mode, RetainUntilDate: &soon, VersionID: written[1].VersionID}); err == nil {
			t.Errorf("the backup side shortened the lock of %s", k)
		}
	}
	assertSameTree(t, want, restoreInto(t, full, second))
	if !strings.Contains(log.String(), "was overwritten after it was written: reading the version written first") {
		t.Errorf("the restore does not say it read around an overwrite:\n%s", log.String())
	}

	// Maintenance after the first Backup is deleted: what it deletes goes behind delete markers,
	// and the locked versions stay until their date.
	deleteBackup(t, full, first)
	maintain(t, full, bucket, time.Hour)
	r := maintain(t, full, bucket, time.Hour)
	if r.Deleted == 0 {
		t.Fatalf("maintenance deleted nothing after a Backup was deleted: %+v", r)
	}
	for p := range firstPacks {
		if v := versionsOf(t, bucket, p); len(v) == 0 || v[len(v)-1].IsDeleteMarker {
			t.Errorf("pack %s lost its locked version: %+v", p, v)
		}
	}
	assertSameTree(t, want, restoreInto(t, full, second))
}

// TestObjectLockNeedsALockedBucket: a backup that should lock, into a bucket without object lock,
// fails saying so, and stores no artifact.
func TestObjectLockNeedsALockedBucket(t *testing.T) {
	bucket := newBucket(t)
	dir := t.TempDir()
	randomFiles(t, dir, 1, 1<<10, 23)
	for _, chunked := range []bool{false, true} {
		a := settledAgent(t)
		a.Chunked = chunked
		a.RetainFor, a.LockMode = time.Hour, minio.Compliance
		key := "ns/tar.tar"
		if chunked {
			key = "ns/chunked.tar"
		}
		_, err := a.Backup(context.Background(), dir, bucket, key)
		if err == nil || !strings.Contains(err.Error(), "object lock") {
			t.Errorf("a locked backup (chunked %v) into a bucket without object lock: %v; want it refused, naming object lock", chunked, err)
		}
		if objs := objectsBelow(t, bucket, key); len(objs) != 0 {
			t.Errorf("the failed backup left %v", objs)
		}
	}
}
