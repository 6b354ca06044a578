package driver

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	"github.com/coffer-backup/coffer/apis/strategy"
	"github.com/coffer-backup/coffer/driver-job/internal/jobs"
	"github.com/coffer-backup/coffer/driver-job/internal/names"
	"github.com/coffer-backup/coffer/driverkit"
)

// ReasonCleanupFailed: the cleanup Job failed; the Backup is kept and the cleanup retried.
const ReasonCleanupFailed = "CleanupFailed"

// DeleteArtifact runs the strategy's cleanup Job and is done once it succeeded. The cleanup Job is
// not owned by the Backup: a foreground deletion of the Backup would otherwise delete the Job
// that must run before the Backup may go.
func (d *Driver) DeleteArtifact(ctx context.Context, b *backupsv1.Backup) (driverkit.DeleteOutcome, error) {
	jr := jobs.Run{Object: b, Kind: names.KindBackup}
	j, err := jobs.Get(ctx, d.Client, jr)
	if err != nil {
		return driverkit.DeleteOutcome{}, err
	}
	if j == nil {
		return d.startCleanup(ctx, b, jr)
	}
	if !j.DeletionTimestamp.IsZero() {
		return driverkit.DeleteOutcome{}, nil // a failed attempt going away; its deletion wakes us
	}
	out, err := jobs.Observe(ctx, d.Live, j)
	if err != nil || !out.Finished {
		return driverkit.DeleteOutcome{}, err
	}
	// Delete the Job first: if the driver stops between the two writes, the next attempt reruns an
	// idempotent cleanup instead of leaking a Job nobody owns.
	if err := client.IgnoreNotFound(d.Client.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &j.UID})); err != nil {
		return driverkit.DeleteOutcome{}, err
	}
	if !out.Succeeded {
		return driverkit.DeleteOutcome{}, driverkit.Failf(ReasonCleanupFailed, "cleanup Job %s failed: %s", j.Name, out.Message)
	}
	d.maintainAfter(ctx, b)
	return driverkit.DeleteOutcome{Done: true, Message: fmt.Sprintf("Job %s deleted the artifact %s", j.Name, artifactURI(b))}, nil
}

func (d *Driver) startCleanup(ctx context.Context, b *backupsv1.Backup, jr jobs.Run) (driverkit.DeleteOutcome, error) {
	// The cache may still show a Backup this driver has just released: the deletion of the cleanup
	// Job, which enqueues the Backup again, can reach the cache before the Backup's own deletion.
	// A Job created for it would be left behind, since nothing reconciles a Backup that is gone.
	if held, err := d.stillHeld(ctx, b); err != nil || !held {
		return driverkit.DeleteOutcome{}, err
	}
	strat, err := driverkit.GetStrategy(ctx, d.Client, b.Spec.StrategyRef, &jobapi.JobBackupStrategy{})
	if err != nil {
		return driverkit.DeleteOutcome{}, err
	}
	if strat.Spec.CleanupTemplate == nil {
		return driverkit.DeleteOutcome{Kept: true,
			Message: fmt.Sprintf("JobBackupStrategy %s no longer has a cleanupTemplate; the artifact %s is kept", strat.Name, artifactURI(b))}, nil
	}
	if a := b.Status.Artifact; a != nil {
		if err := backupScope(b, strat).check(a.URI); err != nil {
			return driverkit.DeleteOutcome{Kept: true, Reason: ReasonArtifactOutsideRun,
				Message: fmt.Sprintf("Backup %s names an artifact outside its bucket and namespace: %v; no cleanup Job deletes it, it is kept", b.Name, err)}, nil
		}
	}
	j, err := d.createArtifactJob(ctx, b, strat, jr, jobapi.ModeCleanup, jobs.ArtifactEnv(b)...)
	if err != nil {
		return driverkit.DeleteOutcome{}, err
	}
	d.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "CleanupStarted", "Cleanup", "Created Job %s to delete the artifact %s", j.Name, artifactURI(b))
	return driverkit.DeleteOutcome{}, nil
}

// createArtifactJob creates the Job jr that acts on a Backup's artifact, from the strategy's
// cleanupTemplate (the pod template that reaches the object store, with its endpoint and
// credentials) rendered in mode: cleanup deletes the artifact, check looks whether it still
// exists. The template sees the Backup as .Backup, its application by name (it may be gone), the
// parameters the backup ran with and the mode; the agent gets the contract variables and the
// artifact's URI, checksum and size (extra: jobs.ArtifactEnv), or what else the mode needs.
func (d *Driver) createArtifactJob(ctx context.Context, b *backupsv1.Backup, strat *jobapi.JobBackupStrategy, jr jobs.Run, mode string, extra ...corev1.EnvVar) (*batchv1.Job, error) {
	backupObj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(b)
	if err != nil {
		return nil, err
	}
	params := jobs.Parameters(b)
	app := map[string]any{"metadata": map[string]any{"name": b.Spec.ApplicationRef.Name, "namespace": b.Namespace}}
	pod, err := jobs.Render(strat, "cleanupTemplate", *strat.Spec.CleanupTemplate,
		strategy.Context{Application: app, Parameters: params, Mode: strategy.Mode(mode), Backup: backupObj})
	if err != nil {
		return nil, err
	}
	env := append(jobs.Env(mode, jr, b.Spec.ApplicationRef, params), extra...)
	return jobs.Create(ctx, d.Client, d.Live, d.Scheme, jr, strat, pod, env)
}

func artifactURI(b *backupsv1.Backup) string {
	if b.Status.Artifact == nil {
		return "(none recorded)"
	}
	return b.Status.Artifact.URI
}

// stillHeld reads the Backup uncached and reports whether it still exists (the same object) and
// holds the cleanup finalizer.
func (d *Driver) stillHeld(ctx context.Context, b *backupsv1.Backup) (bool, error) {
	live := &backupsv1.Backup{}
	if err := d.Live.Get(ctx, client.ObjectKeyFromObject(b), live); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return live.UID == b.UID && controllerutil.ContainsFinalizer(live, names.Finalizer), nil
}
