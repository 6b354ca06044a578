package v1alpha1

import (
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
		Reason: ReasonClaimed, Message: "Claimed by " + driver, ObservedGeneration: s.generation, LastTransitionTime: now})
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
