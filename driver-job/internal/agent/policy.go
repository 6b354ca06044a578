package agent

import (
	"encoding/json"
	"strings"
)

// BackupPolicy is the S3 policy (AWS IAM syntax, which MinIO reads too) of the credentials a
// backup Job needs, and no more: put new objects below prefix (its artifacts, their records, and
// the repository's packs and records), list and read the repository's index/ and files/ objects
// (what a chunked backup reads to skip what is stored already; sealed with the chunk key), abort
// its own unfinished uploads, find the bucket's region and whether it locks, and set object locks (lock.go:
// s3:PutObjectRetention can lengthen a Compliance lock and cannot shorten a lock of either mode
// without s3:BypassGovernanceRetention, which it does not have). It cannot read an artifact or a
// pack, nor delete anything. It can overwrite an object it can name: only the bucket's versioning
// with object lock keeps an overwritten object (docs/security.md). repository is the chunked
// repository's prefix (prefix/.coffer/<namespace>); empty for tar backups, which need no reads.
func BackupPolicy(bucket, prefix, repository string) string {
	prefix = strings.Trim(prefix, "/")
	below := func(p string) string {
		if p == "" {
			return "arn:aws:s3:::" + bucket + "/*"
		}
		return "arn:aws:s3:::" + bucket + "/" + p + "/*"
	}
	type statement struct {
		Effect    string                         `json:"Effect"`
		Action    []string                       `json:"Action"`
		Resource  []string                       `json:"Resource"`
		Condition map[string]map[string][]string `json:"Condition,omitempty"`
	}
	statements := []statement{
		{Effect: "Allow", Action: []string{"s3:GetBucketLocation", "s3:GetBucketObjectLockConfiguration"}, Resource: []string{"arn:aws:s3:::" + bucket}},
		{Effect: "Allow", Action: []string{"s3:PutObject", "s3:PutObjectRetention", "s3:AbortMultipartUpload"}, Resource: []string{below(prefix)}},
	}
	if repository = strings.Trim(repository, "/"); repository != "" {
		statements = append(statements,
			statement{Effect: "Allow", Action: []string{"s3:ListBucket"}, Resource: []string{"arn:aws:s3:::" + bucket},
				Condition: map[string]map[string][]string{"StringLike": {"s3:prefix": {repository + "/index/*", repository + "/files/*"}}}},
			statement{Effect: "Allow", Action: []string{"s3:GetObject"}, Resource: []string{below(repository + "/index"), below(repository + "/files")}})
	}
	b, err := json.MarshalIndent(map[string]any{"Version": "2012-10-17", "Statement": statements}, "", "  ")
	if err != nil {
		panic(err) // plain strings
	}
	return string(b)
}
