package v1alpha1

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxS3KeyBytes bounds an object key, as S3 does.
const MaxS3KeyBytes = 1024

var (
	s3BucketPattern   = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)
	s3BucketIPPattern = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$`)
)

// ParseS3URI splits an artifact URI, s3://bucket/key, into its bucket and key. It is the one
// parser of s3:// URIs in Coffer (drivers, agents and the verifier all read artifact URIs with
// it), and it is strict so that a URI has one reading only, the one the object store will act on:
//
//   - the URI starts with "s3://", the scheme in lower case, with nothing before it;
//   - the bucket is an S3 bucket name: 3-63 lower-case letters, digits, '.' and '-', starting and
//     ending with a letter or digit, with no "..", ".-" or "-." and not formatted as an IPv4
//     address (so no user, password, port, query, upper case or percent-encoding either);
//   - the key is not empty and is taken literally: it has no empty, "." or ".." segment (so no
//     leading, trailing or double '/'), no '%' (no percent-encoding: a key is never decoded), no
//     '\', '?' or '#' (no query or fragment), no control character, and is at most MaxS3KeyBytes
//     bytes of UTF-8.
//
// Whatever it refuses, no agent of Coffer writes, and nothing of Coffer reads or deletes.
func ParseS3URI(uri string) (bucket, key string, err error) {
	rest, ok := strings.CutPrefix(uri, "s3://")
	if !ok {
		return "", "", fmt.Errorf("artifact URI %q is not s3://bucket/key", uri)
	}
	bucket, key, ok = strings.Cut(rest, "/")
	switch {
	case !ok || key == "":
		return "", "", fmt.Errorf("artifact URI %q has no key: it is not s3://bucket/key", uri)
	case !isS3BucketName(bucket):
		return "", "", fmt.Errorf("artifact URI %q: %q is not a bucket name (3-63 lower-case letters, digits, '.' and '-', starting and ending with a letter or digit, no \"..\", \".-\" or \"-.\", not an IP address)", uri, bucket)
	case len(key) > MaxS3KeyBytes:
		return "", "", fmt.Errorf("artifact URI %q: the key is %d bytes, more than %d", uri, len(key), MaxS3KeyBytes)
	case !utf8.ValidString(key):
		return "", "", fmt.Errorf("artifact URI %q: the key is not UTF-8", uri)
	}
	for _, r := range key {
		switch {
		case unicode.IsControl(r):
			return "", "", fmt.Errorf("artifact URI %q: the key holds a control character", uri)
		case r == '%' || r == '\\' || r == '?' || r == '#':
			return "", "", fmt.Errorf("artifact URI %q: the key holds %q (keys are taken literally: no percent-encoding, query or fragment)", uri, r)
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch seg {
		case "":
			return "", "", fmt.Errorf("artifact URI %q: the key has an empty segment (a leading, trailing or double '/')", uri)
		case ".", "..":
			return "", "", fmt.Errorf("artifact URI %q: the key has a %q segment", uri, seg)
		}
	}
	return bucket, key, nil
}

// isS3BucketName reports whether name is a bucket name both S3 and the S3 clients of Coffer
// accept (minio-go refuses "..", ".-", "-." and IPv4-like names before sending a request).
func isS3BucketName(name string) bool {
	return s3BucketPattern.MatchString(name) &&
		!strings.Contains(name, "..") && !strings.Contains(name, ".-") && !strings.Contains(name, "-.") &&
		!s3BucketIPPattern.MatchString(name)
}

// S3URI is the inverse of ParseS3URI.
func S3URI(bucket, key string) string { return "s3://" + bucket + "/" + key }
