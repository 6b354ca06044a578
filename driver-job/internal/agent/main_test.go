package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/minio/minio-go/v7"

	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

// The tests share one real MinIO, started by the first test that needs it.
var (
	minioOnce  sync.Once
	minioStack *velerostack.Stack
	minioErr   error
	minioDir   string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if minioStack != nil {
		minioStack.Stop()
	}
	if minioDir != "" {
		_ = os.RemoveAll(minioDir)
	}
	os.Exit(code)
}

// store returns the shared MinIO; it fails the test, with velerostack's instructions, when the
// binaries are not there.
func store(tb testing.TB) *velerostack.Stack {
	tb.Helper()
	minioOnce.Do(func() {
		if minioDir, minioErr = os.MkdirTemp("", "coffer-agent-minio-"); minioErr != nil {
			return
		}
		minioStack, minioErr = velerostack.StartMinIO(context.Background(), minioDir)
	})
	if minioErr != nil {
		tb.Fatalf("starting MinIO: %v", minioErr)
	}
	return minioStack
}

var (
	nonBucketChars = regexp.MustCompile(`[^a-z0-9]+`)
	bucketSeq      atomic.Int64 // benchmarks run more than once
)

// newBucketName is a new bucket name made of the test's (at most 50 characters of it).
func newBucketName(tb testing.TB) string {
	name := strings.Trim(nonBucketChars.ReplaceAllString(strings.ToLower(tb.Name()), "-"), "-")
	if len(name) > 50 {
		name = name[:50]
	}
	return fmt.Sprintf("%s-%d-%d", name, os.Getpid()%100000, bucketSeq.Add(1))
}

// newBucket creates a bucket named after the test.
func newBucket(tb testing.TB) string {
	tb.Helper()
	name := newBucketName(tb)
	if err := store(tb).S3.MakeBucket(context.Background(), name, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		tb.Fatalf("creating bucket %s: %v", name, err)
	}
	return name
}

// env is a driver-like environment for the shared MinIO.
func env(tb testing.TB, mode, bucket, dir string) map[string]string {
	tb.Helper()
	creds, err := store(tb).S3.GetCreds()
	if err != nil {
		tb.Fatal(err)
	}
	return map[string]string{
		jobv1.EnvMode:                  mode,
		jobv1.EnvRunKind:               "BackupJob",
		jobv1.EnvRunName:               "nightly",
		jobv1.EnvRunNamespace:          "tenant-a",
		jobv1.EnvRunUID:                "1a2b3c4d-5e6f-4a5b-8c9d-0e1f2a3b4c5d",
		jobv1.EnvApplicationAPIGroup:   "apps.example.com",
		jobv1.EnvApplicationKind:       "Database",
		jobv1.EnvApplicationName:       "orders",
		jobv1.ParamEnvName("endpoint"): "http://" + store(tb).S3Endpoint,
		jobv1.ParamEnvName("bucket"):   bucket,
		EnvDataDir:                     dir,
		EnvAccessKeyID:                 creds.AccessKeyID,
		EnvSecretAccessKey:             creds.SecretAccessKey,
	}
}

// restoreEnv asks to restore (or clean up) the artifact of report into dir.
func restoreEnv(tb testing.TB, mode, bucket, dir string, report *jobv1.ArtifactReport) map[string]string {
	e := env(tb, mode, bucket, dir)
	e[jobv1.EnvRunKind] = "RestoreJob"
	e[jobv1.EnvBackupName] = "nightly-backup"
	e[jobv1.EnvArtifactURI] = report.URI
	e[jobv1.EnvArtifactChecksum] = report.Checksum
	e[jobv1.EnvArtifactSizeBytes] = fmt.Sprint(report.SizeBytes)
	return e
}

// result is what a run of the agent left.
type result struct {
	code                    int
	stdout, stderr, termLog string
}

// run runs Main as the binary would, with env as the whole environment and a termination log in
// a temporary directory.
func run(tb testing.TB, env map[string]string, args ...string) result {
	tb.Helper()
	logPath := filepath.Join(tb.TempDir(), "termination-log")
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), append([]string{"--termination-log=" + logPath}, args...),
		func(k string) string { return env[k] }, &stdout, &stderr)
	b, err := os.ReadFile(logPath)
	if err != nil && !os.IsNotExist(err) {
		tb.Fatal(err)
	}
	return result{code: code, stdout: stdout.String(), stderr: stderr.String(), termLog: string(b)}
}

// backup runs a backup of dir that must succeed, and returns its report.
func backup(tb testing.TB, e map[string]string) *jobv1.ArtifactReport {
	tb.Helper()
	r := run(tb, e)
	if r.code != 0 {
		tb.Fatalf("backup exited %d: %s", r.code, r.stderr)
	}
	report, err := jobv1.ParseArtifactReport(r.termLog)
	if err != nil {
		tb.Fatalf("the termination log holds no valid report: %v\n%s", err, r.termLog)
	}
	if strings.TrimSpace(r.stdout) != r.termLog {
		tb.Fatalf("stdout %q differs from the termination log %q", r.stdout, r.termLog)
	}
	return report
}

// objectDigest reads an object whole and returns its size and "sha256:<hex>".
func objectDigest(tb testing.TB, bucket, key string) (int64, string) {
	tb.Helper()
	obj, err := store(tb).S3.GetObject(context.Background(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	defer obj.Close()
	h := sha256.New()
	n, err := io.Copy(h, obj)
	if err != nil {
		tb.Fatal(err)
	}
	return n, "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// snapshot describes every entry below dir: type, mode, owner, size, content hash, link target
// and, but for links, modification time.
func snapshot(tb testing.TB, dir string) map[string]string {
	tb.Helper()
	entries := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("%v owner=%s", fi.Mode(), owner(fi))
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" size=%d sha256=%x mtime=%d", len(b), sha256.Sum256(b), fi.ModTime().Unix())
		case fi.IsDir():
			desc += fmt.Sprintf(" mtime=%d", fi.ModTime().Unix())
		}
		entries[filepath.ToSlash(rel)] = desc
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return entries
}

// assertSameTree fails the test with the differences between two snapshots.
func assertSameTree(tb testing.TB, want, got map[string]string) {
	tb.Helper()
	var diffs []string
	for k, w := range want {
		if g, ok := got[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("missing %s (%s)", k, w))
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("%s: got %s, want %s", k, g, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("unexpected %s (%s)", k, g))
		}
	}
	if len(diffs) > 0 {
		tb.Fatalf("trees differ:\n%s", strings.Join(diffs, "\n"))
	}
}

// assertNoStaging fails the test if a restore left its staging directory in dir.
func assertNoStaging(tb testing.TB, dir string) {
	tb.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), stagingPrefix) {
			tb.Fatalf("the staging directory %s was left in %s", e.Name(), dir)
		}
	}
}

func owner(fi fs.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "?"
	}
	return fmt.Sprintf("%d:%d", st.Uid, st.Gid)
}
