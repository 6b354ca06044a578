package v1alpha1

import "strings"

// Artifact URIs, s3://bucket/key, are read by the one parser of Coffer, backupsv1.ParseS3URI
// (and written by backupsv1.S3URI).

// FirstSegment is the key's first segment (before its first '/'): the namespace whose artifact it
// is, in the layout of Coffer's buckets.
func FirstSegment(key string) string {
	seg, _, _ := strings.Cut(key, "/")
	return seg
}
