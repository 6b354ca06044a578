// Package artifact reads the artifacts of Coffer's Backups (backups.cozystack.io) for the coffer
// backend, whatever driver made them. A Reader is chosen per Backup from a Registry: by the
// Backup's driver (the API group of its strategyRef) when that driver stores its artifacts its own
// way (driver-velero: a Velero backup, read through Velero), else by the scheme of the artifact's
// URI (s3://, read from the one endpoint the administrator gave the verifier). The coffer backend
// knows no driver: a new driver whose artifacts are s3:// objects needs nothing here, and one
// with a format of its own adds a Reader to the Registry.
package artifact

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/velerokit/download"
	"github.com/coffer-backup/coffer/verifier/internal/backend"
)

// ErrMissing is a storage's definite answer that the artifact does not exist: a fact about the
// Backup (artifact-missing), unlike any other error, which is trouble reading it.
var ErrMissing = errors.New("the artifact does not exist")

// DetailContentDiff, in a full-restore's Result, says what the restored state was compared with
// by content, or why it was not.
const DetailContentDiff = "contentDiff"

// Reader reads the artifact of a Ready Backup.
type Reader interface {
	// Digest reads the artifact once and returns its size and SHA-256. An error wrapping
	// ErrMissing says, in its message, where the artifact was looked for; a transport fault is
	// trouble (retried), never a short artifact; an error wrapped in reconcile.TerminalError
	// says why the artifact cannot be read here at all.
	Digest(ctx context.Context, run *securityv1.BackupVerifyRun, b *backupsv1.Backup) (download.Digest, error)
}

// Comparer is a Reader that can read the content of the artifact, object by object, and compare
// it with a restore of it into a sandbox.
type Comparer interface {
	Reader
	// CompareRestore compares sandbox, into which the Backup's driver restored the Backup's
	// namespace, with the artifact's content. Its findings, counts and details are facts; the
	// sentence is what the restore-succeeded finding says of the comparison.
	CompareRestore(ctx context.Context, run *securityv1.BackupVerifyRun, b *backupsv1.Backup, sandbox string) (backend.Outcome, string, error)
}

// VolumeChecker is a Reader that can also read the volume data a Backup records, and adds what it
// found to out: facts as findings, trouble as its error.
type VolumeChecker interface {
	CheckVolumes(ctx context.Context, run *securityv1.BackupVerifyRun, b *backupsv1.Backup, out *backend.Outcome) error
}

// Starter is a Comparer whose comparison makes a restore of its own (driver-velero's: the
// volume data), which it starts beside the driver's restore rather than after it. What it finds
// then is not said: the comparison, which does it all again where it is not done, says it.
type Starter interface {
	StartRestore(ctx context.Context, run *securityv1.BackupVerifyRun, b *backupsv1.Backup)
	// RestoreOptions are the options of the driver's own that the RestoreJob into the sandbox
	// carries beside the standard ones (driver-velero's: the volumes' data left out, as the
	// comparison restores it on its own).
	RestoreOptions() map[string]string
}

// Cleaner is a Reader whose comparison makes objects of its own for a run (a Comparer restoring
// volume data), which the run's cleanup ends: findings say what it could not delete; one
// cleanup-deferred finding says the run's sandboxes must stay (the Sweeper deletes them later).
type Cleaner interface {
	Cleanup(ctx context.Context, run *securityv1.BackupVerifyRun) []securityv1.Finding
}

// Registry chooses the Reader of a Backup.
type Registry struct {
	// ByDriver is the Reader of the artifacts of a driver, by its API group.
	ByDriver map[string]Reader
	// ByScheme is the Reader of the artifacts of any other driver, by URI scheme ("s3").
	ByScheme map[string]Reader
}

// For returns the Reader of Backup b's artifact, or a terminal error saying why none can read it.
func (r Registry) For(b *backupsv1.Backup) (Reader, error) {
	driver := ptr.Deref(b.Spec.StrategyRef.APIGroup, "")
	if rd, ok := r.ByDriver[driver]; ok && rd != nil {
		return rd, nil
	}
	uri := b.Status.Artifact.URI
	u, err := url.Parse(uri)
	if err != nil || u.Scheme == "" {
		return nil, reconcile.TerminalError(fmt.Errorf("the artifact URI %q of driver %s has no scheme this verifier reads", uri, driver))
	}
	rd, ok := r.ByScheme[u.Scheme]
	switch {
	case ok && rd != nil:
		return rd, nil
	case u.Scheme == "s3":
		return nil, reconcile.TerminalError(fmt.Errorf("the verifier has no object storage to read %s from: set --s3-endpoint and the Secret coffer-verifier-s3 (deploy/verifier/manager)", uri))
	}
	return nil, reconcile.TerminalError(fmt.Errorf("the verifier reads s3:// artifacts and those of the drivers it knows, not %s:// (artifact %s of driver %s): verify this Backup by full-restore",
		u.Scheme, uri, driver))
}

// Missing is an error wrapping ErrMissing whose message is msg (where the artifact was looked for).
func Missing(msg string) error { return &missingError{msg} }

type missingError struct{ msg string }

func (e *missingError) Error() string        { return e.msg }
func (e *missingError) Is(target error) bool { return target == ErrMissing }
