package agent

import (
	"reflect"
	"strings"
	"testing"
	"time"

	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// driverEnv is what the Job driver sets for a backup, with made-up S3 settings.
func driverEnv() map[string]string {
	return map[string]string{
		jobv1.EnvMode:                  jobv1.ModeBackup,
		jobv1.EnvRunName:               "nightly",
		jobv1.EnvRunNamespace:          "tenant-a",
		jobv1.EnvRunUID:                "1a2b3c4d-5e6f",
		jobv1.ParamEnvName("endpoint"): "http://127.0.0.1:1",
		jobv1.ParamEnvName("bucket"):   "env-bucket",
		EnvAccessKeyID:                 "id",
		EnvSecretAccessKey:             "secret",
	}
}

func TestParseConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want Config
	}{{
		name: "environment only",
		want: Config{Mode: "backup", Dir: DefaultDir, Endpoint: "http://127.0.0.1:1", Bucket: "env-bucket", Prefix: "tenant-a", TerminationLog: DefaultTerminationLog},
	}, {
		name: "flags win",
		args: []string{"--mode=backup", "--dir=/flag", "--endpoint=https://s3.example.com", "--bucket=flag-bucket", "--prefix=team/app", "--region=eu-west-1", "--termination-log="},
		env:  map[string]string{EnvDataDir: "/env", jobv1.EnvMode: "cleanup", jobv1.ParamEnvName("prefix"): "env-prefix", jobv1.ParamEnvName("region"): "us-east-1"},
		want: Config{Mode: "backup", Dir: "/flag", Endpoint: "https://s3.example.com", Bucket: "flag-bucket", Prefix: "team/app", Region: "eu-west-1"},
	}, {
		name: "environment fallbacks",
		env:  map[string]string{EnvDataDir: "/env", jobv1.ParamEnvName("prefix"): "env-prefix", jobv1.ParamEnvName("region"): "us-east-1"},
		want: Config{Mode: "backup", Dir: "/env", Endpoint: "http://127.0.0.1:1", Bucket: "env-bucket", Prefix: "env-prefix", Region: "us-east-1", TerminationLog: DefaultTerminationLog},
	}, {
		name: "an empty prefix flag means the top of the bucket",
		args: []string{"--prefix="},
		want: Config{Mode: "backup", Dir: DefaultDir, Endpoint: "http://127.0.0.1:1", Bucket: "env-bucket", TerminationLog: DefaultTerminationLog},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			env := driverEnv()
			for k, v := range tc.env {
				env[k] = v
			}
			c, err := ParseConfig(tc.args, func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			got := Config{Mode: c.Mode, Dir: c.Dir, Endpoint: c.Endpoint, Bucket: c.Bucket, Prefix: c.Prefix, Region: c.Region, TerminationLog: c.TerminationLog}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			if c.RetainFor != 0 || c.LockMode != "COMPLIANCE" {
				t.Errorf("no lock asked for, and yet retain-for %s, mode %q", c.RetainFor, c.LockMode)
			}
			if c.AccessKeyID != "id" || c.SecretAccessKey != "secret" || c.RunName != "nightly" || c.RunUID != "1a2b3c4d-5e6f" || c.ArtifactSizeBytes != -1 {
				t.Errorf("credentials, run or size not read: %+v", c)
			}
		})
	}
}

// TestUsageErrors checks that configuration errors exit 2 with a message on stderr and in the
// termination log, before anything is contacted.
func TestUsageErrors(t *testing.T) {
	restore := func(change map[string]string) map[string]string {
		e := driverEnv()
		e[jobv1.EnvMode] = jobv1.ModeRestore
		e[jobv1.EnvArtifactURI] = "s3://bucket/tenant-a/nightly-1a2b3c4d.tar"
		e[jobv1.EnvArtifactChecksum] = "sha256:" + strings.Repeat("ab", 32)
		for k, v := range change {
			e[k] = v
		}
		return e
	}
	backup := func(change map[string]string) map[string]string {
		e := driverEnv()
		for k, v := range change {
			e[k] = v
		}
		return e
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no mode", backup(map[string]string{jobv1.EnvMode: ""}), nil, "no mode"},
		{"unknown mode", backup(nil), []string{"--mode=archive"}, `mode "archive" is not backup, restore, verify, cleanup, check or maintain`},
		{"no endpoint", backup(map[string]string{jobv1.ParamEnvName("endpoint"): ""}), nil, "no S3 endpoint"},
		{"endpoint scheme", backup(nil), []string{"--endpoint=ftp://host"}, "the scheme must be http or https"},
		{"endpoint path", backup(nil), []string{"--endpoint=https://host/bucket"}, "must be scheme://host[:port] only"},
		{"no credentials", backup(map[string]string{EnvSecretAccessKey: ""}), nil, "no S3 credentials"},
		{"no bucket", backup(map[string]string{jobv1.ParamEnvName("bucket"): ""}), nil, "no bucket"},
		{"no run UID", backup(map[string]string{jobv1.EnvRunUID: ""}), nil, "COFFER_RUN_UID are required"},
		{"unknown flag", backup(nil), []string{"--frobnicate"}, "flag provided but not defined: -frobnicate"},
		{"argument", backup(nil), []string{"/data"}, "unexpected arguments"},
		{"bad retention", backup(map[string]string{jobv1.EnvRetainFor: "a month"}), nil, `--retain-for "a month" is not a positive duration`},
		{"negative retention", backup(nil), []string{"--retain-for=-1h"}, "is not a positive duration"},
		{"bad lock mode", backup(map[string]string{jobv1.EnvRetainFor: "24h", jobv1.EnvObjectLockMode: "LEGAL"}), nil, `--object-lock-mode "LEGAL" is not COMPLIANCE or GOVERNANCE`},
		{"no checksum", restore(map[string]string{jobv1.EnvArtifactChecksum: ""}), nil, "COFFER_ARTIFACT_CHECKSUM"},
		{"bad checksum", restore(map[string]string{jobv1.EnvArtifactChecksum: "md5:abc"}), nil, "is not sha256:"},
		{"bad size", restore(map[string]string{jobv1.EnvArtifactSizeBytes: "-1"}), nil, "is not a byte count"},
		{"no artifact", restore(map[string]string{jobv1.EnvArtifactURI: ""}), nil, "COFFER_ARTIFACT_URI is empty"},
		{"artifact not s3", restore(map[string]string{jobv1.EnvArtifactURI: "https://bucket/key"}), nil, "is not s3://bucket/key"},
		{"artifact without key", backup(map[string]string{jobv1.EnvMode: "cleanup", jobv1.EnvArtifactURI: "s3://bucket/"}), nil, "is not s3://bucket/key"},
		{"artifact climbing out", restore(map[string]string{jobv1.EnvArtifactURI: "s3://bucket/tenant-a/../tenant-b/x.tar"}), nil, `has a ".." segment`},
		{"artifact percent-encoded", restore(map[string]string{jobv1.EnvArtifactURI: "s3://bucket/tenant-a%2F..%2Ftenant-b/x.tar"}), nil, "no percent-encoding"},
		{"prefix climbing out", backup(nil), []string{"--prefix=tenant-a/../tenant-b"}, "make no usable artifact URI"},
		{"bucket with a user", backup(map[string]string{jobv1.ParamEnvName("bucket"): "tenant-b-private@coffer"}), nil, "is not a bucket name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.env, tc.args...)
			if r.code != 2 {
				t.Fatalf("exit code %d, want 2; stderr %s", r.code, r.stderr)
			}
			if !strings.HasPrefix(r.termLog, "usage: ") || !strings.Contains(r.termLog, tc.want) {
				t.Errorf("termination log %q, want a usage error with %q", r.termLog, tc.want)
			}
			if strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, r.termLog) {
				t.Errorf("stderr %q, want the termination log's message on one line", r.stderr)
			}
		})
	}
}

func TestParseEndpoint(t *testing.T) {
	for _, tc := range []struct {
		endpoint, host string
		secure         bool
	}{
		{"http://10.1.2.1:9000", "10.1.2.1:9000", false},
		{"https://s3.example.com", "s3.example.com", true},
		{"https://s3.example.com/", "s3.example.com", true},
		{"s3.example.com:9000", "s3.example.com:9000", true},
		{"10.1.2.1:9000", "10.1.2.1:9000", true},
		{"[fd00::1]:9000", "[fd00::1]:9000", true},
	} {
		host, secure, err := ParseEndpoint(tc.endpoint)
		if err != nil || host != tc.host || secure != tc.secure {
			t.Errorf("ParseEndpoint(%q) = %q, %v, %v; want %q, %v", tc.endpoint, host, secure, err, tc.host, tc.secure)
		}
	}
}

func TestObjectKey(t *testing.T) {
	for _, tc := range []struct{ prefix, name, uid, want string }{
		{"tenant-a", "nightly", "1a2b3c4d-5e6f-4a5b-8c9d-0e1f2a3b4c5d", "tenant-a/nightly-1a2b3c4d.tar"},
		{"/tenant-a//orders/", "nightly", "1a2b3c4d-5e6f", "tenant-a/orders/nightly-1a2b3c4d.tar"},
		{"", "nightly", "1a2b", "nightly-1a2b.tar"},
		{"///", "nightly", "1a2b3c4d", "nightly-1a2b3c4d.tar"},
	} {
		if got := ObjectKey(tc.prefix, tc.name, tc.uid); got != tc.want {
			t.Errorf("ObjectKey(%q, %q, %q) = %q, want %q", tc.prefix, tc.name, tc.uid, got, tc.want)
		}
	}
	if uri := ArtifactURI("b", "tenant-a/nightly-1a2b3c4d.tar"); uri != "s3://b/tenant-a/nightly-1a2b3c4d.tar" {
		t.Errorf("ArtifactURI = %q", uri)
	}
}

func TestEntryName(t *testing.T) {
	for raw, want := range map[string]string{"a": "a", "./a/b/": "a/b", "./": ".", "a//b": "a/b", "a/./b": "a/b"} {
		if got, err := entryName(raw); err != nil || got != want {
			t.Errorf("entryName(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
	for _, raw := range []string{"", "/etc/passwd", "..", "../x", "a/../../x", "a/..", "a/../b"} {
		if got, err := entryName(raw); err == nil {
			t.Errorf("entryName(%q) = %q, want an error", raw, got)
		}
	}
}

// TestParseConfigObjectLock: the driver's lock variables reach the agent's configuration.
func TestParseConfigObjectLock(t *testing.T) {
	env := driverEnv()
	env[jobv1.EnvRetainFor], env[jobv1.EnvObjectLockMode] = "720h0m0s", "GOVERNANCE"
	c, err := ParseConfig(nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.RetainFor != 720*time.Hour || c.LockMode != "GOVERNANCE" {
		t.Errorf("retain-for %s, mode %q; want 720h, GOVERNANCE", c.RetainFor, c.LockMode)
	}
}
