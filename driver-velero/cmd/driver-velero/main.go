// Command driver-velero runs Coffer's Velero strategy driver: BackupJobs and RestoreJobs whose
// strategy is a VeleroBackupStrategy become velero.io Backups and Restores, and finished backups
// become Coffer Backups with the artifact's size and SHA-256.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/coffer-backup/coffer/apis/election"
	"github.com/coffer-backup/coffer/driver-velero/internal/driver"
	"github.com/coffer-backup/coffer/driverkit"
	"github.com/coffer-backup/coffer/metricskit"
)

// options are the command's flags.
type options struct {
	metricsAddr, probeAddr, leaderNS string
	metricsCertDir, clusterName      string
	leaderElect, metricsSecure       bool
	election                         election.Timing
	downloadTimeout, confirmDelay    time.Duration
	zap                              zap.Options
}

func (o *options) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "Address of the Prometheus metrics endpoint; 0 disables it.")
	fs.BoolVar(&o.metricsSecure, "metrics-secure", true,
		"Serve metrics over HTTPS, only to clients whose bearer token may get /metrics (TokenReview, SubjectAccessReview); false serves plain HTTP to anyone.")
	fs.StringVar(&o.metricsCertDir, "metrics-cert-dir", "", "Directory of the metrics endpoint's tls.crt and tls.key; empty (or either file missing) means a self-signed certificate.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz probes.")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "Elect a leader so that only one replica reconciles at a time.")
	fs.StringVar(&o.leaderNS, "leader-election-namespace", "", "Namespace of the leader-election Lease; empty means the pod's namespace.")
	o.election.Bind(fs)
	fs.DurationVar(&o.downloadTimeout, "download-timeout", 2*time.Minute, "How long to wait for Velero to answer a DownloadRequest.")
	fs.DurationVar(&o.confirmDelay, "artifact-confirm-delay", driverkit.ArtifactConfirmDelay,
		"How long a Velero backup found gone must stay gone (and its storage location synced since) before its Backup counts as missing.")
	fs.StringVar(&o.clusterName, "cluster-name", "",
		"A name for this cluster in the record of each Velero backup (beside the UID of its kube-system namespace, which identifies it); optional.")
	o.zap.BindFlags(fs)
}

func main() {
	var o options
	o.bind(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.zap)))
	if err := run(ctrl.SetupSignalHandler(), o); err != nil {
		ctrl.Log.Error(err, "Velero driver failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if err := o.election.Validate(); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                  driver.Scheme(),
		Metrics:                 metricskit.Options(o.metricsAddr, o.metricsSecure, o.metricsCertDir),
		HealthProbeBindAddress:  o.probeAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "driver-velero.backups.cozystack.io",
		LeaderElectionNamespace: o.leaderNS,
		LeaseDuration:           &o.election.LeaseDuration,
		RenewDeadline:           &o.election.RenewDeadline,
		RetryPeriod:             &o.election.RetryPeriod,
		// The process exits as soon as the manager stops, so a stopping leader may hand the Lease
		// back at once (a rolling update needs no lease duration to pass).
		LeaderElectionReleaseOnCancel: true,
		Cache:                         driver.CacheOptions(),
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := driver.Setup(mgr, &driver.Driver{DownloadTimeout: o.downloadTimeout, ArtifactConfirmDelay: o.confirmDelay}, o.clusterName); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", cachesSynced(mgr)); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// cachesSynced is ready once the manager's informers have synced.
func cachesSynced(mgr ctrl.Manager) healthz.Checker {
	return func(r *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(r.Context()) {
			return errors.New("caches not synced")
		}
		return nil
	}
}

// Secure metrics (metricskit.Options) ask the API server about each scrape's token and access.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
