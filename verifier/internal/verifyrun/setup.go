package verifyrun

import (
	ctrl "sigs.k8s.io/controller-runtime"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
)

// SetupWithManager registers the reconciler. Restores are polled every PollInterval, as the spec
// says, rather than watched: the verifier must start and fail runs cleanly when Velero's CRDs are
// not installed at all.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("backupverifyrun").
		For(&securityv1.BackupVerifyRun{}).
		Complete(r)
}
