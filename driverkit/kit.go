package driverkit

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/driverkit/fairqueue"
)

// MaxRetryDelay caps the backoff between retries of a failing reconcile, so a run whose
// infrastructure keeps failing ends at most this long after its deadline (contract rule GEN-11).
const MaxRetryDelay = 2 * time.Minute

// UnreadableStrategyDeadline bounds a claimed run whose strategy cannot be read, so it ends too.
const UnreadableStrategyDeadline = time.Hour

// DefaultWorkers is how many runs of one kind a driver reconciles at once: one slow object store
// delays its own run, not every run.
const DefaultWorkers = 4

// Watch is a further source of events for one of the kit's controllers (for example the Velero
// Backups a driver creates, mapped back to their BackupJob).
type Watch struct {
	Object  client.Object
	Handler handler.EventHandler
	Options []builder.WatchesOption
}

// Kit runs a Driver: it owns the three reconcilers of the run lifecycle.
type Kit[S client.Object] struct {
	// Name identifies the driver in claims, events, the managed-by label and logs
	// ("coffer-driver-velero").
	Name string
	// Strategy is the driver's strategy kind; NewStrategy returns an empty one to read into.
	Strategy    StrategyKind
	NewStrategy func() S
	// Finalizer is put on Backups whose BackupResult asks for it; deleting such a Backup calls
	// DeleteArtifact before the finalizer is released.
	Finalizer string
	Driver    Driver[S]

	Client client.Client
	// APIReader reads uncached what the kit reads once and never watches (the kube-system
	// namespace: ClusterIdentity), and a Backup before the kit writes it or hands it to the driver
	// to act on (its cached copy may be trimmed: TrimBackup); SetupWithManager sets the manager's,
	// else Client is used.
	APIReader client.Reader
	Clock     clock.PassiveClock
	Recorder  events.EventRecorder
	Metrics   *Metrics

	// Further watches of each controller.
	BackupJobWatches, RestoreJobWatches, BackupWatches []Watch
	// BackupSources are further sources of the Backup controller's requests that are no
	// informer's (driver-velero's watch of the Velero backups it does not cache).
	BackupSources []source.Source
	// Unremarkable, when set, says of a Backup the cache hands over as new (at start, every
	// Backup) that a look at it would do nothing, so it is not queued: a Backup not being deleted
	// whose check the driver knows would make no change (driver-velero: one whose artifact was
	// seen present and whose settled Velero backup has not changed since). At 100,000 Backups the
	// queue of their first looks costs about 40 MB. Its changes and deletion are queued as ever.
	Unremarkable func(*backupsv1.Backup) bool
	// Workers per controller (default DefaultWorkers).
	Workers int
	// ArtifactConfirmDelay is how long an artifact the driver's ArtifactChecker found gone must
	// stay gone before the Backup counts as missing (default ArtifactConfirmDelay).
	ArtifactConfirmDelay time.Duration
	// ClusterName names this cluster in the records of its artifacts (contract rule BK-11),
	// beside the UID that identifies it; optional.
	ClusterName string

	cluster clusterOnce
}

// Defaults fills what is unset and can be defaulted without a manager (the clock).
func (k *Kit[S]) Defaults() *Kit[S] {
	if k.Clock == nil {
		k.Clock = clock.RealClock{}
	}
	return k
}

// SetupWithManager fills the kit's defaults from mgr and registers its three controllers.
func (k *Kit[S]) SetupWithManager(mgr ctrl.Manager) error {
	if k.Client == nil {
		k.Client = mgr.GetClient()
	}
	if k.APIReader == nil {
		k.APIReader = mgr.GetAPIReader()
	}
	k.Defaults()
	if k.Recorder == nil {
		k.Recorder = mgr.GetEventRecorder(k.Name)
	}
	workers := k.Workers
	if workers == 0 {
		workers = DefaultWorkers
	}
	add := func(name string, obj client.Object, watches []Watch, r reconcile.Reconciler, sources ...source.Source) error {
		var forOpts []builder.ForOption
		if _, ok := obj.(*backupsv1.Backup); ok && k.Unremarkable != nil {
			forOpts = append(forOpts, builder.WithPredicates(predicate.Funcs{CreateFunc: func(e event.CreateEvent) bool { return !k.unremarkable(e.Object) }}))
		}
		b := ctrl.NewControllerManagedBy(mgr).Named(name).For(obj, forOpts...).WithOptions(controller.Options{
			MaxConcurrentReconciles: workers,
			NewQueue:                fairqueue.NewQueue,
			RateLimiter:             workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, MaxRetryDelay),
		})
		for _, w := range watches {
			b = b.Watches(w.Object, w.Handler, w.Options...)
		}
		for _, src := range sources {
			b = b.WatchesRawSource(src)
		}
		return b.Complete(r)
	}
	// A class created or edited after a run naming it wakes the run: a driver whose cache did not
	// have the class yet when the run arrived would otherwise leave it for core to fail unclaimed.
	jobWatches := append([]Watch{{Object: &backupsv1.BackupClass{}, Handler: handler.EnqueueRequestsFromMapFunc(k.unclaimedRunsOf)}}, k.BackupJobWatches...)
	if err := add(k.Name+"-backupjob", &backupsv1.BackupJob{}, jobWatches, reconcile.Func(k.reconcileBackupJob)); err != nil {
		return err
	}
	// A Backup deleted under a running restore wakes that restore (contract RJ-8), found by an
	// index of the unfinished RestoreJobs by Backup, not by listing the namespace's RestoreJobs
	// on every Backup event (a tenant may hold thousands of them).
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &backupsv1.RestoreJob{}, openRestoresIndex, func(o client.Object) []string {
		if rj := o.(*backupsv1.RestoreJob); !rj.IsTerminal() {
			return []string{rj.Spec.BackupRef.Name}
		}
		return nil
	}); err != nil {
		return err
	}
	// The origins of imported Backups the cache's trim kept (ImportOrigin) go with the Backups.
	inf, err := mgr.GetCache().GetInformer(context.Background(), &backupsv1.Backup{})
	if err != nil {
		return err
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{DeleteFunc: ForgetDeleted}); err != nil {
		return err
	}
	restoreWatches := append([]Watch{{Object: &backupsv1.Backup{}, Handler: handler.EnqueueRequestsFromMapFunc(restoresOf(mgr.GetCache()))}}, k.RestoreJobWatches...)
	if err := add(k.Name+"-restorejob", &backupsv1.RestoreJob{}, restoreWatches, reconcile.Func(k.reconcileRestoreJob)); err != nil {
		return err
	}
	return add(k.Name+"-backup", &backupsv1.Backup{}, k.BackupWatches, reconcile.Func(k.reconcileBackup), k.BackupSources...)
}

// unremarkable reports whether o is a Backup not being deleted that k.Unremarkable says a look
// would leave as it is.
func (k *Kit[S]) unremarkable(o client.Object) bool {
	b, ok := o.(*backupsv1.Backup)
	return ok && k.Unremarkable != nil && b.DeletionTimestamp.IsZero() && k.Strategy.Owns(b.Spec.StrategyRef) && k.Unremarkable(b)
}

// BackupJobReconciler, RestoreJobReconciler and BackupReconciler expose the kit's reconcilers,
// for tests that drive them without a manager.
func (k *Kit[S]) BackupJobReconciler() reconcile.Reconciler {
	k.Defaults()
	return reconcile.Func(k.reconcileBackupJob)
}

// RestoreJobReconciler: see BackupJobReconciler.
func (k *Kit[S]) RestoreJobReconciler() reconcile.Reconciler {
	k.Defaults()
	return reconcile.Func(k.reconcileRestoreJob)
}

// BackupReconciler: see BackupJobReconciler.
func (k *Kit[S]) BackupReconciler() reconcile.Reconciler {
	k.Defaults()
	return reconcile.Func(k.reconcileBackup)
}

// live reads the Backup key from the API server (APIReader), uncached: the copy a write is
// computed from, or a driver acts on. It returns nil when the Backup is gone.
func (k *Kit[S]) live(ctx context.Context, key client.ObjectKey) (*backupsv1.Backup, error) {
	var r client.Reader = k.Client
	if k.APIReader != nil {
		r = k.APIReader
	}
	b := &backupsv1.Backup{}
	if err := r.Get(ctx, key, b); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading Backup %s: %w", key, err)
	}
	return b, nil
}

func (k *Kit[S]) strategy(ctx context.Context, ref backupsv1.RunStrategy) (S, error) {
	return GetStrategy(ctx, k.Client, ref.StrategyRef, k.NewStrategy())
}

// unclaimedRunsOf maps a BackupClass to the unclaimed, unfinished BackupJobs that name it.
func (k *Kit[S]) unclaimedRunsOf(ctx context.Context, o client.Object) []reconcile.Request {
	list := &backupsv1.BackupJobList{}
	if err := k.Client.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the BackupJobs of a BackupClass")
		return nil
	}
	var out []reconcile.Request
	for _, j := range list.Items {
		if j.Spec.BackupClassName == o.GetName() && !j.IsTerminal() && j.ClaimedBy() == "" {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&j)})
		}
	}
	return out
}

// openRestoresIndex indexes the unfinished RestoreJobs in the kit's cache by the Backup they
// restore.
const openRestoresIndex = "driverkit.restoreJob.openBackupRef"

// restoresOf maps a Backup to the unfinished RestoreJobs of its namespace that restore it, read
// from the cache c through openRestoresIndex.
func restoresOf(c client.Reader) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		list := &backupsv1.RestoreJobList{}
		if err := c.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingFields{openRestoresIndex: o.GetName()}); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing the RestoreJobs of a Backup")
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for i := range list.Items {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
		return out
	}
}
