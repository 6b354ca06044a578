// Package driverkit is the run lifecycle every Coffer strategy driver shares: the BackupJob,
// RestoreJob and Backup-deletion reconcilers of docs/contract.md, generic over a small Driver
// interface. A driver says how to start or observe a backup, start or observe a restore, and
// delete an artifact; the kit resolves the class, claims the run with an optimistic lock, records
// the strategy it claimed with, enforces the deadline, creates the Backup, writes status once per
// reconcile, and emits the standard events, metrics and log lines.
//
// driverkit requires only the apis module and controller-runtime, so a third party writes a
// driver with apis + driverkit alone (see docs/driverkit.md).
package driverkit

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// Driver is what a strategy driver implements. S is its strategy kind (a pointer type, such as
// *VeleroBackupStrategy). Each method is called inside a reconcile, must be idempotent (a crash
// between any two writes resumes in the same method) and must create every external object under
// a name derived from the run, never adopting one made for another run.
type Driver[S client.Object] interface {
	// Deadline bounds a run of the strategy, from the run's startedAt.
	Deadline(strategy S) time.Duration
	// Backup starts or observes the backup of run. It returns the outcome (in progress, or a
	// result once the artifact is stored), a *Failure to fail the run, or another error to retry.
	Backup(ctx context.Context, run *BackupRun[S]) (BackupOutcome, error)
	// Restore starts or observes the restore of run, with the same conventions.
	Restore(ctx context.Context, run *RestoreRun[S]) (RestoreOutcome, error)
	// DeleteArtifact deletes (or starts deleting) the artifact of a Backup the driver made, which
	// is being deleted and holds the driver's finalizer.
	DeleteArtifact(ctx context.Context, backup *backupsv1.Backup) (DeleteOutcome, error)
}

// ArtifactChecker is implemented by drivers that can tell whether a Ready Backup's artifact still
// exists. The kit writes the condition returned (ArtifactAvailable) on the Backup; nil means no
// opinion (for example, a copy of a Backup restored from a backup of its namespace).
type ArtifactChecker interface {
	CheckArtifact(ctx context.Context, backup *backupsv1.Backup) (*metav1.Condition, error)
}

// RunFinisher is implemented by drivers that act once a run's outcome is recorded (for example,
// to let their Job be garbage-collected). obj is the terminal BackupJob or RestoreJob.
type RunFinisher interface {
	RunFinished(ctx context.Context, obj client.Object) error
}

// BackupRun is one BackupJob the driver claimed.
type BackupRun[S client.Object] struct {
	Job *backupsv1.BackupJob
	// Strategy is the strategy the run was claimed with (status.strategy).
	Strategy S
	// Resolved is the class resolution the run was claimed with; Parameters is never nil.
	Resolved *backupsv1.ResolvedStrategy
	// Backup is the run's Backup when an earlier reconcile created it (the kit checked it is
	// this run's), else nil. When it has an artifact, the driver should report that artifact
	// rather than measure again: what made it may be gone.
	Backup *backupsv1.Backup
	// Now and Deadline: the reconcile's time and when the run must have ended.
	Now, Deadline time.Time
}

// BackupOutcome is what a Backup call came to. With Result nil the backup is in progress.
type BackupOutcome struct {
	// Result, when set, says the artifact is stored: the kit records the Backup and ends the run.
	Result *BackupResult
	// Waiting says what an in-progress run waits for ("velero backup x is InProgress"); it is
	// quoted when the run fails its deadline.
	Waiting string
	// RequeueAfter asks for another look; zero means at the deadline (the driver's watches wake
	// the run before).
	RequeueAfter time.Duration
}

// BackupResult describes a stored artifact.
type BackupResult struct {
	Artifact backupsv1.BackupArtifact
	// TakenAt is when the backup was taken (default: now).
	TakenAt *metav1.Time
	// DriverMetadata is what the driver needs later to restore or delete the artifact.
	DriverMetadata map[string]string
	// Finalize puts the driver's finalizer on the Backup: deleting it calls DeleteArtifact.
	Finalize bool
	// Location is the message of the ArtifactAvailable condition ("stored in location x").
	Location string
	// Conditions are further conditions of the Backup (for example PartiallyFailed).
	Conditions []metav1.Condition
	// UnderlyingResources, when set, is recorded as the Backup's status.underlyingResources
	// (what a restore or a verifier needs beside the artifact: driver-velero's volume data).
	UnderlyingResources *runtime.RawExtension
}

// RestoreRun is one RestoreJob the driver claimed.
type RestoreRun[S client.Object] struct {
	RestoreJob *backupsv1.RestoreJob
	// Backup is the Backup restored from: Ready, with an artifact, not being deleted.
	Backup   *backupsv1.Backup
	Strategy S
	// Now and Deadline: the reconcile's time and when the run must have ended.
	Now, Deadline time.Time
}

// RestoreOutcome is what a Restore call came to.
type RestoreOutcome struct {
	// Done ends the run Succeeded with Message.
	Done    bool
	Message string
	// Warning, with Done, is also emitted as a Warning event (CompletedWithErrors).
	Warning string
	// Items, with Done, counts what the restore did with the backup's items, when the driver can
	// tell; the kit records it in status.items and says so when nothing was restored.
	Items *backupsv1.RestoreItems
	// Waiting and RequeueAfter as in BackupOutcome.
	Waiting      string
	RequeueAfter time.Duration
}

// DeleteOutcome is what a DeleteArtifact call came to.
type DeleteOutcome struct {
	// Done: the artifact is gone (or was never this Backup's to delete); the kit releases the
	// finalizer with Message as a Normal event.
	Done    bool
	Message string
	// Kept: the artifact is left in storage on purpose; the kit releases the finalizer with
	// Message as a Warning event (ArtifactKept).
	Kept bool
	// Reason overrides the event's reason (default ArtifactDeleted, or ArtifactKept).
	Reason string
	// RequeueAfter asks for another look while the deletion runs (zero: the driver's watches).
	RequeueAfter time.Duration
}

// Failure ends a run Failed with Reason (UpperCamel) and the error's message, which must say
// what to fix.
type Failure struct {
	Reason string
	Err    error
}

func (f *Failure) Error() string { return f.Err.Error() }
func (f *Failure) Unwrap() error { return f.Err }

// Failf returns a *Failure with a formatted message.
func Failf(reason, format string, args ...any) *Failure {
	return &Failure{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// AsFailure returns err as a *Failure when it is one.
func AsFailure(err error) (*Failure, bool) {
	var f *Failure
	ok := errors.As(err, &f)
	return f, ok
}

// Transient is an infrastructure error (object store, another API) the kit retries with backoff
// until the run's deadline, then fails the run with Reason and the error's message.
type Transient struct {
	Reason string
	Err    error
}

func (t *Transient) Error() string { return t.Err.Error() }
func (t *Transient) Unwrap() error { return t.Err }

// Transientf returns a *Transient with a formatted message.
func Transientf(reason, format string, args ...any) *Transient {
	return &Transient{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// RestoreOptioner is implemented by a driver that takes restore options beyond the standard ones
// (targetNamespace, restoreRBAC, inert): NewRestoreOptions returns a pointer to an empty struct
// whose json fields name them, typed. Before a restore starts, the kit decodes the RestoreJob's
// spec.options into it and fails the run InvalidOption, nothing restored, on an option the driver
// does not take or of another type. A driver without it takes the standard options only.
type RestoreOptioner interface {
	NewRestoreOptions() any
}
