package backupjob

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// +kubebuilder:rbac:groups=backups.cozystack.io,resources=restorejobs,verbs=get;list;watch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=restorejobs/status,verbs=get;update;patch

// RestoreReconciler flags RestoreJobs that no driver claims within the claim timeout, as the
// BackupJob Reconciler does for BackupJobs: a RestoreJob whose Backup does not exist, or whose
// Backup's driver is not running, would otherwise wait silently forever (drivers cannot tell whose
// it is). Like NoDriverClaimed on BackupJobs, it is not failed: the Backup or the driver may still
// appear.
type RestoreReconciler struct {
	Client       client.Client
	Clock        clock.PassiveClock
	Recorder     events.EventRecorder
	ClaimTimeout time.Duration
}

// Reconcile flags one unclaimed RestoreJob once its claim timeout has passed.
func (r *RestoreReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	rj := &backupsv1.RestoreJob{}
	if err := r.Client.Get(ctx, req.NamespacedName, rj); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if rj.IsTerminal() || rj.IsClaimed() || !rj.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	if wait := rj.CreationTimestamp.Add(r.ClaimTimeout).Sub(r.Clock.Now()); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	reason, msg := r.unclaimed(ctx, rj)
	if c := meta.FindStatusCondition(rj.Status.Conditions, backupsv1.ConditionAccepted); c != nil &&
		c.Status == metav1.ConditionFalse && c.Reason == reason && c.Message == msg {
		return reconcile.Result{}, nil // already said
	}
	orig := rj.DeepCopy()
	if rj.Status.Phase == "" {
		rj.Status.Phase = backupsv1.RestoreJobPending
	}
	meta.SetStatusCondition(&rj.Status.Conditions, metav1.Condition{
		Type: backupsv1.ConditionAccepted, Status: metav1.ConditionFalse, Reason: reason,
		Message: msg, ObservedGeneration: rj.Generation, LastTransitionTime: metav1.NewTime(r.Clock.Now()),
	})
	if err := r.Client.Status().Patch(ctx, rj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: time.Second}, nil
		}
		return reconcile.Result{}, fmt.Errorf("flagging unclaimed RestoreJob: %w", err)
	}
	r.Recorder.Eventf(rj, nil, corev1.EventTypeWarning, reason, "Claim", "%s", msg)
	return reconcile.Result{}, nil
}

func (r *RestoreReconciler) unclaimed(ctx context.Context, rj *backupsv1.RestoreJob) (reason, msg string) {
	prefix := fmt.Sprintf("No driver claimed this RestoreJob within %s", r.ClaimTimeout)
	b := &backupsv1.Backup{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: rj.Namespace, Name: rj.Spec.BackupRef.Name}, b)
	switch {
	case apierrors.IsNotFound(err):
		return backupsv1.ReasonBackupNotFound, fmt.Sprintf("%s: Backup %q does not exist in namespace %s; fix spec.backupRef or create a new RestoreJob",
			prefix, rj.Spec.BackupRef.Name, rj.Namespace)
	case err != nil:
		return backupsv1.ReasonNoDriverClaimed, fmt.Sprintf("%s; reading Backup %q failed: %v", prefix, rj.Spec.BackupRef.Name, err)
	}
	ref := b.Spec.StrategyRef
	group := ""
	if ref.APIGroup != nil {
		group = *ref.APIGroup
	}
	return backupsv1.ReasonNoDriverClaimed, fmt.Sprintf("%s: Backup %q was made with %s %q (group %s); is the driver for that strategy kind installed and running?",
		prefix, b.Name, ref.Kind, ref.Name, group)
}

// SetupWithManager registers the reconciler.
func (r *RestoreReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("core-restorejob").
		For(&backupsv1.RestoreJob{}).
		Complete(r)
}
