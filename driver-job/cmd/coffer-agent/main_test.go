package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

// agentRun is how a run of the binary ended.
type agentRun struct {
	code            int
	stdout, termLog string
}

// TestBinaryEnvContract builds coffer-agent as the image does (CGO_ENABLED=0) and runs it as the Job
// driver would: configuration from environment variables only, the termination log the one flag.
// A backup, a restore into an empty directory, a failed restore, a usage error and a cleanup go
// through a real MinIO.
func TestBinaryEnvContract(t *testing.T) {
	ctx := context.Background()
	s3, err := velerostack.StartMinIO(ctx, t.TempDir())
	if err != nil {
		t.Fatalf("starting MinIO: %v", err)
	}
	t.Cleanup(s3.Stop)
	bin := filepath.Join(t.TempDir(), "coffer-agent")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	const bucket = "backups"
	if err := s3.S3.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		t.Fatal(err)
	}
	creds, err := s3.S3.GetCreds()
	if err != nil {
		t.Fatal(err)
	}

	// run runs the binary with exactly these variables as its environment.
	run := func(t *testing.T, vars map[string]string) agentRun {
		t.Helper()
		logPath := filepath.Join(t.TempDir(), "termination-log")
		cmd := exec.Command(bin, "--termination-log="+logPath)
		cmd.Env = []string{}
		for k, v := range vars {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		t.Logf("coffer-agent %s exited %d:\n%s", vars[jobv1.EnvMode], cmd.ProcessState.ExitCode(), stderr.String())
		b, err := os.ReadFile(logPath)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return agentRun{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), termLog: string(b)}
	}
	vars := func(mode, dir string) map[string]string {
		return map[string]string{
			jobv1.EnvMode:                  mode,
			jobv1.EnvRunKind:               "BackupJob",
			jobv1.EnvRunName:               "weekly",
			jobv1.EnvRunNamespace:          "tenant-b",
			jobv1.EnvRunUID:                "c0ffee00-1111-4222-8333-444455556666",
			jobv1.EnvApplicationAPIGroup:   "apps.example.com",
			jobv1.EnvApplicationKind:       "Database",
			jobv1.EnvApplicationName:       "ledger",
			jobv1.ParamEnvName("endpoint"): "http://" + s3.S3Endpoint,
			jobv1.ParamEnvName("bucket"):   bucket,
			"COFFER_DATA_DIR":              dir,
			"AWS_ACCESS_KEY_ID":            creds.AccessKeyID,
			"AWS_SECRET_ACCESS_KEY":        creds.SecretAccessKey,
		}
	}

	src := t.TempDir()
	files := map[string]string{"db/wal/000001": strings.Repeat("wal record\n", 1000), "db/PG_VERSION": "17\n", "db/empty": ""}
	for name, content := range files {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("wal/000001", filepath.Join(src, "db", "latest")); err != nil {
		t.Fatal(err)
	}

	r := run(t, vars(jobv1.ModeBackup, src))
	if r.code != 0 {
		t.Fatalf("backup exited %d: %s", r.code, r.termLog)
	}
	report, err := jobv1.ParseArtifactReport(r.termLog)
	if err != nil {
		t.Fatalf("termination log %q: %v", r.termLog, err)
	}
	if strings.TrimSpace(r.stdout) != r.termLog {
		t.Errorf("stdout %q differs from the termination log %q", r.stdout, r.termLog)
	}
	// Without --prefix, the run's namespace prefixes the key.
	const key = "tenant-b/weekly-c0ffee00.tar"
	if want := "s3://" + bucket + "/" + key; report.URI != want {
		t.Errorf("uri %s, want %s", report.URI, want)
	}
	info, err := s3.S3.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
	if err != nil || info.Size != report.SizeBytes {
		t.Fatalf("the object: %v, %d bytes; the report says %d", err, info.Size, report.SizeBytes)
	}

	restoreVars := func(dir string, checksum string) map[string]string {
		v := vars(jobv1.ModeRestore, dir)
		v[jobv1.EnvRunKind] = "RestoreJob"
		v[jobv1.EnvBackupName] = "weekly-backup"
		v[jobv1.EnvArtifactURI] = report.URI
		v[jobv1.EnvArtifactChecksum] = checksum
		v[jobv1.EnvArtifactSizeBytes] = fmt.Sprint(report.SizeBytes)
		return v
	}
	dst := t.TempDir()
	if r := run(t, restoreVars(dst, report.Checksum)); r.code != 0 {
		t.Fatalf("restore exited %d: %s", r.code, r.termLog)
	}
	for name, content := range files {
		b, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil || string(b) != content {
			t.Errorf("%s restored as %d bytes (%v), want %d", name, len(b), err, len(content))
		}
		if fi, err := os.Stat(filepath.Join(dst, name)); err != nil {
			t.Error(err)
		} else if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", name, fi.Mode())
		}
	}
	if target, err := os.Readlink(filepath.Join(dst, "db", "latest")); err != nil || target != "wal/000001" {
		t.Errorf("db/latest links to %q (%v)", target, err)
	}

	wrong := "sha256:" + strings.Repeat("0", 64)
	other := t.TempDir()
	r = run(t, restoreVars(other, wrong))
	if r.code != 1 || !strings.Contains(r.termLog, "expected "+wrong) {
		t.Errorf("restore with a wrong checksum exited %d with %q, want 1 and a checksum error", r.code, r.termLog)
	}
	if entries, _ := os.ReadDir(other); len(entries) != 0 {
		t.Errorf("a refused restore wrote %v", entries)
	}

	noMode := vars("", src)
	delete(noMode, jobv1.EnvMode)
	if r := run(t, noMode); r.code != 2 || !strings.HasPrefix(r.termLog, "usage: no mode") {
		t.Errorf("a run without mode exited %d with %q, want 2 and a usage error", r.code, r.termLog)
	}

	cleanup := vars(jobv1.ModeCleanup, "")
	cleanup[jobv1.EnvRunKind] = "Backup"
	cleanup[jobv1.EnvArtifactURI] = report.URI
	if r := run(t, cleanup); r.code != 0 {
		t.Fatalf("cleanup exited %d: %s", r.code, r.termLog)
	}
	if _, err := s3.S3.StatObject(ctx, bucket, key, minio.StatObjectOptions{}); minio.ToErrorResponse(err).Code != minio.NoSuchKey {
		t.Errorf("after cleanup the object stats %v, want NoSuchKey", err)
	}
}
