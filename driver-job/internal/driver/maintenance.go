package driver

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-job/internal/jobs"
	"github.com/coffer-backup/coffer/driver-job/internal/names"
	"github.com/coffer-backup/coffer/driverkit"
)

// Maintenance of Chunked repositories (coffer-agent --mode maintain: docs/artifact-format.md).
// Deleting a chunked Backup deletes its index; the packs no Backup names any more go at the
// second maintenance run after that. So once the cleanup of a chunked Backup (format 4) has
// succeeded, the driver starts a maintenance Job in the Backup's namespace: the strategy's
// cleanupTemplate (which reaches the store with the rights to delete) in mode maintain, with the
// chunk key and the Backup's repository. At most one runs per namespace: a cleanup that finds one running starts none (the
// next deletion will). A finished maintenance Job found then is reported (an event on the
// strategy, the agent's report or its error) and deleted. Maintenance never holds a Backup's
// deletion: trouble starting it is logged and tried again at the next deletion.

// Event reasons of maintenance.
const (
	ReasonMaintenanceStarted   = "MaintenanceStarted"
	ReasonMaintenanceSucceeded = "MaintenanceSucceeded"
	ReasonMaintenanceFailed    = "MaintenanceFailed"
	// ReasonMaintenanceRefused: a deleted Backup names a repository outside its own directory.
	ReasonMaintenanceRefused = "MaintenanceRefused"
)

// repositoryOf is the key prefix of chunked Backup b's repository, "" for a Backup of another
// format. The agent's report names it (driverMetadata artifact.repository); it is maintained only
// where the agent puts it, beside the artifact in the namespace's directory: a report written in
// the tenant's pod must not send a Job with the cleanup credentials to another namespace's keys.
func repositoryOf(b *backupsv1.Backup) (string, error) {
	md := b.Spec.DriverMetadata
	if md[jobapi.MetadataPrefix+"format"] != "4" || b.Status.Artifact == nil {
		return "", nil
	}
	if _, _, err := backupsv1.ParseS3URI(b.Status.Artifact.URI); err != nil {
		return "", nil
	}
	_, repo, err := jobapi.RepositoryBeside(b.Status.Artifact.URI, md[jobapi.MetadataPrefix+"repository"], b.Namespace)
	if err != nil {
		return "", fmt.Errorf("Backup %s: %w: it is not maintained", b.Name, err)
	}
	return repo, nil
}

// maintainAfter starts the maintenance of b's repository after b's cleanup (see above).
func (d *Driver) maintainAfter(ctx context.Context, b *backupsv1.Backup) {
	log := ctrl.LoggerFrom(ctx)
	if err := d.startMaintenance(ctx, b); err != nil {
		log.Error(err, "Maintenance of the chunked repository not started; the next deletion tries again", "namespace", b.Namespace)
	}
}

func (d *Driver) startMaintenance(ctx context.Context, b *backupsv1.Backup) error {
	strat, err := driverkit.GetStrategy(ctx, d.Client, b.Spec.StrategyRef, &jobapi.JobBackupStrategy{})
	if err != nil {
		return err
	}
	list := &batchv1.JobList{}
	if err := d.Client.List(ctx, list, client.InNamespace(b.Namespace), client.MatchingLabels{names.LabelRunKind: names.KindMaintenance}); err != nil {
		return err
	}
	for i := range list.Items {
		j := &list.Items[i]
		if !j.DeletionTimestamp.IsZero() {
			continue
		}
		out, err := jobs.Observe(ctx, d.Live, j)
		if err != nil {
			return err
		}
		if !out.Finished {
			return nil // one at a time: it may already see this deletion, and the next one will
		}
		if out.Succeeded {
			d.Recorder.Eventf(strat, nil, corev1.EventTypeNormal, ReasonMaintenanceSucceeded, "Maintain", "Job %s/%s maintained the repository: %s", j.Namespace, j.Name, out.Message)
		} else {
			d.Recorder.Eventf(strat, nil, corev1.EventTypeWarning, ReasonMaintenanceFailed, "Maintain", "Job %s/%s failed: %s", j.Namespace, j.Name, out.Message)
		}
		if err := client.IgnoreNotFound(d.Client.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &j.UID})); err != nil {
			return err
		}
	}
	repo, err := repositoryOf(b)
	if err != nil {
		d.Recorder.Eventf(strat, nil, corev1.EventTypeWarning, ReasonMaintenanceRefused, "Maintain", "%v", err)
		return nil
	}
	if repo == "" || strat.Spec.CleanupTemplate == nil {
		return nil
	}
	env := append(jobs.FormatEnv(strat, jobapi.ModeMaintain), corev1.EnvVar{Name: jobapi.EnvRepository, Value: repo})
	j, err := d.createArtifactJob(ctx, b, strat, jobs.Run{Object: b, Kind: names.KindMaintenance}, jobapi.ModeMaintain, env...)
	if err != nil {
		return fmt.Errorf("creating the maintenance Job: %w", err)
	}
	d.Recorder.Eventf(strat, nil, corev1.EventTypeNormal, ReasonMaintenanceStarted, "Maintain", "Created Job %s/%s to maintain the chunked repository after the deletion of Backup %s", j.Namespace, j.Name, b.Name)
	return nil
}
