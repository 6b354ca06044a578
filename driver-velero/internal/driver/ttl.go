package driver

import (
	"context"
	"fmt"
	"time"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/driverkit"
)

// VeleroDefaultTTL is the ttl Velero gives a backup whose spec sets none (or zero): the default
// of the velero server's --default-backup-ttl. The driver cannot see the server's flags, so a
// template that relies on another default must set its ttl.
const VeleroDefaultTTL = 720 * time.Hour

// checkTTL refuses a run whose Velero backup would expire before retention lets its Backup go
// (contract BK-9): the Plan's retention, raised to its class floor's minAge, plus the floor's
// deletionDelay, during which a pruned Backup still names its Velero backup
// (RetentionPolicy.HeldUnder). Velero would otherwise delete the artifact while retention still
// counts it, and once it has pruned the older Backups, nothing good would be left. A run without a
// Plan, a Plan that is gone (core's business) and a retention that no age bounds
// (RetentionPolicy.Span) are not checked.
func (d *Driver) checkTTL(ctx context.Context, job *backupsv1.BackupJob, strat Strategy, spec *velerov1.BackupSpec) error {
	plan, hold, err := driverkit.RetentionHoldOf(ctx, d.uncached(), d.Client, job)
	if err != nil || plan == nil || !hold.Bounded {
		return err
	}
	ttl, from := spec.TTL.Duration, "its backupTemplate's ttl"
	if ttl <= 0 {
		ttl, from = VeleroDefaultTTL, "Velero's default ttl, as its backupTemplate sets none"
	}
	need := hold.Total()
	if ttl >= need {
		return nil
	}
	held := fmt.Sprintf("Plan %s keeps Backups up to %s (retention %s)", plan.Name, hold.Duration, hold.Rule)
	fix := fmt.Sprintf("shorten the Plan's retention (maxAge) to at most %s", ttl)
	if hold.DeletionDelay > 0 {
		held += fmt.Sprintf(" and BackupClass %s holds a pruned Backup %s more (deletionDelay)", job.Spec.BackupClassName, hold.DeletionDelay)
		fix = "shorten the Plan's retention (maxAge) or the class's deletionDelay"
	}
	return driverkit.Failf(backupsv1.ReasonTTLShorterThanRetention,
		"VeleroBackupStrategy %s keeps Velero backups for %s (%s), but %s: Velero would delete backups that retention still counts on. "+
			"Set the strategy's backupTemplate.spec.ttl to at least %s, or %s; nothing was created",
		strat.Name, ttl, from, held, need, fix)
}

// uncached reads from the API server (Live), for what the driver reads once per run or not at
// all while things are well: Plans, Velero objects that may have gone, volume data, the restore's
// claims modifier. Without Live (a test's reconciler), the client.
func (d *Driver) uncached() client.Reader {
	if d.Live != nil {
		return d.Live
	}
	return d.Client
}
