package v1alpha1

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The status transitions every driver makes (contract rules BJ-2, BJ-4, BJ-5, RJ-4), as helpers so
// that drivers make them the same way. Each is idempotent.

// runStatus is the shape BackupJobStatus and RestoreJobStatus share.
type runStatus struct {
	startedAt, completedAt **metav1.Time
	message                *string
	conditions             *[]metav1.Condition
	generation             int64
}

func (s runStatus) claim(now metav1.Time, driver string) {
	if *s.startedAt == nil {
		*s.startedAt = now.DeepCopy()
	}
	meta.SetStatusCondition(s.conditions, metav1.Condition{Type: ConditionAccepted, Status: metav1.ConditionTrue,
		Reason: ReasonClaimed, Message: claimPrefix + driver, ObservedGeneration: s.generation, LastTransitionTime: now})
}

func (s runStatus) finish(now metav1.Time, ok bool, reason, msg string) {
	if *s.completedAt == nil {
		*s.completedAt = now.DeepCopy()
	}
	status := metav1.ConditionTrue
	if !ok {
		status = metav1.ConditionFalse
		*s.message = msg
	}
	meta.SetStatusCondition(s.conditions, metav1.Condition{Type: ConditionReady, Status: status,
		Reason: reason, Message: msg, ObservedGeneration: s.generation, LastTransitionTime: now})
}

func (j *BackupJob) runStatus() runStatus {
	return runStatus{&j.Status.StartedAt, &j.Status.CompletedAt, &j.Status.Message, &j.Status.Conditions, j.Generation}
}

// MarkRunning claims the run for driver: startedAt (if unset), phase Running, Accepted=True.
func (j *BackupJob) MarkRunning(now metav1.Time, driver string) {
	j.runStatus().claim(now, driver)
	j.Status.Phase = BackupJobRunning
	j.Status.ObservedGeneration = j.Generation
}

// MarkSucceeded records the Backup the run created: backupRef, completedAt, phase Succeeded, Ready=True.
func (j *BackupJob) MarkSucceeded(now metav1.Time, backup string) {
	j.Status.BackupRef = &corev1.LocalObjectReference{Name: backup}
	j.runStatus().finish(now, true, ReasonSucceeded, "Backup "+backup+" is ready")
	j.Status.Phase = BackupJobSucceeded
}

// MarkFailed ends the run: completedAt, phase Failed, message, and Ready=False with reason.
func (j *BackupJob) MarkFailed(now metav1.Time, reason, msg string) {
	j.runStatus().finish(now, false, reason, msg)
	j.Status.Phase = BackupJobFailed
}

func (r *RestoreJob) runStatus() runStatus {
	return runStatus{&r.Status.StartedAt, &r.Status.CompletedAt, &r.Status.Message, &r.Status.Conditions, r.Generation}
}

// MarkRunning claims the restore for driver: startedAt (if unset), phase Running, Accepted=True.
func (r *RestoreJob) MarkRunning(now metav1.Time, driver string) {
	r.runStatus().claim(now, driver)
	r.Status.Phase = RestoreJobRunning
	r.Status.ObservedGeneration = r.Generation
}

// MarkSucceeded ends the restore: completedAt, phase Succeeded, Ready=True with msg.
func (r *RestoreJob) MarkSucceeded(now metav1.Time, msg string) {
	r.runStatus().finish(now, true, ReasonSucceeded, msg)
	r.Status.Phase = RestoreJobSucceeded
}

// MarkFailed ends the restore: completedAt, phase Failed, message, and Ready=False with reason.
func (r *RestoreJob) MarkFailed(now metav1.Time, reason, msg string) {
	r.runStatus().finish(now, false, reason, msg)
	r.Status.Phase = RestoreJobFailed
}

// claimPrefix starts the message of the Accepted condition a claim writes.
const claimPrefix = "Claimed by "

// claimedBy reads the driver that claimed a run from its Accepted condition ("" when unclaimed).
func claimedBy(conds []metav1.Condition) string {
	c := meta.FindStatusCondition(conds, ConditionAccepted)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonClaimed {
		return ""
	}
	return strings.TrimPrefix(c.Message, claimPrefix)
}

// ClaimedBy is the driver that claimed the run (MarkRunning), or "" when none has. A driver acts
// only on runs it owns and that no other driver has claimed: a BackupClass edited while a run is
// in flight must not hand the run to a second driver.
func (j *BackupJob) ClaimedBy() string { return claimedBy(j.Status.Conditions) }

// ClaimedBy is the driver that claimed the restore (MarkRunning), or "" when none has.
func (r *RestoreJob) ClaimedBy() string { return claimedBy(r.Status.Conditions) }

// ClaimableBy reports whether driver may act on the run: no driver, or this one, has claimed it.
func (j *BackupJob) ClaimableBy(driver string) bool {
	c := j.ClaimedBy()
	return c == "" || c == driver
}

// ClaimableBy reports whether driver may act on the restore: no driver, or this one, has claimed it.
func (r *RestoreJob) ClaimableBy(driver string) bool {
	c := r.ClaimedBy()
	return c == "" || c == driver
}
