package verifyrun

import (
	"time"

	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/driverkit/fairqueue"
)

// SetupWithManager registers the reconciler. A run is reconciled when it is created (and for every
// run when the verifier starts); its spec is immutable, so its updates are the verifier's own status
// writes and are not watched. After that the reconciler asks to come back: a full-restore's Restore
// is polled (pollAfter, every PollInterval at most, as the spec says) rather than watched (the verifier must start and
// fail runs cleanly when Velero's CRDs are not installed at all), and retries back off, never past
// the run's deadline. Errors of the verifier's own writes are retried by the controller from 1 s
// doubling to 1 min, so that a run still ends soon after the API server answers again.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Reader == nil {
		r.Reader = mgr.GetAPIReader()
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("backupverifyrun").
		For(&securityv1.BackupVerifyRun{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{NewQueue: fairqueue.NewQueue, RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, time.Minute)}).
		Complete(r)
}
