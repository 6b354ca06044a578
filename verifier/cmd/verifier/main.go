// Command verifier runs the backup-verify operator: BackupVerifyRuns of Velero backups and etcd
// snapshots, checksum-only or full-restore, each ending in one BackupVerifyResult and SecurityEvents.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime/debug"
	"time"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	velerov2 "github.com/vmware-tanzu/velero/pkg/apis/velero/v2alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/apis/cachetrim"
	"github.com/coffer-backup/coffer/apis/election"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	velerodriverv1 "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/metricskit"
	"github.com/coffer-backup/coffer/verifier/internal/artifact"
	"github.com/coffer-backup/coffer/verifier/internal/backend"
	"github.com/coffer-backup/coffer/verifier/internal/coffercheck"
	"github.com/coffer-backup/coffer/verifier/internal/etcdsnap"
	"github.com/coffer-backup/coffer/verifier/internal/policy"
	"github.com/coffer-backup/coffer/verifier/internal/sandbox"
	"github.com/coffer-backup/coffer/verifier/internal/velerocheck"
	"github.com/coffer-backup/coffer/verifier/internal/verifyrun"
)

// options are the verifier's flags.
type options struct {
	metricsAddr, probeAddr, leaderNS    string
	metricsCertDir                      string
	clusterID, clusterName, snapshotDir string
	leaderElect, metricsSecure          bool
	election                            election.Timing
	downloadTimeout, runTTL             time.Duration
	serviceAccount                      string
	s3Endpoint, s3Region, s3CAFile      string
	trustNamespace                      string
	etcdCheckPods                       bool
	etcdCheckImage, nodeName, podName   string
	etcdCheckMemory                     string
}

func main() {
	// A check pod (the etcd-snapshot backend's --etcd-check-pods) runs this binary's check.
	if len(os.Args) > 1 && os.Args[1] == etcdsnap.CheckCommand {
		os.Exit(etcdsnap.PodMain(os.Args[2:], os.Stdout))
	}
	if len(os.Args) > 1 && os.Args[1] == velerocheck.ReadVolumesCommand {
		os.Exit(velerocheck.ReaderMain(os.Args[2:], os.Stdout))
	}
	// A lister pod (an etcd-snapshot policy's, with --etcd-check-pods) lists a node's snapshots.
	if len(os.Args) > 1 && os.Args[1] == etcdsnap.ListCommand {
		os.Exit(etcdsnap.ListMain(os.Args[2:], os.Stdout))
	}
	o := options{}
	flag.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "Address of the Prometheus metrics endpoint; 0 disables it.")
	flag.BoolVar(&o.metricsSecure, "metrics-secure", true,
		"Serve metrics over HTTPS, only to clients whose bearer token may get /metrics (TokenReview, SubjectAccessReview); false serves plain HTTP to anyone.")
	flag.StringVar(&o.metricsCertDir, "metrics-cert-dir", "", "Directory of the metrics endpoint's tls.crt and tls.key; empty (or either file missing) means a self-signed certificate.")
	flag.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz probes.")
	flag.BoolVar(&o.leaderElect, "leader-elect", true, "Elect a leader so that only one replica reconciles at a time.")
	flag.StringVar(&o.leaderNS, "leader-election-namespace", "", "Namespace of the leader-election Lease; empty means the pod's namespace.")
	o.election.Bind(flag.CommandLine)
	flag.StringVar(&o.clusterID, "cluster-id", "", "Cluster id recorded in every SecurityEvent.")
	flag.StringVar(&o.clusterName, "cluster-name", "", "Cluster name recorded in every SecurityEvent.")
	flag.StringVar(&o.snapshotDir, "etcd-snapshot-dir", "/var/lib/etcd-snapshots", "Directory of etcd snapshots; a run's backupRef.name is a path inside it. Empty: no etcd-snapshot backend (managed clusters).")
	flag.DurationVar(&o.downloadTimeout, "download-timeout", 2*time.Minute, "How long to wait for Velero to answer a DownloadRequest.")
	flag.StringVar(&o.serviceAccount, "service-account", "",
		"The verifier's own ServiceAccount (<namespace>/<name>), bound to ClusterRole coffer-verifier-sandbox in each sandbox; empty means the identity the API server sees.")
	flag.StringVar(&o.s3Endpoint, "s3-endpoint", "",
		"S3 endpoint (http(s)://host[:port]) that checksum-only reads the s3:// artifacts of Coffer Backups from, with the read-only credentials of AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; empty means such artifacts cannot be verified checksum-only (Velero-made Backups are read through Velero).")
	flag.StringVar(&o.s3Region, "s3-region", "", "Region of --s3-endpoint; empty lets the client ask the server.")
	flag.StringVar(&o.s3CAFile, "s3-ca-file", "", "PEM CA bundle trusted for --s3-endpoint besides the system's roots.")
	flag.StringVar(&o.trustNamespace, "checksum-trust-namespace", "",
		"Namespace (the verifier's own) of the ConfigMaps that keep the first checksum of each Velero backup nothing recorded one for; later checksum-only runs compare with it (trust on first use). Empty: such backups are checksum-not-recorded every time.")
	flag.BoolVar(&o.etcdCheckPods, "etcd-check-pods", false,
		"Check each etcd snapshot in a short-lived pod on the node that holds it (the run's backupRef.node, else --node-name), which reads --etcd-snapshot-dir of that node as user 0 with CAP_DAC_READ_SEARCH only: snapshots saved by etcdctl are 0600 and root-owned. False: the verifier reads them itself.")
	flag.StringVar(&o.etcdCheckImage, "etcd-check-image", "", "Image of the check pods; empty: the verifier's own (read from its pod, --pod-name).")
	flag.StringVar(&o.etcdCheckMemory, "etcd-check-memory", "512Mi", "Memory limit of a check pod.")
	flag.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "The verifier's node: etcd-snapshot runs without backupRef.node are checked there.")
	flag.StringVar(&o.podName, "pod-name", os.Getenv("POD_NAME"), "The verifier's pod (in --checksum-trust-namespace), whose image the check pods run.")
	flag.DurationVar(&o.runTTL, "run-ttl", policy.DefaultRunTTL, "How long an ended BackupVerifyRun is kept, with its Result and SecurityEvents; 0 keeps them forever.")
	zo := zap.Options{}
	zo.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zo)))
	if err := run(ctrl.SetupSignalHandler(), o); err != nil {
		ctrl.Log.Error(err, "Verifier failed")
		os.Exit(1)
	}
}

// cacheAnnotations are the only annotations the verifier reads on what it caches: the checksum
// driver-velero records on a Velero Backup. Every cached object is trimmed to them and loses its
// managedFields, Backups are cut to what policies read (policy.TrimCachedBackup) and ended runs to
// what is read of them (verifyrun.TrimEndedRun;
// docs/security.md, "Bounds and caches"); the restored objects a verification compares, a run's
// Backup and the Backup a verdict is written on are read uncached, whole.
var cacheAnnotations = cachetrim.Keep{backupsv1.AnnotationChecksum: 80}

// cacheOptions is what the verifier caches: every object trimmed (cacheAnnotations), Backups cut
// to what policies read, ended runs to what is read of them, and no settled run (a policy's run
// whose verdict is on its Backup: a policy keeps one per verified Backup, and nothing reads them
// but their pruning).
func cacheOptions() cache.Options {
	return cache.Options{DefaultTransform: cachetrim.Transform(cacheAnnotations, policy.TrimCachedBackup, verifyrun.TrimEndedRun),
		ByObject: map[client.Object]cache.ByObject{&securityv1.BackupVerifyRun{}: {Label: verifyrun.Unsettled()}}}
}

func run(ctx context.Context, o options) error {
	if err := o.election.Validate(); err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(securityv1.AddToScheme(scheme))
	utilruntime.Must(velerov1.AddToScheme(scheme))
	utilruntime.Must(velerov2.AddToScheme(scheme))
	utilruntime.Must(backupsv1.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricskit.Options(o.metricsAddr, o.metricsSecure, o.metricsCertDir),
		HealthProbeBindAddress:  o.probeAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "backup-verify.security.ugallu.io",
		LeaderElectionNamespace: o.leaderNS,
		LeaseDuration:           &o.election.LeaseDuration,
		RenewDeadline:           &o.election.RenewDeadline,
		RetryPeriod:             &o.election.RetryPeriod,
		// The process exits as soon as the manager stops, so a stopping leader may hand the Lease
		// back at once (a rolling update needs no lease duration to pass).
		LeaderElectionReleaseOnCancel: true,
		Cache:                         cacheOptions(),
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	sa, err := serviceAccount(ctx, mgr.GetConfig(), scheme, o.serviceAccount)
	if err != nil {
		return err
	}
	ctrl.Log.Info("Sandboxes are bound to the verifier's ServiceAccount", "serviceAccount", sa)
	store, err := s3Store(o)
	if err != nil {
		return err
	}
	// Downloads go through a client per storage location (timeouts, its caCert trusted).
	// Every backend that restores makes its sandboxes through this one Maker.
	sb := &sandbox.Maker{Reader: mgr.GetAPIReader(), Client: mgr.GetClient(), ServiceAccount: sa}
	vc := &velerocheck.Checker{Reader: mgr.GetAPIReader(), Client: mgr.GetClient(), DownloadTimeout: o.downloadTimeout, Sandbox: sb}
	if o.podName != "" && o.trustNamespace != "" {
		// The readers of a full-restore of volume data run the verifier's own image.
		if vc.ReaderImage, err = ownImage(ctx, mgr.GetAPIReader(), o); err != nil {
			ctrl.Log.Error(err, "Volume data will not be restored by full-restores")
		}
	}
	if o.trustNamespace != "" {
		vc.Trust = &velerocheck.TrustStore{Reader: mgr.GetAPIReader(), Writer: mgr.GetClient(), Namespace: o.trustNamespace}
		// A record outlives its backup by the run TTL at least (a month by default).
		ttl := o.runTTL
		if ttl <= 0 {
			ttl = policy.DefaultRunTTL
		}
		if err := mgr.Add(&velerocheck.TrustPruner{Store: vc.Trust, Clock: clock.RealClock{}, TTL: ttl}); err != nil {
			return err
		}
	}
	// The coffer backend reads driver-velero's artifacts through Velero, any other driver's s3://
	// artifacts from --s3-endpoint.
	artifacts := artifact.Registry{ByDriver: map[string]artifact.Reader{velerodriverv1.Group: &velerocheck.ArtifactReader{Checker: vc}}}
	if store != nil {
		artifacts.ByScheme = map[string]artifact.Reader{"s3": store}
	}
	cc := &coffercheck.Checker{Reader: mgr.GetAPIReader(), Client: mgr.GetClient(), Artifacts: artifacts, Sandbox: sb}
	r := &verifyrun.Reconciler{
		Client: mgr.GetClient(),
		Backends: map[securityv1.Backend]backend.Backend{
			securityv1.BackendVelero: vc,
			securityv1.BackendCoffer: cc,
		},
		Clock: clock.RealClock{}, Recorder: mgr.GetEventRecorder("ugallu-backup-verify"),
		ClusterID: o.clusterID, ClusterName: o.clusterName, Version: version(),
	}
	// Without a snapshot directory (deploy/managed/verifier) there is no etcd-snapshot backend:
	// its runs fail BackendNotConfigured.
	var lister policy.SnapshotLister
	switch {
	case o.snapshotDir != "" && o.etcdCheckPods:
		pb, err := checkPods(ctx, mgr, o)
		if err != nil {
			return err
		}
		r.Backends[securityv1.BackendEtcdSnapshot] = pb
		lister = pb
		if err := mgr.Add(&etcdsnap.PodSweeper{Reader: mgr.GetAPIReader(), Runs: mgr.GetClient(), Client: mgr.GetClient(), Namespace: pb.Namespace,
			Clock: clock.RealClock{}}); err != nil {
			return err
		}
	case o.snapshotDir != "":
		r.Backends[securityv1.BackendEtcdSnapshot] = &etcdsnap.Backend{Dir: o.snapshotDir}
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	if o.runTTL > 0 {
		if err := mgr.Add(&policy.HistoryPruner{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Clock: clock.RealClock{}, TTL: o.runTTL}); err != nil {
			return err
		}
	}
	// Sandboxes no run will clean up (its run deleted mid-restore, or its cleanup failed).
	if err := mgr.Add(&sandbox.Sweeper{Reader: mgr.GetAPIReader(), Runs: mgr.GetClient(), Client: mgr.GetClient(), Clock: clock.RealClock{},
		Grace: sandbox.DefaultSweepGrace, Interval: sandbox.DefaultSweepInterval, Hold: holds(vc.RestoreHold, cc.RestoreHold)}); err != nil {
		return err
	}
	// The verifier also runs without Coffer (Velero backups and etcd snapshots only): verdicts,
	// written on Coffer's Backups, and coffer policies, which watch its Backups and Plans, run
	// only where Coffer's CRDs are served; velero and etcd-snapshot policies run everywhere.
	coffer := true
	if _, err := mgr.GetRESTMapper().RESTMapping(backupsv1.GroupVersion.WithKind("Plan").GroupKind(), backupsv1.GroupVersion.Version); err != nil {
		if !meta.IsNoMatchError(err) {
			return fmt.Errorf("looking for Coffer's CRDs: %w", err)
		}
		coffer = false
		ctrl.Log.Info("Coffer's CRDs (backups.cozystack.io) are not installed: coffer BackupVerifyPolicies are not acted on and no verdict is recorded; restart the verifier once they are")
	} else if err := (&verifyrun.VerdictReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return err
	} else if err := (&policy.RunPruner{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return err
	}
	pr := &policy.Reconciler{Client: mgr.GetClient(), Clock: clock.RealClock{}, Recorder: mgr.GetEventRecorder("ugallu-backup-verify"),
		Coffer: coffer, SnapshotDir: o.snapshotDir, Lister: lister}
	if err := pr.SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	// Ready once the informers have synced: before that the verifier reconciles nothing.
	if err := mgr.AddReadyzCheck("readyz", func(r *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(r.Context()) {
			return errors.New("caches not synced")
		}
		return nil
	}); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// holds keeps a run's sandboxes while any of hs says a restore still runs into them (a Velero
// Restore of the velero backend, a RestoreJob of the coffer backend).
func holds(hs ...func(context.Context, types.UID) (bool, error)) func(context.Context, types.UID) (bool, error) {
	return func(ctx context.Context, uid types.UID) (bool, error) {
		for _, h := range hs {
			if hold, err := h(ctx, uid); err != nil || hold {
				return true, err
			}
		}
		return false, nil
	}
}

// checkPods is the etcd-snapshot backend of --etcd-check-pods: check pods in the verifier's
// namespace, running its image.
func checkPods(ctx context.Context, mgr ctrl.Manager, o options) (*etcdsnap.PodBackend, error) {
	if o.trustNamespace == "" {
		return nil, errors.New("--etcd-check-pods needs the verifier's namespace: set --checksum-trust-namespace (POD_NAMESPACE)")
	}
	mem, err := resource.ParseQuantity(o.etcdCheckMemory)
	if err != nil {
		return nil, fmt.Errorf("--etcd-check-memory: %w", err)
	}
	image := o.etcdCheckImage
	if image == "" {
		if o.podName == "" {
			return nil, errors.New("--etcd-check-pods needs an image: set --etcd-check-image, or --pod-name (POD_NAME) to run the verifier's own")
		}
		if image, err = ownImage(ctx, mgr.GetAPIReader(), o); err != nil {
			return nil, err
		}
	}
	ctrl.Log.Info("etcd snapshots are checked in pods on the nodes that hold them", "image", image, "namespace", o.trustNamespace, "node", o.nodeName)
	return &etcdsnap.PodBackend{Reader: mgr.GetAPIReader(), Client: mgr.GetClient(), Namespace: o.trustNamespace, Image: image,
		HostDir: o.snapshotDir, Node: o.nodeName, Memory: mem}, nil
}

// ownImage reads the verifier's own image from its pod (--pod-name in --checksum-trust-namespace).
func ownImage(ctx context.Context, r client.Reader, o options) (string, error) {
	pod := &corev1.Pod{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: o.trustNamespace, Name: o.podName}, pod); err != nil {
		return "", fmt.Errorf("reading the verifier's pod for its image: %w", err)
	}
	image := ""
	for i, c := range pod.Spec.Containers {
		if c.Name == "manager" || i == 0 {
			image = c.Image
		}
	}
	return image, nil
}

// Secure metrics (metricskit.Options) ask the API server about each scrape's token and access.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// s3Store is the object storage of --s3-endpoint, or nil without one.
func s3Store(o options) (*artifact.Store, error) {
	if o.s3Endpoint == "" {
		return nil, nil
	}
	var ca []byte
	if o.s3CAFile != "" {
		var err error
		if ca, err = os.ReadFile(o.s3CAFile); err != nil {
			return nil, fmt.Errorf("--s3-ca-file: %w", err)
		}
	}
	id, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	if id == "" || secret == "" {
		return nil, errors.New("--s3-endpoint is set but AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY is empty: mount the Secret coffer-verifier-s3 (deploy/verifier/manager)")
	}
	return artifact.NewStore(o.s3Endpoint, o.s3Region, id, secret, ca)
}

// version is the verifier's module version as built ("devel" for a build from a checkout).
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}
