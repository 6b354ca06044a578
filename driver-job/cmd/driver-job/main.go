// Command driver-job runs Coffer's Job strategy driver: BackupJobs and RestoreJobs whose strategy
// is a JobBackupStrategy become batch/v1 Jobs; a backup Job's agent reports its artifact, from
// which the driver creates the Backup; deleting a Backup runs the strategy's cleanup Job.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/coffer-backup/coffer/driver-job/internal/driver"
)

func main() {
	var metricsAddr, probeAddr, leaderNS string
	var leaderElect bool
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address of the Prometheus metrics endpoint; 0 disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz probes.")
	flag.BoolVar(&leaderElect, "leader-elect", true, "Elect a leader so that only one replica reconciles at a time.")
	flag.StringVar(&leaderNS, "leader-election-namespace", "", "Namespace of the leader-election Lease; empty means the pod's namespace.")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	if err := run(ctrl.SetupSignalHandler(), metricsAddr, probeAddr, leaderNS, leaderElect); err != nil {
		ctrl.Log.Error(err, "Job driver failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, metricsAddr, probeAddr, leaderNS string, leaderElect bool) error {
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                  driver.Scheme(),
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          leaderElect,
		LeaderElectionID:        "driver-job.backups.cozystack.io",
		LeaderElectionNamespace: leaderNS,
		Cache:                   driver.CacheOptions(),
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := driver.Setup(mgr, clock.RealClock{}); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	return mgr.Start(ctx)
}
