package v1alpha1

import (
	"fmt"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// RepositoryDir is the directory beside a chunked artifact (format 4) that holds the repositories
// of its prefix, one per namespace: <dir of the artifact>/.coffer/<namespace>. The agent reports
// its repository in the metadata key "repository" (s3://<bucket>/<key prefix>).
const RepositoryDir = ".coffer"

// RepositoryBeside checks the repository a chunked Backup records (recorded, from its report)
// against the layout above and returns its bucket and key prefix. The report is written in the
// tenant's pod: whoever reads or deletes a repository's keys with wider rights than the tenant's
// (the verifier, maintenance) takes only one beside the artifact. namespace names the one
// namespace whose repository it must be; "" accepts any namespace's (an imported Backup may be
// read in another namespace than the one that made it).
func RepositoryBeside(artifactURI, recorded, namespace string) (bucket, repo string, err error) {
	bucket, key, err := backupsv1.ParseS3URI(artifactURI)
	if err != nil {
		return "", "", err
	}
	beside := path.Join(path.Dir(key), RepositoryDir)
	name, ok := strings.CutPrefix(recorded, "s3://"+bucket+"/"+beside+"/")
	want := namespace
	if want == "" {
		want = "<namespace>"
	}
	if !ok || len(validation.IsDNS1123Label(name)) > 0 || namespace != "" && name != namespace {
		return "", "", fmt.Errorf("the Backup records the repository %q, not s3://%s/%s/%s beside its artifact", recorded, bucket, beside, want)
	}
	return bucket, beside + "/" + name, nil
}
