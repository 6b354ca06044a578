package backupjob

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	"github.com/coffer-backup/coffer/apis/strategy"
	"github.com/coffer-backup/coffer/driver-job/internal/jobs"
	"github.com/coffer-backup/coffer/driver-job/internal/metrics"
	"github.com/coffer-backup/coffer/driver-job/internal/names"
	"github.com/coffer-backup/coffer/driver-job/internal/resolve"
)

// Reconciler runs one BackupJob as a batch/v1 Job.
type Reconciler struct {
	Client client.Client
	// Live reads uncached: pods (read once, when a Job has finished) and Jobs the label-filtered cache cannot see.
	Live     client.Reader
	Scheme   *runtime.Scheme
	Clock    clock.PassiveClock
	Recorder events.EventRecorder
}

type scope struct {
	job      *backupsv1.BackupJob
	orig     *backupsv1.BackupJob
	now      metav1.Time
	resolved *backupsv1.ResolvedStrategy
	run      jobs.Run
}

// Reconcile drives one BackupJob; its status is written once, at the end.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, retErr error) {
	job := &backupsv1.BackupJob{}
	if err := r.Client.Get(ctx, req.NamespacedName, job); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !job.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	run := jobs.Run{Object: job, Kind: names.KindBackupJob, Own: true}
	if job.IsTerminal() {
		// The outcome is recorded: the Job may now be collected after the strategy's TTL.
		return reconcile.Result{}, jobs.Release(ctx, r.Client, run)
	}
	resolved, err := resolve.Class(ctx, r.Client, job)
	if err != nil || resolved == nil {
		return reconcile.Result{}, err // not ours: untouched
	}
	if !job.ClaimableBy(names.DriverName) {
		return reconcile.Result{}, nil // claimed by another driver before its class changed: theirs
	}
	now := metav1.NewTime(r.Clock.Now())
	if job.Status.Phase != backupsv1.BackupJobRunning {
		// Claim before acting: of two drivers claiming one run (a class edited between their
		// caches), exactly one optimistic write succeeds.
		claim := job.DeepCopy()
		job.MarkRunning(now, names.DriverName)
		if err := r.Client.Status().Patch(ctx, job, client.MergeFromWithOptions(claim, client.MergeFromWithOptimisticLock{})); err != nil {
			return reconcile.Result{}, fmt.Errorf("claiming BackupJob: %w", err)
		}
		r.Recorder.Eventf(job, nil, corev1.EventTypeNormal, "Started", "Backup", "Backing up with JobBackupStrategy %s", resolved.StrategyRef.Name)
	}
	s := &scope{job: job, orig: job.DeepCopy(), now: now, resolved: resolved, run: run}
	defer func() {
		if apiequality.Semantic.DeepEqual(s.orig.Status, s.job.Status) {
			return
		}
		err := r.Client.Status().Patch(ctx, s.job, client.MergeFromWithOptions(s.orig, client.MergeFromWithOptimisticLock{}))
		if err != nil && retErr == nil {
			res, retErr = reconcile.Result{}, fmt.Errorf("patching BackupJob status: %w", err)
			return
		}
		if err == nil && s.job.IsTerminal() {
			metrics.Finished("backup", string(s.job.Status.Phase), s.job.Status.CompletedAt.Sub(s.job.Status.StartedAt.Time).Seconds())
		}
	}()
	res, err = r.run(ctx, s)
	if f, ok := resolve.AsFailure(err); ok {
		s.job.MarkFailed(s.now, f.Reason, f.Error())
		r.Recorder.Eventf(s.job, nil, corev1.EventTypeWarning, f.Reason, "Backup", "%s", f.Error())
		return reconcile.Result{}, nil
	}
	return res, err
}

func (r *Reconciler) run(ctx context.Context, s *scope) (reconcile.Result, error) {
	strat, err := resolve.Strategy(ctx, r.Client, s.resolved.StrategyRef)
	if err != nil {
		return reconcile.Result{}, err
	}
	j, err := jobs.Get(ctx, r.Client, s.run)
	if err != nil {
		return reconcile.Result{}, err
	}
	if j == nil {
		if j, err = r.createJob(ctx, s, strat); err != nil {
			return reconcile.Result{}, err
		}
	}
	out, err := jobs.Observe(ctx, r.Live, j)
	if err != nil {
		return reconcile.Result{}, err
	}
	switch {
	case out.Finished && out.Succeeded:
		return reconcile.Result{}, r.complete(ctx, s, strat, j, out)
	case out.Finished:
		return reconcile.Result{}, &resolve.Failure{Reason: out.Reason, Err: fmt.Errorf("%s", out.Message)}
	}
	return jobs.Deadline(s.job.Status.StartedAt.Time, j, s.now.Time)
}

func (r *Reconciler) createJob(ctx context.Context, s *scope, strat *jobapi.JobBackupStrategy) (*batchv1.Job, error) {
	app, err := resolve.Application(ctx, r.Client, s.job.Namespace, s.job.Spec.ApplicationRef)
	if err != nil {
		return nil, err
	}
	data := strategy.Context{Application: app.Object, Parameters: s.resolved.Parameters, Mode: strategy.ModeBackup}
	pod, err := jobs.Render(strat, "template", strat.Spec.Template, data)
	if err != nil {
		return nil, err
	}
	env := jobs.Env(jobapi.ModeBackup, s.run, s.job.Spec.ApplicationRef, s.resolved.Parameters)
	j, err := jobs.Create(ctx, r.Client, r.Live, r.Scheme, s.run, strat, pod, env)
	if err != nil {
		return nil, err
	}
	ctrl.LoggerFrom(ctx).Info("Created Job", "job", klog.KObj(j))
	r.Recorder.Eventf(s.job, nil, corev1.EventTypeNormal, "JobCreated", "Backup", "Created Job %s", j.Name)
	return j, nil
}

// complete validates the agent's report, creates the Backup and marks the run Succeeded. Each
// step is idempotent, so a crash anywhere resumes here.
func (r *Reconciler) complete(ctx context.Context, s *scope, strat *jobapi.JobBackupStrategy, j *batchv1.Job, out jobs.Outcome) error {
	backup := &backupsv1.Backup{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.job.Namespace, Name: s.job.Name}, backup)
	switch {
	case apierrors.IsNotFound(err):
		backup = nil
	case err != nil:
		return err
	case backup.Labels[backupsv1.LabelBackupJobUID] != string(s.job.UID):
		return resolve.Failf(backupsv1.ReasonNameConflict, "Backup %s exists and was not made by this run; it was not adopted", backup.Name)
	}
	artifact := (*backupsv1.BackupArtifact)(nil)
	if backup != nil && backup.Status.Artifact != nil {
		artifact = backup.Status.Artifact // recorded before a crash: the pods may be gone by now
	} else {
		report, err := jobapi.ParseArtifactReport(out.Report)
		if err != nil {
			where := "no pod of Job " + j.Name + " is left to read"
			if out.Pod != "" {
				where = "pod " + out.Pod + " of Job " + j.Name
			}
			return resolve.Failf(backupsv1.ReasonArtifactReportInvalid, "%s reported no usable artifact: %v; a backup that cannot be located is not a backup", where, err)
		}
		artifact = &backupsv1.BackupArtifact{URI: report.URI, SizeBytes: report.SizeBytes, Checksum: report.Checksum}
		metrics.ArtifactBytes.Add(float64(artifact.SizeBytes))
	}
	if backup == nil {
		if backup, err = r.createBackup(ctx, s, strat, j); err != nil {
			return err
		}
	}
	if err := r.setBackupStatus(ctx, backup, artifact, j, s.now); err != nil {
		return err
	}
	s.job.MarkSucceeded(s.now, backup.Name)
	r.Recorder.Eventf(s.job, backup, corev1.EventTypeNormal, "Succeeded", "Backup",
		"Backup %s is ready: %s, %d bytes, %s", backup.Name, artifact.URI, artifact.SizeBytes, artifact.Checksum)
	return nil
}

func (r *Reconciler) createBackup(ctx context.Context, s *scope, strat *jobapi.JobBackupStrategy, j *batchv1.Job) (*backupsv1.Backup, error) {
	takenAt := s.now
	if j.Status.StartTime != nil {
		takenAt = *j.Status.StartTime
	}
	labels := map[string]string{backupsv1.LabelBackupJobUID: string(s.job.UID), backupsv1.LabelManagedBy: names.DriverName}
	if v, ok := s.job.Labels[backupsv1.LabelPlan]; ok {
		labels[backupsv1.LabelPlan] = v
	}
	meta := map[string]string{names.MetaJobName: j.Name}
	for k, v := range s.resolved.Parameters {
		meta[names.MetaParamPrefix+k] = v
	}
	backup := &backupsv1.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: s.job.Name, Namespace: s.job.Namespace, Labels: labels},
		Spec: backupsv1.BackupSpec{
			ApplicationRef: backupsv1.NormalizeApplicationRef(s.job.Spec.ApplicationRef),
			PlanRef:        s.job.Spec.PlanRef,
			StrategyRef:    s.resolved.StrategyRef,
			TakenAt:        takenAt,
			DriverMetadata: meta,
		},
	}
	if strat.Spec.CleanupTemplate != nil {
		backup.Finalizers = []string{names.Finalizer}
	}
	if err := r.Client.Create(ctx, backup); err != nil {
		return nil, fmt.Errorf("creating Backup %s: %w", backup.Name, err)
	}
	return backup, nil
}

func (r *Reconciler) setBackupStatus(ctx context.Context, backup *backupsv1.Backup, artifact *backupsv1.BackupArtifact, j *batchv1.Job, now metav1.Time) error {
	orig := backup.DeepCopy()
	backup.Status.Phase = backupsv1.BackupReady
	backup.Status.Artifact = artifact
	meta.SetStatusCondition(&backup.Status.Conditions, metav1.Condition{Type: backupsv1.ConditionArtifactAvailable,
		Status: metav1.ConditionTrue, Reason: backupsv1.ReasonArtifactPresent, LastTransitionTime: now,
		Message: fmt.Sprintf("Job %s reported %s", j.Name, artifact.URI)})
	if apiequality.Semantic.DeepEqual(orig.Status, backup.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, backup, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("writing Backup %s status: %w", backup.Name, err)
	}
	return nil
}

// SetupWithManager registers the reconciler; Job changes wake the BackupJob they serve.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("job-backupjob").
		For(&backupsv1.BackupJob{}).
		Watches(&batchv1.Job{}, handler.EnqueueRequestsFromMapFunc(jobs.RunOf(names.KindBackupJob))).
		Complete(r)
}
