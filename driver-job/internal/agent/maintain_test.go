package agent

import (
	"context"
	"io"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// objectsBelow lists the keys below prefix.
func objectsBelow(t *testing.T, bucket, prefix string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for o := range store(t).S3.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		out[o.Key] = true
	}
	return out
}

func maintain(t *testing.T, a *Agent, bucket string, margin time.Duration) *MaintenanceReport {
	t.Helper()
	r, err := a.Maintain(context.Background(), bucket, "ns/.coffer", margin)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func deleteBackup(t testing.TB, a *Agent, r *jobv1.ArtifactReport) {
	t.Helper()
	bucket, key := keyOf(t, r)
	if err := a.Cleanup(context.Background(), bucket, key); err != nil {
		t.Fatal(err)
	}
}

func settledAgent(t *testing.T) *Agent {
	a := chunkedAgent(t, io.Discard)
	a.now = func() time.Time { return time.Now().Add(2 * time.Second) }
	return a
}

// TestMaintenanceDeletesWhatNoBackupNeeds: once a Backup is deleted, two maintenance runs delete
// the packs only it named, and keep those a remaining Backup names, which still restores.
func TestMaintenanceDeletesWhatNoBackupNeeds(t *testing.T) {
	ctx := context.Background()
	bucket := newBucket(t)
	dir := t.TempDir()
	randomFiles(t, dir, 4, 1<<20, 5)
	a := settledAgent(t)
	first, err := a.Backup(ctx, dir, bucket, "ns/first.tar")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(6, 1))
	for _, f := range []string{"0", "1"} {
		writeRandom(t, filepath.Join(dir, "files", f), 1<<20, rng)
	}
	want := snapshot(t, dir)
	second, err := a.Backup(ctx, dir, bucket, "ns/second.tar")
	if err != nil {
		t.Fatal(err)
	}
	before := objectsBelow(t, bucket, "ns/.coffer/packs/")

	if r := maintain(t, a, bucket, time.Hour); r.Condemned != 0 || r.Deleted != 0 || r.Live != 2 {
		t.Fatalf("maintenance with both Backups there: %+v; want both live, nothing condemned", r)
	}
	deleteBackup(t, a, first)
	r := maintain(t, a, bucket, time.Hour)
	if r.Live != 1 || r.Condemned == 0 || r.Deleted != 0 {
		t.Fatalf("first maintenance after a Backup was deleted: %+v; want its own packs condemned, none deleted yet", r)
	}
	condemned := r.Condemned
	r = maintain(t, a, bucket, time.Hour)
	if r.Deleted != condemned || r.DeletedBytes < 2<<20 || r.Condemned != 0 {
		t.Fatalf("second maintenance: %+v; want the %d condemned packs (the old content of two 1 MiB files) deleted", r, condemned)
	}
	after := objectsBelow(t, bucket, "ns/.coffer/packs/")
	if len(after) != len(before)-condemned {
		t.Errorf("%d packs left of %d, %d deleted", len(after), len(before), condemned)
	}
	assertSameTree(t, want, restoreInto(t, a, second))
	bkt, key := keyOf(t, second)
	if v, err := a.Verify(ctx, t.TempDir(), Artifact{Bucket: bkt, Key: key, Checksum: second.Checksum, SizeBytes: second.SizeBytes}); err != nil || v.Mismatched != 0 || v.Compared != 4 {
		t.Errorf("verify of the remaining Backup: %+v, %v", v, err)
	}

	// A live Backup whose record of what it needs is missing stops maintenance from deleting.
	files := readObject(t, bucket, "ns/.coffer/files/second")
	if err := store(t).S3.RemoveObject(ctx, bucket, "ns/.coffer/files/second", minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Maintain(ctx, bucket, "ns/.coffer", time.Hour); err == nil || !strings.Contains(err.Error(), "cannot be told") {
		t.Errorf("maintenance without the live Backup's files/: %v; want it refused", err)
	}
	// So does one whose record was cut short: it cannot tell which packs the Backup names.
	overwrite(t, bucket, "ns/.coffer/files/second", files[:len(files)-20])
	if _, err := a.Maintain(ctx, bucket, "ns/.coffer", time.Hour); err == nil || !strings.Contains(err.Error(), "files/second") {
		t.Errorf("maintenance with the live Backup's files/ cut short: %v; want it refused", err)
	}
	overwrite(t, bucket, "ns/.coffer/files/second", files)

	deleteBackup(t, a, second)
	maintain(t, a, bucket, time.Hour)
	maintain(t, a, bucket, time.Hour)
	left := objectsBelow(t, bucket, "ns/")
	for k := range left {
		if !strings.HasPrefix(k, "ns/.coffer/maintenance/") {
			t.Errorf("%s is left after every Backup was deleted and maintained", k)
		}
	}
}

// TestMaintenanceRacingABackup: a backup that learnt of packs before maintenance condemned them
// keeps them, whether it is still running when the next maintenance runs or finished before it.
func TestMaintenanceRacingABackup(t *testing.T) {
	ctx := context.Background()
	bucket := newBucket(t)
	dir := t.TempDir()
	randomFiles(t, dir, 3, 1<<20, 7)
	want := snapshot(t, dir)
	a := settledAgent(t)
	first, err := a.Backup(ctx, dir, bucket, "ns/first.tar")
	if err != nil {
		t.Fatal(err)
	}
	packs := objectsBelow(t, bucket, "ns/.coffer/packs/")
	// The store's times tell apart only what is a second apart or more (maintenance keeps what it
	// cannot order): the packs are older than the next backup's start.
	time.Sleep(1100 * time.Millisecond)

	// The second backup has read the repository (it knows the first one's packs) when the first
	// Backup is deleted and maintenance runs twice.
	b := settledAgent(t)
	b.Recipients, b.KeyRef, b.Identities = a.Recipients, a.KeyRef, a.Identities
	b.afterLoad = func() {
		deleteBackup(t, a, first)
		if r := maintain(t, a, bucket, time.Hour); r.Condemned != len(packs) || r.Running != 1 {
			t.Errorf("maintenance while a backup runs: %+v; want every pack of the deleted Backup condemned, one backup running", r)
		}
		if r := maintain(t, a, bucket, time.Hour); r.Deleted != 0 || r.Condemned != len(packs) {
			t.Errorf("maintenance again while that backup runs: %+v; want nothing deleted: it started before the packs were condemned", r)
		}
	}
	second, err := b.Backup(ctx, dir, bucket, "ns/second.tar")
	if err != nil {
		t.Fatal(err)
	}
	if stored := metaInt(t, second, MetaStoredBytes); stored != 0 {
		t.Fatalf("the second backup stored %d bytes; the race needs it to take the first one's chunks", stored)
	}
	if r := maintain(t, a, bucket, time.Hour); r.Deleted != 0 || r.Condemned != 0 || r.Live != 1 {
		t.Errorf("maintenance after that backup finished: %+v; want its packs kept, no longer condemned", r)
	}
	if got := objectsBelow(t, bucket, "ns/.coffer/packs/"); len(got) != len(packs) {
		t.Errorf("%d packs left of %d", len(got), len(packs))
	}
	assertSameTree(t, want, restoreInto(t, a, second))

	// A backup that started and never finished protects nothing once it is older than the margin.
	c := settledAgent(t)
	c.Recipients, c.KeyRef, c.Identities = a.Recipients, a.KeyRef, a.Identities
	cctx, cancel := context.WithCancel(ctx)
	c.afterLoad = cancel
	if _, err := c.Backup(cctx, dir, bucket, "ns/crashed.tar"); err == nil {
		t.Fatal("a backup whose context ended succeeded")
	}
	deleteBackup(t, a, second)
	if r := maintain(t, a, bucket, time.Hour); r.Running != 1 || r.Condemned != len(packs) {
		t.Errorf("maintenance with an unfinished backup within the margin: %+v; want it taken as running, and the packs older than it condemned", r)
	}
	if r := maintain(t, a, bucket, time.Hour); r.Running != 1 || r.Deleted != 0 {
		t.Errorf("maintenance again within the margin: %+v; want nothing deleted while it may run", r)
	}
	if r := maintain(t, a, bucket, 0); r.Running != 0 || r.Deleted != len(packs) {
		t.Errorf("maintenance with the unfinished backup beyond the margin: %+v; want it dead and every pack deleted", r)
	}
	for k := range objectsBelow(t, bucket, "ns/.coffer/sessions/") {
		t.Errorf("%s is left: a dead backup's session is removed with its packs", k)
	}
}
