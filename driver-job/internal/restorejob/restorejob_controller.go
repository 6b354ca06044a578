// Package restorejob reconciles the RestoreJobs whose Backup was made with a JobBackupStrategy: one
// batch/v1 Job in the RestoreJob's namespace, told the artifact's URI and checksum.
package restorejob

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
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

// Reconciler runs one RestoreJob as a batch/v1 Job.
type Reconciler struct {
	Client   client.Client
	Live     client.Reader
	Scheme   *runtime.Scheme
	Clock    clock.PassiveClock
	Recorder events.EventRecorder
}

// Reconcile drives one RestoreJob; its status is written once, at the end.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, retErr error) {
	rj := &backupsv1.RestoreJob{}
	if err := r.Client.Get(ctx, req.NamespacedName, rj); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !rj.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	run := jobs.Run{Object: rj, Kind: names.KindRestoreJob, Own: true}
	if rj.IsTerminal() {
		return reconcile.Result{}, jobs.Release(ctx, r.Client, run)
	}
	backup := &backupsv1.Backup{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: rj.Namespace, Name: rj.Spec.BackupRef.Name}, backup); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err) // whose it is cannot be told: untouched
	}
	if !resolve.Ours(backup.Spec.StrategyRef) {
		return reconcile.Result{}, nil
	}
	if !rj.ClaimableBy(names.DriverName) {
		return reconcile.Result{}, nil // claimed by another driver: theirs
	}
	now := metav1.NewTime(r.Clock.Now())
	if rj.Status.Phase != backupsv1.RestoreJobRunning {
		claim := rj.DeepCopy()
		rj.MarkRunning(now, names.DriverName)
		if err := r.Client.Status().Patch(ctx, rj, client.MergeFromWithOptions(claim, client.MergeFromWithOptimisticLock{})); err != nil {
			return reconcile.Result{}, fmt.Errorf("claiming RestoreJob: %w", err)
		}
		r.Recorder.Eventf(rj, nil, corev1.EventTypeNormal, "Started", "Restore", "Restoring Backup %s with JobBackupStrategy %s", backup.Name, backup.Spec.StrategyRef.Name)
	}
	orig := rj.DeepCopy()
	defer func() {
		if apiequality.Semantic.DeepEqual(orig.Status, rj.Status) {
			return
		}
		err := r.Client.Status().Patch(ctx, rj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		if err != nil && retErr == nil {
			res, retErr = reconcile.Result{}, fmt.Errorf("patching RestoreJob status: %w", err)
			return
		}
		if err == nil && rj.IsTerminal() {
			metrics.Finished("restore", string(rj.Status.Phase), rj.Status.CompletedAt.Sub(rj.Status.StartedAt.Time).Seconds())
		}
	}()
	res, err := r.run(ctx, rj, backup, run, now)
	if f, ok := resolve.AsFailure(err); ok {
		rj.MarkFailed(now, f.Reason, f.Error())
		r.Recorder.Eventf(rj, nil, corev1.EventTypeWarning, f.Reason, "Restore", "%s", f.Error())
		return reconcile.Result{}, nil
	}
	return res, err
}

func (r *Reconciler) run(ctx context.Context, rj *backupsv1.RestoreJob, backup *backupsv1.Backup, run jobs.Run, now metav1.Time) (reconcile.Result, error) {
	j, err := jobs.Get(ctx, r.Client, run)
	if err != nil {
		return reconcile.Result{}, err
	}
	if j == nil {
		if j, err = r.createJob(ctx, rj, backup, run); err != nil {
			return reconcile.Result{}, err
		}
	}
	out, err := jobs.Observe(ctx, r.Live, j)
	if err != nil {
		return reconcile.Result{}, err
	}
	switch {
	case out.Finished && out.Succeeded:
		rj.MarkSucceeded(now, fmt.Sprintf("Job %s restored Backup %s (%s)", j.Name, backup.Name, backup.Status.Artifact.Checksum))
		r.Recorder.Eventf(rj, nil, corev1.EventTypeNormal, "Succeeded", "Restore", "Job %s restored Backup %s", j.Name, backup.Name)
		return reconcile.Result{}, nil
	case out.Finished:
		return reconcile.Result{}, &resolve.Failure{Reason: out.Reason, Err: fmt.Errorf("%s", out.Message)}
	}
	return jobs.Deadline(rj.Status.StartedAt.Time, j, now.Time)
}

func (r *Reconciler) createJob(ctx context.Context, rj *backupsv1.RestoreJob, backup *backupsv1.Backup, run jobs.Run) (*batchv1.Job, error) {
	if backup.Status.Phase != backupsv1.BackupReady || backup.Status.Artifact == nil {
		return nil, resolve.Failf(backupsv1.ReasonArtifactMissing, "Backup %s is %q and has no artifact to restore", backup.Name, backup.Status.Phase)
	}
	strat, err := resolve.Strategy(ctx, r.Client, backup.Spec.StrategyRef)
	if err != nil {
		return nil, err
	}
	target := backup.Spec.ApplicationRef
	if rj.Spec.TargetApplicationRef != nil {
		target = *rj.Spec.TargetApplicationRef
	}
	// The target may not exist yet (a restore after loss): the template then sees its name only.
	app := map[string]any{"metadata": map[string]any{"name": target.Name, "namespace": rj.Namespace}}
	if live, err := resolve.Application(ctx, r.Client, rj.Namespace, target); err == nil {
		app = live.Object
	} else if _, isFailure := resolve.AsFailure(err); !isFailure {
		return nil, err
	}
	backupObj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(backup)
	if err != nil {
		return nil, err
	}
	params := jobs.Parameters(backup)
	tmpl, which := strat.Spec.Template, "template"
	if strat.Spec.RestoreTemplate != nil {
		tmpl, which = *strat.Spec.RestoreTemplate, "restoreTemplate"
	}
	pod, err := jobs.Render(strat, which, tmpl, strategy.Context{Application: app, Parameters: params, Mode: strategy.ModeRestore, Backup: backupObj})
	if err != nil {
		return nil, err
	}
	env := append(jobs.Env(jobapi.ModeRestore, run, target, params), jobs.ArtifactEnv(backup)...)
	j, err := jobs.Create(ctx, r.Client, r.Live, r.Scheme, run, strat, pod, env)
	if err != nil {
		return nil, err
	}
	r.Recorder.Eventf(rj, nil, corev1.EventTypeNormal, "JobCreated", "Restore", "Created Job %s to restore Backup %s into %s %s/%s",
		j.Name, backup.Name, target.Kind, rj.Namespace, target.Name)
	return j, nil
}

// SetupWithManager registers the reconciler; Job changes wake the RestoreJob they serve.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("job-restorejob").
		For(&backupsv1.RestoreJob{}).
		Watches(&batchv1.Job{}, handler.EnqueueRequestsFromMapFunc(jobs.RunOf(names.KindRestoreJob))).
		Complete(r)
}
