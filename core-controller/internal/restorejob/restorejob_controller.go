// Package restorejob watches RestoreJobs on behalf of core (contract CORE-7). A RestoreJob whose
// Backup does not exist, or whose Backup's driver is not running, would otherwise wait silently
// forever (no driver can tell whose it is); core fails it once the claim timeout has passed (phase
// Failed; Accepted=False and Ready=False with BackupNotFound, or NoDriverClaimed naming the
// Backup's strategy kind). The failure itself is claim.Reconcile's, shared with BackupJobs: it
// never writes a restore a driver has claimed.
package restorejob

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/core-controller/internal/claim"
	"github.com/coffer-backup/coffer/driverkit/fairqueue"
)

// +kubebuilder:rbac:groups=backups.cozystack.io,resources=restorejobs,verbs=get;list;watch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=restorejobs/status,verbs=patch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backups,verbs=get;list;watch

// Reconciler fails RestoreJobs that no driver claims within the claim timeout.
type Reconciler struct {
	claim.Settings
}

// Reconcile fails the RestoreJob if no driver claimed it in time.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	return claim.Reconcile(ctx, r.Settings, claim.Kind[*backupsv1.RestoreJob]{
		Name: "RestoreJob",
		New:  func() *backupsv1.RestoreJob { return &backupsv1.RestoreJob{} },
		Status: func(rj *backupsv1.RestoreJob) (*[]metav1.Condition, *int64) {
			return &rj.Status.Conditions, &rj.Status.ObservedGeneration
		},
		Explain: r.unclaimed,
	}, req)
}

// unclaimed says why no driver claimed the restore, and what to do.
func (r *Reconciler) unclaimed(ctx context.Context, timeout time.Duration, rj *backupsv1.RestoreJob) (reason, msg string, err error) {
	prefix := fmt.Sprintf("No driver claimed this RestoreJob within %s", timeout)
	b := &backupsv1.Backup{}
	err = r.Client.Get(ctx, client.ObjectKey{Namespace: rj.Namespace, Name: rj.Spec.BackupRef.Name}, b)
	switch {
	case apierrors.IsNotFound(err):
		return backupsv1.ReasonBackupNotFound, fmt.Sprintf("%s: Backup %q does not exist in namespace %s; create a new RestoreJob whose spec.backupRef names an existing Backup",
			prefix, rj.Spec.BackupRef.Name, rj.Namespace), nil
	case err != nil:
		return "", "", fmt.Errorf("reading Backup %q: %w", rj.Spec.BackupRef.Name, err)
	}
	ref := b.Spec.StrategyRef
	group := ""
	if ref.APIGroup != nil {
		group = *ref.APIGroup
	}
	return backupsv1.ReasonNoDriverClaimed, fmt.Sprintf("%s: Backup %q was made with %s %q (group %s), and no driver of that strategy kind took the restore; install or start that driver, then create a new RestoreJob",
		prefix, b.Name, ref.Kind, ref.Name, group), nil
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("core-restorejob").
		WithOptions(controller.Options{NewQueue: fairqueue.NewQueue}).
		For(&backupsv1.RestoreJob{}).
		Complete(r)
}
