package driver

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	"github.com/coffer-backup/coffer/apis/strategy"
	"github.com/coffer-backup/coffer/driver-job/internal/jobs"
	"github.com/coffer-backup/coffer/driver-job/internal/names"
	"github.com/coffer-backup/coffer/driverkit"
)

// Restore creates the run's restore Job or observes it.
func (d *Driver) Restore(ctx context.Context, run *driverkit.RestoreRun[Strategy]) (driverkit.RestoreOutcome, error) {
	jr := jobs.Run{Object: run.RestoreJob, Kind: names.KindRestoreJob, Own: true}
	j, err := jobs.Get(ctx, d.Client, jr)
	if err != nil {
		return driverkit.RestoreOutcome{}, err
	}
	if j == nil {
		if j, err = d.createRestoreJob(ctx, run, jr); err != nil {
			return driverkit.RestoreOutcome{}, err
		}
	}
	out, err := jobs.Observe(ctx, d.Live, j)
	if err != nil {
		return driverkit.RestoreOutcome{}, err
	}
	switch {
	case out.Finished && out.Succeeded:
		return driverkit.RestoreOutcome{Done: true,
			Message: fmt.Sprintf("Job %s restored Backup %s (%s)", j.Name, run.Backup.Name, run.Backup.Status.Artifact.Checksum)}, nil
	case out.Finished:
		return driverkit.RestoreOutcome{}, driverkit.Failf(out.Reason, "%s", out.Message)
	}
	return driverkit.RestoreOutcome{Waiting: waiting(j)}, nil
}

// ReasonTargetNotSupported fails a restore into another namespace: the Job driver's restore Job
// runs in, and writes into, the RestoreJob's namespace.
const ReasonTargetNotSupported = "TargetNotSupported"

func (d *Driver) createRestoreJob(ctx context.Context, run *driverkit.RestoreRun[Strategy], jr jobs.Run) (*batchv1.Job, error) {
	rj, backup, strat := run.RestoreJob, run.Backup, run.Strategy
	if t := rj.TargetNamespace(); t != rj.Namespace {
		return nil, driverkit.Failf(ReasonTargetNotSupported,
			"the Job driver restores into the RestoreJob's own namespace only; to restore into %s, create the RestoreJob there", t)
	}
	target := backup.Spec.ApplicationRef
	if rj.Spec.TargetApplicationRef != nil {
		target = *rj.Spec.TargetApplicationRef
	}
	// The target may not exist yet (a restore after loss): the template then sees its name only.
	app, err := driverkit.ApplicationOrName(ctx, d.Client, rj.Namespace, target)
	if err != nil {
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
	env := append(jobs.Env(jobapi.ModeRestore, jr, target, params), jobs.ArtifactEnv(backup)...)
	env = append(env, jobs.FormatEnv(strat, jobapi.ModeRestore)...)
	j, err := jobs.Create(ctx, d.Client, d.Live, d.Scheme, jr, strat, pod, env)
	if err != nil {
		return nil, err
	}
	d.Recorder.Eventf(rj, nil, corev1.EventTypeNormal, "JobCreated", "Restore", "Created Job %s to restore Backup %s into %s %s/%s",
		j.Name, backup.Name, target.Kind, rj.Namespace, target.Name)
	return j, nil
}
