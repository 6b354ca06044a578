package v1alpha1

import (
	"strings"
	"testing"
)

// TestParseS3URIRefusesHostileInput: every URI here is one a hostile agent or record could write
// to make the bucket or the key read differently by the driver and by the object store.
func TestParseS3URIRefusesHostileInput(t *testing.T) {
	for _, tc := range []struct{ uri, bucket, key, err string }{
		{uri: "s3://coffer/tenant-a/web/nightly-1a2b3c4d.tar", bucket: "coffer", key: "tenant-a/web/nightly-1a2b3c4d.tar"},
		{uri: "s3://my.bucket-1/tenant-a/x.tar" + RecordSuffix, bucket: "my.bucket-1", key: "tenant-a/x.tar.record.json"},
		{uri: "s3://coffer/a", bucket: "coffer", key: "a"},

		{uri: "", err: "not s3://bucket/key"},
		{uri: "S3://coffer/tenant-a/x.tar", err: "not s3://bucket/key"},
		{uri: "s3:/coffer/tenant-a/x.tar", err: "not s3://bucket/key"},
		{uri: "https://coffer/tenant-a/x.tar", err: "not s3://bucket/key"},
		{uri: " s3://coffer/tenant-a/x.tar", err: "not s3://bucket/key"},
		{uri: "s3://coffer", err: "has no key"},
		{uri: "s3://coffer/", err: "has no key"},
		{uri: "s3:///tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://tenant-b-private@coffer/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://coffer:9000/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://Coffer/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://co/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://" + strings.Repeat("b", 64) + "/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://coffer..b/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://-coffer/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://coffer%2Ftenant-b-private/x.tar", err: "not a bucket name"},
		{uri: "s3://coffer?/tenant-a/x.tar", err: "not a bucket name"},
		{uri: "s3://coffer//tenant-b/x.tar", err: "empty segment"},
		{uri: "s3://coffer/tenant-a//x.tar", err: "empty segment"},
		{uri: "s3://coffer/tenant-a/", err: "empty segment"},
		{uri: "s3://coffer/tenant-a/../tenant-b/x.tar", err: `".." segment`},
		{uri: "s3://coffer/tenant-a/./x.tar", err: `"." segment`},
		{uri: "s3://coffer/..", err: `".." segment`},
		{uri: "s3://coffer/tenant-a%2F..%2Ftenant-b/x.tar", err: "percent-encoding"},
		{uri: "s3://coffer/tenant-a/%2e%2e/tenant-b/x.tar", err: "percent-encoding"},
		{uri: "s3://coffer/tenant-a/x.tar?versionId=1", err: "percent-encoding, query or fragment"},
		{uri: "s3://coffer/tenant-a/x.tar#frag", err: "percent-encoding, query or fragment"},
		{uri: `s3://coffer/tenant-a\..\tenant-b/x.tar`, err: `'\\'`},
		{uri: "s3://coffer/tenant-a/x\n.tar", err: "control character"},
		{uri: "s3://coffer/tenant-a/x\x00.tar", err: "control character"},
		{uri: "s3://coffer/tenant-a/\xff.tar", err: "not UTF-8"},
		{uri: "s3://coffer/tenant-a/" + strings.Repeat("k", MaxS3KeyBytes), err: "more than"},
	} {
		t.Run(tc.uri, func(t *testing.T) {
			bucket, key, err := ParseS3URI(tc.uri)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseS3URI(%q) = %q, %q, %v; want an error containing %q", tc.uri, bucket, key, err, tc.err)
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
