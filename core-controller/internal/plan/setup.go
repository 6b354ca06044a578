package plan

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// IndexBackupsByPlan registers BackupPlanIndex on the manager's cache.
func IndexBackupsByPlan(ctx context.Context, mgr ctrl.Manager) error {
	return mgr.GetFieldIndexer().IndexField(ctx, &backupsv1.Backup{}, BackupPlanIndex, func(o client.Object) []string {
		if b := o.(*backupsv1.Backup); b.Spec.PlanRef != nil {
			return []string{b.Spec.PlanRef.Name}
		}
		return nil
	})
}

// SetupWithManager registers the reconciler: Plans, the BackupJobs they control, and the Backups
// that name them.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, workers int) error {
	if err := IndexBackupsByPlan(ctx, mgr); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("core-plan").
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		For(&backupsv1.Plan{}).
		Owns(&backupsv1.BackupJob{}).
		Watches(&backupsv1.Backup{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			b := o.(*backupsv1.Backup)
			if b.Spec.PlanRef == nil {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.PlanRef.Name}}}
		})).
		Complete(r)
}
