package policy

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
)

// DefaultRunTTL is how long an ended run is kept, with its Result and SecurityEvents (ugallu keeps
// Results 30 days).
const DefaultRunTTL = 30 * 24 * time.Hour

// HistoryPruner deletes every run that ended more than TTL ago, hand-made or a policy's, with its
// Result (owned by the run) and its SecurityEvents (cluster-scoped, labelled with the run's UID):
// without it, two events per run pile up forever. It runs on the leader, once an hour.
type HistoryPruner struct {
	// Client lists runs (the manager's cache, which holds every run but the settled ones), reads
	// Backups (cached) and deletes.
	Client client.Client
	// Reader lists the settled runs (securityv1.LabelSettled: a policy's runs whose verdict is on
	// their Backup, not cached) a page at a time, every SettledEvery; nil: only Client's runs.
	Reader client.Reader
	Clock  clock.PassiveClock
	TTL    time.Duration

	lastSettled time.Time
}

// SettledEvery is how often the settled runs are read (a page of settledPage runs a request):
// those past the TTL are deleted, and those whose Backup is gone (deleted while the verifier was
// not running; RunPruner deletes the others as their Backup goes).
const SettledEvery = 6 * time.Hour

const settledPage = 500

// Start prunes once, then every hour, until ctx ends (a manager.Runnable).
func (p *HistoryPruner) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("run-history")
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if n, err := p.Prune(ctx); err != nil {
			log.Error(err, "Pruning ended runs; retrying at the next pass")
		} else if n > 0 {
			log.Info("Deleted runs that ended more than their TTL ago, with their Results and SecurityEvents", "deleted", n, "ttl", p.TTL)
		}
	}, time.Hour)
	return nil
}

// Prune deletes the runs that ended more than TTL ago and reports how many.
func (p *HistoryPruner) Prune(ctx context.Context) (int, error) {
	runs := &securityv1.BackupVerifyRunList{}
	// Read only: the cache's own copies (there may be 100,000 runs).
	if err := p.Client.List(ctx, runs, client.UnsafeDisableDeepCopy); err != nil {
		return 0, fmt.Errorf("listing BackupVerifyRuns: %w", err)
	}
	n := 0
	for i := range runs.Items {
		run := &runs.Items[i]
		if !p.expired(run) {
			continue
		}
		if err := deleteRun(ctx, p.Client, run); err != nil {
			return n, err
		}
		n++
		ctrl.LoggerFrom(ctx).V(1).Info("Deleted an ended run past its TTL", "run", klog.KObj(run), "completed", run.Status.CompletionTime)
	}
	if p.Reader == nil || !p.lastSettled.IsZero() && p.Clock.Since(p.lastSettled) < SettledEvery {
		return n, nil
	}
	page := &securityv1.BackupVerifyRunList{}
	for {
		if err := p.Reader.List(ctx, page, client.MatchingLabels{securityv1.LabelSettled: "true"}, client.Limit(settledPage), client.Continue(page.Continue)); err != nil {
			return n, fmt.Errorf("listing the settled BackupVerifyRuns: %w", err)
		}
		for i := range page.Items {
			run := &page.Items[i]
			gone, err := p.backupGone(ctx, run)
			if err != nil {
				return n, err
			}
			if !gone && !p.expired(run) {
				continue
			}
			if err := deleteRun(ctx, p.Client, run); err != nil {
				return n, err
			}
			n++
			ctrl.LoggerFrom(ctx).V(1).Info("Deleted a settled run past its TTL or of a Backup that is gone", "run", klog.KObj(run), "completed", run.Status.CompletionTime)
		}
		if page.Continue == "" {
			break
		}
	}
	p.lastSettled = p.Clock.Now()
	return n, nil
}

// expired reports whether run ended more than the TTL ago.
func (p *HistoryPruner) expired(run *securityv1.BackupVerifyRun) bool {
	return run.Status.Phase.IsTerminal() && run.Status.CompletionTime != nil && p.Clock.Since(run.Status.CompletionTime.Time) >= p.TTL
}

// backupGone reports whether the Backup a settled run verified is gone (read from the cache).
func (p *HistoryPruner) backupGone(ctx context.Context, run *securityv1.BackupVerifyRun) (bool, error) {
	uid := run.Labels[securityv1.LabelBackupUID]
	if run.Spec.Backend != securityv1.BackendCoffer || uid == "" {
		return false, nil
	}
	b := &backupsv1.Backup{}
	err := p.Client.Get(ctx, run.CofferBackup(), b)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case meta.IsNoMatchError(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading Backup %s: %w", run.CofferBackup(), err)
	}
	return string(b.UID) != uid, nil
}

// RunPruner deletes the settled runs of a Backup as the Backup goes (the policy's pass prunes the
// other runs, which the verifier caches; settled ones it does not). Its requests are a deleted
// Backup's namespace and UID (in Name).
type RunPruner struct {
	Client client.Client
	// Reader lists the runs uncached (settled runs are not cached).
	Reader client.Reader
}

// Reconcile deletes the settled runs labelled with the Backup's UID, with their SecurityEvents.
func (p *RunPruner) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	runs := &securityv1.BackupVerifyRunList{}
	if err := p.Reader.List(ctx, runs, client.InNamespace(req.Namespace),
		client.MatchingLabels{securityv1.LabelBackupUID: req.Name, securityv1.LabelSettled: "true"}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing the settled runs of Backup %s (uid %s): %w", req.Namespace, req.Name, err)
	}
	for i := range runs.Items {
		if err := deleteRun(ctx, p.Client, &runs.Items[i]); err != nil {
			return reconcile.Result{}, err
		}
		ctrl.LoggerFrom(ctx).Info("Deleted the run of a Backup that is gone, with its Result and SecurityEvents", "run", klog.KObj(&runs.Items[i]))
	}
	return reconcile.Result{}, nil
}

// SetupWithManager registers the pruner: each deleted Backup's namespace and UID.
func (p *RunPruner) SetupWithManager(mgr ctrl.Manager) error {
	if p.Reader == nil {
		p.Reader = mgr.GetAPIReader()
	}
	return ctrl.NewControllerManagedBy(mgr).Named("backupverifyrun-prune").
		Watches(&backupsv1.Backup{}, handler.Funcs{DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: e.Object.GetNamespace(), Name: string(e.Object.GetUID())}})
		}}).Complete(p)
}

// deleteRun deletes run's SecurityEvents, then the run (its Result goes with it): a crash between
// the two leaves the run, deleted at the next pass.
func deleteRun(ctx context.Context, c client.Client, run *securityv1.BackupVerifyRun) error {
	if err := c.DeleteAllOf(ctx, &securityv1.SecurityEvent{}, client.MatchingLabels{securityv1.LabelRunUID: string(run.UID)}); err != nil {
		return fmt.Errorf("deleting the SecurityEvents of run %s/%s: %w", run.Namespace, run.Name, err)
	}
	if err := c.Delete(ctx, run, client.Preconditions{UID: &run.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting run %s/%s: %w", run.Namespace, run.Name, err)
	}
	return nil
}
