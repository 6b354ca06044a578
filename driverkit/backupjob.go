package driverkit

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// backupScope is one reconcile of a BackupJob.
type backupScope struct {
	job, orig *backupsv1.BackupJob
	now       metav1.Time
	deadline  time.Time // known once the strategy is read
}

// reconcileBackupJob drives one BackupJob; its status is written once, at the end.
func (k *Kit[S]) reconcileBackupJob(ctx context.Context, req reconcile.Request) (res reconcile.Result, retErr error) {
	job := &backupsv1.BackupJob{}
	if err := k.Client.Get(ctx, req.NamespacedName, job); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	log := ctrl.LoggerFrom(ctx).WithValues("backupJob", klog.KObj(job))
	ctx = ctrl.LoggerInto(ctx, log)
	if !job.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	if job.IsTerminal() {
		return reconcile.Result{}, k.finished(ctx, job, job.ClaimedBy())
	}
	resolved, err := k.claimedStrategy(ctx, job)
	if err != nil || resolved == nil {
		return reconcile.Result{}, err
	}
	s := &backupScope{job: job, now: metav1.NewTime(k.Clock.Now())}
	if job.Status.Phase != backupsv1.BackupJobRunning || job.Status.Strategy == nil {
		if err := k.claimBackupJob(ctx, s, resolved); err != nil {
			return reconcile.Result{}, err
		}
	}
	s.orig = job.DeepCopy()
	defer k.writeRunStatus(ctx, "backup", s.job, s.orig, &res, &retErr)
	res, err = k.runBackup(ctx, s, resolved)
	return k.settle(ctx, err, res, func() time.Time { return s.deadline }, func(reason, msg string) {
		s.job.MarkFailed(s.now, reason, msg)
		k.Recorder.Eventf(s.job, nil, corev1.EventTypeWarning, reason, "Backup", "%s", msg)
	})
}

// claimedStrategy returns the strategy the run is (or would be) claimed with, or nil when the
// run is not this driver's. A run this driver claimed keeps the strategy recorded at claim time,
// whatever happened to its class since.
func (k *Kit[S]) claimedStrategy(ctx context.Context, job *backupsv1.BackupJob) (*backupsv1.ResolvedStrategy, error) {
	switch job.ClaimedBy() {
	case k.Name:
		if job.Status.Strategy != nil {
			return job.Status.Strategy.Resolved(), nil
		}
	case "":
	default:
		return nil, nil // another driver's claim: theirs, even if the class now names us
	}
	resolved, err := ResolveClass(ctx, k.Client, job, k.Strategy)
	if err != nil || resolved != nil || job.ClaimedBy() != k.Name {
		return resolved, err
	}
	// Claimed by this driver before claims recorded their strategy, and the class no longer
	// resolves to it: the run cannot be finished as it was started.
	return &backupsv1.ResolvedStrategy{ClassName: job.Spec.BackupClassName}, nil
}

// claimBackupJob claims the run before anything is created: of two drivers claiming one run (a
// class edited between their caches), exactly one optimistic write succeeds.
func (k *Kit[S]) claimBackupJob(ctx context.Context, s *backupScope, resolved *backupsv1.ResolvedStrategy) error {
	claim := s.job.DeepCopy()
	first := s.job.Status.Phase != backupsv1.BackupJobRunning
	s.job.MarkRunning(s.now, k.Name)
	if resolved.StrategyRef.Name != "" {
		s.job.Status.Strategy = resolved.Record()
	}
	if _, err := PatchStatus(ctx, k.Client, s.job, claim); err != nil {
		return fmt.Errorf("claiming BackupJob: %w", err)
	}
	if first {
		ctrl.LoggerFrom(ctx).Info("Claimed BackupJob", "strategy", describe(resolved.StrategyRef), "class", resolved.ClassName)
		k.Recorder.Eventf(s.job, nil, corev1.EventTypeNormal, "Started", "Backup", "Backing up with %s", describe(resolved.StrategyRef))
	}
	return nil
}

func (k *Kit[S]) runBackup(ctx context.Context, s *backupScope, resolved *backupsv1.ResolvedStrategy) (reconcile.Result, error) {
	if resolved.StrategyRef.Name == "" {
		return reconcile.Result{}, Failf(backupsv1.ReasonNoMatchingStrategy,
			"BackupClass %s no longer resolves to a strategy of %s for this run, which %s claimed before claims recorded their strategy; create a new BackupJob",
			resolved.ClassName, k.Name, k.Name)
	}
	// Until the strategy is read, its deadline is unknown: a strategy that cannot be read (a
	// Forbidden read, say) still ends the run, UnreadableStrategyDeadline after it started.
	s.deadline = s.job.Status.StartedAt.Add(UnreadableStrategyDeadline)
	strat, err := k.strategy(ctx, *s.job.Status.Strategy)
	if err != nil {
		return reconcile.Result{}, err
	}
	s.deadline = s.job.Status.StartedAt.Add(k.Driver.Deadline(strat))
	backup, err := k.ownBackup(ctx, s.job)
	if err != nil {
		return reconcile.Result{}, err
	}
	run := &BackupRun[S]{Job: s.job, Strategy: strat, Resolved: resolved, Backup: backup, Now: s.now.Time, Deadline: s.deadline}
	ctrl.LoggerFrom(ctx).V(1).Info("Observing backup", "strategy", describe(resolved.StrategyRef))
	dctx, cancel := context.WithDeadline(ctx, s.deadline.Add(MaxRetryDelay))
	defer cancel()
	// A driver call is bounded by the run's deadline (plus the retry bound), so a stalled call
	// (an object store that stopped answering) holds a worker no longer than the run may last.
	out, err := k.Driver.Backup(dctx, run)
	if err != nil {
		return reconcile.Result{}, err
	}
	if out.Result == nil {
		return k.waiting(s.now.Time, s.deadline, out.Waiting, out.RequeueAfter)
	}
	return reconcile.Result{}, k.completeBackup(ctx, s, run, out.Result)
}

// ownBackup returns the run's Backup, nil when there is none. A Backup of that name made by
// something else fails the run with NameConflict: it is never adopted. The cache says whether
// there is one; the one returned is read uncached (the cached copy may be trimmed: TrimBackup),
// since the driver reports its artifact and the kit writes its status.
func (k *Kit[S]) ownBackup(ctx context.Context, job *backupsv1.BackupJob) (*backupsv1.Backup, error) {
	key := client.ObjectKey{Namespace: job.Namespace, Name: job.Name}
	err := k.Client.Get(ctx, key, &backupsv1.Backup{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	b, err := k.live(ctx, key)
	switch {
	case err != nil || b == nil:
		return nil, err
	case b.Labels[backupsv1.LabelBackupJobUID] != string(job.UID):
		return nil, Failf(backupsv1.ReasonNameConflict, "Backup %s exists and was not made by this run; it was not adopted: delete or rename it", b.Name)
	}
	return b, nil
}

// completeBackup creates the Backup, records its artifact and ends the run Succeeded. Each step
// is idempotent, so a crash anywhere resumes here.
func (k *Kit[S]) completeBackup(ctx context.Context, s *backupScope, run *BackupRun[S], r *BackupResult) error {
	if err := validArtifact(r.Artifact); err != nil {
		return Failf(backupsv1.ReasonArtifactReportInvalid, "%s reported an artifact Coffer cannot record: %v", k.Name, err)
	}
	backup := run.Backup
	if backup == nil {
		var err error
		if backup, err = k.createBackup(ctx, run, r); err != nil {
			return err
		}
	}
	orig := backup.DeepCopy()
	first := backup.Status.Artifact == nil
	backup.Status.Phase = backupsv1.BackupReady
	backup.Status.Artifact = r.Artifact.DeepCopy()
	if r.UnderlyingResources != nil {
		backup.Status.UnderlyingResources = r.UnderlyingResources.DeepCopy()
	}
	meta.SetStatusCondition(&backup.Status.Conditions, metav1.Condition{Type: backupsv1.ConditionArtifactAvailable,
		Status: metav1.ConditionTrue, Reason: backupsv1.ReasonArtifactPresent, LastTransitionTime: s.now,
		Message: orDefault(r.Location, "Stored at "+r.Artifact.URI)})
	for _, c := range r.Conditions {
		c.LastTransitionTime = s.now
		meta.SetStatusCondition(&backup.Status.Conditions, c)
	}
	if _, err := PatchStatus(ctx, k.Client, backup, orig); err != nil {
		return err
	}
	if first && k.Metrics != nil {
		k.Metrics.ArtifactBytes.Add(float64(r.Artifact.SizeBytes))
	}
	s.job.MarkSucceeded(s.now, backup.Name)
	k.Recorder.Eventf(s.job, backup, corev1.EventTypeNormal, "Succeeded", "Backup",
		"Backup %s is ready: %s, %d bytes, %s", backup.Name, r.Artifact.URI, r.Artifact.SizeBytes, r.Artifact.Checksum)
	return nil
}

func (k *Kit[S]) createBackup(ctx context.Context, run *BackupRun[S], r *BackupResult) (*backupsv1.Backup, error) {
	backup := k.newBackup(run, r)
	if err := k.Client.Create(ctx, backup); err != nil {
		return nil, fmt.Errorf("creating Backup %s: %w", backup.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Created Backup", "backup", klog.KObj(backup))
	return backup, nil
}

// newBackup is the Backup a run's result makes (contract rules BK-1, BK-2, BK-8).
func (k *Kit[S]) newBackup(run *BackupRun[S], r *BackupResult) *backupsv1.Backup {
	job := run.Job
	takenAt := metav1.NewTime(run.Now)
	if r.TakenAt != nil {
		takenAt = *r.TakenAt
	}
	labels := backupsv1.ApplicationLabels(job.Spec.ApplicationRef)
	labels[backupsv1.LabelBackupJobUID] = string(job.UID)
	labels[backupsv1.LabelManagedBy] = k.Name
	if v, ok := job.Labels[backupsv1.LabelPlan]; ok {
		labels[backupsv1.LabelPlan] = v
	}
	backup := &backupsv1.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: job.Name, Namespace: job.Namespace, Labels: labels},
		Spec: backupsv1.BackupSpec{
			ApplicationRef: backupsv1.NormalizeApplicationRef(job.Spec.ApplicationRef),
			PlanRef:        job.Spec.PlanRef,
			StrategyRef:    run.Resolved.StrategyRef,
			TakenAt:        takenAt,
			DriverMetadata: r.DriverMetadata,
		},
	}
	if r.Finalize && k.Finalizer != "" {
		backup.Finalizers = []string{k.Finalizer}
	}
	return backup
}

// waiting requeues an in-progress run, and fails it once its deadline has passed.
func (k *Kit[S]) waiting(now, deadline time.Time, what string, after time.Duration) (reconcile.Result, error) {
	left := deadline.Sub(now)
	if left <= 0 {
		return reconcile.Result{}, Failf(backupsv1.ReasonDeadlineExceeded, "%s at the run's deadline (%s)",
			orDefault(what, "the run had not finished"), deadline.UTC().Format(time.RFC3339))
	}
	if after <= 0 || after > left {
		after = left
	}
	return reconcile.Result{RequeueAfter: after}, nil
}

// settle turns the outcome of a run's reconcile into its result: a Failure fails the run; an
// infrastructure error is retried until the deadline, then fails the run with its reason.
func (k *Kit[S]) settle(ctx context.Context, err error, res reconcile.Result, deadline func() time.Time, fail func(reason, msg string)) (reconcile.Result, error) {
	if err == nil {
		return res, nil
	}
	if f, ok := AsFailure(err); ok {
		fail(f.Reason, f.Error())
		return reconcile.Result{}, nil
	}
	d := deadline()
	if d.IsZero() || k.Clock.Now().Before(d) {
		ctrl.LoggerFrom(ctx).V(1).Info("Retrying after an error", "error", err.Error())
		return reconcile.Result{}, err
	}
	reason := backupsv1.ReasonDeadlineExceeded
	var t *Transient
	switch {
	case errors.As(err, &t):
		reason = t.Reason
	case apierrors.IsForbidden(err):
		reason = ReasonForbidden
	}
	fail(reason, fmt.Sprintf("still failing at the run's deadline (%s): %v", d.UTC().Format(time.RFC3339), err))
	return reconcile.Result{}, nil
}

// finished lets a driver act on a run whose outcome is recorded.
func (k *Kit[S]) finished(ctx context.Context, obj client.Object, claimedBy string) error {
	f, ok := k.Driver.(RunFinisher)
	if !ok || claimedBy != k.Name {
		return nil
	}
	return f.RunFinished(ctx, obj)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func validArtifact(a backupsv1.BackupArtifact) error {
	switch {
	case a.URI == "":
		return errors.New("no URI")
	case a.SizeBytes < 0:
		return fmt.Errorf("negative size %d", a.SizeBytes)
	case a.Checksum != "" && !backupsv1.IsChecksum(a.Checksum):
		return fmt.Errorf("checksum %q is not sha256:<64 hex digits>", a.Checksum)
	}
	return nil
}
