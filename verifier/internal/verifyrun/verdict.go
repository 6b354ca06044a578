package verifyrun

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/driverkit/fairqueue"
	"github.com/coffer-backup/coffer/verifier/internal/backend"
)

// VerdictReconciler records the verdict of each ended run of the coffer backend on its Backup
// (contract BK-10): the verdict is the run's outcome, read from its terminal status (Ready's
// reason, its message, its completionTime) and its Result. It is a controller of its own, so the
// run reconciler writes nothing but the run, its Result and its SecurityEvents; it acts on ended
// coffer runs only, and again for each of them when the verifier starts (recording a verdict
// twice changes nothing).
type VerdictReconciler struct {
	Client client.Client
	// Reader reads the Backup a verdict is written on, uncached: the verifier's cache holds
	// Backups cut to what policies read (policy.TrimCachedBackup), and a patch computed from
	// such a copy would erase what the cut dropped. SetupWithManager sets the manager's API
	// reader; nil (tests that call the reconciler without a manager) means Client.
	Reader client.Reader
}

// Reconcile records the verdict of one ended coffer run. It decides from the cache first: an
// ended run that gives no verdict, or whose verdict (or a newer one) the cached Backup already
// records, reads nothing more, so a start with 100,000 ended runs makes no request for them. Only
// a verdict to record reads the run (whose message the cache drops, TrimEndedRun), its Result and
// its Backup uncached.
func (r *VerdictReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	run := &securityv1.BackupVerifyRun{}
	if err := r.Client.Get(ctx, req.NamespacedName, run); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !endedWithVerdict(run) || run.Labels[securityv1.LabelSettled] != "" {
		return reconcile.Result{}, nil // no verdict, or its verdict is on the Backup
	}
	if done, err := r.recorded(ctx, run); err != nil || done {
		if err != nil {
			return reconcile.Result{}, err
		}
		return reconcile.Result{}, r.settle(ctx, run)
	}
	if err := r.reader().Get(ctx, req.NamespacedName, run); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !endedWithVerdict(run) {
		return reconcile.Result{}, nil
	}
	res := &securityv1.BackupVerifyResult{}
	if err := r.reader().Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: run.Status.ResultName()}, res); err != nil {
		// A Result deleted since is no verdict to record.
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if res.Spec.RunUID() != run.UID {
		return reconcile.Result{}, nil
	}
	ready := meta.FindStatusCondition(run.Status.Conditions, securityv1.ConditionReady)
	if done, err := recordVerdict(ctx, r.reader(), r.Client, run, res, ready.Reason, run.Status.Message, *run.Status.CompletionTime); err != nil || !done {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, r.settle(ctx, run)
}

// Unsettled selects the runs the verifier caches: every run but the settled ones (LabelSettled).
func Unsettled() labels.Selector {
	req, err := labels.NewRequirement(securityv1.LabelSettled, selection.DoesNotExist, nil)
	if err != nil {
		panic(err) // a constant key
	}
	return labels.NewSelector().Add(*req)
}

// settle labels a policy's run whose verdict its Backup records (LabelSettled), once: the run
// leaves the verifier's cache. A run made by hand is not settled.
func (r *VerdictReconciler) settle(ctx context.Context, run *securityv1.BackupVerifyRun) error {
	if run.Labels[securityv1.LabelPolicy] == "" || run.Labels[securityv1.LabelSettled] != "" {
		return nil
	}
	patch := []byte(`{"metadata":{"labels":{"` + securityv1.LabelSettled + `":"true"}}}`)
	if err := r.Client.Patch(ctx, run, client.RawPatch(types.MergePatchType, patch)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("settling run %s: %w", klog.KObj(run), err)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Settled the run: its Backup records its verdict", "run", klog.KObj(run))
	return nil
}

// endedWithVerdict reports whether run is an ended coffer run that may give its Backup a verdict:
// it has its Result, its completion time and a Ready reason other than BackupVerifyFailed (a run
// that could not be carried out says nothing of the Backup).
func endedWithVerdict(run *securityv1.BackupVerifyRun) bool {
	ready := meta.FindStatusCondition(run.Status.Conditions, securityv1.ConditionReady)
	return endedCofferRun(run) && ready != nil && ready.Reason != securityv1.EventBackupVerifyFailed &&
		run.Status.ResultName() != "" && run.Status.CompletionTime != nil
}

// recorded reports whether run's Backup, as cached, already records the run's verdict or a newer
// one of its mode (the cache keeps a verdict's result and time, not its Result). A Backup the
// cache does not hold, or holds under another UID, is looked at live.
func (r *VerdictReconciler) recorded(ctx context.Context, run *securityv1.BackupVerifyRun) (bool, error) {
	b := &backupsv1.Backup{}
	if err := r.Client.Get(ctx, run.CofferBackup(), b); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading Backup %s: %w", run.CofferBackup(), err)
	}
	if uid := run.Labels[securityv1.LabelBackupUID]; uid != "" && uid != string(b.UID) || b.Status.Verification == nil {
		return false, nil
	}
	old := b.Status.Verification.Checksum
	if mode(run) == securityv1.ModeFullRestore {
		old = b.Status.Verification.FullRestore
	}
	if old == nil {
		return false, nil
	}
	// A verdict is recorded at its run's completion time (recordVerdict), and the cache keeps of it
	// its result and time, not its Result: newer, or of the run's own completion time with the
	// run's result (another run of the mode that ended in the same second with the same result
	// says the same).
	return old.Time.After(run.Status.CompletionTime.Time) || old.Time.Equal(run.Status.CompletionTime) && old.Result == resultOf(run), nil
}

// resultOf is the verdict an ended run with a verdict gives its Backup.
func resultOf(run *securityv1.BackupVerifyRun) backupsv1.VerificationResult {
	if ready := meta.FindStatusCondition(run.Status.Conditions, securityv1.ConditionReady); ready != nil && ready.Reason == securityv1.EventBackupVerifyMismatch {
		return backupsv1.VerificationFailed
	}
	return backupsv1.VerificationPassed
}

func endedCofferRun(run *securityv1.BackupVerifyRun) bool {
	return run.Spec.Backend == securityv1.BackendCoffer && run.Status.Phase.IsTerminal()
}

// SetupWithManager registers the verdict controller: it sees ended coffer runs (their status
// writes included, which the run reconciler does not watch).
func (r *VerdictReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Reader == nil {
		r.Reader = mgr.GetAPIReader()
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("backupverifyrun-verdict").
		For(&securityv1.BackupVerifyRun{}, builder.WithPredicates(ended, predicate.Funcs{
			// A run leaves the cache when it is settled or deleted: nothing to record then.
			DeleteFunc: func(event.DeleteEvent) bool { return false },
		})).
		WithOptions(controller.Options{NewQueue: fairqueue.NewQueue, RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, time.Minute)}).
		Complete(r)
}

// ended passes the events of ended coffer runs.
var ended = predicate.NewPredicateFuncs(func(o client.Object) bool {
	run, ok := o.(*securityv1.BackupVerifyRun)
	return ok && endedCofferRun(run)
})

// reader is what the Backup a verdict is written on is read with (Reader, else Client).
func (r *VerdictReconciler) reader() client.Reader {
	if r.Reader != nil {
		return r.Reader
	}
	return r.Client
}

// recordVerdict writes a coffer run's verdict on its Backup, read with rd: the mode's entry of
// status.verification and the Verified condition, in one optimistic write. A run that could not be
// carried out (BackupVerifyFailed) is no verdict and writes nothing; neither does a run whose
// Backup is gone or was replaced (another UID than the one the run was made for), nor an older
// verdict than the one recorded. Writing the same verdict twice changes nothing.
//
// It reports whether the Backup holds the run's verdict, or a newer one, when it returns.
func recordVerdict(ctx context.Context, rd client.Reader, c client.Client, run *securityv1.BackupVerifyRun, res *securityv1.BackupVerifyResult, eventType, msg string, now metav1.Time) (bool, error) {
	if run.Spec.Backend != securityv1.BackendCoffer || eventType == securityv1.EventBackupVerifyFailed || saysNothingOfTheBackup(res) {
		return false, nil
	}
	key := run.CofferBackup()
	b := &backupsv1.Backup{}
	if err := rd.Get(ctx, key, b); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading Backup %s to record the verdict: %w", key, err)
	}
	if uid := run.Labels[securityv1.LabelBackupUID]; uid != "" && uid != string(b.UID) {
		return false, nil
	}
	verdict := &backupsv1.VerificationVerdict{Result: backupsv1.VerificationPassed, Time: now,
		ResultRef: &backupsv1.VerificationResultRef{Namespace: res.Namespace, Name: res.Name}, Message: backend.Truncate(msg, 1024)}
	if eventType == securityv1.EventBackupVerifyMismatch {
		verdict.Result = backupsv1.VerificationFailed
	}
	orig := b.DeepCopy()
	if b.Status.Verification == nil {
		b.Status.Verification = &backupsv1.BackupVerification{}
	}
	slot := &b.Status.Verification.Checksum
	if mode(run) == securityv1.ModeFullRestore {
		slot = &b.Status.Verification.FullRestore
	}
	if old := *slot; old != nil && (old.ResultRef != nil && *old.ResultRef == *verdict.ResultRef || old.Time.After(now.Time)) {
		return true, nil
	}
	if verdict.Result == backupsv1.VerificationFailed {
		// Failures in a row of this mode: one is a signal, two confirm it (Backup.VerifyFailureConfirmed).
		verdict.Failures = 1
		if old := *slot; old != nil && old.Result == backupsv1.VerificationFailed {
			verdict.Failures = max(old.Failures, 1) + 1
		}
	}
	if mode(run) == securityv1.ModeFullRestore {
		if d, ok := backend.RestoreSeconds(res.Spec.Details); ok {
			verdict.RestoreDuration = &metav1.Duration{Duration: d}
		}
	}
	*slot = verdict
	cond := VerifiedCondition(b.Status.Verification)
	cond.ObservedGeneration = b.Generation
	cond.LastTransitionTime = now
	meta.SetStatusCondition(&b.Status.Conditions, cond)
	if err := c.Status().Patch(ctx, b, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("recording the verdict on Backup %s: %w", key, err)
	}
	ctrl.LoggerFrom(ctx).Info("Recorded the verdict on the Backup", "backup", klog.KObj(b), "mode", mode(run), "result", verdict.Result, "verified", cond.Reason)
	return true, nil
}

// saysNothingOfTheBackup reports whether the result's failure is about the sandbox, not the
// Backup: a sandbox someone tampered with during the run compared nothing that can be trusted, in
// either direction, so the run gives no verdict on the Backup.
func saysNothingOfTheBackup(res *securityv1.BackupVerifyResult) bool {
	for _, f := range res.Spec.Findings {
		if f.Code == securityv1.CodeSandboxTampered {
			return true
		}
	}
	return false
}

// VerifiedCondition is the Verified condition of a Backup's verdicts: False when the newest verdict
// of either mode failed (a failed full-restore first), else True with RestoreVerified when a
// full-restore passed, else True with ChecksumVerified.
func VerifiedCondition(v *backupsv1.BackupVerification) metav1.Condition {
	c := metav1.Condition{Type: backupsv1.ConditionVerified}
	if v == nil || v.Checksum == nil && v.FullRestore == nil {
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, "NotVerified", "no verification has ended"
		return c
	}
	failed := func(x *backupsv1.VerificationVerdict) bool {
		return x != nil && x.Result == backupsv1.VerificationFailed
	}
	passed := func(x *backupsv1.VerificationVerdict) bool {
		return x != nil && x.Result == backupsv1.VerificationPassed
	}
	switch {
	case failed(v.FullRestore):
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, backupsv1.ReasonRestoreMismatch, "full-restore: "+describeVerdict(v.FullRestore)
	case failed(v.Checksum):
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, backupsv1.ReasonChecksumMismatch, "checksum-only: "+describeVerdict(v.Checksum)
	case passed(v.FullRestore):
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, backupsv1.ReasonRestoreVerified, "full-restore: "+describeVerdict(v.FullRestore)
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, backupsv1.ReasonChecksumVerified, "checksum-only: "+describeVerdict(v.Checksum)
	}
	return c
}

func describeVerdict(v *backupsv1.VerificationVerdict) string {
	s := string(v.Result) + " at " + v.Time.UTC().Format("2006-01-02T15:04:05Z")
	if v.RestoreDuration != nil {
		s += ", restored in " + v.RestoreDuration.Duration.String()
	}
	if v.ResultRef != nil {
		s += " (BackupVerifyResult " + v.ResultRef.Namespace + "/" + v.ResultRef.Name + ")"
	}
	if v.Message != "" {
		s += ": " + v.Message
	}
	return s
}
