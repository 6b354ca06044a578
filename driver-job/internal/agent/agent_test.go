package agent

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// makeTree builds a tree with nested directories, an empty file, 0600, 0755 and read-only files, a
// file larger than one upload part when big is, relative, absolute and dangling symbolic links, a
// read-only directory, a name longer than USTAR's 100 bytes, files of another owner (when the
// tests run as root) and a socket, which backups skip. Modification times are whole seconds.
func makeTree(t *testing.T, dir string, big int) {
	t.Helper()
	rng := rand.New(rand.NewChaCha8([32]byte{7}))
	write := func(name string, data []byte, mode fs.FileMode) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, name string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	data := make([]byte, big)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	write("app/config.yaml", []byte("key: value\n"), 0o600)
	write("app/run.sh", []byte("#!/bin/sh\necho hello\n"), 0o755)
	write("app/empty", nil, 0o644)
	write("app/nested/deeper/deepest/data.bin", data, 0o640)
	write("app/private/token", []byte("s3cr3t"), 0o400)
	write("app/"+strings.Repeat("a-rather-long-directory-name/", 4)+"and-a-file-with-a-long-name.txt", []byte("long"), 0o644)
	write("readonly/frozen.txt", []byte("frozen"), 0o444)
	link("nested/deeper", "app/link-to-dir")
	link("/etc/hostname", "absolute-link")
	link("does/not/exist", "app/dangling")
	if os.Geteuid() == 0 {
		for _, name := range []string{"app/config.yaml", "app/private", "app/link-to-dir"} {
			if err := os.Lchown(filepath.Join(dir, name), 1234, 5678); err != nil {
				t.Fatal(err)
			}
		}
	}
	l, err := net.Listen("unix", filepath.Join(dir, "app", "agent.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })

	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&(fs.ModeSymlink|fs.ModeSocket) != 0 {
			return err
		}
		mtime = mtime.Add(time.Minute)
		return os.Chtimes(p, mtime, mtime)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "app", "private"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "readonly"), 0o555); err != nil {
		t.Fatal(err)
	}
}

func TestBackupAndRestoreRoundTrip(t *testing.T) {
	bucket := newBucket(t)
	dir := filepath.Join(t.TempDir(), "data")
	makeTree(t, dir, 20<<20) // two parts of 16 MiB
	if err := os.MkdirAll(filepath.Join(dir, "lost+found"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lost+found", "#1234"), []byte("fsck"), 0o600); err != nil {
		t.Fatal(err)
	}
	want := snapshot(t, dir)
	for _, skipped := range []string{"app/agent.sock", "lost+found", "lost+found/#1234"} {
		delete(want, skipped)
	}

	r := run(t, env(t, jobv1.ModeBackup, bucket, dir))
	if r.code != 0 {
		t.Fatalf("backup exited %d: %s", r.code, r.stderr)
	}
	report, err := jobv1.ParseArtifactReport(r.termLog)
	if err != nil {
		t.Fatalf("termination log %q: %v", r.termLog, err)
	}
	if strings.TrimSpace(r.stdout) != r.termLog {
		t.Errorf("stdout %q differs from the termination log %q", r.stdout, r.termLog)
	}
	const key = "tenant-a/nightly-1a2b3c4d.tar"
	if want := "s3://" + bucket + "/" + key; report.URI != want {
		t.Errorf("uri %s, want %s", report.URI, want)
	}
	size, sum := objectDigest(t, bucket, key)
	if size != report.SizeBytes || sum != report.Checksum {
		t.Errorf("the object is %d bytes with %s; the report says %d bytes with %s", size, sum, report.SizeBytes, report.Checksum)
	}
	for _, warning := range []string{"skipping app/agent.sock: a socket", "skipping lost+found"} {
		if !strings.Contains(r.stderr, warning) {
			t.Errorf("no warning %q on stderr:\n%s", warning, r.stderr)
		}
	}
	if creds, _ := store(t).S3.GetCreds(); strings.Contains(r.stderr+r.stdout+r.termLog, creds.SecretAccessKey) {
		t.Errorf("stderr shows the secret key")
	}

	// The same tree gives the same bytes; the prefix is cleaned of extra slashes.
	e := env(t, jobv1.ModeBackup, bucket, dir)
	e[jobv1.EnvRunUID] = "ffffffff-0000-4000-8000-000000000000"
	e[jobv1.ParamEnvName("prefix")] = "/again//daily/"
	again := backup(t, e)
	if want := "s3://" + bucket + "/again/daily/nightly-ffffffff.tar"; again.URI != want {
		t.Errorf("uri %s, want %s", again.URI, want)
	}
	if again.Checksum != report.Checksum || again.SizeBytes != report.SizeBytes {
		t.Errorf("a second backup of the same tree differs: %+v, then %+v", report, again)
	}

	// Delete the backed-up entries; add one the backup does not hold, and a stray file inside a
	// directory the restore replaces as a whole.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := removeAll(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "unrelated.txt"), []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "app"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "app", "stray.txt"), []byte("replaced with app/"), 0o644); err != nil {
		t.Fatal(err)
	}

	r = run(t, restoreEnv(t, jobv1.ModeRestore, bucket, dir, report))
	if r.code != 0 {
		t.Fatalf("restore exited %d: %s", r.code, r.stderr)
	}
	got := snapshot(t, dir)
	if b, err := os.ReadFile(filepath.Join(dir, "unrelated.txt")); err != nil || string(b) != "keep me" {
		t.Errorf("unrelated.txt was not left alone: %q, %v", b, err)
	}
	delete(got, "unrelated.txt")
	assertSameTree(t, want, got)
	assertNoStaging(t, dir)

	var status RestoreStatus
	if err := json.Unmarshal([]byte(r.termLog), &status); err != nil {
		t.Fatalf("restore status %q: %v", r.termLog, err)
	}
	var files, dirs, links int64
	for _, d := range want {
		switch d[0] {
		case '-':
			files++
		case 'd':
			dirs++
		case 'L':
			links++
		}
	}
	if status.URI != report.URI || status.Files != files || status.Directories != dirs || status.Symlinks != links {
		t.Errorf("status %+v, want %d files, %d directories, %d links of %s", status, files, dirs, links, report.URI)
	}
}

// overwrite replaces an object's content.
func overwrite(t *testing.T, bucket, key string, data []byte) {
	t.Helper()
	if _, err := store(t).S3.PutObject(context.Background(), bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
}

// corrupt flips one byte in the middle of an object, keeping its size, and returns the new checksum.
func corrupt(t *testing.T, bucket, key string) string {
	t.Helper()
	obj, err := store(t).S3.GetObject(context.Background(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(obj)
	obj.Close()
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	overwrite(t, bucket, key, data)
	return fmt.Sprintf("sha256:%x", sha256.Sum256(data))
}

func keyOf(t testing.TB, report *jobv1.ArtifactReport) (bucket, key string) {
	t.Helper()
	bucket, key, err := backupsv1.ParseS3URI(report.URI)
	if err != nil {
		t.Fatal(err)
	}
	return bucket, key
}

func TestRestoreRefusesCorruptedObject(t *testing.T) {
	bucket := newBucket(t)
	dir := filepath.Join(t.TempDir(), "data")
	makeTree(t, dir, 1<<20)
	report := backup(t, env(t, jobv1.ModeBackup, bucket, dir))
	_, key := keyOf(t, report)
	corrupted := corrupt(t, bucket, key)
	// Change the directory, so that a restore would show.
	if err := os.WriteFile(filepath.Join(dir, "app", "config.yaml"), []byte("key: changed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dir)

	r := run(t, restoreEnv(t, jobv1.ModeRestore, bucket, dir, report))
	if r.code != 1 {
		t.Fatalf("restore of a corrupted object exited %d, want 1: %s", r.code, r.stderr)
	}
	for _, s := range []string{corrupted, report.Checksum, "nothing was restored"} {
		if !strings.Contains(r.termLog, s) || !strings.Contains(r.stderr, s) {
			t.Errorf("the termination log %q or stderr %q lacks %q", r.termLog, r.stderr, s)
		}
	}
	assertSameTree(t, before, snapshot(t, dir))
	assertNoStaging(t, dir)
}

// TestRestoreRefusesObjectChangedAfterItsHeader replaces the object after the restore checked its
// header, before it extracts.
func TestRestoreRefusesObjectChangedAfterItsHeader(t *testing.T) {
	bucket := newBucket(t)
	dir := filepath.Join(t.TempDir(), "data")
	makeTree(t, dir, 1<<20)
	report := backup(t, env(t, jobv1.ModeBackup, bucket, dir))
	_, key := keyOf(t, report)
	before := snapshot(t, dir)

	e := env(t, "", "", "")
	client, err := NewClient(e[jobv1.ParamEnvName("endpoint")], "", e[EnvAccessKeyID], e[EnvSecretAccessKey])
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	a := &Agent{S3: client, Log: &log, afterHeader: func() { corrupt(t, bucket, key) }}
	_, err = a.Restore(context.Background(), dir, Artifact{Bucket: bucket, Key: key, Checksum: report.Checksum, SizeBytes: report.SizeBytes})
	if err == nil || !strings.Contains(err.Error(), "changed since") {
		t.Fatalf("restore of an object replaced after its header was read: %v, want an error saying it changed", err)
	}
	assertSameTree(t, before, snapshot(t, dir))
	assertNoStaging(t, dir)
}

func TestRestoreRefusesWrongSize(t *testing.T) {
	bucket := newBucket(t)
	dir := filepath.Join(t.TempDir(), "data")
	makeTree(t, dir, 0)
	report := backup(t, env(t, jobv1.ModeBackup, bucket, dir))
	if err := os.Remove(filepath.Join(dir, "app", "run.sh")); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dir)

	wrong := *report
	wrong.SizeBytes++
	r := run(t, restoreEnv(t, jobv1.ModeRestore, bucket, dir, &wrong))
	if r.code != 1 {
		t.Fatalf("restore with a wrong size exited %d, want 1: %s", r.code, r.stderr)
	}
	if want := fmt.Sprintf("is %d bytes, expected %d", report.SizeBytes, wrong.SizeBytes); !strings.Contains(r.termLog, want) {
		t.Errorf("termination log %q lacks %q", r.termLog, want)
	}
	assertSameTree(t, before, snapshot(t, dir))
	assertNoStaging(t, dir)
}

// entry is a tar entry of a hand-made archive.
type entry struct {
	hdr  tar.Header
	data string
}

func makeTar(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := e.hdr
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
		}
		hdr.Size = int64(len(e.data))
		if err := tw.WriteHeader(&hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// upload stores an archive and returns its report.
func upload(t *testing.T, bucket, key string, data []byte) *jobv1.ArtifactReport {
	t.Helper()
	overwrite(t, bucket, key, data)
	sum := sha256.Sum256(data)
	return &jobv1.ArtifactReport{URI: ArtifactURI(bucket, key), SizeBytes: int64(len(data)), Checksum: "sha256:" + hex.EncodeToString(sum[:])}
}

func TestRestoreRefusesUnsafeArchives(t *testing.T) {
	bucket := newBucket(t)
	parent := t.TempDir()
	// Every archive tries to write parent/evil; targets are parent/target-N, and extraction
	// happens in parent/target-N/.coffer-restore-*/data.
	evil := filepath.Join(parent, "evil")
	reg := func(name string) entry {
		return entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name}, data: "pwned"}
	}
	for i, tc := range []struct {
		name    string
		entries []entry
		want    string
	}{
		{"parent component", []entry{reg("../evil")}, `".." component`},
		{"escaping to the parent", []entry{reg("../../../evil")}, `".." component`},
		{"parent component inside", []entry{reg("app/../../../../evil")}, `".." component`},
		{"absolute path", []entry{reg(evil)}, "absolute path"},
		{"below an absolute symlink", []entry{
			{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "link", Linkname: parent}},
			reg("link/evil"),
		}, `below "link", which is not a directory`},
		{"below a relative symlink", []entry{
			{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "up", Linkname: "../../.."}},
			reg("up/evil"),
		}, `below "up", which is not a directory`},
		{"hard link", []entry{{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "passwd", Linkname: "/etc/passwd"}}}, "hard link"},
		{"duplicate entry", []entry{reg("twice"), reg("twice")}, "appears twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(parent, fmt.Sprintf("target-%d", i))
			if err := os.MkdirAll(filepath.Join(dir, "app"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "app", "existing"), []byte("mine"), 0o644); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, dir)
			// A harmless entry first, so that the refusal comes in the middle of an extraction.
			entries := append([]entry{reg("app/harmless")}, tc.entries...)
			report := upload(t, bucket, fmt.Sprintf("unsafe/%d.tar", i), makeTar(t, entries...))

			r := run(t, restoreEnv(t, jobv1.ModeRestore, bucket, dir, report))
			if r.code != 1 {
				t.Fatalf("restore exited %d, want 1: %s", r.code, r.stderr)
			}
			if !strings.Contains(r.termLog, tc.want) {
				t.Errorf("termination log %q lacks %q", r.termLog, tc.want)
			}
			if _, err := os.Lstat(evil); !os.IsNotExist(err) {
				t.Errorf("%s was written (%v)", evil, err)
			}
			assertSameTree(t, before, snapshot(t, dir))
			assertNoStaging(t, dir)
		})
	}
	var names []string
	if err := filepath.WalkDir(parent, func(p string, d fs.DirEntry, err error) error {
		names = append(names, d.Name())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(names, "evil") {
		t.Errorf("a file named evil was written below %s: %v", parent, names)
	}
}

// TestRestoreForeignArchive restores what `tar -C dir .` makes: "./" names, and files whose
// parent directories have no entries of their own.
func TestRestoreForeignArchive(t *testing.T) {
	bucket := newBucket(t)
	dir := t.TempDir()
	report := upload(t, bucket, "foreign.tar", makeTar(t,
		entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755}},
		entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "./a/", Mode: 0o750}},
		entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "./a/f", Mode: 0o640}, data: "f"},
		entry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "./b", Linkname: "a/f"}},
		entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "x/y/z", Mode: 0o600}, data: "z"},
	))
	r := run(t, restoreEnv(t, jobv1.ModeRestore, bucket, dir, report))
	if r.code != 0 {
		t.Fatalf("restore exited %d: %s", r.code, r.stderr)
	}
	got := map[string]string{}
	for k, v := range snapshot(t, dir) {
		got[k] = strings.Fields(v)[0]
	}
	want := map[string]string{"a": "drwxr-x---", "a/f": "-rw-r-----", "b": "Lrwxrwxrwx", "x": "drwxr-xr-x", "x/y": "drwxr-xr-x", "x/y/z": "-rw-------"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("restored %v, want %v", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "b")); err != nil || string(b) != "f" {
		t.Errorf("b reads %q, %v", b, err)
	}
}

func TestBackupRefusesToOverwrite(t *testing.T) {
	bucket := newBucket(t)
	dir := filepath.Join(t.TempDir(), "data")
	makeTree(t, dir, 0)
	e := env(t, jobv1.ModeBackup, bucket, dir)
	report := backup(t, e)
	_, key := keyOf(t, report)
	info, err := store(t).S3.StatObject(context.Background(), bucket, key, minio.StatObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "new.txt"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}

	r := run(t, e)
	if r.code != 1 {
		t.Fatalf("a second backup with the same key exited %d, want 1: %s", r.code, r.stderr)
	}
	want := "backup failed: " + report.URI + " already exists; refusing to overwrite it"
	if r.termLog != want || !strings.Contains(r.stderr, want) {
		t.Errorf("termination log %q, stderr %q; want %q", r.termLog, r.stderr, want)
	}
	if r.stdout != "" {
		t.Errorf("stdout %q, want nothing", r.stdout)
	}
	after, err := store(t).S3.StatObject(context.Background(), bucket, key, minio.StatObjectOptions{})
	if err != nil || after.ETag != info.ETag {
		t.Errorf("the object changed: %v, ETag %s then %s", err, info.ETag, after.ETag)
	}
}

func TestCleanup(t *testing.T) {
	bucket := newBucket(t)
	dir := filepath.Join(t.TempDir(), "data")
	makeTree(t, dir, 0)
	report := backup(t, env(t, jobv1.ModeBackup, bucket, dir))
	_, key := keyOf(t, report)

	for i := range 2 { // the second finds nothing to delete, and succeeds
		r := run(t, restoreEnv(t, jobv1.ModeCleanup, bucket, "", report))
		if r.code != 0 {
			t.Fatalf("cleanup %d exited %d: %s", i+1, r.code, r.stderr)
		}
		_, err := store(t).S3.StatObject(context.Background(), bucket, key, minio.StatObjectOptions{})
		if minio.ToErrorResponse(err).Code != minio.NoSuchKey {
			t.Fatalf("after cleanup %d the object stats %v, want NoSuchKey", i+1, err)
		}
	}

	gone := *report
	gone.URI = ArtifactURI("no-such-bucket", key)
	r := run(t, restoreEnv(t, jobv1.ModeCleanup, bucket, "", &gone))
	if r.code != 1 || !strings.HasPrefix(r.termLog, "cleanup failed: deleting "+gone.URI) {
		t.Errorf("cleanup in a missing bucket exited %d with %q, want 1 and an error", r.code, r.termLog)
	}
}
