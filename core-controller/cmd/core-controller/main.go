// Command core-controller runs Coffer's core: it schedules Plans into BackupJobs, keeps history and
// retention, and flags BackupJobs that no driver claims. It never executes a backup.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/core-controller/internal/backupjob"
	"github.com/coffer-backup/coffer/core-controller/internal/metrics"
	"github.com/coffer-backup/coffer/core-controller/internal/plan"
)

func main() {
	var o options
	flag.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "Address of the Prometheus metrics endpoint; 0 disables it.")
	flag.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz probes.")
	flag.BoolVar(&o.leaderElect, "leader-elect", true, "Elect a leader so that only one replica reconciles at a time.")
	flag.StringVar(&o.leaderNS, "leader-election-namespace", "", "Namespace of the leader-election Lease; empty means the pod's namespace.")
	flag.DurationVar(&o.claimTimeout, "driver-claim-timeout", backupjob.DefaultClaimTimeout, "How long a BackupJob may wait for a driver before it is flagged Accepted=False (NoDriverClaimed).")
	flag.Float64Var(&o.qps, "kube-api-qps", 100, "Queries per second to the API server.")
	flag.IntVar(&o.burst, "kube-api-burst", 200, "Burst of queries to the API server.")
	flag.IntVar(&o.workers, "plan-workers", 8, "Plans reconciled in parallel.")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	if err := run(ctrl.SetupSignalHandler(), o); err != nil {
		ctrl.Log.Error(err, "Core controller failed")
		os.Exit(1)
	}
}

type options struct {
	metricsAddr, probeAddr, leaderNS string
	leaderElect                      bool
	claimTimeout                     time.Duration
	qps                              float64
	burst, workers                   int
}

func run(ctx context.Context, o options) error {
	if o.claimTimeout <= 0 {
		return fmt.Errorf("--driver-claim-timeout must be positive, got %s", o.claimTimeout)
	}
	if o.workers < 1 {
		return fmt.Errorf("--plan-workers must be at least 1, got %d", o.workers)
	}
	cfg := ctrl.GetConfigOrDie()
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(backupsv1.AddToScheme(scheme))

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:  o.probeAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "core-controller.backups.cozystack.io",
		LeaderElectionNamespace: o.leaderNS,
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	clk := clock.RealClock{}
	if err := (&plan.Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Clock:     clk,
		Recorder:  mgr.GetEventRecorder("coffer-core-controller"),
	}).SetupWithManager(ctx, mgr, o.workers); err != nil {
		return fmt.Errorf("setting up the Plan controller: %w", err)
	}
	if err := (&backupjob.Reconciler{
		Client:       mgr.GetClient(),
		Clock:        clk,
		Recorder:     mgr.GetEventRecorder("coffer-core-controller"),
		ClaimTimeout: o.claimTimeout,
		Started:      clk.Now(),
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the BackupJob controller: %w", err)
	}
	if err := (&backupjob.RestoreReconciler{
		Client:       mgr.GetClient(),
		Clock:        clk,
		Recorder:     mgr.GetEventRecorder("coffer-core-controller"),
		ClaimTimeout: o.claimTimeout,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the RestoreJob controller: %w", err)
	}
	if err := metrics.Register(ctrlmetrics.Registry, mgr.GetCache()); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", func(req *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return fmt.Errorf("informer caches not synced")
		}
		return nil
	}); err != nil {
		return err
	}
	ctrl.Log.Info("Starting core controller", "driverClaimTimeout", o.claimTimeout, "leaderElection", o.leaderElect, "planWorkers", o.workers)
	return mgr.Start(ctx)
}
