package driver

import (
	"context"
	"fmt"
	"time"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/driverkit"
)

// VeleroDefaultTTL is the ttl Velero gives a backup whose spec sets none (or zero): the default
// of the velero server's --default-backup-ttl. The driver cannot see the server's flags, so a
// template that relies on another default must set its ttl.
const VeleroDefaultTTL = 720 * time.Hour

// checkTTL refuses a run whose Velero backup would expire before the retention of the run's Plan
// lets its Backup go (contract BK-9): Velero would delete the artifact while retention still
// counts it, and once it has pruned the older Backups, nothing good would be left. A run without a
// Plan, a Plan that is gone (core's business) and a retention that no age bounds
// (RetentionPolicy.Span) are not checked.
func (d *Driver) checkTTL(ctx context.Context, job *backupsv1.BackupJob, strat Strategy, spec *velerov1.BackupSpec) error {
	if job.Spec.PlanRef == nil || job.Spec.PlanRef.Name == "" {
		return nil
	}
	plan := &backupsv1.Plan{}
	if err := d.plans().Get(ctx, client.ObjectKey{Namespace: job.Namespace, Name: job.Spec.PlanRef.Name}, plan); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reading Plan %s/%s to compare its retention with the Velero backup's ttl: %w", job.Namespace, job.Spec.PlanRef.Name, err)
	}
	span := plan.Spec.Retention.Span()
	if !span.Bounded {
		return nil
	}
	ttl, from := spec.TTL.Duration, "its backupTemplate's ttl"
	if ttl <= 0 {
		ttl, from = VeleroDefaultTTL, "Velero's default ttl, as its backupTemplate sets none"
	}
	if ttl >= span.Duration {
		return nil
	}
	return driverkit.Failf(backupsv1.ReasonTTLShorterThanRetention,
		"VeleroBackupStrategy %s keeps Velero backups for %s (%s), but Plan %s keeps Backups up to %s (retention %s): Velero would delete backups that retention still counts on. "+
			"Set the strategy's backupTemplate.spec.ttl to at least %s, or shorten the Plan's retention (maxAge) to at most %s; nothing was created",
		strat.Name, ttl, from, plan.Name, span.Duration, span.Rule, span.Duration, ttl)
}

// plans reads Plans: uncached (get only), since the driver reads one Plan per run.
func (d *Driver) plans() client.Reader {
	if d.Live != nil {
		return d.Live
	}
	return d.Client
}
