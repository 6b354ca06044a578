package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	"github.com/coffer-backup/coffer/apis/strategy"
	"github.com/coffer-backup/coffer/driver-job/internal/jobs"
	"github.com/coffer-backup/coffer/driver-job/internal/names"
	"github.com/coffer-backup/coffer/driverkit"
)

// Backup creates the run's Job or observes it; once the Job succeeded, it reads the agent's
// artifact report.
func (d *Driver) Backup(ctx context.Context, run *driverkit.BackupRun[Strategy]) (driverkit.BackupOutcome, error) {
	jr := jobs.Run{Object: run.Job, Kind: names.KindBackupJob, Own: true}
	j, err := jobs.Get(ctx, d.Client, jr)
	if err != nil {
		return driverkit.BackupOutcome{}, err
	}
	if j == nil {
		var snapshots string
		if j, snapshots, err = d.createBackupJob(ctx, run, jr); err != nil {
			return driverkit.BackupOutcome{}, err
		}
		if j == nil {
			return driverkit.BackupOutcome{Waiting: snapshots, RequeueAfter: snapshotPoll}, nil
		}
	}
	out, err := jobs.Observe(ctx, d.Live, j)
	if err != nil {
		return driverkit.BackupOutcome{}, err
	}
	if out.Finished {
		// The Job read its clones: they and their snapshots go, whatever it came to.
		if err := d.releaseSnapshots(ctx, run, j.Name, j.Spec.Template.Spec); err != nil {
			return driverkit.BackupOutcome{}, err
		}
	}
	switch {
	case out.Finished && out.Succeeded:
		res, err := d.result(run, j, out)
		return driverkit.BackupOutcome{Result: res}, err
	case out.Finished:
		return driverkit.BackupOutcome{}, driverkit.Failf(out.Reason, "%s", out.Message)
	}
	return driverkit.BackupOutcome{Waiting: waiting(j)}, nil
}

// createBackupJob creates the run's Job. With spec.volumeSnapshot it first takes the snapshots and
// makes the clones the Job reads, and creates no Job (nil, with what it waits for) until every
// snapshot is ready.
func (d *Driver) createBackupJob(ctx context.Context, run *driverkit.BackupRun[Strategy], jr jobs.Run) (*batchv1.Job, string, error) {
	app, err := driverkit.Application(ctx, d.Client, run.Job.Namespace, run.Job.Spec.ApplicationRef)
	if err != nil {
		return nil, "", err
	}
	data := strategy.Context{Application: app.Object, Parameters: run.Resolved.Parameters, Mode: strategy.ModeBackup}
	pod, err := jobs.Render(run.Strategy, "template", run.Strategy.Spec.Template, data)
	if err != nil {
		return nil, "", err
	}
	if run.Strategy.Spec.VolumeSnapshot != nil {
		if waiting, err := d.snapshotClaims(ctx, run, jr.Name(), &pod); err != nil || waiting != "" {
			return nil, waiting, err
		}
	}
	env := append(jobs.Env(jobapi.ModeBackup, jr, run.Job.Spec.ApplicationRef, run.Resolved.Parameters), jobs.FormatEnv(run.Strategy, jobapi.ModeBackup)...)
	var lockWhy string
	if a := run.Strategy.Spec.Artifact; a != nil && a.ObjectLock != nil {
		lock, why, err := d.lockFor(ctx, run)
		if err != nil {
			return nil, "", err
		}
		env = append(env, jobs.LockEnv(run.Strategy, lock)...)
		lockWhy = why
	}
	// The record the agent stores next to the artifact (contract rule BK-11): the Backup this run
	// will make, but for the artifact, which the agent adds.
	record, err := d.kit.RecordTemplate(ctx, run, backupMetadata(run, jr.Name()))
	if err != nil {
		return nil, "", err
	}
	text, err := json.Marshal(record)
	if err != nil {
		return nil, "", err
	}
	env = append(env, corev1.EnvVar{Name: jobapi.EnvRecord, Value: string(text)})
	j, err := jobs.Create(ctx, d.Client, d.Live, d.Scheme, jr, run.Strategy, pod, env)
	if err != nil {
		return nil, "", err
	}
	ctrl.LoggerFrom(ctx).Info("Created Job", "job", klog.KObj(j))
	if lockWhy != "" {
		d.Recorder.Eventf(run.Job, nil, corev1.EventTypeNormal, "JobCreated", "Backup", "Created Job %s; it locks what it stores for %s", j.Name, lockWhy)
	} else {
		d.Recorder.Eventf(run.Job, nil, corev1.EventTypeNormal, "JobCreated", "Backup", "Created Job %s", j.Name)
	}
	return j, "", nil
}

// result validates the agent's report (or reuses the artifact recorded before a crash: the pods
// may be gone by now) and describes the Backup.
func (d *Driver) result(run *driverkit.BackupRun[Strategy], j *batchv1.Job, out jobs.Outcome) (*driverkit.BackupResult, error) {
	var artifact backupsv1.BackupArtifact
	meta := backupMetadata(run, j.Name)
	if run.Backup != nil && run.Backup.Status.Artifact != nil {
		artifact = *run.Backup.Status.Artifact
		for k, v := range run.Backup.Spec.DriverMetadata {
			if strings.HasPrefix(k, jobapi.MetadataPrefix) {
				meta[k] = v
			}
		}
	} else {
		report, err := jobapi.ParseArtifactReport(out.Report)
		if err != nil {
			where := "no pod of Job " + j.Name + " is left to read"
			if out.Pod != "" {
				where = "pod " + out.Pod + " of Job " + j.Name
			}
			return nil, driverkit.Failf(backupsv1.ReasonArtifactReportInvalid, "%s reported no usable artifact: %v; a backup that cannot be located is not a backup", where, err)
		}
		// The report is the agent's word, and the agent runs what the tenant's volume holds: its
		// artifact must lie where this run writes, or a Backup here would name another tenant's.
		if err := runScope(run.Job.Namespace, run.Resolved.Parameters).check(report.URI); err != nil {
			return nil, driverkit.Failf(ReasonArtifactOutsideRun, "pod %s of Job %s reported an artifact outside the run: %v; it is not recorded", out.Pod, j.Name, err)
		}
		artifact = backupsv1.BackupArtifact{URI: report.URI, SizeBytes: report.SizeBytes, Checksum: report.Checksum}
		// The agent's description of its artifact (format, compression, uncompressed size, key
		// reference): status.artifact.sizeBytes is the stored size, these say what it holds.
		for k, v := range report.Metadata {
			meta[jobapi.MetadataPrefix+k] = v
		}
	}
	return &driverkit.BackupResult{
		Artifact:       artifact,
		TakenAt:        j.Status.StartTime,
		DriverMetadata: meta,
		Finalize:       run.Strategy.Spec.CleanupTemplate != nil,
		Location:       fmt.Sprintf("Job %s reported %s", j.Name, artifact.URI),
	}, nil
}

// backupMetadata is the driverMetadata of a run's Backup that the driver knows before the Job
// runs: the Job's name and the class parameters (storage, contract rule RJ-3). The agent's
// description of its artifact joins it, prefixed with jobapi.MetadataPrefix.
func backupMetadata(run *driverkit.BackupRun[Strategy], jobName string) map[string]string {
	meta := map[string]string{names.MetaJobName: jobName}
	for k, v := range run.Resolved.Parameters {
		meta[names.MetaParamPrefix+k] = v
	}
	return meta
}
