package driver

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/minio/minio-go/v7"

	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// listedRecord is a record a listing found: its key, its ETag, and whether its artifact is
// listed beside it.
type listedRecord struct {
	key, etag string
	artifact  bool
}

// listRecords lists bucket under prefix and returns its records, in key order. It streams the
// listing and keeps only those: a bucket holds millions of objects (artifacts, chunks) for a few
// records, and the catalog must not hold the listing whole. Memory is O(records), one slice
// entry each (two maps by key took about twice as much), plus at most one key length of keys
// (recordScan).
func listRecords(ctx context.Context, s3 *minio.Client, bucket, prefix string) ([]listedRecord, error) {
	s := &recordScan{}
	for o := range s3.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			return nil, fmt.Errorf("listing s3://%s/%s: %w", bucket, prefix, o.Err)
		}
		if err := s.add(o.Key, o.ETag); err != nil {
			return nil, fmt.Errorf("listing s3://%s/%s: %w", bucket, prefix, err)
		}
	}
	return s.records, nil
}

// listed returns the record of records (in key order) at key.
func listed(records []listedRecord, key string) (listedRecord, bool) {
	i, ok := slices.BinarySearchFunc(records, key, func(r listedRecord, key string) int { return strings.Compare(r.key, key) })
	if !ok {
		return listedRecord{}, false
	}
	return records[i], true
}

// recordScan reads a listing in key order, as S3 returns it (UTF-8 binary order). A record's
// artifact key A is a prefix of the record's key A+RecordSuffix, and every key listed between the
// two starts with A; so the keys listed so far that are prefixes of the last one (open, each a
// prefix of the next) are all it must remember to know, at each record, whether its artifact was
// listed. A listing out of order is refused rather than read wrong: a record whose artifact was
// missed would be taken for one whose artifact is gone.
type recordScan struct {
	records []listedRecord
	open    []string
	last    string
}

func (s *recordScan) add(key, etag string) error {
	if len(s.records)+len(s.open) > 0 && key <= s.last {
		return fmt.Errorf("the store listed %q after %q, not in key order", key, s.last)
	}
	s.last = key
	for len(s.open) > 0 && !strings.HasPrefix(key, s.open[len(s.open)-1]) {
		s.open = s.open[:len(s.open)-1]
	}
	if artifact, ok := strings.CutSuffix(key, jobapi.RecordSuffix); ok {
		r := listedRecord{key: key, etag: etag}
		for i := len(s.open) - 1; i >= 0 && len(s.open[i]) >= len(artifact); i-- {
			if s.open[i] == artifact {
				r.artifact = true
			}
		}
		s.records = append(s.records, r)
	}
	s.open = append(s.open, key)
	return nil
}
