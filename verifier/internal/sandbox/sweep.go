package sandbox

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/verifier/internal/backend"
)

// Sweeper deletes the sandboxes no run will clean up: those whose run is gone (deleted mid
// restore) or ended (its cleanup failed). Only namespaces the verifier made as sandboxes are
// touched: named with securityv1.SandboxSuffix and labelled with a run's UID (the admission policy
// coffer-verifier-confinement lets the verifier delete no other namespace), each deleted with a
// UID precondition. A sandbox younger than Grace is left alone, so a run whose sandbox was just
// made is never raced.
type Sweeper struct {
	// Reader lists sandboxes (the API server directly: nothing else caches namespaces).
	Reader client.Reader
	// Runs lists the BackupVerifyRuns (the manager's cache).
	Runs   client.Reader
	Client client.Client
	Clock  clock.PassiveClock
	// Grace is the age a sandbox must reach before it is swept; Interval the time between sweeps.
	Grace, Interval time.Duration
	// Hold, if set, keeps the sandboxes of a run for as long as it answers true (a backend's
	// restore into them still running, which would re-create a deleted sandbox).
	Hold func(ctx context.Context, runUID types.UID) (bool, error)
}

// DefaultSweepGrace and DefaultSweepInterval are the sweeper's defaults.
const (
	DefaultSweepGrace    = 10 * time.Minute
	DefaultSweepInterval = 10 * time.Minute
)

// Start sweeps once, then every Interval, until ctx ends (a manager.Runnable; it runs on the
// leader only).
func (s *Sweeper) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("sandbox-sweeper")
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if n, err := s.Sweep(ctx); err != nil {
			log.Error(err, "Sweeping sandboxes; retrying at the next sweep")
		} else if n > 0 {
			log.Info("Swept sandboxes no run will clean up", "deleted", n)
		}
	}, s.Interval)
	return nil
}

// Sweep deletes the sandboxes whose run is gone or ended, and reports how many it deleted.
func (s *Sweeper) Sweep(ctx context.Context) (int, error) {
	nss := &corev1.NamespaceList{}
	if err := s.Reader.List(ctx, nss, client.HasLabels{securityv1.LabelRunUID}); err != nil {
		return 0, fmt.Errorf("listing sandboxes: %w", err)
	}
	if len(nss.Items) == 0 {
		return 0, nil
	}
	live, err := backend.LiveRuns(ctx, s.Runs)
	if err != nil {
		return 0, err
	}
	now := s.Clock.Now()
	deleted := 0
	held := map[types.UID]bool{}
	for i := range nss.Items {
		ns := &nss.Items[i]
		uid := types.UID(ns.Labels[securityv1.LabelRunUID])
		if !strings.HasSuffix(ns.Name, securityv1.SandboxSuffix) || !ns.DeletionTimestamp.IsZero() || live[uid] ||
			now.Sub(ns.CreationTimestamp.Time) < s.Grace {
			continue
		}
		if s.Hold != nil {
			h, seen := held[uid]
			if !seen {
				var err error
				if h, err = s.Hold(ctx, uid); err != nil {
					return deleted, err
				}
				held[uid] = h
			}
			if h {
				continue
			}
		}
		if err := s.Client.Delete(ctx, ns, client.Preconditions{UID: &ns.UID}); err != nil {
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				continue
			}
			return deleted, fmt.Errorf("deleting sandbox %s of run %s: %w", ns.Name, uid, err)
		}
		deleted++
		ctrl.LoggerFrom(ctx).Info("Deleted a sandbox whose run is gone or ended", "namespace", klog.KObj(ns), "runUID", uid, "run", ns.Labels[securityv1.LabelRun])
	}
	return deleted, nil
}
