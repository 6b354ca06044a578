// Command driver-velero runs Coffer's Velero strategy driver: BackupJobs and RestoreJobs whose
// strategy is a VeleroBackupStrategy become velero.io Backups and Restores, and finished backups
// become Coffer Backups with the artifact's size and SHA-256.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/internal/backup"
	"github.com/coffer-backup/coffer/driver-velero/internal/backupjob"
	"github.com/coffer-backup/coffer/driver-velero/internal/restorejob"
)

func main() {
	var metricsAddr, probeAddr, leaderNS string
	var leaderElect bool
	var downloadTimeout time.Duration
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address of the Prometheus metrics endpoint; 0 disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz probes.")
	flag.BoolVar(&leaderElect, "leader-elect", true, "Elect a leader so that only one replica reconciles at a time.")
	flag.StringVar(&leaderNS, "leader-election-namespace", "", "Namespace of the leader-election Lease; empty means the pod's namespace.")
	flag.DurationVar(&downloadTimeout, "download-timeout", 2*time.Minute, "How long to wait for Velero to answer a DownloadRequest.")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	if err := run(ctrl.SetupSignalHandler(), metricsAddr, probeAddr, leaderNS, leaderElect, downloadTimeout); err != nil {
		ctrl.Log.Error(err, "Velero driver failed")
		os.Exit(1)
	}
}

// Scheme knows the kinds the driver reads and writes.
func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(backupsv1.AddToScheme(s))
	utilruntime.Must(veleroapi.AddToScheme(s))
	utilruntime.Must(velerov1.AddToScheme(s))
	return s
}

func run(ctx context.Context, metricsAddr, probeAddr, leaderNS string, leaderElect bool, downloadTimeout time.Duration) error {
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                  newScheme(),
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          leaderElect,
		LeaderElectionID:        "driver-velero.backups.cozystack.io",
		LeaderElectionNamespace: leaderNS,
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	clk := clock.RealClock{}
	rec := mgr.GetEventRecorder("coffer-driver-velero")
	if err := (&backupjob.Reconciler{Client: mgr.GetClient(), Clock: clk, Recorder: rec, HTTP: http.DefaultClient, DownloadTimeout: downloadTimeout}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&backup.Reconciler{Client: mgr.GetClient(), Clock: clk, Recorder: rec}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&restorejob.Reconciler{Client: mgr.GetClient(), Clock: clk, Recorder: rec}).SetupWithManager(mgr); err != nil {
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
