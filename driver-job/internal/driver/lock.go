package driver

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	ref := run.Job.Spec.PlanRef
	if ref == nil || ref.Name == "" {
		return retainFor, fmt.Sprintf("%s (the strategy's retainFor; the run has no Plan)", retainFor), nil
	}
	plan := &backupsv1.Plan{}
	if err := d.Live.Get(ctx, client.ObjectKey{Namespace: run.Job.Namespace, Name: ref.Name}, plan); err != nil {
		if apierrors.IsNotFound(err) {
			return retainFor, fmt.Sprintf("%s (the strategy's retainFor; Plan %s is gone)", retainFor, ref.Name), nil
		}
		return 0, "", fmt.Errorf("reading Plan %s/%s to lock the backup as long as its retention keeps it: %w", run.Job.Namespace, ref.Name, err)
	}
	span := plan.Spec.Retention.Span()
	if !span.Bounded {
		return retainFor, fmt.Sprintf("%s (the strategy's retainFor; Plan %s's retention has no age bound: %s)", retainFor, plan.Name, span.Rule), nil
	}
	// The class's floor: minAge keeps younger Backups whatever the Plan says; deletionDelay holds
	// a pruned Backup longer. (Its minKeepLast keeps the newest Backups whatever their age, as
	// retention keeps the newest good one: no span covers those; the verifier reports their
	// objects once unlocked.)
	var delay time.Duration
	class := &backupsv1.BackupClass{}
	if err := d.Client.Get(ctx, client.ObjectKey{Name: run.Job.Spec.BackupClassName}, class); err == nil {
		if f := class.Spec.RetentionFloor; f != nil {
			if f.MinAge != nil && f.MinAge.Duration > span.Duration {
				span.Duration, span.Rule = f.MinAge.Duration, "the class's minAge "+f.MinAge.Duration.String()
			}
			if f.DeletionDelay != nil {
				delay = f.DeletionDelay.Duration
			}
		}
	} else if !apierrors.IsNotFound(err) {
		return 0, "", fmt.Errorf("reading BackupClass %s for its retention floor: %w", run.Job.Spec.BackupClassName, err)
	}
	need := addCapped(addCapped(span.Duration, delay), LockMargin)
	if need > retainFor {
		d.Recorder.Eventf(run.Job, nil, corev1.EventTypeWarning, ReasonLockShorterThanRetention, "Backup",
			"Locking what this backup stores for the strategy's retainFor, %s, but Plan %s keeps Backups up to %s (%s) and a pruned Backup waits %s more: for the last %s of its life the Backup's objects can be deleted. Raise the strategy's objectLock.retainFor to at least %s",
			retainFor, plan.Name, span.Duration, span.Rule, delay, need-retainFor, need)
		return retainFor, fmt.Sprintf("%s (the strategy's retainFor, shorter than Plan %s's retention needs: %s)", retainFor, plan.Name, need), nil
	}
	return need, fmt.Sprintf("%s (Plan %s's retention, %s, + deletionDelay %s + %s; the strategy allows up to %s)", need, plan.Name, span.Rule, delay, LockMargin, retainFor), nil
}

// addCapped is a+b, at most time.Duration's maximum.
func addCapped(a, b time.Duration) time.Duration {
	if a > 1<<63-1-b {
		return 1<<63 - 1
	}
	return a + b
}
