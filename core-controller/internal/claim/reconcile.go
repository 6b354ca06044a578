package claim

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/coffer-backup/coffer/core-controller/internal/metrics"
)

// Settings are what core's run reconcilers share: how they reach the cluster, and the claim
// timeout.
type Settings struct {
	Client       client.Client
	Clock        clock.PassiveClock
	Recorder     events.EventRecorder
	ClaimTimeout time.Duration
	// Started is when this process started: the claim timeout of a run counts from it at the
	// earliest (Deadline).
	Started time.Time
}

// Run is a BackupJob or a RestoreJob.
type Run interface {
	client.Object
	IsTerminal() bool
	IsClaimed() bool
	MarkFailed(now metav1.Time, reason, msg string)
}

// Kind is what one kind of run adds to the shared reconcile.
type Kind[R Run] struct {
	// Name is the kind's name, as in "BackupJob".
	Name string
	// New returns an empty run to read into.
	New func() R
	// Status returns the run's conditions and status.observedGeneration, for the failure write.
	Status func(R) (conds *[]metav1.Condition, observedGeneration *int64)
	// Explain says why no driver claimed run, and what to do about it: a reason and a message.
	Explain func(ctx context.Context, timeout time.Duration, run R) (reason, msg string, err error)
	// Finished, if set, sees every terminal run.
	Finished func(run R)
	// Gone, if set, learns of every run that no longer exists.
	Gone func(key client.ObjectKey)
}

// Reconcile fails run req of kind k when no driver has claimed it within the claim timeout
// (contract CORE-5, CORE-7): phase Failed, Accepted=False and Ready=False with k.Explain's reason,
// a Warning event and a log line. The write carries an optimistic lock, so of a driver's claim and
// this failure exactly one lands; a run claimed meanwhile is read again and left alone. A claimed,
// terminal or deleted run is never written.
func Reconcile[R Run](ctx context.Context, s Settings, k Kind[R], req reconcile.Request) (reconcile.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	run := k.New()
	if err := s.Client.Get(ctx, req.NamespacedName, run); err != nil {
		if apierrors.IsNotFound(err) && k.Gone != nil {
			k.Gone(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	key := logKey(k.Name)
	switch {
	case run.IsTerminal():
		if k.Finished != nil {
			k.Finished(run)
		}
		return reconcile.Result{}, nil
	case run.IsClaimed() || !run.GetDeletionTimestamp().IsZero():
		return reconcile.Result{}, nil
	}
	now := s.Clock.Now()
	if wait := Deadline(run.GetCreationTimestamp().Time, s.Started, s.ClaimTimeout).Sub(now); wait > 0 {
		log.V(1).Info("Waiting for a driver to claim the "+k.Name, key, klog.KObj(run), "remaining", wait)
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	reason, msg, err := k.Explain(ctx, s.ClaimTimeout, run)
	if err != nil {
		return reconcile.Result{}, err
	}
	orig := run.DeepCopyObject().(R)
	conds, observed := k.Status(run)
	RefuseAccepted(conds, run.GetGeneration(), now, reason, msg)
	run.MarkFailed(metav1.NewTime(now), reason, msg)
	*observed = run.GetGeneration()
	if err := s.Client.Status().Patch(ctx, run, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			log.V(1).Info(k.Name+" changed since it was read (a driver may have claimed it); looking again", key, klog.KObj(run))
			return reconcile.Result{RequeueAfter: time.Second}, nil
		}
		return reconcile.Result{}, fmt.Errorf("writing the status of %s %s: %w", k.Name, run.GetName(), err)
	}
	log.Info("Failed unclaimed "+k.Name, key, klog.KObj(run), "reason", reason, "claimTimeout", s.ClaimTimeout, "message", msg)
	metrics.UnclaimedFailed.WithLabelValues(run.GetNamespace(), k.Name, reason).Inc()
	s.Recorder.Eventf(run, nil, corev1.EventTypeWarning, reason, "Fail", "%s", msg)
	return reconcile.Result{}, nil
}

// logKey is the log key naming a run of kind: "BackupJob" → "backupJob".
func logKey(kind string) string {
	if kind == "" {
		return "run"
	}
	return string(kind[0]|0x20) + kind[1:]
}
