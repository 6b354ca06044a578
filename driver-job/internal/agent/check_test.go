package agent

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// checkAgent is an agent on the shared MinIO, logging to log.
func checkAgent(t *testing.T, secret string, log *bytes.Buffer) *Agent {
	t.Helper()
	e := env(t, "", "", "")
	if secret == "" {
		secret = e[EnvSecretAccessKey]
	}
	client, err := NewClient(e[jobv1.ParamEnvName("endpoint")], "", e[EnvAccessKeyID], secret)
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{S3: client}
	if log != nil {
		a.Log = log
	}
	return a
}

// checkEnv asks the agent, as the driver's check Job does, to check the artifact at uri that the
// backup stored with size bytes. A check needs no checksum and no directory.
func checkEnv(t *testing.T, uri string, size int64) map[string]string {
	t.Helper()
	e := env(t, jobv1.ModeCheck, "", "")
	delete(e, EnvDataDir)
	delete(e, jobv1.ParamEnvName("bucket"))
	e[jobv1.EnvRunKind] = "Backup"
	e[jobv1.EnvBackupName] = "nightly"
	e[jobv1.EnvArtifactURI] = uri
	e[jobv1.EnvArtifactSizeBytes] = fmt.Sprint(size)
	return e
}

// An object that is there is reported with its size, whatever size the backup stored: the driver
// compares; the agent only logs a difference. An unknown stored size (-1) is not compared.
func TestCheckFindsTheObject(t *testing.T) {
	bucket := newBucket(t)
	data := bytes.Repeat([]byte("coffer"), 1000)
	report := upload(t, bucket, "tenant-a/nightly.tar", data)
	_, key := keyOf(t, report)

	for _, tc := range []struct {
		stored int64
		log    string
	}{
		{stored: 6000, log: report.URI + " exists (6000 bytes)"},
		{stored: -1, log: report.URI + " exists (6000 bytes)"},
		{stored: 4096, log: report.URI + " exists with 6000 bytes, but the backup stored 4096"},
	} {
		var log bytes.Buffer
		got, err := checkAgent(t, "", &log).Check(context.Background(), bucket, key, tc.stored)
		if err != nil {
			t.Fatalf("stored %d: %v", tc.stored, err)
		}
		if *got != (jobv1.CheckReport{Exists: true, SizeBytes: 6000}) {
			t.Errorf("stored %d: report %+v, want exists with 6000 bytes", tc.stored, *got)
		}
		if !strings.Contains(log.String(), tc.log) {
			t.Errorf("stored %d: log %q lacks %q", tc.stored, log.String(), tc.log)
		}
	}
}

// A key that is not in an existing bucket is reported missing: the agent could tell.
func TestCheckReportsAMissingKey(t *testing.T) {
	bucket := newBucket(t)
	upload(t, bucket, "tenant-a/other.tar", []byte("another backup"))
	var log bytes.Buffer
	got, err := checkAgent(t, "", &log).Check(context.Background(), bucket, "tenant-a/nightly.tar", 4096)
	if err != nil {
		t.Fatal(err)
	}
	if *got != (jobv1.CheckReport{Exists: false, SizeBytes: 0}) {
		t.Errorf("report %+v, want exists=false", *got)
	}
	if want := ArtifactURI(bucket, "tenant-a/nightly.tar") + " does not exist"; !strings.Contains(log.String(), want) {
		t.Errorf("log %q lacks %q", log.String(), want)
	}
}

// A missing bucket, or a store that denies access, is no answer about the artifact: an error, never
// a report that it is missing (a wrong endpoint or bucket would mark every artifact missing).
func TestCheckCannotTell(t *testing.T) {
	bucket := newBucket(t)
	report := upload(t, bucket, "tenant-a/nightly.tar", []byte("a backup"))
	_, key := keyOf(t, report)

	gone := fmt.Sprintf("no-such-bucket-%d", os.Getpid())
	got, err := checkAgent(t, "", nil).Check(context.Background(), gone, key, 8)
	if err == nil || got != nil {
		t.Fatalf("check in a missing bucket: %+v, %v; want an error", got, err)
	}
	if !strings.Contains(err.Error(), gone) || !strings.Contains(err.Error(), "bucket does not exist") {
		t.Errorf("error %q does not say that bucket %s does not exist", err, gone)
	}

	got, err = checkAgent(t, "not-the-secret", nil).Check(context.Background(), bucket, key, 8)
	if err == nil || got != nil {
		t.Fatalf("check with a wrong secret: %+v, %v; want an error", got, err)
	}
	if want := "looking up " + report.URI; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q lacks %q", err, want)
	}
	if code := minio.ToErrorResponse(err).Code; code == minio.NoSuchKey {
		t.Errorf("a denied lookup passes for a missing key: %v", err)
	}
}

// The check mode end to end, through Main as the binary runs it: a report the driver can parse in
// the termination log (and on stdout) when the agent could tell, exit code 1 and a message the
// driver cannot take for a report when it could not.
func TestCheckMode(t *testing.T) {
	bucket := newBucket(t)
	data := []byte("a backup of 26 bytes, here")
	report := upload(t, bucket, "tenant-a/nightly.tar", data)
	_, key := keyOf(t, report)

	for _, tc := range []struct {
		name string
		uri  string
		want jobv1.CheckReport
	}{
		{name: "present", uri: report.URI, want: jobv1.CheckReport{Exists: true, SizeBytes: int64(len(data))}},
		{name: "missing", uri: ArtifactURI(bucket, key+".gone"), want: jobv1.CheckReport{Exists: false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, checkEnv(t, tc.uri, int64(len(data))))
			if r.code != 0 {
				t.Fatalf("check exited %d: %s", r.code, r.stderr)
			}
			got, err := jobv1.ParseCheckReport(r.termLog)
			if err != nil {
				t.Fatalf("the termination log %q holds no check report: %v", r.termLog, err)
			}
			if *got != tc.want {
				t.Errorf("report %+v, want %+v", *got, tc.want)
			}
			if strings.TrimSpace(r.stdout) != r.termLog {
				t.Errorf("stdout %q differs from the termination log %q", r.stdout, r.termLog)
			}
		})
	}

	t.Run("missing bucket", func(t *testing.T) {
		gone := ArtifactURI(fmt.Sprintf("no-such-bucket-%d", os.Getpid()), key)
		r := run(t, checkEnv(t, gone, int64(len(data))))
		if r.code != 1 {
			t.Fatalf("check in a missing bucket exited %d, want 1: %s", r.code, r.stderr)
		}
		if !strings.HasPrefix(r.termLog, "check failed: ") || !strings.Contains(r.termLog, "bucket does not exist") || !strings.Contains(r.stderr, r.termLog) {
			t.Errorf("termination log %q, stderr %q; want the failure in both", r.termLog, r.stderr)
		}
		if _, err := jobv1.ParseCheckReport(r.termLog); err == nil {
			t.Errorf("the failure %q parses as a check report", r.termLog)
		}
		if r.stdout != "" {
			t.Errorf("stdout %q, want nothing", r.stdout)
		}
	})

	t.Run("no artifact URI", func(t *testing.T) {
		e := checkEnv(t, report.URI, 1)
		delete(e, jobv1.EnvArtifactURI)
		r := run(t, e)
		if r.code != 2 || !strings.HasPrefix(r.termLog, "usage: ") {
			t.Errorf("check without an artifact URI exited %d with %q, want 2 and a usage error", r.code, r.termLog)
		}
	})

	t.Run("termination log not writable", func(t *testing.T) {
		cfg, err := ParseConfig([]string{"--termination-log=" + filepath.Join(t.TempDir(), "missing-dir", "log")},
			func(k string) string { return checkEnv(t, report.URI, int64(len(data)))[k] })
		if err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		if err := Run(context.Background(), cfg, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), "termination log") {
			t.Errorf("a check that cannot write its report: %v, want an error", err)
		}
		if stdout.Len() != 0 {
			t.Errorf("stdout %q, want nothing", stdout.String())
		}
	})
}

// bodylessStore is an S3 endpoint that answers every HEAD request with a bare status, as some
// stores do: a missing bucket then looks, to a HEAD of the object, like a missing key. bucket is
// the status of a HEAD of the bucket.
func bodylessStore(t *testing.T, bucket int) *Agent {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodHead {
			t.Errorf("unexpected %s %s", r.Method, r.URL)
			w.WriteHeader(http.StatusNotImplemented)
			return
		}
		if strings.Trim(r.URL.Path, "/") == "coffer" {
			w.WriteHeader(bucket)
			return
		}
		w.WriteHeader(http.StatusNotFound)
	}))
	t.Cleanup(srv.Close)
	client, err := NewClient(srv.URL, "us-east-1", "id", "secret")
	if err != nil {
		t.Fatal(err)
	}
	return &Agent{S3: client}
}

// When the HEAD of the object cannot tell a missing bucket from a missing key, the agent asks
// about the bucket: only a bucket known to exist makes the artifact missing.
func TestCheckTellsAMissingBucketFromAMissingKey(t *testing.T) {
	uri := ArtifactURI("coffer", "tenant-a/nightly.tar")
	got, err := bodylessStore(t, http.StatusOK).Check(context.Background(), "coffer", "tenant-a/nightly.tar", 8)
	if err != nil || got == nil || *got != (jobv1.CheckReport{Exists: false}) {
		t.Errorf("a missing key in an existing bucket: %+v, %v; want exists=false", got, err)
	}

	got, err = bodylessStore(t, http.StatusNotFound).Check(context.Background(), "coffer", "tenant-a/nightly.tar", 8)
	if err == nil || got != nil {
		t.Fatalf("a missing bucket: %+v, %v; want an error", got, err)
	}
	if want := "bucket coffer does not exist at this endpoint; check the endpoint and the bucket before taking " + uri + " for gone"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}

	got, err = bodylessStore(t, http.StatusForbidden).Check(context.Background(), "coffer", "tenant-a/nightly.tar", 8)
	if err == nil || got != nil {
		t.Fatalf("a bucket that cannot be looked up: %+v, %v; want an error", got, err)
	}
	if want := uri + " was not found, and whether bucket coffer exists could not be told"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q lacks %q", err, want)
	}
}
