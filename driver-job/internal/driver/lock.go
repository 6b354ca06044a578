package driver

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/driverkit"
)

// LockMargin is what a backup's object lock adds to the time its Plan's retention can keep it
// (and its class's deletionDelay): retention runs when a Backup ages out, not at the second.
const LockMargin = 24 * time.Hour

// ReasonLockShorterThanRetention (a Warning event on the BackupJob): the strategy's
// objectLock.retainFor ends before the run's Plan lets its Backup go, so the Backup's objects can
// be deleted while retention still counts on them. The backup runs: a shorter lock is less
// protection, not less data.
const ReasonLockShorterThanRetention = "LockShorterThanRetention"

// lockFor is how long the run's backup locks what it stores: the Plan's retention span
// (RetentionPolicy.Span) plus the class's deletionDelay and LockMargin, so that storage is held
// no longer than retention needs it, at most the strategy's retainFor, which bounds what a
// tenant's Plan can make the platform hold (a Compliance lock cannot be undone). Without a Plan or
// a span in time (keepLast alone, no retention) it is retainFor. why says how it was chosen.
func (d *Driver) lockFor(ctx context.Context, run *driverkit.BackupRun[Strategy]) (lock time.Duration, why string, err error) {
	retainFor := run.Strategy.Spec.Artifact.ObjectLock.RetainFor.Duration
	plan, hold, err := driverkit.RetentionHoldOf(ctx, d.Live, d.Client, run.Job)
	switch {
	case err != nil:
		return 0, "", err
	case plan == nil:
		return retainFor, fmt.Sprintf("%s (the strategy's retainFor; the run has no Plan, or its Plan is gone)", retainFor), nil
	case !hold.Bounded:
		// The class floor's minKeepLast, like keepLast, keeps the newest Backups whatever their
		// age: no span covers those; the verifier reports their objects once unlocked.
		return retainFor, fmt.Sprintf("%s (the strategy's retainFor; Plan %s's retention has no age bound: %s)", retainFor, plan.Name, hold.Rule), nil
	}
	need := backupsv1.AddCapped(hold.Total(), LockMargin)
	if need > retainFor {
		d.Recorder.Eventf(run.Job, nil, corev1.EventTypeWarning, ReasonLockShorterThanRetention, "Backup",
			"Locking what this backup stores for the strategy's retainFor, %s, but Plan %s keeps Backups up to %s (%s) and a pruned Backup waits %s more: for the last %s of its life the Backup's objects can be deleted. Raise the strategy's objectLock.retainFor to at least %s",
			retainFor, plan.Name, hold.Duration, hold.Rule, hold.DeletionDelay, need-retainFor, need)
		return retainFor, fmt.Sprintf("%s (the strategy's retainFor, shorter than Plan %s's retention needs: %s)", retainFor, plan.Name, need), nil
	}
	return need, fmt.Sprintf("%s (Plan %s's retention, %s, + deletionDelay %s + %s; the strategy allows up to %s)", need, plan.Name, hold.Rule, hold.DeletionDelay, LockMargin, retainFor), nil
}
