package v1alpha1

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// MaxS3KeyBytes bounds an object key, as S3 does.
const MaxS3KeyBytes = 1024

var bucketPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// ParseS3URI splits an artifact URI, s3://bucket/key, into its bucket and key. It is the one
// parser of artifact URIs in the Job driver and its agent, and it is strict so that a URI has one
// reading only, the one the object store will act on: the scheme is "s3" in lower case; the bucket
// is an S3 bucket name (3-63 lower-case letters, digits, '.' and '-'; so no user, port or
// upper case); the key is taken literally, and has no empty, "." or ".." segment, no leading or
// trailing '/', no '%' (no percent-encoding: a key is never decoded), no '\', '?', '#' or
// control character, and at most MaxS3KeyBytes bytes of UTF-8. Whatever it refuses, no agent of
// Coffer writes.
func ParseS3URI(uri string) (bucket, key string, err error) {
	rest, ok := strings.CutPrefix(uri, "s3://")
	if !ok {
		return "", "", fmt.Errorf("artifact URI %q is not s3://bucket/key", uri)
	}
	bucket, key, ok = strings.Cut(rest, "/")
	switch {
	case !ok || key == "":
		return "", "", fmt.Errorf("artifact URI %q has no key: it is not s3://bucket/key", uri)
	case !bucketPattern.MatchString(bucket) || strings.Contains(bucket, ".."):
		return "", "", fmt.Errorf("artifact URI %q: %q is not a bucket name (3-63 lower-case letters, digits, '.' and '-')", uri, bucket)
	case len(key) > MaxS3KeyBytes:
		return "", "", fmt.Errorf("artifact URI %q: the key is %d bytes, more than %d", uri, len(key), MaxS3KeyBytes)
	case !utf8.ValidString(key):
		return "", "", fmt.Errorf("artifact URI %q: the key is not UTF-8", uri)
	}
	for _, r := range key {
		switch {
		case r < 0x20 || r == 0x7f:
			return "", "", fmt.Errorf("artifact URI %q: the key holds a control character", uri)
		case r == '%' || r == '\\' || r == '?' || r == '#':
			return "", "", fmt.Errorf("artifact URI %q: the key holds %q (keys are taken literally: no percent-encoding, query or fragment)", uri, r)
		}
	}
	for _, seg := range strings.Split(key, "/") {
		switch seg {
		case "":
			return "", "", fmt.Errorf("artifact URI %q: the key has an empty segment (a leading, trailing or double '/')", uri)
		case ".", "..":
			return "", "", fmt.Errorf("artifact URI %q: the key has a %q segment", uri, seg)
		}
	}
	return bucket, key, nil
}

// S3URI is the inverse of ParseS3URI.
func S3URI(bucket, key string) string { return "s3://" + bucket + "/" + key }

// FirstSegment is the key's first segment (before its first '/'): the namespace whose artifact it
// is, in the layout of Coffer's buckets.
func FirstSegment(key string) string {
	seg, _, _ := strings.Cut(key, "/")
	return seg
}
