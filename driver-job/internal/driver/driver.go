// Package driver is the Job strategy driver on driverkit: a BackupJob becomes one batch/v1 Job
// whose agent reports its artifact; a RestoreJob becomes one restore Job told the artifact's URI
// and checksum; deleting a Backup runs the strategy's cleanup Job; and on a period, a check Job
// from the same template looks whether each Ready Backup's artifact still exists (check.go). What
// every driver shares (claims, deadlines, status, events, metrics) is driverkit's.
package driver

// The run lifecycle is driverkit's: it reads runs, Backups, BackupClasses, strategies and the
// restore-target policy binding through the manager's cache (get, list, watch), claims runs and
// writes their status with Status().Patch (patch on the status subresources), creates Backups and
// releases their finalizer with a merge patch, and emits events through events.k8s.io. It reads
// applications uncached (unstructured), so get is all it needs there. The Jobs of BackupJobs and
// RestoreJobs are owned by their run with blockOwnerDeletion, which the
// OwnerReferencesPermissionEnforcement admission plugin allows only to who may update the owner's
// finalizers. Pods are listed uncached, once per finished Job. A check Job is owned by its Backup
// without blockOwnerDeletion, which needs no right on the Backup's finalizers; the time of a
// Backup's next check is an annotation the driver patches. The only Secret it reads is a catalog's
// credentials (CatalogCredentialsSecret unless an admin grants more names), in its own namespace. Every verb is listed with the code
// that calls it in docs/security.md, which a test keeps equal to deploy/.
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupjobs;restorejobs;backups,verbs=get;list;watch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupjobs/status;restorejobs/status;backups/status,verbs=patch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backups/status,verbs=update
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupjobs/finalizers;restorejobs/finalizers,verbs=update
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backups,verbs=create;patch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=plans,verbs=get
// +kubebuilder:rbac:groups=jobdriver.backups.cozystack.io,resources=jobbackupstrategies,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=list
// +kubebuilder:rbac:groups=apps.cozystack.io,resources=*,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=namespaces,resourceNames=kube-system,verbs=get
// +kubebuilder:rbac:groups=jobdriver.backups.cozystack.io,resources=jobbackupstrategies/status,verbs=patch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backups,verbs=delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get,namespace=coffer-system,resourceNames=catalog-readonly
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicybindings,verbs=get;list;watch

import (
	"context"
	"fmt"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-job/internal/jobs"
	"github.com/coffer-backup/coffer/driver-job/internal/names"
	"github.com/coffer-backup/coffer/driverkit"
)

// Strategy is the driver's strategy type.
type Strategy = *jobapi.JobBackupStrategy

// Kit is the driverkit instance of this driver.
type Kit = driverkit.Kit[Strategy]

// Driver implements driverkit.Driver for JobBackupStrategies.
type Driver struct {
	Client client.Client
	// Live reads uncached: pods (read once, when a Job has finished) and Jobs the label-filtered
	// cache cannot see.
	Live     client.Reader
	Scheme   *runtime.Scheme
	Recorder events.EventRecorder
	// Cache, when set, is the cache Client reads: passes over every Backup (StartDueChecks) walk
	// its store instead of listing copies (driverkit.EachCached). Nil lists with Client.
	Cache cache.Cache

	// CheckPeriod is how often the artifact of a Ready Backup is checked (StartDueChecks); zero
	// disables the checks. MaxCheckJobs bounds the check Jobs running at once (zero:
	// DefaultMaxCheckJobs).
	CheckPeriod  time.Duration
	MaxCheckJobs int
	// Clock is the checks' clock; nil means the real one (New sets the kit's).
	Clock clock.PassiveClock

	warned sync.Map // what was said once (uncheckable strategies)
	kit    *Kit     // the kit running this driver (New sets it): records of artifacts
}

var _ driverkit.Driver[Strategy] = (*Driver)(nil)

// Kind is the driver's strategy kind.
var Kind = driverkit.StrategyKind{Group: jobapi.Group, Kind: jobapi.Kind}

// Scheme knows the kinds the driver reads and writes.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(backupsv1.AddToScheme(s))
	utilruntime.Must(jobapi.AddToScheme(s))
	return s
}

// CacheOptions caches only the driver's own Jobs, not every Job in the cluster, and only the
// Backups of its strategy kind; pods are read uncached, once per finished Job. Every cached
// object is trimmed to what the driver reads (cacheTransform).
func CacheOptions() cache.Options {
	return driverkit.CacheBackupsOf(cache.Options{DefaultTransform: cacheTransform(), ByObject: map[client.Object]cache.ByObject{
		&batchv1.Job{}: {Label: labels.SelectorFromSet(labels.Set{backupsv1.LabelManagedBy: names.DriverName})},
	}}, Kind)
}

// metrics are created once per process (they are registered on controller-runtime's registry).
var metrics = driverkit.NewMetrics("coffer_jobdriver", names.DriverName, nil)

// New returns the kit running d with clock clk (nil: the real clock), which d's checks use too
// unless d has a clock of its own.
func New(d *Driver, clk clock.PassiveClock) *Kit {
	if d.Clock == nil {
		d.Clock = clk
	}
	d.kit = &Kit{
		Name:              names.DriverName,
		Strategy:          Kind,
		NewStrategy:       func() Strategy { return &jobapi.JobBackupStrategy{} },
		Finalizer:         names.Finalizer,
		Driver:            d,
		Client:            d.Client,
		APIReader:         d.Live,
		Recorder:          d.Recorder,
		Clock:             clk,
		Metrics:           metrics,
		BackupJobWatches:  []driverkit.Watch{{Object: &batchv1.Job{}, Handler: handler.EnqueueRequestsFromMapFunc(jobs.RunOf(names.KindBackupJob))}},
		RestoreJobWatches: []driverkit.Watch{{Object: &batchv1.Job{}, Handler: handler.EnqueueRequestsFromMapFunc(jobs.RunOf(names.KindRestoreJob))}},
		BackupWatches:     []driverkit.Watch{{Object: &batchv1.Job{}, Handler: handler.EnqueueRequestsFromMapFunc(jobs.RunOf(names.KindBackup, names.KindBackupCheck))}},
		Unremarkable:      d.unremarkable,
	}
	return d.kit
}

// Setup registers the driver with a manager: the kit's controllers, and the artifact checks
// (every checkPeriod, at most maxCheckJobs at once; a zero period disables them).
func Setup(mgr ctrl.Manager, clk clock.PassiveClock, checkPeriod time.Duration, maxCheckJobs int, clusterName, namespace string) error {
	d := &Driver{Client: mgr.GetClient(), Live: mgr.GetAPIReader(), Scheme: mgr.GetScheme(), Recorder: mgr.GetEventRecorder(names.DriverName),
		Cache: mgr.GetCache(), CheckPeriod: checkPeriod, MaxCheckJobs: maxCheckJobs}
	k := New(d, clk)
	k.ClusterName = clusterName
	if err := k.SetupWithManager(mgr); err != nil {
		return err
	}
	cat := &Catalog{Client: mgr.GetClient(), Cache: mgr.GetCache(), Live: mgr.GetAPIReader(), Recorder: d.Recorder, Clock: clk, Namespace: namespace, Kit: k}
	if err := cat.SetupWithManager(mgr); err != nil {
		return err
	}
	if checkPeriod <= 0 {
		return nil
	}
	return mgr.Add(ArtifactChecks{Driver: d})
}

// Deadline is the Job's activeDeadlineSeconds and a grace for the Job controller to report it.
func (d *Driver) Deadline(s Strategy) time.Duration { return jobs.Deadline(s) }

// RunFinished lets a finished run's Job be collected after the strategy's TTL, now that its
// outcome is recorded.
func (d *Driver) RunFinished(ctx context.Context, obj client.Object) error {
	kind := names.KindBackupJob
	if _, ok := obj.(*backupsv1.RestoreJob); ok {
		kind = names.KindRestoreJob
	}
	return jobs.Release(ctx, d.Client, jobs.Run{Object: obj, Kind: kind, Own: true})
}

// waiting describes a Job that has not finished.
func waiting(j *batchv1.Job) string {
	return fmt.Sprintf("Job %s had not finished (activeDeadlineSeconds %d; is kube-controller-manager running?)",
		j.Name, ptr.Deref(j.Spec.ActiveDeadlineSeconds, jobs.DefaultActiveDeadlineSeconds))
}
