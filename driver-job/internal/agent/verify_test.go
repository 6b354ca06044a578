package agent

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// verified runs a verify of report into a fresh scratch directory, which must succeed, and
// returns its report; the scratch directory must be left empty.
func verified(t *testing.T, e map[string]string) *jobv1.VerifyReport {
	t.Helper()
	r := run(t, e)
	if r.code != 0 {
		t.Fatalf("verify exited %d: %s", r.code, r.stderr)
	}
	report, err := jobv1.ParseVerifyReport(r.termLog)
	if err != nil {
		t.Fatalf("the termination log holds no valid verify report: %v\n%s", err, r.termLog)
	}
	if left, err := os.ReadDir(e[EnvDataDir]); err != nil || len(left) != 0 {
		t.Fatalf("the scratch directory holds %v (%v) after the verify; want it empty", left, err)
	}
	return report
}

func regularFiles(t *testing.T, tree map[string]string) int64 {
	t.Helper()
	var n int64
	for _, d := range tree {
		if strings.Contains(d, " sha256=") { // snapshot describes regular files so
			n++
		}
	}
	return n
}

// TestVerifyComparesEveryFile backs a tree up (compressed, and compressed and encrypted), then
// verifies it into a scratch directory: every file is compared with the manifest and matches, the
// source is untouched, and nothing stays in scratch. A restore of the same artifact does not
// write the manifest as a file.
func TestVerifyComparesEveryFile(t *testing.T) {
	identity, recipient := newKey(t)
	for _, tc := range []struct {
		name    string
		encrypt bool
	}{{"zstd", false}, {"zstd+age", true}} {
		t.Run(tc.name, func(t *testing.T) {
			bucket := newBucket(t)
			dir := filepath.Join(t.TempDir(), "data")
			makeTree(t, dir, 3<<20)
			e := env(t, jobv1.ModeBackup, bucket, dir)
			if tc.encrypt {
				e[jobv1.EnvAgeRecipients] = recipient
			}
			report := backup(t, e)
			source := snapshot(t, dir)
			files := regularFiles(t, source)
			if files < 4 {
				t.Fatalf("the tree holds %d regular files; the test needs several", files)
			}

			v := restoreEnv(t, jobv1.ModeVerify, bucket, t.TempDir(), report)
			if tc.encrypt {
				v[jobv1.EnvAgeIdentities] = identity
			}
			got := verified(t, v)
			if got.Format != FormatVersion || got.Files != files || got.Compared != files || got.Mismatched != 0 || len(got.Differences) != 0 {
				t.Errorf("verify report %+v, want format %d and all %d files compared, none differing", got, FormatVersion, files)
			}
			assertSameTree(t, source, snapshot(t, dir))

			restored := filepath.Join(t.TempDir(), "restored")
			if err := os.Mkdir(restored, 0o755); err != nil {
				t.Fatal(err)
			}
			r := restoreEnv(t, jobv1.ModeRestore, bucket, restored, report)
			if tc.encrypt {
				r[jobv1.EnvAgeIdentities] = identity
			}
			if res := run(t, r); res.code != 0 {
				t.Fatalf("restore exited %d: %s", res.code, res.stderr)
			}
			if _, err := os.Lstat(filepath.Join(restored, manifestName)); !os.IsNotExist(err) {
				t.Errorf("the restore wrote the manifest as a file (%v)", err)
			}
		})
	}
}

// TestVerifyReportsRestoredFilesThatDiffer changes the restored files between the extraction and
// the comparison (one byte of a file, a file removed, a file added): each is a difference, named.
func TestVerifyReportsRestoredFilesThatDiffer(t *testing.T) {
	bucket := newBucket(t)
	dir := filepath.Join(t.TempDir(), "data")
	makeTree(t, dir, 1<<20)
	report := backup(t, env(t, jobv1.ModeBackup, bucket, dir))
	files := regularFiles(t, snapshot(t, dir))
	_, key := keyOf(t, report)

	e := env(t, "", "", "")
	client, err := NewClient(e[jobv1.ParamEnvName("endpoint")], "", e[EnvAccessKeyID], e[EnvSecretAccessKey])
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	a := &Agent{S3: client, Log: &log, afterExtract: func(data string) {
		p := filepath.Join(data, "app", "nested", "deeper", "deepest", "data.bin")
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0x01
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(data, "app", "config.yaml")); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, "app", "planted"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}}
	scratch := t.TempDir()
	got, err := a.Verify(context.Background(), scratch, Artifact{Bucket: bucket, Key: key, Checksum: report.Checksum, SizeBytes: report.SizeBytes})
	if err != nil {
		t.Fatalf("verify: %v\n%s", err, log.String())
	}
	if got.Mismatched != 3 || got.Compared != files-2 {
		t.Errorf("verify report %+v, want 3 differences and %d files compared", got, files-2)
	}
	all := strings.Join(got.Differences, "\n")
	for _, want := range []string{"app/nested/deeper/deepest/data.bin: SHA-256", "app/config.yaml: in the backup, not restored", "app/planted: restored, but the manifest does not list it"} {
		if !strings.Contains(all, want) {
			t.Errorf("differences %q lack %q", all, want)
		}
	}
	assertNoStaging(t, scratch)
}

// artifactOf is an artifact of the given header version (no compression, no encryption) of a tar
// made of entries.
func artifactOf(t *testing.T, version uint8, entries ...entry) []byte {
	t.Helper()
	h, err := Header{Version: version}.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return append(h, makeTar(t, entries...)...)
}

func manifestLine(path, data string) string {
	sum := sha256.Sum256([]byte(data))
	return `{"path":"` + path + `","size":` + strconv.Itoa(len(data)) + `,"sha256":"` + hex.EncodeToString(sum[:]) + `"}` + "\n"
}

// TestVerifyArtifactsByHand checks a verify against artifacts written by hand: a manifest that
// disagrees with the file it lists, a format 2 artifact (no manifest: nothing compared; and it
// restores), a
// format 3 one without a manifest, an entry after the manifest, and a manifest that is not one.
func TestVerifyArtifactsByHand(t *testing.T) {
	bucket := newBucket(t)
	file := entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "x", Mode: 0o600}, data: "hello"}
	manifest := func(body string) entry {
		return entry{hdr: tar.Header{Typeflag: typeManifest, Name: manifestName, Mode: 0o400}, data: body}
	}

	lying := upload(t, bucket, "lying.tar", artifactOf(t, 3, file, manifest(manifestLine("x", "hellO"))))
	got := verified(t, restoreEnv(t, jobv1.ModeVerify, bucket, t.TempDir(), lying))
	if got.Mismatched != 1 || got.Compared != 0 || len(got.Differences) != 1 || !strings.Contains(got.Differences[0], "x: SHA-256") {
		t.Errorf("a manifest that disagrees with its file: %+v, want one SHA-256 difference", got)
	}

	v2 := upload(t, bucket, "v2.tar", artifactOf(t, 2, file))
	got = verified(t, restoreEnv(t, jobv1.ModeVerify, bucket, t.TempDir(), v2))
	if got.Format != 2 || got.Files != 1 || got.Compared != 0 || got.Mismatched != 0 {
		t.Errorf("a format 2 artifact: %+v, want 1 file restored and none compared", got)
	}
	// The previous format restores as it always did.
	dir := t.TempDir()
	if r := run(t, restoreEnv(t, jobv1.ModeRestore, bucket, dir, v2)); r.code != 0 || !strings.Contains(r.termLog, `"format":2`) {
		t.Fatalf("restore of a format 2 artifact exited %d (%s): %s", r.code, r.termLog, r.stderr)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "x")); err != nil || string(b) != "hello" {
		t.Errorf("x of the format 2 artifact reads %q, %v", b, err)
	}

	for _, tc := range []struct {
		name string
		tar  []entry
		want string
	}{
		{"no manifest", []entry{file}, "has no manifest"},
		{"an entry after the manifest", []entry{manifest(manifestLine("x", "hello")), file}, "follows the manifest"},
		{"not a manifest", []entry{file, manifest("x hello\n")}, "the manifest's line 1"},
		{"a path that escapes", []entry{file, manifest(manifestLine("../x", "hello"))}, "not a file's path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scratch := t.TempDir()
			report := upload(t, bucket, "bad.tar", artifactOf(t, 3, tc.tar...))
			r := run(t, restoreEnv(t, jobv1.ModeVerify, bucket, scratch, report))
			if r.code != 1 || !strings.Contains(r.termLog, tc.want) {
				t.Errorf("verify exited %d with %q; want 1 and %q", r.code, r.termLog, tc.want)
			}
			assertNoStaging(t, scratch)
		})
	}
}
