package policy

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
)

// DefaultRunTTL is how long an ended run is kept, with its Result and SecurityEvents (ugallu keeps
// Results 30 days).
const DefaultRunTTL = 30 * 24 * time.Hour

// HistoryPruner deletes every run that ended more than TTL ago, hand-made or a policy's, with its
// Result (owned by the run) and its SecurityEvents (cluster-scoped, labelled with the run's UID):
// without it, two events per run pile up forever. It runs on the leader, once an hour.
type HistoryPruner struct {
	// Client lists runs (the manager's cache) and deletes.
	Client client.Client
	Clock  clock.PassiveClock
	TTL    time.Duration
}

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
		if !run.Status.Phase.IsTerminal() || run.Status.CompletionTime == nil || p.Clock.Since(run.Status.CompletionTime.Time) < p.TTL {
			continue
		}
		if err := deleteRun(ctx, p.Client, run); err != nil {
			return n, err
		}
		n++
		ctrl.LoggerFrom(ctx).V(1).Info("Deleted an ended run past its TTL", "run", klog.KObj(run), "completed", run.Status.CompletionTime)
	}
	return n, nil
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
