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
	"github.com/coffer-backup/coffer/driverkit/fairqueue"
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

// IndexPlansByClass registers PlanClassIndex on the manager's cache.
func IndexPlansByClass(ctx context.Context, mgr ctrl.Manager) error {
	return mgr.GetFieldIndexer().IndexField(ctx, &backupsv1.Plan{}, PlanClassIndex, func(o client.Object) []string {
		return []string{o.(*backupsv1.Plan).Spec.BackupClassName}
	})
}

// SetupWithManager registers the reconciler: Plans, the BackupJobs they control, the Backups that
// name them, and the BackupClasses they name (created, changed or deleted, a class changes what
// the Plans' Ready condition says).
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, workers int) error {
	if err := IndexBackupsByPlan(ctx, mgr); err != nil {
		return err
	}
	if err := IndexPlansByClass(ctx, mgr); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("core-plan").
		WithOptions(controller.Options{MaxConcurrentReconciles: workers, NewQueue: fairqueue.NewQueue}).
		For(&backupsv1.Plan{}).
		Owns(&backupsv1.BackupJob{}).
		Watches(&backupsv1.Backup{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			b := o.(*backupsv1.Backup)
			if b.Spec.PlanRef == nil {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.PlanRef.Name}}}
		})).
		Watches(&backupsv1.BackupClass{}, handler.EnqueueRequestsFromMapFunc(r.plansOfClass)).
		Complete(r)
}

// plansOfClass maps a BackupClass to the Plans that name it, in every namespace the cache holds.
func (r *Reconciler) plansOfClass(ctx context.Context, o client.Object) []reconcile.Request {
	plans := &backupsv1.PlanList{}
	if err := r.Client.List(ctx, plans, client.MatchingFields{PlanClassIndex: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the Plans of a BackupClass", "backupClass", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(plans.Items))
	for _, p := range plans.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&p)})
	}
	return reqs
}
