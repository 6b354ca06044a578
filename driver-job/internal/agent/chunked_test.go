package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

const testChunkKey = "a chunk key of the tests, long enough to be one"

// chunkedAgent is an agent writing chunked backups encrypted to a fresh key, with packs small
// enough that a test tree fills several.
func chunkedAgent(t *testing.T, log io.Writer) *Agent {
	t.Helper()
	identity, recipient := newKey(t)
	recipients, keyRef, err := ParseRecipients(recipient)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := ParseIdentities(identity)
	if err != nil {
		t.Fatal(err)
	}
	return &Agent{S3: store(t).S3, Log: log, CompressionLevel: DefaultCompressionLevel, Recipients: recipients, KeyRef: keyRef, Identities: ids,
		Chunked: true, ChunkKey: testChunkKey, PackSize: 1 << 20}
}

// randomFiles writes n files of size random bytes below dir/files, with modification times in the
// past (as files a backup finds settled).
func randomFiles(t *testing.T, dir string, n, size int, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	for i := range n {
		writeRandom(t, filepath.Join(dir, "files", strconv.Itoa(i)), size, rng)
	}
	// Directories keep whole seconds (tar's USTAR header).
	past := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(filepath.Join(dir, "files"), past, past); err != nil {
		t.Fatal(err)
	}
}

func writeRandom(t testing.TB, p string, size int, rng *rand.Rand) {
	t.Helper()
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour).Truncate(time.Second) // whole seconds, as tar keeps them
	if err := os.Chtimes(p, past, past); err != nil {
		t.Fatal(err)
	}
}

func metaInt(t *testing.T, r *jobv1.ArtifactReport, key string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(r.Metadata[key], 10, 64)
	if err != nil {
		t.Fatalf("report metadata %s=%q: %v", key, r.Metadata[key], err)
	}
	return n
}

// packList reads the pack list of a chunked backup and checks it against the report's digest and
// every listed pack against the store: its size and the SHA-256 of its bytes.
func packList(t *testing.T, a *Agent, report *jobv1.ArtifactReport) *jobv1.PackList {
	t.Helper()
	ctx := context.Background()
	bucket, key := keyOf(t, report)
	repo := a.repository(key)
	obj, err := a.S3.GetObject(ctx, bucket, repo+"/packlists/"+strings.TrimSuffix(path.Base(key), ".tar"), minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	b, err := io.ReadAll(obj)
	if err != nil {
		t.Fatalf("reading the pack list of %s: %v", report.URI, err)
	}
	if sum := sha256.Sum256(b); report.Metadata[jobv1.MetaPackList] != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("the report's pack list digest %q is not that of the stored list", report.Metadata[jobv1.MetaPackList])
	}
	l, err := jobv1.ParsePackList(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the pack list of %s: %v", report.URI, err)
	}
	for _, p := range l.Packs {
		o, err := a.S3.GetObject(ctx, bucket, repo+"/packs/"+p.Name, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(o)
		o.Close()
		if err != nil {
			t.Fatalf("pack %s: %v", p.Name, err)
		}
		if sum := sha256.Sum256(data); int64(len(data)) != p.Size || hex.EncodeToString(sum[:]) != p.SHA256 {
			t.Errorf("pack %s holds %d bytes of SHA-256 %x; the list says %d bytes of %s", p.Name, len(data), sum, p.Size, p.SHA256)
		}
	}
	return l
}

func restoreInto(t *testing.T, a *Agent, report *jobv1.ArtifactReport) map[string]string {
	t.Helper()
	bucket, key := keyOf(t, report)
	target := t.TempDir()
	if _, err := a.Restore(context.Background(), target, Artifact{Bucket: bucket, Key: key, Checksum: report.Checksum, SizeBytes: report.SizeBytes}); err != nil {
		t.Fatalf("restoring %s: %v", report.URI, err)
	}
	return snapshot(t, target)
}

// TestChunkedRoundTrip backs up the tree of the round-trip test through the agent's command line
// as a chunked, encrypted backup, and restores and verifies it.
func TestChunkedRoundTrip(t *testing.T) {
	bucket := newBucket(t)
	dir := filepath.Join(t.TempDir(), "data")
	makeTree(t, dir, 5<<20) // several chunks
	want := snapshot(t, dir)
	delete(want, "app/agent.sock")
	identity, recipient := newKey(t)

	e := env(t, jobv1.ModeBackup, bucket, dir)
	e[EnvFormat] = FormatChunked
	e[jobv1.EnvAgeRecipients] = recipient
	if r := run(t, e); r.code != 2 || !strings.Contains(r.stderr, EnvChunkKey) {
		t.Fatalf("an encrypted chunked backup without chunk key: exit %d, %s; want a usage error naming %s", r.code, r.stderr, EnvChunkKey)
	}
	e[EnvChunkKey] = testChunkKey
	r := run(t, e)
	if r.code != 0 {
		t.Fatalf("backup exited %d: %s", r.code, r.stderr)
	}
	report, err := jobv1.ParseArtifactReport(r.termLog)
	if err != nil {
		t.Fatal(err)
	}
	if report.Metadata[MetaFormat] != "4" || report.Metadata[MetaEncryption] != "age" {
		t.Errorf("report metadata %v, want format 4 and age", report.Metadata)
	}
	if want := "s3://" + bucket + "/tenant-a/.coffer/tenant-a"; report.Metadata[MetaRepository] != want {
		t.Errorf("repository %q, want %q", report.Metadata[MetaRepository], want)
	}
	if stored := metaInt(t, report, MetaStoredBytes); stored < 5<<20 {
		t.Errorf("the backup stored %d bytes of packs, less than its 5 MiB of random data", stored)
	}
	// Nothing of the tree is readable in the store: the index and the packs are encrypted.
	for o := range store(t).S3.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		b := readObject(t, bucket, o.Key)
		for _, plain := range []string{"key: value", "echo hello", "config.yaml", "s3cr3t"} {
			if bytes.Contains(b, []byte(plain)) {
				t.Errorf("object %s holds %q in the clear", o.Key, plain)
			}
		}
	}

	for _, mode := range []string{jobv1.ModeRestore, jobv1.ModeVerify} {
		target := t.TempDir()
		re := restoreEnv(t, mode, bucket, target, report)
		re[jobv1.EnvAgeIdentities] = identity
		r := run(t, re)
		if r.code != 0 {
			t.Fatalf("%s exited %d: %s", mode, r.code, r.stderr)
		}
		if mode == jobv1.ModeRestore {
			assertSameTree(t, want, snapshot(t, target))
			continue
		}
		v, err := jobv1.ParseVerifyReport(r.termLog)
		if err != nil {
			t.Fatal(err)
		}
		if v.Format != 4 || v.Compared != v.Files || v.Files < 6 || v.Mismatched != 0 {
			t.Errorf("verify report %+v, want format 4 and every file compared, none differing", v)
		}
	}

	// Maintenance of the namespace's repository, from the command line.
	me := env(t, ModeMaintain, bucket, "")
	me[EnvChunkKey] = testChunkKey
	r = run(t, me)
	if r.code != 0 {
		t.Fatalf("maintain exited %d: %s", r.code, r.stderr)
	}
	var m MaintenanceReport
	if err := json.Unmarshal([]byte(r.termLog), &m); err != nil || m.Live != 1 || m.Packs == 0 || m.Deleted != 0 || m.Repository != report.Metadata[MetaRepository] {
		t.Errorf("maintenance report %q (%v): want the one Backup live and nothing deleted in %s", r.termLog, err, report.Metadata[MetaRepository])
	}
}

// TestChunkedBackupsStoreOnlyWhatChanged: a second backup of an unchanged tree reads no file and
// stores no chunk; after one file is rewritten, the next stores about that file; every backup
// restores the tree as it was when it ran, from its own index alone.
func TestChunkedBackupsStoreOnlyWhatChanged(t *testing.T) {
	ctx := context.Background()
	bucket := newBucket(t)
	dir := t.TempDir()
	randomFiles(t, dir, 8, 1<<20, 1)
	var log bytes.Buffer
	a := chunkedAgent(t, &log)
	// A file changed within a second before a backup started is read again by the next one,
	// whatever its times say (they may not have moved for a change within their resolution). The
	// clock stands still at the files' last change, however long the backups take.
	written := time.Now()
	a.now = func() time.Time { return written }
	first, err := a.Backup(ctx, dir, bucket, "ns/racy.tar")
	if err != nil {
		t.Fatal(err)
	}
	if read, stored := metaInt(t, first, MetaUncompressedBytes), metaInt(t, first, MetaStoredBytes); read != 8<<20 || stored < 8<<20 {
		t.Fatalf("the first backup read %d bytes and stored %d, want all 8 MiB of random data read and stored", read, stored)
	}
	again, err := a.Backup(ctx, dir, bucket, "ns/racy-again.tar")
	if err != nil {
		t.Fatal(err)
	}
	if read, stored := metaInt(t, again, MetaUncompressedBytes), metaInt(t, again, MetaStoredBytes); read != 8<<20 || stored != 0 {
		t.Errorf("files changed just before the last backup: read %d bytes and stored %d, want all read again and nothing stored", read, stored)
	}
	// The chunks of the first were compressed (and found incompressible); those read again are
	// the repository's already, and not compressed again.
	counts := regexp.MustCompile(`(\d+) new chunks .*, (\d+) chunks already stored, (\d+) compressed`).FindAllStringSubmatch(log.String(), -1)
	if len(counts) != 2 || counts[0][1] == "0" || counts[0][3] != counts[0][1] || counts[1][2] != counts[0][1] || counts[1][3] != "0" {
		t.Errorf("new, known and compressed chunks of the two backups: %v; want every chunk of the first compressed, none of the second", counts)
	}
	// From here on the backups run two seconds later than the files' last change.
	a.now = func() time.Time { return time.Now().Add(2 * time.Second) }

	first, err = a.Backup(ctx, dir, bucket, "ns/first.tar")
	if err != nil {
		t.Fatal(err)
	}
	wantFirst := snapshot(t, dir)

	second, err := a.Backup(ctx, dir, bucket, "ns/second.tar")
	if err != nil {
		t.Fatal(err)
	}
	if read, stored := metaInt(t, second, MetaUncompressedBytes), metaInt(t, second, MetaStoredBytes); read != 0 || stored != 0 {
		t.Errorf("a backup of the unchanged tree read %d bytes and stored %d; want neither", read, stored)
	}

	// One file rewritten with the same size and modification time: its change time gives it away.
	p := filepath.Join(dir, "files", "3")
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	writeRandom(t, p, 1<<20, rand.New(rand.NewPCG(99, 1)))
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	wantThird := snapshot(t, dir)
	third, err := a.Backup(ctx, dir, bucket, "ns/third.tar")
	if err != nil {
		t.Fatal(err)
	}
	read, stored := metaInt(t, third, MetaUncompressedBytes), metaInt(t, third, MetaStoredBytes)
	if read != 1<<20 || stored < 1<<20 || stored > 1<<20+64<<10 {
		t.Errorf("after one 1 MiB file changed, the backup read %d bytes and stored %d; want that file read and stored", read, stored)
	}

	// The pack lists: what a reader without keys can check (apis/jobdriver: PackList).
	l1, l2, l3 := packList(t, a, first), packList(t, a, second), packList(t, a, third)
	if l1.Sequence != 2 || l2.Sequence != 3 || l3.Sequence != 4 {
		t.Errorf("pack list sequences %d, %d, %d; want the backups' numbers in the repository 2, 3, 4", l1.Sequence, l2.Sequence, l3.Sequence)
	}
	names := func(l *jobv1.PackList, added bool) (n []string) {
		for _, p := range l.Packs {
			if p.Added == added {
				n = append(n, p.Name)
			}
		}
		return n
	}
	if len(names(l1, true)) != 0 || len(names(l2, true)) != 0 || len(l1.Packs) < 8 || !slices.Equal(names(l1, false), names(l2, false)) {
		t.Errorf("backups that stored nothing list packs %v (added %v) and %v (added %v); want the same old packs, none added",
			names(l1, false), names(l1, true), names(l2, false), names(l2, true))
	}
	old3 := names(l3, false)
	if got := names(l3, true); len(got) != 1 || len(old3) == 0 || slices.ContainsFunc(old3, func(n string) bool { return !slices.Contains(names(l2, false), n) }) {
		t.Errorf("the third backup lists %v added and old packs %v; want the one that holds the changed file and some of the second's %v", got, old3, names(l2, false))
	}

	assertSameTree(t, wantFirst, restoreInto(t, a, first))
	assertSameTree(t, wantFirst, restoreInto(t, a, second))
	assertSameTree(t, wantThird, restoreInto(t, a, third))
	if !strings.Contains(log.String(), "7 unchanged files not read") {
		t.Errorf("the log does not say the third backup skipped 7 files:\n%s", log.String())
	}
}

// TestChunkedRepositoriesDoNotMix: backups encrypted to other keys, or with another chunk key,
// share no chunk with the repository's earlier backups, and restore with their own keys.
func TestChunkedRepositoriesDoNotMix(t *testing.T) {
	ctx := context.Background()
	bucket := newBucket(t)
	dir := t.TempDir()
	randomFiles(t, dir, 2, 1<<20, 2)
	want := snapshot(t, dir)
	a := chunkedAgent(t, io.Discard)
	if _, err := a.Backup(ctx, dir, bucket, "ns/a.tar"); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	b := chunkedAgent(t, &log) // other age keys, same chunk key
	rb, err := b.Backup(ctx, dir, bucket, "ns/b.tar")
	if err != nil {
		t.Fatal(err)
	}
	if stored := metaInt(t, rb, MetaStoredBytes); stored < 2<<20 {
		t.Errorf("a backup to other age keys stored %d bytes: it took chunks sealed for other keys", stored)
	}
	assertSameTree(t, want, restoreInto(t, b, rb))
	bucketOf, key := keyOf(t, rb)
	if _, err := a.Restore(ctx, t.TempDir(), Artifact{Bucket: bucketOf, Key: key, Checksum: rb.Checksum, SizeBytes: rb.SizeBytes}); err == nil || !strings.Contains(err.Error(), "wrong key") {
		t.Errorf("restoring b's backup with a's identity: %v, want a wrong key", err)
	}

	c := chunkedAgent(t, &log)
	c.Recipients, c.KeyRef, c.Identities = b.Recipients, b.KeyRef, b.Identities
	c.ChunkKey = strings.Repeat("another chunk key ", 3)
	log.Reset()
	rc, err := c.Backup(ctx, dir, bucket, "ns/c.tar")
	if err != nil {
		t.Fatal(err)
	}
	if stored := metaInt(t, rc, MetaStoredBytes); stored < 2<<20 {
		t.Errorf("a backup with another chunk key stored %d bytes: it read the others' records", stored)
	}
	if !strings.Contains(log.String(), "does not open with this repository's chunk key") {
		t.Errorf("the log does not say the other key's records were ignored:\n%s", log.String())
	}
	assertSameTree(t, want, restoreInto(t, c, rc))
}

// TestChunkedDamage: a damaged or missing pack fails a restore, which writes nothing, and is a
// finding of a verify naming the file, not a failed run.
func TestChunkedDamage(t *testing.T) {
	ctx := context.Background()
	bucket := newBucket(t)
	dir := t.TempDir()
	randomFiles(t, dir, 3, 1<<20, 3) // one pack per file: packs are 1 MiB here
	a := chunkedAgent(t, io.Discard)
	report, err := a.Backup(ctx, dir, bucket, "ns/backup.tar")
	if err != nil {
		t.Fatal(err)
	}
	art := Artifact{Bucket: bucket, Key: "ns/backup.tar", Checksum: report.Checksum, SizeBytes: report.SizeBytes}
	var packs []string
	for o := range store(t).S3.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: "ns/.coffer/packs/"}) {
		packs = append(packs, o.Key)
	}
	if len(packs) < 3 {
		t.Fatalf("%d packs, want one per file at least", len(packs))
	}

	for _, damage := range []struct {
		name  string
		do    func(key string)
		found string
	}{
		{"flipped", func(key string) { corrupt(t, bucket, key) }, "does not authenticate"},
		{"deleted", func(key string) {
			if err := store(t).S3.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{}); err != nil {
				t.Fatal(err)
			}
		}, "NoSuchKey"},
	} {
		t.Run(damage.name, func(t *testing.T) {
			before := readObject(t, bucket, packs[0])
			damage.do(packs[0])
			defer overwrite(t, bucket, packs[0], before)

			target := t.TempDir()
			if err := os.WriteFile(filepath.Join(target, "keep"), []byte("mine"), 0o600); err != nil {
				t.Fatal(err)
			}
			was := snapshot(t, target)
			if _, err := a.Restore(ctx, target, art); err == nil || !strings.Contains(err.Error(), damage.found) || !strings.Contains(err.Error(), "nothing was restored") {
				t.Errorf("restore of a backup with a %s pack: %v; want it refused, saying %q", damage.name, err, damage.found)
			}
			assertSameTree(t, was, snapshot(t, target))
			assertNoStaging(t, target)

			v, err := a.Verify(ctx, t.TempDir(), art)
			if err != nil {
				t.Fatalf("verify of a backup with a %s pack failed as a run: %v; want a finding", damage.name, err)
			}
			if v.Mismatched != 1 || v.Compared != 2 || len(v.Differences) < 2 || !strings.Contains(v.Differences[0], damage.found) || !strings.HasPrefix(v.Differences[0], "files/") {
				t.Errorf("verify report %+v; want one file found damaged (%q) and named, two compared", v, damage.found)
			}
		})
	}
	v, err := a.Verify(ctx, t.TempDir(), art)
	if err != nil || v.Mismatched != 0 || v.Compared != 3 {
		t.Errorf("verify with the packs put back: %+v, %v; want all three files compared", v, err)
	}
}

// TestChunkedDamageReportIsBounded: a missing pack of many files makes a verify's report name
// at most MaxVerifyDifferences of them, each cut to 300 bytes however long its name, and count
// them all.
func TestChunkedDamageReportIsBounded(t *testing.T) {
	ctx := context.Background()
	bucket := newBucket(t)
	dir := t.TempDir()
	long := filepath.Join(dir, strings.Repeat("d", 200), strings.Repeat("e", 200))
	rng := rand.New(rand.NewPCG(21, 1))
	const files = 3 * jobv1.MaxVerifyDifferences / 2
	for i := range files { // small: one pack holds them all
		writeRandom(t, filepath.Join(long, fmt.Sprintf("%s-%02d", strings.Repeat("f", 200), i)), 4<<10, rng)
	}
	a := chunkedAgent(t, io.Discard)
	report, err := a.Backup(ctx, dir, bucket, "ns/backup.tar")
	if err != nil {
		t.Fatal(err)
	}
	packs := objectsBelow(t, bucket, "ns/.coffer/packs/")
	if len(packs) != 1 {
		t.Fatalf("%d packs; want the one that holds every file", len(packs))
	}
	for k := range packs { // gone: every file's chunks are missing
		if err := store(t).S3.RemoveObject(ctx, bucket, k, minio.RemoveObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	v, err := a.Verify(ctx, t.TempDir(), Artifact{Bucket: bucket, Key: "ns/backup.tar", Checksum: report.Checksum, SizeBytes: report.SizeBytes})
	if err != nil {
		t.Fatalf("verify of a backup with a missing pack failed as a run: %v; want findings", err)
	}
	if v.Mismatched != files || len(v.Differences) != jobv1.MaxVerifyDifferences {
		t.Errorf("verify report: %d mismatched, %d differences; want all %d counted and %d named", v.Mismatched, len(v.Differences), files, jobv1.MaxVerifyDifferences)
	}
	for _, d := range v.Differences {
		if len(d) > 303 || !strings.Contains(d, "NoSuchKey") && !strings.HasSuffix(d, "...") {
			t.Errorf("difference of %d bytes: %.80q...; want a damage message of at most 300 bytes and an ellipsis", len(d), d)
		}
	}
}

// TestChunkedLargeFile: a file of many chunks (more than the backup holds in flight) backs up
// and restores, and a tree whose file cannot be read fails the backup and leaves no record.
func TestChunkedLargeFile(t *testing.T) {
	ctx := context.Background()
	bucket := newBucket(t)
	dir := t.TempDir()
	writeRandom(t, filepath.Join(dir, "big"), 24<<20, rand.New(rand.NewPCG(12, 1)))
	want := snapshot(t, dir)
	a := chunkedAgent(t, io.Discard)
	r, err := a.Backup(ctx, dir, bucket, "ns/big.tar")
	if err != nil {
		t.Fatal(err)
	}
	assertSameTree(t, want, restoreInto(t, a, r))

	// Credentials that may start a backup (its session record) and not store packs: the backup
	// fails, and leaves no index, files record or artifact.
	policy := strings.Replace(BackupPolicy(bucket, "ns/.coffer/sessions", "ns/.coffer"), `"arn:aws:s3:::`+bucket+`/ns/.coffer/sessions/*"`,
		`"arn:aws:s3:::`+bucket+`/ns/.coffer/sessions/*", "arn:aws:s3:::`+bucket+`/ns/.coffer/files/*", "arn:aws:s3:::`+bucket+`/ns/failed.tar"`, 1)
	b := *a
	b.S3 = restrictedClient(t, policy)
	writeRandom(t, filepath.Join(dir, "more"), 1<<20, rand.New(rand.NewPCG(13, 1)))
	if _, err := b.Backup(ctx, dir, bucket, "ns/failed.tar"); err == nil || !strings.Contains(err.Error(), "uploading pack") {
		t.Fatalf("a backup that cannot store its packs: %v; want it failed, naming the pack", err)
	}
	for k := range objectsBelow(t, bucket, "ns/") {
		if strings.Contains(k, "failed") && !strings.Contains(k, "/sessions/") {
			t.Errorf("the failed backup left %s", k)
		}
	}
}

// TestChunkedRestoreAcrossWindows: with packs larger than a restore's window, chunks that lie
// across windows, and packs that follow each other, restore byte for byte; a pack cut short in
// its second window fails the restore as damage, naming the pack, and restores nothing.
func TestChunkedRestoreAcrossWindows(t *testing.T) {
	ctx := context.Background()
	bucket := newBucket(t)
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(31, 1))
	writeRandom(t, filepath.Join(dir, "big"), 3*DefaultPackSize, rng) // chunks of up to 8 MiB
	// Small files, their directory's time set (tar keeps whole seconds for directories).
	randomFiles(t, dir, 40, 300<<10, 32)
	want := snapshot(t, dir)
	a := chunkedAgent(t, io.Discard)
	a.PackSize = 0 // the default, twice a window
	r, err := a.Backup(ctx, dir, bucket, "ns/backup.tar")
	if err != nil {
		t.Fatal(err)
	}
	packs := objectsBelow(t, bucket, "ns/.coffer/packs/")
	if len(packs) < 3 {
		t.Fatalf("%d packs; want several", len(packs))
	}
	assertSameTree(t, want, restoreInto(t, a, r))

	var cut string
	var whole []byte
	for k := range packs {
		if b := readObject(t, bucket, k); len(b) > restoreWindow+restoreWindow/2 {
			cut, whole = k, b
			break
		}
	}
	if cut == "" {
		t.Fatal("no pack reaches into a second window")
	}
	overwrite(t, bucket, cut, whole[:restoreWindow+restoreWindow/2])
	target := t.TempDir()
	was := snapshot(t, target)
	_, err = a.Restore(ctx, target, Artifact{Bucket: bucket, Key: "ns/backup.tar", Checksum: r.Checksum, SizeBytes: r.SizeBytes})
	var d *chunkDamage
	if !errors.As(err, &d) || !strings.Contains(err.Error(), cut) || !strings.Contains(err.Error(), "nothing was restored") {
		t.Errorf("restore with a pack cut short: %v; want damage naming %s, nothing restored", err, cut)
	}
	assertSameTree(t, was, snapshot(t, target))
	overwrite(t, bucket, cut, whole)
	assertSameTree(t, want, restoreInto(t, a, r))
}
