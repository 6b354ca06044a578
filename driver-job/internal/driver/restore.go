package driver

import (
	"context"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
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
	case out.Finished && out.Succeeded && verification(run.RestoreJob):
		return verified(j, run.Backup, out.Report)
	case out.Finished && out.Succeeded:
		return driverkit.RestoreOutcome{Done: true,
			Message: fmt.Sprintf("Job %s restored Backup %s (%s)", j.Name, run.Backup.Name, run.Backup.Status.Artifact.Checksum)}, nil
	case out.Finished:
		return driverkit.RestoreOutcome{}, driverkit.Failf(out.Reason, "%s", out.Message)
	}
	return driverkit.RestoreOutcome{Waiting: waiting(j)}, nil
}

// ReasonTargetNotSupported fails a restore into another namespace: the Job driver's restore Job
// runs in, and writes into, the RestoreJob's namespace. The one exception is a verification.
const ReasonTargetNotSupported = "TargetNotSupported"

// verification says whether a RestoreJob is a verification: inert, and aimed at another
// namespace. Only whoever may create RestoreJobs in that namespace can make one (the admission
// policy coffer-restore-target): the verifier, for its sandbox. The driver then runs the
// strategy's verifyTemplate, which restores into a scratch volume of its own in the Backup's
// namespace (the sandbox runs no pods) and compares every file with the artifact's manifest;
// nothing is written into the sandbox, and nothing into the application.
func verification(rj *backupsv1.RestoreJob) bool {
	return rj.TargetNamespace() != rj.Namespace && rj.Spec.IsTrue(backupsv1.OptionInert)
}

// verified turns a verify Job's report into the RestoreJob's outcome (contract RJ-13): every file
// identical is a success with items.compared; any difference fails ContentMismatch.
func verified(j *batchv1.Job, b *backupsv1.Backup, msg string) (driverkit.RestoreOutcome, error) {
	r, err := jobapi.ParseVerifyReport(msg)
	if err != nil {
		return driverkit.RestoreOutcome{}, driverkit.Failf(backupsv1.ReasonArtifactReportInvalid, "Job %s verified Backup %s but its report is invalid: %v", j.Name, b.Name, err)
	}
	if r.Mismatched > 0 {
		return driverkit.RestoreOutcome{}, driverkit.Failf(backupsv1.ReasonContentMismatch,
			"Job %s restored Backup %s into scratch and found %d difference(s) from the manifest the backup stored (%d file(s) identical): %s",
			j.Name, b.Name, r.Mismatched, r.Compared, strings.Join(r.Differences, "; "))
	}
	items := &backupsv1.RestoreItems{Restored: r.Files, Compared: r.Compared}
	if r.Format < 3 {
		return driverkit.RestoreOutcome{Done: true, Items: items, Message: fmt.Sprintf(
			"Job %s restored Backup %s into scratch (%d file(s)); its artifact is format %d, which has no manifest, so no file was compared", j.Name, b.Name, r.Files, r.Format)}, nil
	}
	return driverkit.RestoreOutcome{Done: true, Items: items, Message: fmt.Sprintf(
		"Job %s restored Backup %s into scratch and compared all %d file(s) with the manifest the backup stored (path, size, SHA-256): identical", j.Name, b.Name, r.Compared)}, nil
}

func (d *Driver) createRestoreJob(ctx context.Context, run *driverkit.RestoreRun[Strategy], jr jobs.Run) (*batchv1.Job, error) {
	rj, backup, strat := run.RestoreJob, run.Backup, run.Strategy
	verify := verification(rj)
	switch t := rj.TargetNamespace(); {
	case verify && strat.Spec.VerifyTemplate == nil:
		return nil, driverkit.Failf(ReasonTargetNotSupported,
			"JobBackupStrategy %s has no verifyTemplate: the Job driver verifies a Backup (an inert restore into another namespace, %s) only with one", strat.Name, t)
	case t != rj.Namespace && !verify:
		return nil, driverkit.Failf(ReasonTargetNotSupported,
			"the Job driver restores into the RestoreJob's own namespace only; to restore into %s, create the RestoreJob there", t)
	}
	if a := backup.Status.Artifact; a != nil {
		if err := backupScope(backup, strat).check(a.URI); err != nil {
			return nil, driverkit.Failf(ReasonArtifactOutsideRun,
				"Backup %s names an artifact outside its bucket and namespace: %v; the driver restores no such artifact", backup.Name, err)
		}
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
	tmpl, which, mode := strat.Spec.Template, "template", jobapi.ModeRestore
	switch {
	case verify:
		tmpl, which, mode = *strat.Spec.VerifyTemplate, "verifyTemplate", jobapi.ModeVerify
	case strat.Spec.RestoreTemplate != nil:
		tmpl, which = *strat.Spec.RestoreTemplate, "restoreTemplate"
	}
	pod, err := jobs.Render(strat, which, tmpl, strategy.Context{Application: app, Parameters: params, Mode: strategy.Mode(mode), Backup: backupObj})
	if err != nil {
		return nil, err
	}
	env := append(jobs.Env(mode, jr, target, params), jobs.ArtifactEnv(backup)...)
	env = append(env, jobs.FormatEnv(strat, mode)...)
	j, err := jobs.Create(ctx, d.Client, d.Live, d.Scheme, jr, strat, pod, env)
	if err != nil {
		return nil, err
	}
	if verify {
		d.Recorder.Eventf(rj, nil, corev1.EventTypeNormal, "JobCreated", "Restore", "Created Job %s to verify Backup %s: a restore into scratch compared with its manifest",
			j.Name, backup.Name)
		return j, nil
	}
	d.Recorder.Eventf(rj, nil, corev1.EventTypeNormal, "JobCreated", "Restore", "Created Job %s to restore Backup %s into %s %s/%s",
		j.Name, backup.Name, target.Kind, rj.Namespace, target.Name)
	return j, nil
}
