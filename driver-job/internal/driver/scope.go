package driver

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-job/internal/names"
)

// ReasonArtifactOutsideRun: an artifact URI does not lie in the run's bucket below its namespace's
// segment (s3://<bucket>/<namespace>/...). A backup reporting one fails and records nothing; a
// Backup naming one is neither restored, nor checked, nor deleted by a cleanup Job.
const ReasonArtifactOutsideRun = "ArtifactOutsideRun"

// ParamBucket is the class parameter naming the bucket of a run's artifacts: the driver passes it
// to the agent (COFFER_PARAM_BUCKET) and accepts only artifacts in it.
const ParamBucket = "bucket"

// scope is where the artifacts of a run, or of a Backup, may lie: in bucket, below the first key
// segment of one of namespaces (the layout coffer-agent writes, and DR catalogs read).
type scope struct {
	bucket     string
	namespaces []string
}

// check returns why uri lies outside the scope, or nil. The URI is read by the one parser of
// artifact URIs (backupsv1.ParseS3URI), so what is checked here is what an agent will act on.
func (s scope) check(uri string) error {
	bucket, key, err := backupsv1.ParseS3URI(uri)
	switch {
	case err != nil:
		return err
	case s.bucket == "":
		return fmt.Errorf("the class parameters name no %q, so the driver cannot tell that %s lies in the run's bucket; give the class the parameter %q", ParamBucket, uri, ParamBucket)
	case bucket != s.bucket:
		return fmt.Errorf("%s is in bucket %s, not in the run's bucket %s", uri, bucket, s.bucket)
	}
	seg, rest, _ := strings.Cut(key, "/")
	if rest == "" || !slices.Contains(s.namespaces, seg) {
		return fmt.Errorf("the key of %s is not below %s", uri, s.prefixes())
	}
	return nil
}

// prefixes says where the scope's artifacts lie, for messages.
func (s scope) prefixes() string {
	out := make([]string, len(s.namespaces))
	for i, ns := range s.namespaces {
		out[i] = "s3://" + s.bucket + "/" + ns + "/"
	}
	return strings.Join(out, " or ")
}

// runScope is the scope of a backup run: the bucket of its class parameters, below its namespace.
func runScope(namespace string, params map[string]string) scope {
	return scope{bucket: params[ParamBucket], namespaces: []string{namespace}}
}

// backupScope is the scope of a Backup's artifact, where restore, check and cleanup Jobs may act:
// the bucket its backup ran with (driverMetadata param.bucket), below its namespace. A Backup a
// catalog of strat imported lies in the catalog's bucket, below the namespace of its record,
// which the catalog's namespaceMapping maps to the Backup's namespace. strat may be nil.
func backupScope(b *backupsv1.Backup, strat *jobapi.JobBackupStrategy) scope {
	s := scope{bucket: b.Spec.DriverMetadata[names.MetaParamPrefix+ParamBucket], namespaces: []string{b.Namespace}}
	if !b.Imported() || strat == nil || strat.Spec.Catalog == nil || b.Labels[backupsv1.LabelCatalog] != backupsv1.LabelValue(strat.Name) {
		return s
	}
	cat := strat.Spec.Catalog
	s.bucket, s.namespaces = cat.Bucket, nil
	if to, ok := cat.NamespaceMapping[b.Namespace]; !ok || string(to) == b.Namespace {
		s.namespaces = append(s.namespaces, b.Namespace)
	}
	for from, to := range cat.NamespaceMapping {
		if string(to) == b.Namespace && from != b.Namespace {
			s.namespaces = append(s.namespaces, from)
		}
	}
	sort.Strings(s.namespaces)
	return s
}
