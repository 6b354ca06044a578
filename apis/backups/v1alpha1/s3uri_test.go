package v1alpha1

import (
	"strings"
	"testing"
)

// TestParseS3URI: the accepted forms round-trip through S3URI; every refused URI here is one a
// hostile agent, record or Backup could write to make the bucket or the key read differently by
// Coffer and by the object store.
func TestParseS3URI(t *testing.T) {
	for _, tc := range []struct{ uri, bucket, key, err string }{
		{uri: "s3://coffer/tenant-a/web/nightly-1a2b3c4d.tar", bucket: "coffer", key: "tenant-a/web/nightly-1a2b3c4d.tar"},
		{uri: "s3://my.bucket-1/tenant-a/x.tar.record.json", bucket: "my.bucket-1", key: "tenant-a/x.tar.record.json"},
		{uri: "s3://coffer/a", bucket: "coffer", key: "a"},
		{uri: "s3://abc/velero/backups/nightly/nightly.tar.gz", bucket: "abc", key: "velero/backups/nightly/nightly.tar.gz"},
		{uri: "s3://" + strings.Repeat("b", 63) + "/k", bucket: strings.Repeat("b", 63), key: "k"},
		{uri: "s3://1.2.3.bucket/k", bucket: "1.2.3.bucket", key: "k"},
		{uri: "s3://coffer/tenant a/ünïcödé ☃.tar", bucket: "coffer", key: "tenant a/ünïcödé ☃.tar"},
		{uri: "s3://coffer/a..b/.x/x./...", bucket: "coffer", key: "a..b/.x/x./..."},
		{uri: "s3://coffer/" + strings.Repeat("k", MaxS3KeyBytes), bucket: "coffer", key: strings.Repeat("k", MaxS3KeyBytes)},

		// Scheme: exactly "s3://", nothing before it.
		{uri: "", err: "not s3://bucket/key"},
		{uri: "S3://coffer/tenant-a/x.tar", err: "not s3://bucket/key"},
		{uri: "s3:/coffer/tenant-a/x.tar", err: "not s3://bucket/key"},
		{uri: "s3:coffer/tenant-a/x.tar", err: "not s3://bucket/key"},
		{uri: "https://coffer/tenant-a/x.tar", err: "not s3://bucket/key"},
		{uri: "s3a://coffer/tenant-a/x.tar", err: "not s3://bucket/key"},
		{uri: " s3://coffer/tenant-a/x.tar", err: "not s3://bucket/key"},
		{uri: "coffer/tenant-a/x.tar", err: "not s3://bucket/key"},
		// A key.
		{uri: "s3://", err: "has no key"},
		{uri: "s3://coffer", err: "has no key"},
		{uri: "s3://coffer/", err: "has no key"},
		// Bucket: an S3 bucket name, so no user, port, query, fragment, encoding or upper case.
		{uri: "s3:///tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://tenant-b-private@coffer/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://user:pass@coffer/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://coffer:9000/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://Coffer/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://co/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://" + strings.Repeat("b", 64) + "/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://coffer..b/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://coffer.-b/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://coffer-.b/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://-coffer/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://coffer-/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://.coffer/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://cof_fer/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://192.168.5.4/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://[::1]/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://coffer%2Ftenant-b-private/x.tar", err: "not a bucket name"},
		{uri: "s3://coffer?/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://coffer?x=1", err: "has no key"},
		{uri: "s3://coffer#/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://cöffer/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://coffer\\tenant-a/x.tar", err: "not a bucket name"},
		// Key: literal, with no empty, "." or ".." segment.
		{uri: "s3://coffer//tenant-b/x.tar", err: "empty segment"},
		{uri: "s3://coffer/tenant-a//x.tar", err: "empty segment"},
		{uri: "s3://coffer/tenant-a/", err: "empty segment"},
		{uri: "s3://coffer/tenant-a/../tenant-b/x.tar", err: `".." segment`},
		{uri: "s3://coffer/tenant-a/./x.tar", err: `"." segment`},
		{uri: "s3://coffer/..", err: `".." segment`},
		{uri: "s3://coffer/.", err: `"." segment`},
		{uri: "s3://coffer/tenant-a%2F..%2Ftenant-b/x.tar", err: "percent-encoding"},
		{uri: "s3://coffer/tenant-a/%2e%2e/tenant-b/x.tar", err: "percent-encoding"},
		{uri: "s3://coffer/tenant-a/x.tar?versionId=1", err: "percent-encoding, query or fragment"},
		{uri: "s3://coffer/tenant-a/x.tar#frag", err: "percent-encoding, query or fragment"},
		{uri: `s3://coffer/tenant-a\..\tenant-b/x.tar`, err: `'\\'`},
		{uri: "s3://coffer/tenant-a/x\n.tar", err: "control character"},
		{uri: "s3://coffer/tenant-a/x\x00.tar", err: "control character"},
		{uri: "s3://coffer/tenant-a/x\x7f.tar", err: "control character"},
		{uri: "s3://coffer/tenant-a/x\u0085.tar", err: "control character"},
		{uri: "s3://coffer/tenant-a/\xff.tar", err: "not UTF-8"},
		{uri: "s3://coffer/tenant-a/" + strings.Repeat("k", MaxS3KeyBytes), err: "more than"},
	} {
		t.Run(tc.uri, func(t *testing.T) {
			bucket, key, err := ParseS3URI(tc.uri)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseS3URI(%q) = %q, %q, %v; want an error containing %q", tc.uri, bucket, key, err, tc.err)
				}
				if bucket != "" || key != "" {
					t.Errorf("ParseS3URI(%q) refused the URI but returned %q, %q", tc.uri, bucket, key)
				}
				return
			}
			if err != nil || bucket != tc.bucket || key != tc.key {
				t.Fatalf("ParseS3URI(%q) = %q, %q, %v; want %q, %q", tc.uri, bucket, key, err, tc.bucket, tc.key)
			}
			if S3URI(bucket, key) != tc.uri {
				t.Errorf("S3URI(%q, %q) = %q, not the URI parsed", bucket, key, S3URI(bucket, key))
			}
		})
	}
}
