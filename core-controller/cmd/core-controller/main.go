// Command core-controller runs Coffer's core: it schedules Plans into BackupJobs, keeps history and
// retention, and fails BackupJobs and RestoreJobs that no driver claims. It never executes a backup.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/apis/cachetrim"
	"github.com/coffer-backup/coffer/apis/election"
	"github.com/coffer-backup/coffer/core-controller/internal/controllers"
	"github.com/coffer-backup/coffer/core-controller/internal/metrics"
	"github.com/coffer-backup/coffer/metricskit"
)

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.zap)))
	if err := run(ctrl.SetupSignalHandler(), ctrl.GetConfigOrDie(), o); err != nil {
		ctrl.Log.Error(err, "Core controller failed")
		os.Exit(1)
	}
}

// options is everything the flags set.
type options struct {
	metricsAddr, probeAddr, leaderNS string
	metricsCertDir                   string
	leaderElect, metricsSecure       bool
	election                         election.Timing
	qps                              float64
	burst                            int
	controllers                      controllers.Options
	zap                              zap.Options
}

// parseFlags fills the options from the command line.
func parseFlags(args []string) (options, error) {
	o := options{controllers: controllers.DefaultOptions()}
	fs := flag.NewFlagSet("core-controller", flag.ContinueOnError)
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "Address of the Prometheus metrics endpoint; 0 disables it.")
	fs.BoolVar(&o.metricsSecure, "metrics-secure", true,
		"Serve metrics over HTTPS, only to clients whose bearer token may get /metrics (TokenReview, SubjectAccessReview); false serves plain HTTP to anyone.")
	fs.StringVar(&o.metricsCertDir, "metrics-cert-dir", "", "Directory of the metrics endpoint's tls.crt and tls.key; empty (or either file missing) means a self-signed certificate.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz probes.")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "Elect a leader so that only one replica reconciles at a time.")
	fs.StringVar(&o.leaderNS, "leader-election-namespace", "", "Namespace of the leader-election Lease; empty means the pod's namespace.")
	o.election.Bind(fs)
	fs.DurationVar(&o.controllers.ClaimTimeout, "driver-claim-timeout", o.controllers.ClaimTimeout,
		"How long a BackupJob or RestoreJob may wait for a driver to claim it; then core fails it (phase Failed, Ready=False with the reason, e.g. NoDriverClaimed or BackupClassNotFound).")
	fs.Float64Var(&o.qps, "kube-api-qps", 100, "Queries per second to the API server.")
	fs.IntVar(&o.burst, "kube-api-burst", 200, "Burst of queries to the API server.")
	fs.IntVar(&o.controllers.PlanWorkers, "plan-workers", o.controllers.PlanWorkers, "Plans reconciled in parallel.")
	o.zap.BindFlags(fs)
	// controller-runtime registers --kubeconfig on the global flag set; ctrl.GetConfigOrDie reads it.
	if f := flag.CommandLine.Lookup("kubeconfig"); f != nil {
		fs.Var(f.Value, f.Name, f.Usage)
	}
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if err := errors.Join(o.controllers.Validate(), o.election.Validate()); err != nil {
		return options{}, fmt.Errorf("invalid flags: %w", err)
	}
	return o, nil
}

// run starts the manager with core's controllers, metrics and probes, until ctx ends.
func run(ctx context.Context, cfg *rest.Config, o options) error {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(backupsv1.AddToScheme(scheme))

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricskit.Options(o.metricsAddr, o.metricsSecure, o.metricsCertDir),
		HealthProbeBindAddress:  o.probeAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "core-controller.backups.cozystack.io",
		LeaderElectionNamespace: o.leaderNS,
		LeaseDuration:           &o.election.LeaseDuration,
		RenewDeadline:           &o.election.RenewDeadline,
		RetryPeriod:             &o.election.RetryPeriod,
		// The process exits as soon as the manager stops, so a stopping leader may hand the Lease
		// back at once (a rolling update needs no lease duration to pass).
		LeaderElectionReleaseOnCancel: true,
		Cache:                         cache.Options{DefaultTransform: cacheTransform()},
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := controllers.Setup(ctx, mgr, o.controllers); err != nil {
		return err
	}
	if err := metrics.Register(ctrlmetrics.Registry, mgr.GetCache(), mgr.Elected()); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", func(r *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(r.Context()) {
			return errors.New("caches not synced")
		}
		return nil
	}); err != nil {
		return err
	}
	ctrl.Log.Info("Starting core controller", "driverClaimTimeout", o.controllers.ClaimTimeout,
		"leaderElection", o.leaderElect, "planWorkers", o.controllers.PlanWorkers)
	return mgr.Start(ctx)
}

// cacheAnnotations are the annotations core reads: a BackupJob's tick (history, Forbid) and an
// administrator's adoption of an imported Backup (retention).
var cacheAnnotations = cachetrim.Keep{
	backupsv1.AnnotationScheduledTime: 64,
	backupsv1.AnnotationAdopted:       8,
}

// cacheTransform trims what core caches to what it reads (docs/security.md, "Bounds and caches"):
// no managedFields, only cacheAnnotations, no RestoreJob spec.options, which core never reads
// (it fails an unclaimed RestoreJob by its Backup alone), and Backups cut to what retention and
// the unclaimed-restore message read (trimBackup). Core writes those objects only with
// Status().Patch (Plans and runs; never a Backup, which it only reads and deletes), so nothing
// dropped here is written back.
func cacheTransform() func(any) (any, error) {
	return cachetrim.Transform(cacheAnnotations, func(obj any) {
		switch o := obj.(type) {
		case *backupsv1.RestoreJob:
			o.Spec.Options = nil
		case *backupsv1.Backup:
			trimBackup(o)
		}
	})
}

// trimBackup cuts a Backup to what core reads: its name, deletion, the imported label and the
// adoption annotation (ReadOnly), spec.applicationRef, planRef, strategyRef and takenAt, the
// phase, the conditions retention decides by (ArtifactAvailable when False, PartiallyFailed when
// True, Verified) with their type, status and reason only, and the failed verification verdicts'
// results and failure counts (VerifyFailureConfirmed: a passed verdict is as good as none). Its
// strings are interned (cachetrim.Intern): a namespace, kind, group, phase or reason is held once
// for all Backups. Core holds every Backup of the cluster, so what it drops here (the driver's
// labels, metadata, finalizers and record, the artifact, every message and time but takenAt) is
// most of a Backup's size (docs/benchmarks.md, "Scale").
func trimBackup(b *backupsv1.Backup) {
	labels := map[string]string(nil)
	if v, ok := b.Labels[backupsv1.LabelImported]; ok {
		labels = map[string]string{backupsv1.LabelImported: cachetrim.Intern(v)}
	}
	b.Labels = labels
	b.Finalizers = nil
	b.OwnerReferences = nil
	b.GenerateName = ""
	b.Namespace = cachetrim.Intern(b.Namespace)
	for _, ref := range []*corev1.TypedLocalObjectReference{&b.Spec.ApplicationRef, &b.Spec.StrategyRef} {
		ref.APIGroup, ref.Kind, ref.Name = cachetrim.InternPtr(ref.APIGroup), cachetrim.Intern(ref.Kind), cachetrim.Intern(ref.Name)
	}
	if p := b.Spec.PlanRef; p != nil {
		p.Name = cachetrim.Intern(p.Name)
	}
	b.Spec.DriverMetadata = nil
	b.Status.Phase = backupsv1.BackupPhase(cachetrim.Intern(string(b.Status.Phase)))
	b.Status.Artifact = nil
	b.Status.UnderlyingResources = nil
	var conds []metav1.Condition
	for _, c := range b.Status.Conditions {
		switch {
		case c.Type == backupsv1.ConditionArtifactAvailable && c.Status == metav1.ConditionFalse,
			c.Type == backupsv1.ConditionPartiallyFailed && c.Status == metav1.ConditionTrue,
			c.Type == backupsv1.ConditionVerified:
			conds = append(conds, metav1.Condition{Type: cachetrim.Intern(c.Type),
				Status: metav1.ConditionStatus(cachetrim.Intern(string(c.Status))), Reason: cachetrim.Intern(c.Reason)})
		}
	}
	b.Status.Conditions = conds
	if v := b.Status.Verification; v != nil {
		// A failed verdict (retention counts failures in a row) and a measured restore time (the
		// Plan shows that of its restorable point).
		read := func(x *backupsv1.VerificationVerdict) *backupsv1.VerificationVerdict {
			switch {
			case x == nil:
				return nil
			case x.Result == backupsv1.VerificationFailed:
				return &backupsv1.VerificationVerdict{Result: backupsv1.VerificationFailed, Failures: x.Failures}
			case x.RestoreDuration != nil:
				return &backupsv1.VerificationVerdict{Result: backupsv1.VerificationResult(cachetrim.Intern(string(x.Result))), RestoreDuration: x.RestoreDuration}
			}
			return nil
		}
		b.Status.Verification = &backupsv1.BackupVerification{Checksum: read(v.Checksum), FullRestore: read(v.FullRestore)}
		if b.Status.Verification.Checksum == nil && b.Status.Verification.FullRestore == nil {
			b.Status.Verification = nil
		}
	}
}

// Secure metrics (metricskit.Options) ask the API server about each scrape's token and access.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
