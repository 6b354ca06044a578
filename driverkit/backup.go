package driverkit

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// ConditionArtifactDeletion on a Backup being deleted is False while its artifact could not be
// deleted; the message says why and what to do (contract rule BK-7).
const ConditionArtifactDeletion = "ArtifactDeletion"

// ReasonDeletionFailing: deleting the artifact keeps failing; the driver retries with backoff.
const ReasonDeletionFailing = "DeletionFailing"

// ReasonDeletionInProgress: the driver started deleting the artifact and waits for it to end.
const ReasonDeletionInProgress = "DeletionInProgress"

// Waits between two attempts at deleting an artifact: DeletionRetryDelay for the first
// DeletionRetryBackoffAfter of a deletion, then DeletionRetryMaxDelay.
const (
	DeletionRetryDelay        = time.Minute
	DeletionRetryBackoffAfter = 10 * time.Minute
	DeletionRetryMaxDelay     = 10 * time.Minute
)

// reconcileBackup looks after one Backup of this driver: it keeps ArtifactAvailable current
// (drivers that implement ArtifactChecker) and carries out deletion behind the driver's finalizer.
func (k *Kit[S]) reconcileBackup(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	b := &backupsv1.Backup{}
	if err := k.Client.Get(ctx, req.NamespacedName, b); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !k.Strategy.Owns(b.Spec.StrategyRef) {
		return reconcile.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx).WithValues("backup", klog.KObj(b))
	ctx = ctrl.LoggerInto(ctx, log)
	if b.DeletionTimestamp.IsZero() {
		return k.checkArtifact(ctx, b)
	}
	if k.Finalizer == "" || !controllerutil.ContainsFinalizer(b, k.Finalizer) {
		return reconcile.Result{}, nil
	}
	// The driver deletes from, and the kit writes on, the Backup as the API server holds it: the
	// cached copy may be trimmed (TrimBackup). A deletion is rare, so is this read.
	b, err := k.live(ctx, req.NamespacedName)
	if err != nil || b == nil || !k.Strategy.Owns(b.Spec.StrategyRef) || b.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(b, k.Finalizer) {
		return reconcile.Result{}, err
	}
	out, err := k.Driver.DeleteArtifact(ctx, b)
	if err != nil {
		return k.deletionFailing(ctx, b, err)
	}
	switch {
	case out.Done:
		if err := k.release(ctx, b); err != nil {
			return reconcile.Result{}, err
		}
		k.Metrics.finished("cleanup", string(backupsv1.BackupJobSucceeded), -1)
		log.Info("Deleted artifact; released Backup", "message", out.Message)
		k.Recorder.Eventf(b, nil, corev1.EventTypeNormal, orDefault(out.Reason, "ArtifactDeleted"), "Delete", "%s", orDefault(out.Message, "The artifact is deleted"))
	case out.Kept:
		if err := k.release(ctx, b); err != nil {
			return reconcile.Result{}, err
		}
		log.Info("Released Backup; artifact kept", "message", out.Message)
		k.Recorder.Eventf(b, nil, corev1.EventTypeWarning, orDefault(out.Reason, "ArtifactKept"), "Delete", "%s", out.Message)
	default:
		// Said on the Backup, and read back by drivers: the deletion this driver started is
		// under way (an artifact that vanishes now was deleted by it, not lost).
		if c := meta.FindStatusCondition(b.Status.Conditions, ConditionArtifactDeletion); c == nil || c.Reason != ReasonDeletionInProgress {
			orig := b.DeepCopy()
			meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: ConditionArtifactDeletion, Status: metav1.ConditionUnknown,
				Reason: ReasonDeletionInProgress, Message: "The driver is deleting the artifact " + artifactURI(b), LastTransitionTime: metav1.NewTime(k.Clock.Now())})
			if _, err := PatchStatus(ctx, k.Client, b, orig); err != nil {
				// A Backup read from a stale cache may already be released and gone: it
				// needs no status, and its deletion is over.
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
		}
		return reconcile.Result{RequeueAfter: out.RequeueAfter}, nil
	}
	return reconcile.Result{}, nil
}

// DeletionStarted reports whether the driver's DeleteArtifact started deleting the artifact of b
// in an earlier call (ArtifactDeletion=Unknown, DeletionInProgress): an artifact gone now was
// deleted by it, not lost. The condition says so only until an attempt fails: deletionFailing
// overwrites it (ArtifactDeletion=False, DeletionFailing), whatever was started before. A driver
// that must still know after a failed attempt that its deletion was started (driver-velero, whose
// backend deletes the proof of its request once done) records that itself, apart from the status.
func DeletionStarted(b *backupsv1.Backup) bool {
	c := meta.FindStatusCondition(b.Status.Conditions, ConditionArtifactDeletion)
	return c != nil && c.Reason == ReasonDeletionInProgress
}

// deletionFailing handles a failed deletion attempt. A namespace being deleted cannot hold the
// Jobs or objects a deletion may need, and must never hang on Coffer's finalizer: the Backup is
// released and the artifact left in storage, said in a Warning event and the log. Otherwise the
// Backup stays, with ArtifactDeletion=False saying why, and the deletion is retried with a
// backoff (a Failure waits DeletionRetryDelay, then DeletionRetryMaxDelay once the deletion is
// failing for longer than DeletionRetryBackoffAfter).
func (k *Kit[S]) deletionFailing(ctx context.Context, b *backupsv1.Backup, err error) (reconcile.Result, error) {
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		if rerr := k.release(ctx, b); rerr != nil {
			return reconcile.Result{}, rerr
		}
		msg := fmt.Sprintf("namespace %s is being deleted and the artifact %s of Backup %s could not be deleted from it (%v); the artifact is left in storage: delete it there if it is not wanted",
			b.Namespace, artifactURI(b), b.Name, err)
		ctrl.LoggerFrom(ctx).Info("Released Backup of a terminating namespace; artifact kept", "artifact", artifactURI(b), "error", err.Error())
		// The API server refuses new objects, events too, in a namespace being deleted, and would
		// delete them with it: the warning regards the Namespace (cluster-scoped, so it is kept in
		// namespace default), the Backup being its related object.
		namespace := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: b.Namespace}}
		k.Recorder.Eventf(namespace, b, corev1.EventTypeWarning, "ArtifactKept", "Delete", "%s", msg)
		return reconcile.Result{}, nil
	}
	orig := b.DeepCopy()
	msg := fmt.Sprintf("Deleting the artifact %s failed: %v. The Backup is kept and the deletion retried; to keep the artifact and delete the Backup, remove the finalizer %s",
		artifactURI(b), err, k.Finalizer)
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: ConditionArtifactDeletion, Status: metav1.ConditionFalse,
		Reason: ReasonDeletionFailing, Message: msg, LastTransitionTime: metav1.NewTime(k.Clock.Now())})
	wrote, perr := PatchStatus(ctx, k.Client, b, orig)
	if perr != nil {
		return reconcile.Result{}, perr
	}
	if wrote {
		k.Metrics.finished("cleanup", string(backupsv1.BackupJobFailed), -1)
		k.Recorder.Eventf(b, nil, corev1.EventTypeWarning, ReasonDeletionFailing, "Delete", "%s", msg)
	}
	if f, ok := AsFailure(err); ok {
		delay := DeletionRetryDelay
		if c := meta.FindStatusCondition(b.Status.Conditions, ConditionArtifactDeletion); c != nil && k.Clock.Since(c.LastTransitionTime.Time) > DeletionRetryBackoffAfter {
			delay = DeletionRetryMaxDelay
		}
		ctrl.LoggerFrom(ctx).Info("Artifact deletion failed", "reason", f.Reason, "error", f.Error(), "retryAfter", delay)
		return reconcile.Result{RequeueAfter: delay}, nil
	}
	return reconcile.Result{}, err
}

// ArtifactConfirmDelay is the default of Kit.ArtifactConfirmDelay: how long an artifact the driver
// found gone must stay gone before the Backup counts as missing (ArtifactAvailable=False, which retention acts on): longer than the
// storage sync of the drivers' backends (Velero's backup sync runs every minute by default), so
// that an object that vanished for a moment, a storage location pointed elsewhere for a while
// or a backend being reinstalled never costs a restore point.
const ArtifactConfirmDelay = 3 * time.Minute

// checkArtifact keeps ArtifactAvailable current. An absence is confirmed before it is written:
// the first check that finds the artifact gone writes Unknown (ArtifactAbsenceUnconfirmed), and
// only a check at least k.ArtifactConfirmDelay later that still finds it gone writes False. A
// driver that needs more to confirm (its storage to be synced since) answers Unknown meanwhile.
//
// It decides from b, the cached copy (trimmed: TrimBackup keeps the ArtifactAvailable condition
// whole): when the condition would not change, it makes no request. Otherwise it reads the Backup
// uncached, decides again on that copy, and writes the status patch computed from it.
func (k *Kit[S]) checkArtifact(ctx context.Context, b *backupsv1.Backup) (reconcile.Result, error) {
	checker, ok := k.Driver.(ArtifactChecker)
	if !ok || b.Status.Phase != backupsv1.BackupReady {
		return reconcile.Result{}, nil // no checker, or the BackupJob reconciler is still writing it
	}
	cond, err := checker.CheckArtifact(ctx, b)
	if err != nil || cond == nil {
		return reconcile.Result{}, err
	}
	res, next := k.artifactCondition(b, *cond)
	if next == nil || shown(b, next) {
		return res, nil
	}
	live, err := k.live(ctx, client.ObjectKeyFromObject(b))
	if err != nil || live == nil || live.UID != b.UID || live.Status.Phase != backupsv1.BackupReady || !live.DeletionTimestamp.IsZero() {
		return res, err
	}
	if res, next = k.artifactCondition(live, *cond); next == nil {
		return res, nil
	}
	orig := live.DeepCopy()
	if next.Reason == backupsv1.ReasonArtifactAbsenceUnconfirmed && !absenceUnconfirmed(live) {
		// The wait is measured from this first sighting, whatever Unknown stood before.
		meta.RemoveStatusCondition(&live.Status.Conditions, backupsv1.ConditionArtifactAvailable)
	}
	meta.SetStatusCondition(&live.Status.Conditions, *next)
	wrote, err := PatchStatus(ctx, k.Client, live, orig)
	if wrote && next.Status != metav1.ConditionTrue {
		k.Recorder.Eventf(live, nil, corev1.EventTypeWarning, next.Reason, "Check", "%s", next.Message)
	}
	return res, err
}

// artifactCondition is the ArtifactAvailable condition a check that found cond makes of b's, and
// when to look again; nil when b's stands (a confirmed absence the check cannot contradict).
func (k *Kit[S]) artifactCondition(b *backupsv1.Backup, cond metav1.Condition) (reconcile.Result, *metav1.Condition) {
	var res reconcile.Result
	prev := meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionArtifactAvailable)
	unconfirmed := absenceUnconfirmed(b)
	if cond.Status == metav1.ConditionUnknown && prev != nil && prev.Status == metav1.ConditionFalse {
		return res, nil // a confirmed absence stands until the artifact is seen again
	}
	if cond.Status != metav1.ConditionTrue && (prev == nil || prev.Status != metav1.ConditionFalse) {
		waited := time.Duration(0)
		if unconfirmed {
			waited = k.Clock.Since(prev.LastTransitionTime.Time)
		}
		delay := k.ArtifactConfirmDelay
		if delay == 0 {
			delay = ArtifactConfirmDelay
		}
		if cond.Status == metav1.ConditionUnknown || waited < delay {
			msg := cond.Message
			if cond.Status == metav1.ConditionFalse {
				msg = fmt.Sprintf("%s; checked again before the Backup counts as missing", cond.Message)
			}
			cond = metav1.Condition{Type: backupsv1.ConditionArtifactAvailable, Status: metav1.ConditionUnknown,
				Reason: backupsv1.ReasonArtifactAbsenceUnconfirmed, Message: msg}
			res.RequeueAfter = delay - waited
			if res.RequeueAfter <= 0 {
				res.RequeueAfter = delay // the driver waits for more than time: look again a delay later
			}
		}
	}
	cond.LastTransitionTime = metav1.NewTime(k.Clock.Now())
	cond.ObservedGeneration = b.Generation
	return res, &cond
}

// absenceUnconfirmed reports whether b's ArtifactAvailable is a first sighting of an absence, not
// yet confirmed.
func absenceUnconfirmed(b *backupsv1.Backup) bool {
	prev := meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionArtifactAvailable)
	return prev != nil && prev.Status == metav1.ConditionUnknown && prev.Reason == backupsv1.ReasonArtifactAbsenceUnconfirmed
}

// shown reports whether b already has the condition c would make of it: the same status, reason
// and message, stamped with its generation (a new first sighting of an absence restarts its wait,
// so it is never shown).
func shown(b *backupsv1.Backup, c *metav1.Condition) bool {
	prev := meta.FindStatusCondition(b.Status.Conditions, c.Type)
	if c.Reason == backupsv1.ReasonArtifactAbsenceUnconfirmed && !absenceUnconfirmed(b) {
		return false
	}
	return prev != nil && prev.Status == c.Status && prev.Reason == c.Reason && prev.Message == c.Message && prev.ObservedGeneration == c.ObservedGeneration
}

// release removes the driver's finalizer.
func (k *Kit[S]) release(ctx context.Context, b *backupsv1.Backup) error {
	if !controllerutil.ContainsFinalizer(b, k.Finalizer) {
		return nil
	}
	orig := b.DeepCopy()
	controllerutil.RemoveFinalizer(b, k.Finalizer)
	if err := k.Client.Patch(ctx, b, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("releasing Backup %s: %w", b.Name, err)
	}
	return nil
}

func artifactURI(b *backupsv1.Backup) string {
	if b.Status.Artifact == nil {
		return "(none recorded)"
	}
	return b.Status.Artifact.URI
}
