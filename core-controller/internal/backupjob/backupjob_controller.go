// Package backupjob watches BackupJobs on behalf of core. It fails a BackupJob that no driver
// claims within the claim timeout (phase Failed; Accepted=False and Ready=False with the reason:
// BackupClassNotFound, BackupClassNotAllowed, NoMatchingStrategy, or NoDriverClaimed naming the strategy kind its
// BackupClass resolves to), so that an unclaimed run never blocks its Plan for good; and it records
// the duration of finished runs. The failure itself is claim.Reconcile's, shared with RestoreJobs:
// it never writes a run that a driver has claimed.
package backupjob

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/core-controller/internal/claim"
	"github.com/coffer-backup/coffer/core-controller/internal/metrics"
	"github.com/coffer-backup/coffer/driverkit/fairqueue"
)

// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupjobs,verbs=get;list;watch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupjobs/status,verbs=patch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupclasses,verbs=get;list;watch
// A class with a namespaceSelector: the run's namespace is read uncached for its labels.
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get

// DefaultClaimTimeout is how long a BackupJob may wait for a driver before core fails it.
const DefaultClaimTimeout = claim.DefaultTimeout

// Reconciler fails unclaimed BackupJobs and observes run durations. Only runs completing after
// Started are observed, so a restart does not observe old runs twice.
type Reconciler struct {
	claim.Settings
	// APIReader reads the run's namespace uncached, when its class has a namespaceSelector.
	APIReader client.Reader

	observed sync.Map // client.ObjectKey of each run already observed → struct{}
}

// Reconcile fails the BackupJob if no driver claimed it in time, or observes its duration once it
// is finished.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	return claim.Reconcile(ctx, r.Settings, claim.Kind[*backupsv1.BackupJob]{
		Name: "BackupJob",
		New:  func() *backupsv1.BackupJob { return &backupsv1.BackupJob{} },
		Status: func(j *backupsv1.BackupJob) (*[]metav1.Condition, *int64) {
			return &j.Status.Conditions, &j.Status.ObservedGeneration
		},
		Explain:  r.unclaimed,
		Finished: r.observe,
		Gone:     func(key client.ObjectKey) { r.observed.Delete(key) },
	}, req)
}

// unclaimed says why no driver claimed the job, and what to do: the class is missing, has no
// strategy for the application, or resolves to a strategy kind whose driver did not take it.
func (r *Reconciler) unclaimed(ctx context.Context, timeout time.Duration, job *backupsv1.BackupJob) (reason, msg string, err error) {
	prefix := fmt.Sprintf("No driver claimed this BackupJob within %s", timeout)
	// This run's spec cannot change: say how the next one gets it right.
	otherClass, retry := "use another class", "then create a new BackupJob (this one's spec cannot change)"
	if p := job.Spec.PlanRef; p != nil {
		otherClass = fmt.Sprintf("set spec.backupClassName of Plan %s to an existing class", p.Name)
		retry = fmt.Sprintf("Plan %s creates a new BackupJob at its next tick", p.Name)
	}
	class := &backupsv1.BackupClass{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: job.Spec.BackupClassName}, class); apierrors.IsNotFound(err) {
		class = nil
	} else if err != nil {
		return "", "", fmt.Errorf("reading BackupClass %q: %w", job.Spec.BackupClassName, err)
	}
	if class != nil && class.Spec.NamespaceSelector != nil {
		ns := &corev1.Namespace{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Name: job.Namespace}, ns); err != nil && !apierrors.IsNotFound(err) {
			return "", "", fmt.Errorf("reading namespace %q for the namespaceSelector of BackupClass %q: %w", job.Namespace, class.Name, err)
		}
		if err := class.AllowsNamespace(job.Namespace, ns.Labels); err != nil {
			return backupsv1.ReasonBackupClassNotAllowed, fmt.Sprintf("%s: %v; use a class allowed in this namespace, or ask an administrator to select it; %s",
				prefix, err, retry), nil
		}
	}
	resolved, err := backupsv1.ResolveStrategy(job.Spec.BackupClassName, class, job.Spec.ApplicationRef)
	switch reason := backupsv1.ResolutionReason(err); {
	case reason == backupsv1.ReasonBackupClassNotFound:
		return reason, fmt.Sprintf("%s: %v; create it or %s; %s", prefix, err, otherClass, retry), nil
	case reason == backupsv1.ReasonNoMatchingStrategy:
		return reason, fmt.Sprintf("%s: %v; add a strategy for this application to the class, or %s; %s", prefix, err, otherClass, retry), nil
	case err != nil:
		return "", "", fmt.Errorf("resolving BackupClass %q: %w", job.Spec.BackupClassName, err)
	}
	ref := resolved.StrategyRef
	group := ""
	if ref.APIGroup != nil {
		group = *ref.APIGroup
	}
	return backupsv1.ReasonNoDriverClaimed, fmt.Sprintf("%s: BackupClass %q resolves to %s %q (group %s), and no driver of that strategy kind took it; install or start that driver, or point the class at a strategy whose driver runs; %s",
		prefix, resolved.ClassName, ref.Kind, ref.Name, group, retry), nil
}

// observe records the duration of a finished run, once.
func (r *Reconciler) observe(job *backupsv1.BackupJob) {
	st := job.Status
	if st.StartedAt == nil || st.CompletedAt == nil || st.CompletedAt.Time.Before(r.Started) {
		return
	}
	if _, seen := r.observed.LoadOrStore(client.ObjectKeyFromObject(job), struct{}{}); seen {
		return
	}
	metrics.JobDuration.WithLabelValues(string(st.Phase)).Observe(st.CompletedAt.Sub(st.StartedAt.Time).Seconds())
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("core-backupjob").
		WithOptions(controller.Options{NewQueue: fairqueue.NewQueue}).
		For(&backupsv1.BackupJob{}).
		Complete(r)
}
