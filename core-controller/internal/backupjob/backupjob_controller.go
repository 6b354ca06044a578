// Package backupjob watches BackupJobs on behalf of core. It flags a BackupJob that no driver
// claims within the claim timeout (Accepted=False, NoDriverClaimed, naming the strategy kind its
// BackupClass resolves to, or why it resolves to none) without failing it, since a driver
// installed later may still take it; and it records the duration of finished runs. It never
// writes a run that a driver has claimed.
package backupjob

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/core-controller/internal/metrics"
)

// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupjobs,verbs=get;list;watch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupjobs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupclasses,verbs=get;list;watch

// DefaultClaimTimeout is how long a BackupJob may wait for a driver before it is flagged.
const DefaultClaimTimeout = 5 * time.Minute

// Reconciler flags unclaimed BackupJobs and observes run durations.
type Reconciler struct {
	Client       client.Client
	Clock        clock.PassiveClock
	Recorder     events.EventRecorder
	ClaimTimeout time.Duration
	// Started is when this process started; only runs completing after it are observed, so a
	// restart does not observe old runs twice.
	Started time.Time

	observed sync.Map // client.ObjectKey of each run already observed → struct{}
}

// Reconcile handles one BackupJob.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	job := &backupsv1.BackupJob{}
	if err := r.Client.Get(ctx, req.NamespacedName, job); err != nil {
		if apierrors.IsNotFound(err) {
			r.observed.Delete(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if job.IsTerminal() {
		r.observe(job)
		return reconcile.Result{}, nil
	}
	if job.IsClaimed() || !job.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	if wait := job.CreationTimestamp.Add(r.ClaimTimeout).Sub(r.Clock.Now()); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	msg := r.unclaimedMessage(ctx, job)
	if c := meta.FindStatusCondition(job.Status.Conditions, backupsv1.ConditionAccepted); c != nil &&
		c.Status == metav1.ConditionFalse && c.Reason == backupsv1.ReasonNoDriverClaimed && c.Message == msg {
		return reconcile.Result{}, nil // already said
	}
	orig := job.DeepCopy()
	if job.Status.Phase == "" {
		job.Status.Phase = backupsv1.BackupJobPending
	}
	meta.SetStatusCondition(&job.Status.Conditions, metav1.Condition{
		Type: backupsv1.ConditionAccepted, Status: metav1.ConditionFalse, Reason: backupsv1.ReasonNoDriverClaimed,
		Message: msg, ObservedGeneration: job.Generation, LastTransitionTime: metav1.NewTime(r.Clock.Now()),
	})
	// The optimistic lock makes a driver's concurrent claim win: on conflict we re-read and see it.
	if err := r.Client.Status().Patch(ctx, job, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: time.Second}, nil
		}
		return reconcile.Result{}, fmt.Errorf("flagging unclaimed BackupJob: %w", err)
	}
	r.Recorder.Eventf(job, nil, corev1.EventTypeWarning, backupsv1.ReasonNoDriverClaimed, "Claim", "%s", msg)
	return reconcile.Result{}, nil
}

// unclaimedMessage says which driver should have claimed the job, or why none can.
func (r *Reconciler) unclaimedMessage(ctx context.Context, job *backupsv1.BackupJob) string {
	prefix := fmt.Sprintf("No driver claimed this BackupJob within %s", r.ClaimTimeout)
	class := &backupsv1.BackupClass{}
	err := r.Client.Get(ctx, client.ObjectKey{Name: job.Spec.BackupClassName}, class)
	if apierrors.IsNotFound(err) {
		class = nil
	} else if err != nil {
		return fmt.Sprintf("%s; reading BackupClass %q failed: %v", prefix, job.Spec.BackupClassName, err)
	}
	resolved, err := backupsv1.ResolveStrategy(job.Spec.BackupClassName, class, job.Spec.ApplicationRef)
	var notFound *backupsv1.ClassNotFoundError
	switch {
	case errors.As(err, &notFound):
		return fmt.Sprintf("%s: %v; create it or fix spec.backupClassName", prefix, err)
	case err != nil:
		return fmt.Sprintf("%s: %v; add a strategy for this application to the class", prefix, err)
	}
	ref := resolved.StrategyRef
	group := ""
	if ref.APIGroup != nil {
		group = *ref.APIGroup
	}
	return fmt.Sprintf("%s: BackupClass %q resolves to %s %q (group %s); is the driver for that strategy kind installed and running?",
		prefix, resolved.ClassName, ref.Kind, ref.Name, group)
}

func (r *Reconciler) observe(job *backupsv1.BackupJob) {
	st := job.Status
	if st.StartedAt == nil || st.CompletedAt == nil || st.CompletedAt.Time.Before(r.Started) {
		return
	}
	if _, seen := r.observed.LoadOrStore(client.ObjectKeyFromObject(job), struct{}{}); seen {
		return
	}
	metrics.JobDuration.WithLabelValues(string(st.Phase)).Observe(st.CompletedAt.Sub(st.StartedAt.Time).Seconds())
}
