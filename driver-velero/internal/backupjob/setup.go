package backupjob

import (
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/internal/names"
)

// SetupWithManager registers the reconciler: BackupJobs, and the Velero Backups made for them.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("velero-backupjob").
		For(&backupsv1.BackupJob{}).
		Watches(&velerov1.Backup{}, handler.EnqueueRequestsFromMapFunc(names.RunOf)).
		Complete(r)
}
