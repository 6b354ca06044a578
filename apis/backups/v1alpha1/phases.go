package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// IsTerminal reports whether the phase is Succeeded or Failed.
func (p BackupJobPhase) IsTerminal() bool { return p == BackupJobSucceeded || p == BackupJobFailed }

// IsTerminal reports whether the phase is Succeeded or Failed.
func (p RestoreJobPhase) IsTerminal() bool { return p == RestoreJobSucceeded || p == RestoreJobFailed }

// IsTerminal reports whether the run has finished.
func (j *BackupJob) IsTerminal() bool { return j.Status.Phase.IsTerminal() }

// IsClaimed reports whether a driver has picked the run up (phase set or Accepted=True).
func (j *BackupJob) IsClaimed() bool {
	return j.Status.Phase != "" && j.Status.Phase != BackupJobPending || conditionTrue(j.Status.Conditions, ConditionAccepted)
}

// IsTerminal reports whether the restore has finished.
func (r *RestoreJob) IsTerminal() bool { return r.Status.Phase.IsTerminal() }

// IsClaimed reports whether a driver has picked the restore up.
func (r *RestoreJob) IsClaimed() bool {
	return r.Status.Phase != "" && r.Status.Phase != RestoreJobPending || conditionTrue(r.Status.Conditions, ConditionAccepted)
}

// IsGood reports whether the Backup is usable for a restore: Ready, its artifact known to exist,
// not partially failed, and not found bad by a verification (Verified=False). Retention never
// prunes the newest good Backup.
func (b *Backup) IsGood() bool {
	if b.Status.Phase != BackupReady || b.DeletionTimestamp != nil {
		return false
	}
	for _, c := range b.Status.Conditions {
		switch {
		case c.Type == ConditionArtifactAvailable && c.Status == "False":
			return false
		case c.Type == ConditionPartiallyFailed && c.Status == "True":
			return false
		case c.Type == ConditionVerified && c.Status == "False":
			return false
		}
	}
	return true
}

// RestoreVerified reports whether the Backup is good and a full-restore verification proved it
// restorable (Verified=True, reason RestoreVerified, which the verifier derives from
// status.verification). Retention never prunes the newest such Backup of an application.
func (b *Backup) RestoreVerified() bool {
	if !b.IsGood() {
		return false
	}
	for _, c := range b.Status.Conditions {
		if c.Type == ConditionVerified {
			return c.Status == "True" && c.Reason == ReasonRestoreVerified
		}
	}
	return false
}

// VerifyFailureConfirmed reports whether the verifier's finding that the Backup is bad is
// confirmed: two verifications of one mode in a row failed, or the newest verdict of each mode
// failed. One failed verification alone is a signal, not yet a fact retention acts on.
func (b *Backup) VerifyFailureConfirmed() bool {
	v := b.Status.Verification
	if v == nil {
		return false
	}
	failed := func(x *VerificationVerdict) bool { return x != nil && x.Result == VerificationFailed }
	return failed(v.Checksum) && failed(v.FullRestore) ||
		failed(v.Checksum) && v.Checksum.Failures >= 2 || failed(v.FullRestore) && v.FullRestore.Failures >= 2
}

// WasGood reports whether the Backup completed whole (Ready, not partially failed) and no
// confirmed fact has since shown it bad: its artifact is not confirmed missing (drivers set
// ArtifactAvailable=False only once an absence is confirmed) and no verification failure is
// confirmed (VerifyFailureConfirmed). Retention never prunes the newest such Backup of an
// application: a single unconfirmed signal never costs the last restore point.
func (b *Backup) WasGood() bool {
	if b.Status.Phase != BackupReady || b.DeletionTimestamp != nil || b.ArtifactMissing() || b.VerifyFailureConfirmed() {
		return false
	}
	for _, c := range b.Status.Conditions {
		if c.Type == ConditionPartiallyFailed && c.Status == "True" {
			return false
		}
	}
	return true
}

// ArtifactMissing reports whether the driver found the Backup's artifact gone
// (ArtifactAvailable=False). Such a Backup is never good, and retention keeps it by no rule.
func (b *Backup) ArtifactMissing() bool {
	for _, c := range b.Status.Conditions {
		if c.Type == ConditionArtifactAvailable {
			return c.Status == metav1.ConditionFalse
		}
	}
	return false
}

func conditionTrue(conds []metav1.Condition, t string) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == "True"
		}
	}
	return false
}

// Imported tells whether a catalog sync made the Backup from another cluster's record.
func (b *Backup) Imported() bool { return b.Labels[LabelImported] == "true" }

// Adopted tells whether an admin made an imported Backup this cluster's (AnnotationAdopted).
func (b *Backup) Adopted() bool { return b.Annotations[AnnotationAdopted] == "true" }

// ReadOnly tells whether the Backup belongs to another cluster: imported and not adopted. Retention
// never prunes it and its driver never deletes its artifact.
func (b *Backup) ReadOnly() bool { return b.Imported() && !b.Adopted() }
