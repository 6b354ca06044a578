// Package backup looks after the Coffer Backups made by the Velero driver: it shows whether the
// Velero backup behind each still exists (ArtifactAvailable), and on deletion it deletes that
// Velero backup through a DeleteBackupRequest (a plain delete would be resurrected by Velero's
// storage sync) before releasing the Backup's finalizer.
package backup

import (
	"context"
	"fmt"
	"time"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/internal/names"
	"github.com/coffer-backup/coffer/driver-velero/internal/resolve"
)

// Reconciler handles one Coffer Backup of this driver.
type Reconciler struct {
	Client   client.Client
	Clock    clock.PassiveClock
	Recorder events.EventRecorder
}

// Reconcile reports artifact availability or carries out a deletion.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	b := &backupsv1.Backup{}
	if err := r.Client.Get(ctx, req.NamespacedName, b); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !resolve.Ours(b.Spec.StrategyRef) || b.Spec.DriverMetadata[names.MetaBackupName] == "" {
		return reconcile.Result{}, nil
	}
	key := client.ObjectKey{Namespace: b.Spec.DriverMetadata[names.MetaNamespace], Name: b.Spec.DriverMetadata[names.MetaBackupName]}
	vb := &velerov1.Backup{}
	err := r.Client.Get(ctx, key, vb)
	gone := apierrors.IsNotFound(err)
	if err != nil && !gone {
		return reconcile.Result{}, err
	}
	// A Backup restored from a backup of its own namespace (into a verification sandbox, or back
	// into place) is a copy: it carries the finalizer and driverMetadata, but the Velero backup
	// was made for the original. A copy never deletes or judges the artifact.
	copied := !gone && vb.Annotations[names.AnnotationRun] != b.Namespace+"/"+b.Name
	if !b.DeletionTimestamp.IsZero() {
		if copied {
			return reconcile.Result{}, r.release(ctx, b)
		}
		return r.delete(ctx, b, key, gone)
	}
	if copied {
		return reconcile.Result{}, nil
	}
	if b.Status.Phase != backupsv1.BackupReady {
		return reconcile.Result{}, nil // the BackupJob reconciler is still writing it
	}
	orig := b.DeepCopy()
	cond := metav1.Condition{Type: backupsv1.ConditionArtifactAvailable, Status: metav1.ConditionTrue, Reason: backupsv1.ReasonArtifactPresent,
		Message: fmt.Sprintf("Velero backup %s is stored in location %s", key, vb.Spec.StorageLocation), LastTransitionTime: metav1.NewTime(r.Clock.Now())}
	if gone || vb.Status.Phase == velerov1.BackupPhaseDeleting {
		cond.Status, cond.Reason = metav1.ConditionFalse, backupsv1.ReasonArtifactMissing
		cond.Message = fmt.Sprintf("Velero backup %s no longer exists (expired by its TTL or deleted outside Coffer); this Backup cannot be restored", key)
	}
	meta.SetStatusCondition(&b.Status.Conditions, cond)
	if apiequality.Semantic.DeepEqual(orig.Status, b.Status) {
		return reconcile.Result{}, nil
	}
	if cond.Status == metav1.ConditionFalse {
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, backupsv1.ReasonArtifactMissing, "Check", "%s", cond.Message)
	}
	return reconcile.Result{}, r.Client.Status().Patch(ctx, b, client.MergeFrom(orig))
}

// delete asks Velero to delete the backup and its data, and releases the Backup once it is gone.
func (r *Reconciler) delete(ctx context.Context, b *backupsv1.Backup, key client.ObjectKey, gone bool) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(b, names.Finalizer) {
		return reconcile.Result{}, nil
	}
	dbr := &velerov1.DeleteBackupRequest{}
	dbrKey := client.ObjectKey{Namespace: key.Namespace, Name: names.DeleteRequest(key.Name)}
	if gone {
		_ = client.IgnoreNotFound(r.Client.Delete(ctx, &velerov1.DeleteBackupRequest{ObjectMeta: metav1.ObjectMeta{Name: dbrKey.Name, Namespace: dbrKey.Namespace}}))
		if err := r.release(ctx, b); err != nil {
			return reconcile.Result{}, err
		}
		r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "ArtifactDeleted", "Delete", "Velero backup %s and its data are deleted", key)
		return reconcile.Result{}, nil
	}
	err := r.Client.Get(ctx, dbrKey, dbr)
	if apierrors.IsNotFound(err) {
		dbr = &velerov1.DeleteBackupRequest{
			ObjectMeta: metav1.ObjectMeta{Name: dbrKey.Name, Namespace: dbrKey.Namespace,
				Labels:      map[string]string{velerov1.BackupNameLabel: key.Name},
				Annotations: map[string]string{names.AnnotationRun: b.Namespace + "/" + b.Name}},
			Spec: velerov1.DeleteBackupRequestSpec{BackupName: key.Name},
		}
		if err := r.Client.Create(ctx, dbr); err != nil {
			return reconcile.Result{}, fmt.Errorf("creating DeleteBackupRequest %s: %w", dbrKey, err)
		}
		return reconcile.Result{}, nil // the Velero Backup's deletion wakes us
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if dbr.Status.Phase == velerov1.DeleteBackupRequestPhaseProcessed && len(dbr.Status.Errors) > 0 {
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "ArtifactDeletionFailed", "Delete",
			"Velero could not delete backup %s: %v; retrying", key, dbr.Status.Errors)
		// Ask again with a fresh request.
		return reconcile.Result{RequeueAfter: 30 * time.Second}, client.IgnoreNotFound(r.Client.Delete(ctx, dbr))
	}
	return reconcile.Result{}, nil
}

// SetupWithManager registers the reconciler: Backups, and the Velero Backups and
// DeleteBackupRequests behind them.
// release removes the driver's finalizer.
func (r *Reconciler) release(ctx context.Context, b *backupsv1.Backup) error {
	if !controllerutil.ContainsFinalizer(b, names.Finalizer) {
		return nil
	}
	orig := b.DeepCopy()
	controllerutil.RemoveFinalizer(b, names.Finalizer)
	if err := r.Client.Patch(ctx, b, client.MergeFrom(orig)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("releasing Backup %s: %w", b.Name, err)
	}
	return nil
}

func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	// A Coffer Backup has its BackupJob's namespace and name, which its Velero objects name.
	toBackup := handler.EnqueueRequestsFromMapFunc(names.RunOf)
	return ctrl.NewControllerManagedBy(mgr).
		Named("velero-backup").
		For(&backupsv1.Backup{}).
		Watches(&velerov1.Backup{}, toBackup).
		Watches(&velerov1.DeleteBackupRequest{}, toBackup).
		Complete(r)
}
