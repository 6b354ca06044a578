// Command driver-job runs Coffer's Job strategy driver: BackupJobs and RestoreJobs whose strategy
// is a JobBackupStrategy become batch/v1 Jobs; a backup Job's agent reports its artifact, from
// which the driver creates the Backup; deleting a Backup runs the strategy's cleanup Job; and on
// a period (--artifact-check-period) a check Job from the same template looks whether each Ready
// Backup's artifact still exists.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/coffer-backup/coffer/apis/election"
	"github.com/coffer-backup/coffer/driver-job/internal/driver"
	"github.com/coffer-backup/coffer/metricskit"
)

// options are the command's flags.
type options struct {
	metricsAddr, probeAddr, leaderNS string
	metricsCertDir                   string
	leaderElect, metricsSecure       bool
	election                         election.Timing
	checkPeriod                      time.Duration
	maxCheckJobs                     int
	clusterName, namespace           string
	qps                              float64
	burst                            int
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
	fs.DurationVar(&o.checkPeriod, "artifact-check-period", driver.DefaultCheckPeriod,
		"How often a check Job (the strategy's cleanupTemplate in check mode) looks whether a Ready Backup's artifact still exists; 0 disables the checks.")
	fs.IntVar(&o.maxCheckJobs, "max-artifact-check-jobs", driver.DefaultMaxCheckJobs, "How many check Jobs may run at once, in the whole cluster.")
	fs.StringVar(&o.clusterName, "cluster-name", "",
		"A name for this cluster in the record stored next to each artifact (beside the UID of its kube-system namespace, which identifies it); optional.")
	fs.StringVar(&o.namespace, "namespace", podNamespace(),
		"The driver's namespace, where the credentials Secrets of catalogs (JobBackupStrategy spec.catalog) are read; by default the pod's.")
	fs.Float64Var(&o.qps, "kube-api-qps", 100, "Queries per second to the API server (a catalog sync makes two writes per imported Backup).")
	fs.IntVar(&o.burst, "kube-api-burst", 200, "Burst of queries to the API server.")
	o.zap.BindFlags(fs)
}

func main() {
	var o options
	o.bind(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.zap)))
	if err := run(ctrl.SetupSignalHandler(), o); err != nil {
		ctrl.Log.Error(err, "Job driver failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if err := o.election.Validate(); err != nil {
		return err
	}
	cfg := ctrl.GetConfigOrDie()
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  driver.Scheme(),
		Metrics:                 metricskit.Options(o.metricsAddr, o.metricsSecure, o.metricsCertDir),
		HealthProbeBindAddress:  o.probeAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "driver-job.backups.cozystack.io",
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
	if o.maxCheckJobs < 1 {
		return fmt.Errorf("--max-artifact-check-jobs must be at least 1, not %d", o.maxCheckJobs)
	}
	if err := driver.Setup(mgr, clock.RealClock{}, o.checkPeriod, o.maxCheckJobs, o.clusterName, o.namespace); err != nil {
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

// podNamespace is the namespace of the pod the driver runs in (its ServiceAccount's), or
// coffer-system outside a pod.
func podNamespace() string {
	b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil || len(b) == 0 {
		return "coffer-system"
	}
	return strings.TrimSpace(string(b))
}
