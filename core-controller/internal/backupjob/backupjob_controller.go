// Package backupjob watches BackupJobs on behalf of core. It fails a BackupJob that no driver
// claims within the claim timeout (phase Failed; Accepted=False and Ready=False with the reason:
// BackupClassNotFound, NoMatchingStrategy, or NoDriverClaimed naming the strategy kind its
// BackupClass resolves to), so that an unclaimed run never blocks its Plan for good; and it records
// the duration of finished runs. It never writes a run that a driver has claimed: the failure is
// written with an optimistic lock, so of a driver's claim and core's failure exactly one lands.
package backupjob

import (
	"context"
	"fmt"
	"sync"
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

// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupjobs,verbs=get;list;watch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupjobs/status,verbs=patch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupclasses,verbs=get;list;watch

// DefaultClaimTimeout is how long a BackupJob may wait for a driver before core fails it.
const DefaultClaimTimeout = claim.DefaultTimeout

// Reconciler fails unclaimed BackupJobs and observes run durations.
type Reconciler struct {
	Client       client.Client
	Clock        clock.PassiveClock
	Recorder     events.EventRecorder
	ClaimTimeout time.Duration
	// Started is when this process started. Only runs completing after it are observed, so a
	// restart does not observe old runs twice; and the claim timeout of a run counts from it at
	// the earliest (claim.Deadline).
	Started time.Time

	observed sync.Map // client.ObjectKey of each run already observed → struct{}
}

// scope carries one reconcile's state; status changes are written once, at the end.
type scope struct {
	job  *backupsv1.BackupJob
	orig *backupsv1.BackupJob
	now  time.Time
	log  logr.Logger
	// result is what the reconcile returns when no phase failed.
	result reconcile.Result
	// done ends the reconcile after the current phase.
	done bool
	// failReason is set when this reconcile fails the job (reported once the write landed).
	failReason string
}

type phase struct {
	name string
	run  func(context.Context, *scope) error
}

// Reconcile runs the phases of one BackupJob and writes its status once.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, retErr error) {
	job := &backupsv1.BackupJob{}
	if err := r.Client.Get(ctx, req.NamespacedName, job); err != nil {
		if apierrors.IsNotFound(err) {
			r.observed.Delete(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	s := &scope{job: job, orig: job.DeepCopy(), now: r.Clock.Now(), log: ctrl.LoggerFrom(ctx)}
	defer func() {
		if pres, err := r.patchStatus(ctx, s); err != nil && retErr == nil {
			res, retErr = reconcile.Result{}, err
		} else if pres != nil && retErr == nil {
			res = *pres
		}
	}()
	for _, p := range []phase{
		{"observeFinished", r.observeFinished},
		{"awaitClaim", r.awaitClaim},
		{"failUnclaimed", r.failUnclaimed},
	} {
		s.log.V(1).Info("BackupJob phase", "backupJob", klog.KObj(job), "phase", p.name)
		if err := p.run(ctx, s); err != nil {
			s.log.V(1).Info("BackupJob phase failed", "backupJob", klog.KObj(job), "phase", p.name, "error", err.Error())
			return reconcile.Result{}, err
		}
		if s.done {
			break
		}
	}
	return s.result, nil
}

// patchStatus writes this reconcile's status changes, if any, stamping observedGeneration, with
// an optimistic lock: a driver that claimed the job since it was read wins, and the reconcile is
// retried on a fresh read (which sees the claim and leaves the job alone). It returns a result to
// use instead of the phases' one, if any.
func (r *Reconciler) patchStatus(ctx context.Context, s *scope) (*reconcile.Result, error) {
	if apiequality.Semantic.DeepEqual(s.orig.Status, s.job.Status) {
		return nil, nil
	}
	s.job.Status.ObservedGeneration = s.job.Generation
	patch := client.MergeFromWithOptions(s.orig, client.MergeFromWithOptimisticLock{})
	if err := r.Client.Status().Patch(ctx, s.job, patch); err != nil {
		if apierrors.IsConflict(err) {
			s.log.V(1).Info("BackupJob changed since it was read (a driver may have claimed it); looking again", "backupJob", klog.KObj(s.job))
			return &reconcile.Result{RequeueAfter: time.Second}, nil
		}
		return nil, fmt.Errorf("writing the status of BackupJob %s: %w", s.job.Name, err)
	}
	if s.failReason != "" {
		s.log.Info("Failed unclaimed BackupJob", "backupJob", klog.KObj(s.job), "reason", s.failReason,
			"claimTimeout", r.ClaimTimeout, "message", s.job.Status.Message)
		metrics.UnclaimedFailed.WithLabelValues(s.job.Namespace, "BackupJob", s.failReason).Inc()
		r.Recorder.Eventf(s.job, nil, corev1.EventTypeWarning, s.failReason, "Fail", "%s", s.job.Status.Message)
	}
	return nil, nil
}

// observeFinished records the duration of a finished run, once; core has nothing else to do with it.
func (r *Reconciler) observeFinished(_ context.Context, s *scope) error {
	if !s.job.IsTerminal() {
		return nil
	}
	r.observe(s.job)
	s.done = true
	return nil
}

// awaitClaim ends the reconcile while the job is a driver's or still has time to be claimed.
func (r *Reconciler) awaitClaim(_ context.Context, s *scope) error {
	if s.job.IsClaimed() || !s.job.DeletionTimestamp.IsZero() {
		s.done = true
		return nil
	}
	if wait := claim.Deadline(s.job.CreationTimestamp.Time, r.Started, r.ClaimTimeout).Sub(s.now); wait > 0 {
		s.log.V(1).Info("Waiting for a driver to claim the BackupJob", "backupJob", klog.KObj(s.job), "remaining", wait)
		s.result = reconcile.Result{RequeueAfter: wait}
		s.done = true
	}
	return nil
}

// failUnclaimed fails a job no driver claimed in time, with the reason and what to fix.
func (r *Reconciler) failUnclaimed(ctx context.Context, s *scope) error {
	reason, msg, err := r.unclaimed(ctx, s.job)
	if err != nil {
		return err
	}
	claim.RefuseAccepted(&s.job.Status.Conditions, s.job.Generation, s.now, reason, msg)
	s.job.MarkFailed(metav1.NewTime(s.now), reason, msg)
	s.failReason = reason
	return nil
}

// unclaimed says why no driver claimed the job, and what to do: the class is missing, has no
// strategy for the application, or resolves to a strategy kind whose driver did not take it.
func (r *Reconciler) unclaimed(ctx context.Context, job *backupsv1.BackupJob) (reason, msg string, err error) {
	prefix := fmt.Sprintf("No driver claimed this BackupJob within %s", r.ClaimTimeout)
	// This run's spec cannot change: say how the next one gets it right.
	otherClass, retry := "name an existing class", "then create a new BackupJob"
	if p := job.Spec.PlanRef; p != nil {
		otherClass = fmt.Sprintf("set spec.backupClassName of Plan %s to an existing class", p.Name)
		retry = fmt.Sprintf("Plan %s creates a new BackupJob at its next tick", p.Name)
	}
	class := &backupsv1.BackupClass{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: job.Spec.BackupClassName}, class); apierrors.IsNotFound(err) {
		class = nil
	} else if err != nil {
		return "", "", fmt.Errorf("reading BackupClass %q: %w", job.Spec.BackupClassName, err)
	}
	resolved, err := backupsv1.ResolveStrategy(job.Spec.BackupClassName, class, job.Spec.ApplicationRef)
	switch reason := backupsv1.ResolutionReason(err); {
	case reason == backupsv1.ReasonBackupClassNotFound:
		return reason, fmt.Sprintf("%s: %v; create it or %s; %s", prefix, err, otherClass, retry), nil
	case reason == backupsv1.ReasonNoMatchingStrategy:
		return reason, fmt.Sprintf("%s: %v; add a strategy for this application to the class or %s; %s", prefix, err, otherClass, retry), nil
	case err != nil:
		return "", "", fmt.Errorf("resolving BackupClass %q: %w", job.Spec.BackupClassName, err)
	}
	ref := resolved.StrategyRef
	group := ""
	if ref.APIGroup != nil {
		group = *ref.APIGroup
	}
	return backupsv1.ReasonNoDriverClaimed, fmt.Sprintf("%s: BackupClass %q resolves to %s %q (group %s), and no driver of that strategy kind took it; install or start that driver, or point the class at a strategy whose driver runs; %s",
		prefix, resolved.ClassName, ref.Kind, ref.Name, group, retry), nil
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
