package verifyrun

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/verifier/internal/etcdsnap"
	"github.com/coffer-backup/coffer/verifier/internal/metrics"
	"github.com/coffer-backup/coffer/verifier/internal/velerocheck"
)

// DefaultTimeout bounds a run whose spec sets none.
const DefaultTimeout = 30 * time.Minute

// PollInterval is how often a full-restore checks its Restore (the spec's 10 s).
const PollInterval = 10 * time.Second

// Source is the SecurityEvent source of the verifier.
const Source = "ugallu-backup-verify"

// Reconciler runs one BackupVerifyRun.
type Reconciler struct {
	Client   client.Client
	Velero   *velerocheck.Checker
	Clock    clock.PassiveClock
	Recorder events.EventRecorder
	// EtcdSnapshotDir is --etcd-snapshot-dir.
	EtcdSnapshotDir        string
	ClusterID, ClusterName string
}

// Reconcile follows the spec's loop: terminal → nothing; "" → Running + BackupVerifyStarted;
// Running → execute the backend, and at the end one Result, the terminal phase, one SecurityEvent.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	run := &securityv1.BackupVerifyRun{}
	if err := r.Client.Get(ctx, req.NamespacedName, run); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if run.Status.Phase.IsTerminal() {
		return reconcile.Result{}, nil
	}
	now := metav1.NewTime(r.Clock.Now())
	if run.Status.Phase == "" || run.Status.Phase == securityv1.RunPending {
		orig := run.DeepCopy()
		run.Status.Phase = securityv1.RunRunning
		run.Status.StartTime = &now
		if err := r.Client.Status().Patch(ctx, run, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return reconcile.Result{}, err
		}
		if err := r.emit(ctx, run, securityv1.EventBackupVerifyStarted, securityv1.SeverityInfo, "Verification started", nil); err != nil {
			return reconcile.Result{}, err
		}
		r.Recorder.Eventf(run, nil, corev1.EventTypeNormal, securityv1.EventBackupVerifyStarted, "Verify", "Verifying %s backup %s (%s)", run.Spec.Backend, run.Spec.BackupRef.Name, mode(run))
		return reconcile.Result{RequeueAfter: time.Millisecond}, nil
	}

	// A Result exists only once the run finished executing: a crash after writing it resumes at
	// the terminal writes, never re-running the backend (the sandbox may be gone by then).
	if res, err := r.existingResult(ctx, run); err != nil {
		return reconcile.Result{}, err
	} else if res != nil {
		return reconcile.Result{}, r.finish(ctx, run, res, now)
	}

	out, done := r.execute(ctx, run, now)
	if !done {
		return reconcile.Result{RequeueAfter: PollInterval}, nil
	}
	if mode(run) == securityv1.ModeFullRestore {
		out.Findings = append(out.Findings, r.Velero.Cleanup(ctx, run)...)
		if run.Status.StartTime != nil {
			metrics.FullRestoreDuration.WithLabelValues(outcomeOf(out.Findings)).Observe(now.Sub(run.Status.StartTime.Time).Seconds())
		}
	}
	res, err := r.writeResult(ctx, run, out)
	if err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, r.finish(ctx, run, res, now)
}

func mode(run *securityv1.BackupVerifyRun) securityv1.Mode {
	if run.Spec.Mode == "" {
		return securityv1.ModeChecksumOnly
	}
	return run.Spec.Mode
}

// execute runs the backend, enforcing the timeout. done is false while a Restore is in flight.
func (r *Reconciler) execute(ctx context.Context, run *securityv1.BackupVerifyRun, now metav1.Time) (velerocheck.Outcome, bool) {
	timeout := DefaultTimeout
	if run.Spec.Timeout != nil {
		timeout = run.Spec.Timeout.Duration
	}
	if run.Status.StartTime != nil && now.Sub(run.Status.StartTime.Time) > timeout {
		return velerocheck.Outcome{Done: true, Findings: []securityv1.Finding{{
			Code: securityv1.CodeTimeout, Severity: securityv1.SeverityHigh,
			Message: fmt.Sprintf("the verification did not finish within its timeout of %s", timeout),
		}}}, true
	}
	switch {
	case run.Spec.Backend == securityv1.BackendEtcdSnapshot:
		// The check runs in a child process that the run's own timeout bounds.
		checkCtx := ctx
		if run.Status.StartTime != nil {
			var cancel context.CancelFunc
			checkCtx, cancel = context.WithDeadline(ctx, run.Status.StartTime.Add(timeout))
			defer cancel()
		}
		rep := etcdsnap.Verify(checkCtx, r.EtcdSnapshotDir, run.Spec.BackupRef.Name)
		return velerocheck.Outcome{Done: true, Findings: rep.Findings, ComputedChecksum: rep.Checksum, SizeBytes: rep.SizeBytes, Details: rep.Details}, true
	case mode(run) == securityv1.ModeFullRestore:
		out := r.Velero.FullRestore(ctx, run)
		return out, out.Done
	default:
		return r.Velero.Checksum(ctx, run), true
	}
}

func resultName(run *securityv1.BackupVerifyRun) string { return run.Name }

func (r *Reconciler) existingResult(ctx context.Context, run *securityv1.BackupVerifyRun) (*securityv1.BackupVerifyResult, error) {
	res := &securityv1.BackupVerifyResult{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: resultName(run)}, res)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if res.Spec.RunRef.UID != run.UID {
		return nil, fmt.Errorf("BackupVerifyResult %s/%s belongs to another run (uid %s)", res.Namespace, res.Name, res.Spec.RunRef.UID)
	}
	return res, nil
}

// writeResult creates the run's one Result (tolerating AlreadyExists) and sets its worst severity
// through the status subresource.
func (r *Reconciler) writeResult(ctx context.Context, run *securityv1.BackupVerifyRun, out velerocheck.Outcome) (*securityv1.BackupVerifyResult, error) {
	findings := out.Findings
	sort.SliceStable(findings, func(i, j int) bool { return findings[i].Severity.Rank() > findings[j].Severity.Rank() })
	if len(findings) > securityv1.MaxFindings {
		left := len(findings) - (securityv1.MaxFindings - 1)
		findings = append(findings[:securityv1.MaxFindings-1], securityv1.Finding{Code: securityv1.CodeFindingsTruncated,
			Severity: securityv1.SeverityInfo, Message: strconv.Itoa(left) + " further findings were left out"})
	}
	res := &securityv1.BackupVerifyResult{
		ObjectMeta: metav1.ObjectMeta{Name: resultName(run), Namespace: run.Namespace,
			Labels: map[string]string{securityv1.LabelRun: backupsv1.BoundedName(63, run.Name)}},
		Spec: securityv1.BackupVerifyResultSpec{
			RunRef:  securityv1.RunReference{Name: run.Name, UID: run.UID},
			Backend: run.Spec.Backend, BackupRef: run.Spec.BackupRef, Mode: mode(run),
			RecordedChecksum: out.RecordedChecksum, ComputedChecksum: out.ComputedChecksum, SizeBytes: out.SizeBytes,
			ObjectsExpected: out.ObjectsExpected, ObjectsRestored: out.ObjectsRestored,
			Details: out.Details, Findings: findings,
		},
	}
	err := r.Client.Create(ctx, res)
	if apierrors.IsAlreadyExists(err) {
		existing, gerr := r.existingResult(ctx, run)
		if gerr != nil {
			return nil, gerr
		}
		res = existing
	} else if err != nil {
		return nil, fmt.Errorf("creating BackupVerifyResult: %w", err)
	}
	return res, nil
}

// finish sets the Result's worst severity, the run's terminal phase, and emits the terminal
// SecurityEvent. Each write is idempotent, so a crash between them is repaired on the next pass.
func (r *Reconciler) finish(ctx context.Context, run *securityv1.BackupVerifyRun, res *securityv1.BackupVerifyResult, now metav1.Time) error {
	worst := securityv1.WorstSeverity(res.Spec.Findings)
	if res.Status.WorstSeverity != worst {
		res.Status.WorstSeverity = worst
		if err := r.Client.Status().Update(ctx, res); err != nil {
			return fmt.Errorf("writing the Result's worst severity: %w", err)
		}
	}
	phase := securityv1.RunSucceeded
	if worst.AtLeast(securityv1.SeverityHigh) {
		phase = securityv1.RunFailed
	}
	eventType := securityv1.TerminalEventType(phase, res.Spec.Findings)
	top := securityv1.TopFinding(res.Spec.Findings)
	msg := "Verification succeeded"
	sev := securityv1.SeverityInfo
	if top != nil {
		msg, sev = top.Message, top.Severity
	}
	attrs := map[string]string{"result": res.Name, "findings": strconv.Itoa(len(res.Spec.Findings))}
	if top != nil {
		attrs["topFinding"] = top.Code
	}
	// The event first: once the phase is terminal the run is never reconciled again.
	if err := r.emit(ctx, run, eventType, sev, msg, attrs); err != nil {
		return err
	}
	orig := run.DeepCopy()
	run.Status.Phase = phase
	run.Status.CompletionTime = &now
	run.Status.ResultRef = res.Name
	run.Status.WorstSeverity = worst
	run.Status.Message = msg
	if err := r.Client.Status().Patch(ctx, run, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("writing the run's terminal phase: %w", err)
	}
	metrics.Runs.WithLabelValues(string(run.Spec.Backend), string(mode(run)), string(phase)).Inc()
	for _, f := range res.Spec.Findings {
		metrics.Findings.WithLabelValues(string(f.Severity)).Inc()
	}
	evType := corev1.EventTypeNormal
	if phase == securityv1.RunFailed {
		evType = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(run, res, evType, eventType, "Verify", "%s", msg)
	return nil
}

func outcomeOf(findings []securityv1.Finding) string {
	if securityv1.WorstSeverity(findings).AtLeast(securityv1.SeverityHigh) {
		return string(securityv1.RunFailed)
	}
	return string(securityv1.RunSucceeded)
}

// EventName is the deterministic name of a run's SecurityEvent of one type: emitted once per run.
func EventName(run *securityv1.BackupVerifyRun, eventType string) string {
	return strings.ToLower(backupsv1.BoundedName(253, "bvr", run.Namespace, run.Name, string(run.UID)[:8], eventType))
}

func (r *Reconciler) emit(ctx context.Context, run *securityv1.BackupVerifyRun, eventType string, sev securityv1.Severity, msg string, attrs map[string]string) error {
	if attrs == nil {
		attrs = map[string]string{}
	}
	attrs["backend"], attrs["mode"], attrs["backup"] = string(run.Spec.Backend), string(mode(run)), run.Spec.BackupRef.Name
	if len(msg) > 4096 {
		msg = msg[:4096]
	}
	se := &securityv1.SecurityEvent{
		ObjectMeta: metav1.ObjectMeta{Name: EventName(run, eventType),
			Labels: map[string]string{securityv1.LabelRunUID: string(run.UID)}},
		Spec: securityv1.SecurityEventSpec{
			Type: eventType, Class: securityv1.EventClassOf(eventType), Severity: sev,
			ClusterID: r.ClusterID, ClusterName: r.ClusterName, Source: Source,
			Subject: securityv1.EventSubject{APIVersion: securityv1.GroupVersion.String(), Kind: "BackupVerifyRun",
				Namespace: run.Namespace, Name: run.Name, UID: run.UID},
			OccurredAt: metav1.NewTime(r.Clock.Now()), Message: msg, Attributes: attrs,
		},
	}
	if err := r.Client.Create(ctx, se); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("emitting SecurityEvent %s: %w", eventType, err)
	}
	return nil
}
