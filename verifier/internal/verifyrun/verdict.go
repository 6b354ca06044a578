package verifyrun

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/verifier/internal/coffercheck"
)

// recordVerdict writes a coffer run's verdict on its Backup (contract BK-10): the mode's entry of
// status.verification and the Verified condition, in one optimistic write. A run that could not be
// carried out (BackupVerifyFailed) is no verdict and writes nothing; neither does a run whose
// Backup is gone or was replaced (another UID than the one the run was made for), nor an older
// verdict than the one recorded. Writing the same verdict twice changes nothing, so a crash before
// the run's terminal status repeats it harmlessly.
func (r *Reconciler) recordVerdict(ctx context.Context, s *scope, res *securityv1.BackupVerifyResult, eventType, msg string) error {
	run := s.run
	if run.Spec.Backend != securityv1.BackendCoffer || eventType == securityv1.EventBackupVerifyFailed || saysNothingOfTheBackup(res) {
		return nil
	}
	key := coffercheck.BackupKey(run)
	b := &backupsv1.Backup{}
	if err := r.Client.Get(ctx, key, b); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reading Backup %s to record the verdict: %w", key, err)
	}
	if uid := run.Labels[securityv1.LabelBackupUID]; uid != "" && uid != string(b.UID) {
		return nil
	}
	verdict := &backupsv1.VerificationVerdict{Result: backupsv1.VerificationPassed, Time: s.now,
		ResultRef: &backupsv1.VerificationResultRef{Namespace: res.Namespace, Name: res.Name}, Message: truncate(msg, 1024)}
	if eventType == securityv1.EventBackupVerifyMismatch {
		verdict.Result = backupsv1.VerificationFailed
	}
	orig := b.DeepCopy()
	if b.Status.Verification == nil {
		b.Status.Verification = &backupsv1.BackupVerification{}
	}
	slot := &b.Status.Verification.Checksum
	if mode(run) == securityv1.ModeFullRestore {
		slot = &b.Status.Verification.FullRestore
	}
	if old := *slot; old != nil && (old.ResultRef != nil && *old.ResultRef == *verdict.ResultRef || old.Time.After(s.now.Time)) {
		return nil
	}
	if verdict.Result == backupsv1.VerificationFailed {
		// Failures in a row of this mode: one is a signal, two confirm it (Backup.VerifyFailureConfirmed).
		verdict.Failures = 1
		if old := *slot; old != nil && old.Result == backupsv1.VerificationFailed {
			verdict.Failures = max(old.Failures, 1) + 1
		}
	}
	*slot = verdict
	cond := VerifiedCondition(b.Status.Verification)
	cond.ObservedGeneration = b.Generation
	cond.LastTransitionTime = s.now
	meta.SetStatusCondition(&b.Status.Conditions, cond)
	if err := r.Client.Status().Patch(ctx, b, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("recording the verdict on Backup %s: %w", key, err)
	}
	ctrl.LoggerFrom(ctx).Info("Recorded the verdict on the Backup", "backup", klog.KObj(b), "mode", mode(run), "result", verdict.Result, "verified", cond.Reason)
	return nil
}

// saysNothingOfTheBackup reports whether the result's failure is about the sandbox, not the
// Backup: a sandbox someone tampered with during the run compared nothing that can be trusted, in
// either direction, so the run gives no verdict on the Backup.
func saysNothingOfTheBackup(res *securityv1.BackupVerifyResult) bool {
	for _, f := range res.Spec.Findings {
		if f.Code == securityv1.CodeSandboxTampered {
			return true
		}
	}
	return false
}

// VerifiedCondition is the Verified condition of a Backup's verdicts: False when the newest verdict
// of either mode failed (a failed full-restore first), else True with RestoreVerified when a
// full-restore passed, else True with ChecksumVerified.
func VerifiedCondition(v *backupsv1.BackupVerification) metav1.Condition {
	c := metav1.Condition{Type: backupsv1.ConditionVerified}
	if v == nil || v.Checksum == nil && v.FullRestore == nil {
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, "NotVerified", "no verification has ended"
		return c
	}
	failed := func(x *backupsv1.VerificationVerdict) bool {
		return x != nil && x.Result == backupsv1.VerificationFailed
	}
	passed := func(x *backupsv1.VerificationVerdict) bool {
		return x != nil && x.Result == backupsv1.VerificationPassed
	}
	switch {
	case failed(v.FullRestore):
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, backupsv1.ReasonRestoreMismatch, "full-restore: "+describeVerdict(v.FullRestore)
	case failed(v.Checksum):
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, backupsv1.ReasonChecksumMismatch, "checksum-only: "+describeVerdict(v.Checksum)
	case passed(v.FullRestore):
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, backupsv1.ReasonRestoreVerified, "full-restore: "+describeVerdict(v.FullRestore)
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, backupsv1.ReasonChecksumVerified, "checksum-only: "+describeVerdict(v.Checksum)
	}
	return c
}

func describeVerdict(v *backupsv1.VerificationVerdict) string {
	s := string(v.Result) + " at " + v.Time.UTC().Format("2006-01-02T15:04:05Z")
	if v.ResultRef != nil {
		s += " (BackupVerifyResult " + v.ResultRef.Namespace + "/" + v.ResultRef.Name + ")"
	}
	if v.Message != "" {
		s += ": " + v.Message
	}
	return s
}
