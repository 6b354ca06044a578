package driverkit

import (
	"context"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// PatchStatus writes obj's status when it differs from orig's, as a merge patch with an
// optimistic lock (a status written meanwhile by another writer makes this one fail and retry,
// never overwrite). Before writing it stamps the object's generation as observedGeneration on
// the status and on every condition, so a reader can tell what a status is about. It reports
// whether it wrote.
func PatchStatus(ctx context.Context, c client.Client, obj, orig client.Object) (bool, error) {
	stamp(obj)
	if apiequality.Semantic.DeepEqual(statusOf(orig), statusOf(obj)) {
		return false, nil
	}
	if err := c.Status().Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, fmt.Errorf("writing the status of %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
	}
	return true, nil
}

func stamp(obj client.Object) {
	gen := obj.GetGeneration()
	var conds []metav1.Condition
	switch o := obj.(type) {
	case *backupsv1.BackupJob:
		o.Status.ObservedGeneration, conds = gen, o.Status.Conditions
	case *backupsv1.RestoreJob:
		o.Status.ObservedGeneration, conds = gen, o.Status.Conditions
	case *backupsv1.Backup:
		conds = o.Status.Conditions
	}
	for i := range conds {
		conds[i].ObservedGeneration = gen
	}
}

func statusOf(obj client.Object) any {
	switch o := obj.(type) {
	case *backupsv1.BackupJob:
		return o.Status
	case *backupsv1.RestoreJob:
		return o.Status
	case *backupsv1.Backup:
		return o.Status
	}
	panic(fmt.Sprintf("driverkit: no status for %T", obj))
}

// writeRunStatus ends a run's reconcile: it writes the run's status (PatchStatus) and, when that
// write made the run terminal, counts it under kind (backup, restore) and logs it, once. A write
// error becomes the reconcile's error unless it already has one.
func (k *Kit[S]) writeRunStatus(ctx context.Context, kind string, run, orig client.Object, res *reconcile.Result, retErr *error) {
	wrote, err := PatchStatus(ctx, k.Client, run, orig)
	if err != nil {
		if *retErr == nil {
			*res, *retErr = reconcile.Result{}, err
		}
		return
	}
	var phase string
	var started, completed *metav1.Time
	var conds []metav1.Condition
	switch o := run.(type) {
	case *backupsv1.BackupJob:
		phase, started, completed, conds = string(o.Status.Phase), o.Status.StartedAt, o.Status.CompletedAt, o.Status.Conditions
	case *backupsv1.RestoreJob:
		phase, started, completed, conds = string(o.Status.Phase), o.Status.StartedAt, o.Status.CompletedAt, o.Status.Conditions
	}
	if !wrote || completed == nil || started == nil {
		return
	}
	k.Metrics.finished(kind, phase, completed.Sub(started.Time).Seconds())
	ctrl.LoggerFrom(ctx).Info("Run finished", "kind", kind, "phase", phase, "message", readyMessage(conds))
}
