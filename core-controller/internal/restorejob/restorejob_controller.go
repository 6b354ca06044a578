// Package restorejob watches RestoreJobs on behalf of core (contract CORE-7). A RestoreJob whose
// Backup does not exist, or whose Backup's driver is not running, would otherwise wait silently
// forever (no driver can tell whose it is); core fails it once the claim timeout has passed (phase
// Failed; Accepted=False and Ready=False with BackupNotFound, or NoDriverClaimed naming the
// Backup's strategy kind). It never writes a restore a driver has claimed: the failure is written
// with an optimistic lock, so of a driver's claim and core's failure exactly one lands.
package restorejob

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/core-controller/internal/claim"
	"github.com/coffer-backup/coffer/core-controller/internal/metrics"
)

// +kubebuilder:rbac:groups=backups.cozystack.io,resources=restorejobs,verbs=get;list;watch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=restorejobs/status,verbs=patch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backups,verbs=get;list;watch

// Reconciler fails RestoreJobs that no driver claims within the claim timeout.
type Reconciler struct {
	Client       client.Client
	Clock        clock.PassiveClock
	Recorder     events.EventRecorder
	ClaimTimeout time.Duration
	// Started is when this process started: the claim timeout of a restore counts from it at the
	// earliest (claim.Deadline).
	Started time.Time
}

// scope carries one reconcile's state; status changes are written once, at the end.
type scope struct {
	rj   *backupsv1.RestoreJob
	orig *backupsv1.RestoreJob
	now  time.Time
	log  logr.Logger
	// result is what the reconcile returns when no phase failed.
	result reconcile.Result
	// done ends the reconcile after the current phase.
	done bool
	// failReason is set when this reconcile fails the restore (reported once the write landed).
	failReason string
}

type phase struct {
	name string
	run  func(context.Context, *scope) error
}

// Reconcile runs the phases of one RestoreJob and writes its status once.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, retErr error) {
	rj := &backupsv1.RestoreJob{}
	if err := r.Client.Get(ctx, req.NamespacedName, rj); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	s := &scope{rj: rj, orig: rj.DeepCopy(), now: r.Clock.Now(), log: ctrl.LoggerFrom(ctx)}
	defer func() {
		if pres, err := r.patchStatus(ctx, s); err != nil && retErr == nil {
			res, retErr = reconcile.Result{}, err
		} else if pres != nil && retErr == nil {
			res = *pres
		}
	}()
	for _, p := range []phase{
		{"awaitClaim", r.awaitClaim},
		{"failUnclaimed", r.failUnclaimed},
	} {
		s.log.V(1).Info("RestoreJob phase", "restoreJob", klog.KObj(rj), "phase", p.name)
		if err := p.run(ctx, s); err != nil {
			s.log.V(1).Info("RestoreJob phase failed", "restoreJob", klog.KObj(rj), "phase", p.name, "error", err.Error())
			return reconcile.Result{}, err
		}
		if s.done {
			break
		}
	}
	return s.result, nil
}

// patchStatus writes this reconcile's status changes, if any, stamping observedGeneration, with
// an optimistic lock: a driver that claimed the restore since it was read wins, and the reconcile
// is retried on a fresh read. It returns a result to use instead of the phases' one, if any.
func (r *Reconciler) patchStatus(ctx context.Context, s *scope) (*reconcile.Result, error) {
	if apiequality.Semantic.DeepEqual(s.orig.Status, s.rj.Status) {
		return nil, nil
	}
	s.rj.Status.ObservedGeneration = s.rj.Generation
	patch := client.MergeFromWithOptions(s.orig, client.MergeFromWithOptimisticLock{})
	if err := r.Client.Status().Patch(ctx, s.rj, patch); err != nil {
		if apierrors.IsConflict(err) {
			s.log.V(1).Info("RestoreJob changed since it was read (a driver may have claimed it); looking again", "restoreJob", klog.KObj(s.rj))
			return &reconcile.Result{RequeueAfter: time.Second}, nil
		}
		return nil, fmt.Errorf("writing the status of RestoreJob %s: %w", s.rj.Name, err)
	}
	if s.failReason != "" {
		s.log.Info("Failed unclaimed RestoreJob", "restoreJob", klog.KObj(s.rj), "reason", s.failReason,
			"claimTimeout", r.ClaimTimeout, "message", s.rj.Status.Message)
		metrics.UnclaimedFailed.WithLabelValues(s.rj.Namespace, "RestoreJob", s.failReason).Inc()
		r.Recorder.Eventf(s.rj, nil, corev1.EventTypeWarning, s.failReason, "Fail", "%s", s.rj.Status.Message)
	}
	return nil, nil
}

// awaitClaim ends the reconcile while the restore is finished, a driver's, or still has time to
// be claimed.
func (r *Reconciler) awaitClaim(_ context.Context, s *scope) error {
	if s.rj.IsTerminal() || s.rj.IsClaimed() || !s.rj.DeletionTimestamp.IsZero() {
		s.done = true
		return nil
	}
	if wait := claim.Deadline(s.rj.CreationTimestamp.Time, r.Started, r.ClaimTimeout).Sub(s.now); wait > 0 {
		s.log.V(1).Info("Waiting for a driver to claim the RestoreJob", "restoreJob", klog.KObj(s.rj), "remaining", wait)
		s.result = reconcile.Result{RequeueAfter: wait}
		s.done = true
	}
	return nil
}

// failUnclaimed fails a restore no driver claimed in time, with the reason and what to fix.
func (r *Reconciler) failUnclaimed(ctx context.Context, s *scope) error {
	reason, msg, err := r.unclaimed(ctx, s.rj)
	if err != nil {
		return err
	}
	claim.RefuseAccepted(&s.rj.Status.Conditions, s.rj.Generation, s.now, reason, msg)
	s.rj.MarkFailed(metav1.NewTime(s.now), reason, msg)
	s.failReason = reason
	return nil
}

// unclaimed says why no driver claimed the restore, and what to do.
func (r *Reconciler) unclaimed(ctx context.Context, rj *backupsv1.RestoreJob) (reason, msg string, err error) {
	prefix := fmt.Sprintf("No driver claimed this RestoreJob within %s", r.ClaimTimeout)
	b := &backupsv1.Backup{}
	err = r.Client.Get(ctx, client.ObjectKey{Namespace: rj.Namespace, Name: rj.Spec.BackupRef.Name}, b)
	switch {
	case apierrors.IsNotFound(err):
		return backupsv1.ReasonBackupNotFound, fmt.Sprintf("%s: Backup %q does not exist in namespace %s; create a new RestoreJob whose spec.backupRef names an existing Backup",
			prefix, rj.Spec.BackupRef.Name, rj.Namespace), nil
	case err != nil:
		return "", "", fmt.Errorf("reading Backup %q: %w", rj.Spec.BackupRef.Name, err)
	}
	ref := b.Spec.StrategyRef
	group := ""
	if ref.APIGroup != nil {
		group = *ref.APIGroup
	}
	return backupsv1.ReasonNoDriverClaimed, fmt.Sprintf("%s: Backup %q was made with %s %q (group %s), and no driver of that strategy kind took the restore; install or start that driver, then create a new RestoreJob",
		prefix, b.Name, ref.Kind, ref.Name, group), nil
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("core-restorejob").
		For(&backupsv1.RestoreJob{}).
		Complete(r)
}
