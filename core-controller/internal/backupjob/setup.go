package backupjob

import (
	ctrl "sigs.k8s.io/controller-runtime"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("core-backupjob").
		For(&backupsv1.BackupJob{}).
		Complete(r)
}
