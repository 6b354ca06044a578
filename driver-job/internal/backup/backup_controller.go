// Package backup runs a strategy's cleanup Job when a Backup it made is deleted, and releases the
// Backup once the Job has deleted the artifact.
package backup

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
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

// RetryAfter is how long the driver waits before retrying a failed cleanup or a cleanup it cannot
// start (its strategy is missing).
const RetryAfter = time.Minute

// Reconciler runs cleanup Jobs for deleted Backups.
type Reconciler struct {
	Client   client.Client
	Live     client.Reader
	Scheme   *runtime.Scheme
	Recorder events.EventRecorder
}

// Reconcile acts only on Backups of this driver that are being deleted and hold its finalizer.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	b := &backupsv1.Backup{}
	if err := r.Client.Get(ctx, req.NamespacedName, b); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !resolve.Ours(b.Spec.StrategyRef) || b.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(b, names.Finalizer) {
		return reconcile.Result{}, nil
	}
	// The cleanup Job is not owned by the Backup: a foreground deletion of the Backup would
	// otherwise delete the Job that must run before the Backup may go.
	run := jobs.Run{Object: b, Kind: names.KindBackup}
	j, err := jobs.Get(ctx, r.Client, run)
	if f, ok := resolve.AsFailure(err); ok {
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, f.Reason, "Cleanup", "%s", f.Error())
		return reconcile.Result{RequeueAfter: RetryAfter}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if j == nil {
		return r.start(ctx, b, run)
	}
	if !j.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil // a failed attempt going away; its deletion wakes us
	}
	out, err := jobs.Observe(ctx, r.Live, j)
	if err != nil || !out.Finished {
		return reconcile.Result{}, err
	}
	if !out.Succeeded {
		metrics.Finished("cleanup", string(backupsv1.BackupJobFailed), -1)
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "CleanupFailed", "Cleanup",
			"%s; the Backup is kept and the cleanup retried in %s", out.Message, RetryAfter)
		if err := r.deleteJob(ctx, j); err != nil {
			return reconcile.Result{}, err
		}
		return reconcile.Result{RequeueAfter: RetryAfter}, nil
	}
	// Delete the Job first: if the driver stops between the two writes, the next attempt reruns an
	// idempotent cleanup instead of leaking a Job nobody owns.
	if err := r.deleteJob(ctx, j); err != nil {
		return reconcile.Result{}, err
	}
	metrics.Finished("cleanup", string(backupsv1.BackupJobSucceeded), -1)
	r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "ArtifactDeleted", "Cleanup", "Job %s deleted the artifact %s", j.Name, artifactURI(b))
	return reconcile.Result{}, r.release(ctx, b)
}

func (r *Reconciler) start(ctx context.Context, b *backupsv1.Backup, run jobs.Run) (reconcile.Result, error) {
	strat, err := resolve.Strategy(ctx, r.Client, b.Spec.StrategyRef)
	if f, ok := resolve.AsFailure(err); ok {
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "CleanupBlocked", "Cleanup",
			"%s; the artifact %s cannot be deleted and the Backup is kept. Recreate the strategy, or remove the finalizer %s to delete the Backup and keep the artifact",
			f.Error(), artifactURI(b), names.Finalizer)
		return reconcile.Result{RequeueAfter: RetryAfter}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if strat.Spec.CleanupTemplate == nil {
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "ArtifactKept", "Cleanup",
			"JobBackupStrategy %s no longer has a cleanupTemplate; the artifact %s is kept", strat.Name, artifactURI(b))
		return reconcile.Result{}, r.release(ctx, b)
	}
	backupObj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(b)
	if err != nil {
		return reconcile.Result{}, err
	}
	params := jobs.Parameters(b)
	app := map[string]any{"metadata": map[string]any{"name": b.Spec.ApplicationRef.Name, "namespace": b.Namespace}}
	pod, err := jobs.Render(strat, "cleanupTemplate", *strat.Spec.CleanupTemplate,
		strategy.Context{Application: app, Parameters: params, Mode: jobapi.ModeCleanup, Backup: backupObj})
	if err == nil {
		env := append(jobs.Env(jobapi.ModeCleanup, run, b.Spec.ApplicationRef, params), jobs.ArtifactEnv(b)...)
		var j *batchv1.Job
		if j, err = jobs.Create(ctx, r.Client, r.Live, r.Scheme, run, strat, pod, env); err == nil {
			r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "CleanupStarted", "Cleanup", "Created Job %s to delete the artifact %s", j.Name, artifactURI(b))
			return reconcile.Result{}, nil
		}
	}
	if f, ok := resolve.AsFailure(err); ok {
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, f.Reason, "Cleanup", "%s; the Backup is kept, retrying in %s", f.Error(), RetryAfter)
		return reconcile.Result{RequeueAfter: RetryAfter}, nil
	}
	return reconcile.Result{}, err
}

func (r *Reconciler) deleteJob(ctx context.Context, j *batchv1.Job) error {
	err := r.Client.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &j.UID})
	return client.IgnoreNotFound(err)
}

func (r *Reconciler) release(ctx context.Context, b *backupsv1.Backup) error {
	orig := b.DeepCopy()
	controllerutil.RemoveFinalizer(b, names.Finalizer)
	if err := r.Client.Patch(ctx, b, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("releasing Backup %s: %w", b.Name, err)
	}
	return nil
}

func artifactURI(b *backupsv1.Backup) string {
	if b.Status.Artifact == nil {
		return "(none recorded)"
	}
	return b.Status.Artifact.URI
}

// SetupWithManager registers the reconciler; cleanup Job changes wake their Backup.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("job-backup").
		For(&backupsv1.Backup{}).
		Watches(&batchv1.Job{}, handler.EnqueueRequestsFromMapFunc(jobs.RunOf(names.KindBackup))).
		Complete(r)
}
