package verifyrun

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/verifier/internal/backend"
	"github.com/coffer-backup/coffer/verifier/internal/metrics"
)

// DefaultTimeout bounds a run whose spec sets none (the CRD defaults it to the same 15m, as
// ugallu's does; this covers runs stored before that default).
const DefaultTimeout = 15 * time.Minute

// PollInterval is the longest a full-restore waits between two checks of its Restore (the spec's
// 10 s). A younger run checks sooner (pollAfter): after a twentieth of its age, and at least every
// MinPollInterval, so a short restore is seen ended within about 5 % of its time rather than up
// to 10 s later (each wait of a full-restore, up to three with volume data, added its share: a
// verification of 1 GiB whose restores took 18 s took 35 s), at the cost of a Get or two per check.
const (
	PollInterval    = 10 * time.Second
	MinPollInterval = 500 * time.Millisecond
)

// pollAfter is how long a full-restore of age waits before it checks its Restore again.
func pollAfter(age time.Duration) time.Duration {
	return min(PollInterval, max(MinPollInterval, age/20))
}

// Retries after infrastructure trouble (the API server, Velero, the object store, the check's
// process) back off per run from RetryBase, doubling up to RetryMax, and never past the run's
// deadline.
const (
	RetryBase = time.Second
	RetryMax  = time.Minute
)

// CleanupTimeout bounds the cleanup of a full-restore (its Restore and sandboxes), which runs
// after the run's deadline when the run timed out.
const CleanupTimeout = 30 * time.Second

// Source is the SecurityEvent source of the verifier: the name ugallu's backup-verify emits
// under, so that its consumers find the verifier's events where they find ugallu's.
const Source = "ugallu-backup-verify"

// Instance is the SecurityEvent source instance: which implementation of backup-verify emitted.
const Instance = "coffer"

// LabelCorrelationID is ugallu's label of an event's correlation ID.
const LabelCorrelationID = "ugallu.io/correlation-id"

// ReasonSecurityEventsNotInstalled is the reason of the Warning Event on a run whose
// SecurityEvent could not be emitted because the cluster serves no SecurityEvent kind.
const ReasonSecurityEventsNotInstalled = "SecurityEventsNotInstalled"

// Reconciler runs one BackupVerifyRun: the lifecycle every backend shares, around the checks of
// the run's backend.
type Reconciler struct {
	Client client.Client
	// Reader reads a run's Result uncached: the verifier caches no Result (a policy's 100,000
	// would be most of its memory), and reads one only while its run is in flight. Nil means
	// Client (SetupWithManager sets the manager's API reader).
	Reader client.Reader
	// Backends verify the runs of each spec.backend; a run of a backend missing here fails
	// BackendNotConfigured, and a full-restore of a backend that is no backend.Restorer fails
	// ModeNotSupported.
	Backends               map[securityv1.Backend]backend.Backend
	Clock                  clock.PassiveClock
	Recorder               events.EventRecorder
	ClusterID, ClusterName string
	// Version is the verifier's version, written as its SecurityEvents' source version.
	Version string

	backoffOnce sync.Once
	backoff     workqueue.TypedRateLimiter[types.UID]
}

// scope is one pass over a run: the run as read (orig) and as it is being changed, and the time.
// Its status is written once, when the pass ends (patchStatus).
type scope struct {
	run, orig *securityv1.BackupVerifyRun
	now       metav1.Time
	deadline  time.Time
	timeout   time.Duration
	// result is the run's Result once written or found.
	result *securityv1.BackupVerifyResult
}

// Reconcile follows the spec's loop: terminal → nothing; "" → Running + BackupVerifyStarted;
// Running → execute the backend, and at the end one Result, one SecurityEvent, the terminal phase.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, retErr error) {
	run := &securityv1.BackupVerifyRun{}
	if err := r.Client.Get(ctx, req.NamespacedName, run); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if run.Status.Phase.IsTerminal() {
		return reconcile.Result{}, nil
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("run", klog.KObj(run), "runUID", run.UID))
	now := metav1.NewTime(r.Clock.Now())
	if run.Status.Phase == "" || run.Status.Phase == securityv1.RunPending {
		if err := r.start(ctx, run, now); err != nil {
			return reconcile.Result{}, err
		}
	}
	s := &scope{run: run, orig: run.DeepCopy(), now: now, timeout: timeoutOf(run)}
	s.deadline = now.Add(s.timeout)
	if run.Status.StartTime != nil {
		s.deadline = run.Status.StartTime.Add(s.timeout)
	}
	defer r.patchStatus(ctx, s, &res, &retErr)
	return r.advance(ctx, s)
}

func timeoutOf(run *securityv1.BackupVerifyRun) time.Duration {
	if run.Spec.Timeout != nil && run.Spec.Timeout.Duration > 0 {
		return run.Spec.Timeout.Duration
	}
	return DefaultTimeout
}

func mode(run *securityv1.BackupVerifyRun) securityv1.Mode {
	if run.Spec.Mode == "" {
		return securityv1.ModeChecksumOnly
	}
	return run.Spec.Mode
}

// start records the start of a run: the BackupVerifyStarted SecurityEvent first (named from the
// run, so a second attempt finds it instead of emitting another), then phase Running and
// startTime in one optimistic write. A failure of either leaves the run Pending and is retried:
// the event is neither lost nor doubled, and the deadline counts from a persisted startTime.
func (r *Reconciler) start(ctx context.Context, run *securityv1.BackupVerifyRun, now metav1.Time) error {
	if err := r.emit(ctx, run, securityv1.EventBackupVerifyStarted, securityv1.SeverityInfo, "Verification started", nil); err != nil {
		return err
	}
	orig := run.DeepCopy()
	run.Status.Phase = securityv1.RunRunning
	run.Status.StartTime = &now
	setCondition(run, securityv1.ConditionProgressing, metav1.ConditionTrue, securityv1.ReasonVerifying,
		fmt.Sprintf("verifying %s backup %s (%s)", run.Spec.Backend, run.Spec.BackupRef.Name, mode(run)), now)
	if err := r.Client.Status().Patch(ctx, run, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("recording the run's start: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("Verification started", "phase", run.Status.Phase, "backend", run.Spec.Backend, "mode", mode(run),
		"backup", run.Spec.BackupRef.Name, "timeout", timeoutOf(run))
	r.Recorder.Eventf(run, nil, corev1.EventTypeNormal, securityv1.EventBackupVerifyStarted, "Verify", "Verifying %s backup %s (%s)", run.Spec.Backend, run.Spec.BackupRef.Name, mode(run))
	return nil
}

// advance takes a Running run one step: a pass of its backend, then either a retry or a poll
// (bounded by the deadline), or its end: cleanup, the Result, the terminal event and status.
func (r *Reconciler) advance(ctx context.Context, s *scope) (reconcile.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	// A Result of this run exists only once its execution is over: a crash after writing it
	// resumes at the terminal writes, never re-running the backend (the sandbox may be gone).
	res, err := r.ownResult(ctx, s)
	if err != nil {
		return reconcile.Result{}, err
	}
	if res != nil {
		log.V(1).Info("Resuming at the terminal writes", "result", klog.KObj(res))
		return reconcile.Result{}, r.finish(ctx, s, res)
	}

	remaining := s.deadline.Sub(s.now.Time)
	var out backend.Outcome
	var execErr error
	expired := remaining <= 0
	if !expired {
		log.V(1).Info("Running the backend", "backend", s.run.Spec.Backend, "mode", mode(s.run), "remaining", remaining.Round(time.Second))
		ectx, cancel := context.WithTimeout(ctx, remaining)
		out, execErr = r.execute(ectx, s.run)
		// A pass that ended with its context, not one that finished just in time.
		expired = ectx.Err() != nil && ctx.Err() == nil && (execErr != nil || !out.Done)
		cancel()
	}
	if ctx.Err() != nil {
		return reconcile.Result{}, ctx.Err() // the manager is stopping: the next leader resumes
	}
	switch {
	case expired:
		out = timedOut(s, out, execErr)
	case execErr != nil && errors.Is(execErr, reconcile.TerminalError(nil)):
		out = failed(out, message(execErr))
	case execErr != nil:
		delay := min(r.retryDelay(s.run.UID), r.untilDeadline(s))
		msg := "retrying in " + delay.Round(time.Second).String() + ": " + message(execErr)
		if c := meta.FindStatusCondition(s.run.Status.Conditions, securityv1.ConditionProgressing); c == nil || c.Reason != securityv1.ReasonRetrying {
			log.Info("Verification meets infrastructure trouble; retrying until the run's timeout", "error", message(execErr), "retryIn", delay, "deadline", s.deadline)
		} else {
			log.V(1).Info("Retrying", "error", message(execErr), "retryIn", delay)
		}
		setCondition(s.run, securityv1.ConditionProgressing, metav1.ConditionTrue, securityv1.ReasonRetrying, msg, s.now)
		return reconcile.Result{RequeueAfter: delay}, nil
	case !out.Done:
		what := "the restore"
		if w, ok := r.Backends[s.run.Spec.Backend].(backend.Waiter); ok {
			what = w.Waiting(s.run)
		}
		msg := "waiting for " + what
		age := time.Duration(0)
		if st := s.run.Status.StartTime; st != nil {
			age = s.now.Sub(st.Time)
		}
		poll := min(pollAfter(age), r.untilDeadline(s))
		log.V(1).Info("Restore in progress", "restore", what, "pollIn", poll)
		setCondition(s.run, securityv1.ConditionProgressing, metav1.ConditionTrue, securityv1.ReasonRestoreInProgress, msg, s.now)
		return reconcile.Result{RequeueAfter: poll}, nil
	}
	if rs, ok := r.Backends[s.run.Spec.Backend].(backend.Restorer); ok && mode(s.run) == securityv1.ModeFullRestore {
		log.V(1).Info("Cleaning up the restore and sandboxes")
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
		out.Findings = append(out.Findings, rs.Cleanup(cctx, s.run)...)
		cancel()
	}
	log.V(1).Info("Writing the Result", "findings", len(out.Findings))
	if res, err = r.writeResult(ctx, s, out); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, r.finish(ctx, s, res)
}

// untilDeadline is how long the run has left now (the pass may have taken a while), at least
// 100 ms: a requeue of 0 would never come back, and the next pass ends the run if it is late.
func (r *Reconciler) untilDeadline(s *scope) time.Duration {
	return max(s.deadline.Sub(r.Clock.Now()), 100*time.Millisecond)
}

// timedOut ends a run whose deadline passed: a timeout finding (medium: it says the verification
// did not happen, nothing about the backup), the facts found before, and the failure.
func timedOut(s *scope, out backend.Outcome, lastErr error) backend.Outcome {
	msg := fmt.Sprintf("the verification did not finish within its timeout of %s", s.timeout)
	if lastErr != nil && !errors.Is(lastErr, context.DeadlineExceeded) {
		msg += "; the last attempt failed: " + message(lastErr)
	} else if lastErr == nil {
		if c := meta.FindStatusCondition(s.run.Status.Conditions, securityv1.ConditionProgressing); c != nil && c.Reason == securityv1.ReasonRetrying {
			msg += "; " + c.Message
		}
	}
	out = failed(out, msg)
	out.Findings = append(out.Findings, securityv1.Finding{Code: securityv1.CodeTimeout, Severity: securityv1.SeverityMedium, Message: backend.Truncate(msg, 4096)})
	return out
}

// failed is an outcome of a verification that could not be carried out: the facts found before
// it stopped, and why.
func failed(out backend.Outcome, why string) backend.Outcome {
	done := backend.Outcome{Done: true, Findings: out.Findings, RecordedChecksum: out.RecordedChecksum, ComputedChecksum: out.ComputedChecksum,
		ChecksumBasis: out.ChecksumBasis, SizeBytes: out.SizeBytes, Details: map[string]string{}}
	for k, v := range out.Details {
		done.Details[k] = v
	}
	done.Details[securityv1.DetailFailure] = backend.Truncate(why, 4096)
	return done
}

// execute runs one pass of the run's backend within ctx (the run's deadline). A nil error and
// Done mean the outcome is final; an error is infrastructure trouble, final when wrapped in
// reconcile.TerminalError.
func (r *Reconciler) execute(ctx context.Context, run *securityv1.BackupVerifyRun) (backend.Outcome, error) {
	b, ok := r.Backends[run.Spec.Backend]
	if !ok {
		return backend.Outcome{}, reconcile.TerminalError(fmt.Errorf("%s: this verifier has no %s backend configured (see its flags in deploy/verifier/manager)",
			securityv1.ReasonBackendNotConfigured, run.Spec.Backend))
	}
	if mode(run) != securityv1.ModeFullRestore {
		return b.Checksum(ctx, run)
	}
	rs, ok := b.(backend.Restorer)
	if !ok {
		return backend.Outcome{}, reconcile.TerminalError(fmt.Errorf("%s: the %s backend verifies by checksum only", securityv1.ReasonModeNotSupported, run.Spec.Backend))
	}
	return rs.FullRestore(ctx, run)
}

func (r *Reconciler) retryDelay(uid types.UID) time.Duration {
	r.backoffOnce.Do(func() {
		r.backoff = workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](RetryBase, RetryMax)
	})
	return r.backoff.When(uid)
}

func (r *Reconciler) forgetRetries(uid types.UID) {
	if r.backoff != nil {
		r.backoff.Forget(uid)
	}
}

func resultName(run *securityv1.BackupVerifyRun) string { return securityv1.ResultName(run.Name) }

// ownResult returns the run's Result, if written. A Result under the run's name that belongs to
// another run (an earlier run of the same name, deleted and created again before the garbage
// collector removed its Result, or whose Result was orphaned) is not this run's verdict: it is
// deleted, exactly that object, and this run writes its own. Nothing of it is adopted.
func (r *Reconciler) ownResult(ctx context.Context, s *scope) (*securityv1.BackupVerifyResult, error) {
	res := &securityv1.BackupVerifyResult{}
	rd := client.Reader(r.Client)
	if r.Reader != nil {
		rd = r.Reader
	}
	err := rd.Get(ctx, client.ObjectKey{Namespace: s.run.Namespace, Name: resultName(s.run)}, res)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading BackupVerifyResult: %w", err)
	}
	if res.Spec.RunUID() == s.run.UID {
		return res, nil
	}
	ctrl.LoggerFrom(ctx).Info("Deleting the BackupVerifyResult of an earlier run of the same name", "result", klog.KObj(res), "itsRunUID", res.Spec.RunUID())
	if err := r.Client.Delete(ctx, res, client.Preconditions{UID: &res.UID}); err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("deleting BackupVerifyResult %s of an earlier run (uid %s): %w", res.Name, res.Spec.RunUID(), err)
	}
	return nil, nil
}

// writeResult creates the run's one Result, owned by the run and labelled with its UID.
func (r *Reconciler) writeResult(ctx context.Context, s *scope, out backend.Outcome) (*securityv1.BackupVerifyResult, error) {
	run := s.run
	findings := out.Findings
	for i := range findings {
		findings[i].Message = backend.Truncate(findings[i].Message, 4096)
		findings[i].Detail = backend.Truncate(findings[i].Message, 1024)
		findings[i].Object = backend.Truncate(findings[i].Object, 512)
	}
	sort.SliceStable(findings, func(i, j int) bool { return findings[i].Severity.Rank() > findings[j].Severity.Rank() })
	if len(findings) > securityv1.MaxFindings {
		left := len(findings) - (securityv1.MaxFindings - 1)
		findings = append(findings[:securityv1.MaxFindings-1], securityv1.Finding{Code: securityv1.CodeFindingsTruncated,
			Severity: securityv1.SeverityInfo, Message: strconv.Itoa(left) + " further findings were left out"})
	}
	controller := true
	res := &securityv1.BackupVerifyResult{
		ObjectMeta: metav1.ObjectMeta{Name: resultName(run), Namespace: run.Namespace,
			Labels: map[string]string{securityv1.LabelRun: backupsv1.BoundedName(63, run.Name), securityv1.LabelRunUID: string(run.UID)},
			// No blockOwnerDeletion: that would need update on the runs' finalizers.
			OwnerReferences: []metav1.OwnerReference{{APIVersion: securityv1.GroupVersion.String(), Kind: "BackupVerifyRun",
				Name: run.Name, UID: run.UID, Controller: &controller}}},
		Spec: securityv1.BackupVerifyResultSpec{
			RunRef:  &securityv1.RunReference{Name: run.Name, UID: run.UID},
			Backend: run.Spec.Backend, BackupRef: run.Spec.BackupRef.DeepCopy(), Mode: mode(run),
			RecordedChecksum: out.RecordedChecksum, ComputedChecksum: out.ComputedChecksum, SizeBytes: out.SizeBytes,
			ChecksumBasis:   out.ChecksumBasis,
			ObjectsExpected: out.ObjectsExpected, ObjectsRestored: out.ObjectsRestored,
			// ugallu's fields, for its consumers.
			DerivedFromRun:      &securityv1.DerivedFromRun{Name: run.Name},
			Checksum:            strings.TrimPrefix(out.ComputedChecksum, "sha256:"),
			RestoredObjectCount: int64(out.ObjectsRestored),

			Details: out.Details, Findings: findings,
		},
	}
	for attempt := 0; ; attempt++ {
		err := r.Client.Create(ctx, res)
		if err == nil {
			return res, nil
		}
		if !apierrors.IsAlreadyExists(err) || attempt > 0 {
			return nil, fmt.Errorf("creating BackupVerifyResult: %w", err)
		}
		existing, gerr := r.ownResult(ctx, s)
		if gerr != nil {
			return nil, gerr
		}
		if existing != nil {
			return existing, nil
		}
		res.ResourceVersion = "" // an earlier run's Result was in the way and is gone: once more
	}
}

// finish sets the Result's worst severity, emits the terminal SecurityEvent and sets the run's
// terminal status (written by patchStatus). Each write is idempotent, so a crash between them is
// repaired on the next pass.
func (r *Reconciler) finish(ctx context.Context, s *scope, res *securityv1.BackupVerifyResult) error {
	s.result = res
	worst := securityv1.WorstSeverity(res.Spec.Findings)
	if res.Status.WorstSeverity != worst {
		res.Status.WorstSeverity = worst
		if err := r.Client.Status().Update(ctx, res); err != nil {
			return fmt.Errorf("writing the Result's worst severity: %w", err)
		}
	}
	// As ugallu runs it: a run that was carried out Succeeded, whatever it found (its verdict is
	// the Result and the event: BackupVerifyMismatch when a finding is high or worse); a run that
	// could not be carried out Failed, with BackupVerifyFailed (Anomaly, high).
	failure := res.Spec.Details[securityv1.DetailFailure]
	phase := securityv1.RunSucceeded
	if failure != "" {
		phase = securityv1.RunFailed
	}
	eventType := securityv1.TerminalEventType(phase, res.Spec.Findings)
	top := securityv1.TopFinding(res.Spec.Findings)
	msg, sev := "Verification succeeded", securityv1.SeverityInfo
	switch {
	case eventType == securityv1.EventBackupVerifyMismatch:
		msg, sev = top.Message, worst
	case eventType == securityv1.EventBackupVerifyFailed:
		msg, sev = "the verification could not be carried out: "+failure, securityv1.SeverityHigh
	case top != nil:
		msg = top.Message
	}
	signals := map[string]string{"result.name": res.Name, "findings.count": strconv.Itoa(len(res.Spec.Findings))}
	if len(res.Spec.Findings) > 0 {
		signals["findings.first.code"] = res.Spec.Findings[0].Code
		signals["findings.top.code"] = top.Code
		signals["findings.worstSeverity"] = string(worst)
	}
	if res.Spec.ChecksumBasis != "" {
		signals[SignalChecksumBasis] = string(res.Spec.ChecksumBasis)
	}
	// The event first: once the phase is terminal the run is never reconciled again. The verdict
	// on the Backup follows the terminal status (VerdictReconciler).
	if err := r.emit(ctx, s.run, eventType, sev, msg, signals); err != nil {
		return err
	}
	s.run.Status.Phase = phase
	if s.run.Status.CompletionTime == nil {
		s.run.Status.CompletionTime = s.now.DeepCopy()
	}
	s.run.Status.ResultRef = &securityv1.ResultReference{Name: res.Name}
	s.run.Status.WorstSeverity = worst
	s.run.Status.Message = backend.Truncate(msg, 32768)
	ready := metav1.ConditionFalse
	if eventType == securityv1.EventBackupVerifyCompleted {
		ready = metav1.ConditionTrue
	}
	setCondition(s.run, securityv1.ConditionReady, ready, eventType, msg, s.now)
	setCondition(s.run, securityv1.ConditionProgressing, metav1.ConditionFalse, eventType, msg, s.now)
	return nil
}

// patchStatus writes the pass's status changes in one merge patch with an optimistic lock. The
// effects of a run's end (metrics, its Kubernetes Event, the log line) follow the write that made
// it terminal, and only that write: each is observed once per run.
func (r *Reconciler) patchStatus(ctx context.Context, s *scope, res *reconcile.Result, retErr *error) {
	if apiequality.Semantic.DeepEqual(s.orig.Status, s.run.Status) {
		return
	}
	if err := r.Client.Status().Patch(ctx, s.run, client.MergeFromWithOptions(s.orig, client.MergeFromWithOptimisticLock{})); err != nil {
		if *retErr == nil {
			*res, *retErr = reconcile.Result{}, fmt.Errorf("patching BackupVerifyRun status: %w", err)
		}
		return
	}
	if !s.orig.Status.Phase.IsTerminal() && s.run.Status.Phase.IsTerminal() {
		r.ended(ctx, s)
	}
}

// ended records a run's end: metrics, the Kubernetes Event, one log line.
func (r *Reconciler) ended(ctx context.Context, s *scope) {
	run := s.run
	r.forgetRetries(run.UID)
	phase := string(run.Status.Phase)
	metrics.Runs.WithLabelValues(string(run.Spec.Backend), string(mode(run)), phase).Inc()
	var findings []securityv1.Finding
	if s.result != nil {
		findings = s.result.Spec.Findings
	}
	for _, f := range findings {
		metrics.Findings.WithLabelValues(string(f.Severity)).Inc()
	}
	if mode(run) == securityv1.ModeFullRestore && run.Status.StartTime != nil && run.Status.CompletionTime != nil {
		metrics.FullRestoreDuration.WithLabelValues(phase).Observe(run.Status.CompletionTime.Sub(run.Status.StartTime.Time).Seconds())
	}
	if s.result != nil && mode(run) == securityv1.ModeFullRestore {
		if d, ok := backend.RestoreSeconds(s.result.Spec.Details); ok {
			metrics.RestoreDuration.WithLabelValues(string(run.Spec.Backend)).Observe(d.Seconds())
		}
	}
	reason := ""
	if c := meta.FindStatusCondition(run.Status.Conditions, securityv1.ConditionReady); c != nil {
		reason = c.Reason
	}
	evType := corev1.EventTypeNormal
	if run.Status.Phase == securityv1.RunFailed {
		evType = corev1.EventTypeWarning
	}
	var related runtime.Object
	if s.result != nil {
		related = s.result
	}
	r.Recorder.Eventf(run, related, evType, reason, "Verify", "%s", backend.Truncate(run.Status.Message, 1024))
	ctrl.LoggerFrom(ctx).Info("Verification finished", "phase", phase, "reason", reason, "worstSeverity", run.Status.WorstSeverity,
		"result", run.Status.ResultName(), "findings", len(findings), "message", backend.Truncate(run.Status.Message, 1024))
}

// message is an error's text for a status, finding or event, without controller-runtime's
// "terminal error: " marker.
func message(err error) string { return strings.ReplaceAll(err.Error(), "terminal error: ", "") }

func setCondition(run *securityv1.BackupVerifyRun, typ string, status metav1.ConditionStatus, reason, msg string, now metav1.Time) {
	meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason,
		Message: backend.Truncate(msg, 32768), ObservedGeneration: run.Generation, LastTransitionTime: now})
}

// EventName is the deterministic name of a run's SecurityEvent of one type: emitted once per run.
func EventName(run *securityv1.BackupVerifyRun, eventType string) string {
	return strings.ToLower(backupsv1.BoundedName(253, "bvr", run.Namespace, run.Name, string(run.UID)[:8], eventType))
}

// emit creates the run's SecurityEvent of one type, in ugallu's shape as its backup-verify writes
// it: subject the cluster (unresolved), the signals ugallu's consumers read (run.*, backup.*,
// findings.*), plus Coffer's (run.uid, backup.storageLocation, result.name, findings.top.code,
// findings.worstSeverity, message). The events of one run share a correlation ID (the run's UID)
// and the terminal event names the Started one as its parent. Its name is deterministic per run
// and type, so a retry finds it instead of emitting it twice.
//
// Without a SecurityEvent CRD in the cluster (neither ugallu's nor deploy/verifier/securityevents)
// the run goes on: it is verified and ends as usual, and a Warning Event on the run says that no
// SecurityEvent could be emitted.
// SignalChecksumBasis is the terminal event's signal that says what the checksum was compared with
// (the Result's checksumBasis); a run that compared it with nothing is an Audit, not Compliance.
const SignalChecksumBasis = "checksum.basis"

func (r *Reconciler) emit(ctx context.Context, run *securityv1.BackupVerifyRun, eventType string, sev securityv1.Severity, msg string, extra map[string]string) error {
	signals := map[string]string{
		"run.namespace": run.Namespace, "run.name": run.Name, "run.uid": string(run.UID),
		"backup.backend": string(run.Spec.Backend), "backup.mode": string(mode(run)), "backup.refName": run.Spec.BackupRef.Name,
		"message": backend.Truncate(msg, 4096),
	}
	if run.Spec.BackupRef.Namespace != "" {
		signals["backup.refNamespace"] = run.Spec.BackupRef.Namespace
	}
	if run.Spec.BackupRef.StorageLocation != "" {
		signals["backup.storageLocation"] = run.Spec.BackupRef.StorageLocation
	}
	for k, v := range extra {
		signals[k] = v
	}
	se := &securityv1.SecurityEvent{
		ObjectMeta: metav1.ObjectMeta{Name: EventName(run, eventType),
			Labels: map[string]string{securityv1.LabelRunUID: string(run.UID), LabelCorrelationID: string(run.UID),
				"app.kubernetes.io/managed-by": Source}},
		Spec: securityv1.SecurityEventSpec{
			Class: securityv1.EventClassFor(eventType, securityv1.ChecksumBasis(signals[SignalChecksumBasis])), Type: eventType, Severity: sev,
			ClusterIdentity: securityv1.ClusterIdentity{ClusterID: r.ClusterID, ClusterName: r.ClusterName},
			Source:          securityv1.SourceRef{APIVersion: securityv1.GroupVersion.String(), Kind: Source, Name: Source, Version: r.Version, Instance: Instance},
			Subject: securityv1.EventSubject{Kind: securityv1.SubjectKindCluster, Name: "cluster", Namespace: run.Namespace,
				Unresolved: true},
			DetectedAt:    metav1.NewTime(r.Clock.Now()),
			Signals:       signals,
			CorrelationID: string(run.UID),
		},
	}
	if eventType != securityv1.EventBackupVerifyStarted {
		se.Spec.Parents = []corev1.ObjectReference{{APIVersion: securityv1.GroupVersion.String(), Kind: "SecurityEvent",
			Name: EventName(run, securityv1.EventBackupVerifyStarted)}}
	}
	err := r.Client.Create(ctx, se)
	switch {
	case err == nil || apierrors.IsAlreadyExists(err):
		return nil
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err): // a cluster-scoped create finds no resource

		r.Recorder.Eventf(run, nil, corev1.EventTypeWarning, ReasonSecurityEventsNotInstalled, "Verify",
			"SecurityEvent %s not emitted: the cluster serves no securityevents.security.ugallu.io (install ugallu, or apply deploy/verifier/securityevents)", eventType)
		ctrl.LoggerFrom(ctx).Info("SecurityEvent not emitted: no SecurityEvent CRD in the cluster", "type", eventType)
		return nil
	default:
		return fmt.Errorf("emitting SecurityEvent %s: %w", eventType, err)
	}
}
