// Package driver is the Velero strategy driver on driverkit: a BackupJob becomes one velero.io/v1
// Backup confined to the BackupJob's namespace, then a Coffer Backup with the tarball's size and
// SHA-256; a RestoreJob becomes one velero.io/v1 Restore mapped exactly onto its target; deleting a
// Backup deletes the Velero backup through a DeleteBackupRequest. What every driver shares (claims,
// deadlines, status, events, metrics) is driverkit's.
package driver

// The run lifecycle is driverkit's: it reads runs, Backups, BackupClasses, strategies and the
// restore-target policy binding through the manager's cache (get, list, watch), claims runs and
// writes their status with Status().Patch (patch on the status subresources), creates Backups and
// releases their finalizer with a merge patch, and emits events through events.k8s.io. It reads
// applications uncached (unstructured), so get is all it needs there. The driver reads the Plan of
// a BackupJob uncached, once per run, to compare its retention with the Velero backup's ttl
// (checkTTL), so get is all it needs there too. Deleting a Backup, the driver records on it the
// DeleteBackupRequest it made (an annotation, by merge patch: patch on backups). Every verb is
// listed with the code that calls it in docs/security.md, which a test keeps equal to deploy/.
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupjobs;restorejobs;backups,verbs=get;list;watch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=plans,verbs=get
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupjobs/status;restorejobs/status;backups/status,verbs=patch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backups/status,verbs=update
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backups,verbs=create;patch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=velerodriver.backups.cozystack.io,resources=velerobackupstrategies,verbs=get;list;watch
// +kubebuilder:rbac:groups=velero.io,resources=backups;restores;downloadrequests;deletebackuprequests,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=velero.io,resources=downloadrequests;deletebackuprequests;backups;restores,verbs=delete
// +kubebuilder:rbac:groups=velero.io,resources=backups,verbs=patch
// +kubebuilder:rbac:groups=velero.io,resources=backupstoragelocations,verbs=get;list;watch
// +kubebuilder:rbac:groups=velero.io,resources=podvolumebackups;datauploads,verbs=list
// +kubebuilder:rbac:groups="",resources=configmaps,resourceNames=coffer-restore-claims,verbs=get
// +kubebuilder:rbac:groups=apps.cozystack.io,resources=*,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicybindings,verbs=get;list;watch

// The records of artifacts and the catalog (contract BK-11, BK-12): the driver reads the UID of
// kube-system uncached, by name, as this cluster's identity; the catalog writes the status of the
// strategies that enable it, and deletes the Backups it imported whose Velero backup is gone.
// +kubebuilder:rbac:groups="",resources=namespaces,resourceNames=kube-system,verbs=get
// +kubebuilder:rbac:groups=velerodriver.backups.cozystack.io,resources=velerobackupstrategies/status,verbs=patch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backups,verbs=delete

import (
	"net/http"
	"time"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	velerov2 "github.com/vmware-tanzu/velero/pkg/apis/velero/v2alpha1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/internal/names"
	"github.com/coffer-backup/coffer/driverkit"
)

// DefaultDeadline bounds a run when its strategy sets no deadline.
const DefaultDeadline = time.Hour

// Strategy is the driver's strategy type.
type Strategy = *veleroapi.VeleroBackupStrategy

// Kit is the driverkit instance of this driver.
type Kit = driverkit.Kit[Strategy]

// Driver implements driverkit.Driver for VeleroBackupStrategies.
type Driver struct {
	Client client.Client
	// Live reads uncached: the Plan of a run (checkTTL), a Velero backup whose absence is
	// confirmed, a DeleteBackupRequest the cache has yet to see. Nil means Client.
	Live client.Reader
	// Cache, when set, is the cache Client reads: a catalog sync walks the Backups it imported
	// before in its store (driverkit.Catalog.Cache). Setup sets the manager's when it sets Client.
	Cache cache.Cache
	// Watcher lists and watches the settled Velero backups, which the cache does not hold
	// (SettledSource). Setup sets one on the manager's config. The driver settles Velero backups
	// only with a Watcher and Live.
	Watcher  client.WithWatch
	Recorder events.EventRecorder
	// HTTP downloads backup tarballs from the object store (presigned URLs).
	HTTP *http.Client
	// DownloadTimeout bounds the wait for Velero to answer a DownloadRequest.
	DownloadTimeout time.Duration
	// ArtifactConfirmDelay is the kit's Kit.ArtifactConfirmDelay (zero: its default).
	ArtifactConfirmDelay time.Duration

	kit      *Kit     // the kit running this driver (New sets it): records of artifacts
	suspects suspects // Backups whose settled Velero backup changed or went (settle.go)
}

var _ driverkit.Driver[Strategy] = (*Driver)(nil)

// Kind is the driver's strategy kind.
var Kind = driverkit.StrategyKind{Group: veleroapi.Group, Kind: veleroapi.Kind}

// Scheme knows the kinds the driver reads and writes.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(backupsv1.AddToScheme(s))
	utilruntime.Must(veleroapi.AddToScheme(s))
	utilruntime.Must(velerov1.AddToScheme(s))
	utilruntime.Must(velerov2.AddToScheme(s))
	return s
}

// metrics are created once per process (they are registered on controller-runtime's registry).
var metrics = driverkit.NewMetrics("coffer_velero", names.DriverName, nil)

// New returns the kit running d; SetupWithManager fills what is left unset from the manager.
func New(d *Driver) *Kit {
	toRun := handler.EnqueueRequestsFromMapFunc(names.RunOf)
	d.kit = &Kit{
		Name:        names.DriverName,
		Strategy:    Kind,
		NewStrategy: func() Strategy { return &veleroapi.VeleroBackupStrategy{} },
		Finalizer:   names.Finalizer,
		Driver:      d,
		Client:      d.Client,
		Recorder:    d.Recorder,
		Metrics:     metrics,

		ArtifactConfirmDelay: d.ArtifactConfirmDelay,
		// A Coffer Backup has its BackupJob's namespace and name, which its Velero objects name.
		BackupJobWatches:  []driverkit.Watch{{Object: &velerov1.Backup{}, Handler: toRun}},
		RestoreJobWatches: []driverkit.Watch{{Object: &velerov1.Restore{}, Handler: toRun}},
		BackupWatches:     []driverkit.Watch{{Object: &velerov1.Backup{}, Handler: d.goneOrSettled(toRun)}, {Object: &velerov1.DeleteBackupRequest{}, Handler: toRun}},
	}
	if src := d.SettledSource(); src != nil {
		d.kit.BackupSources = []source.Source{src}
		d.kit.Unremarkable = d.unremarkable
	}
	return d.kit
}

// Setup registers the driver with a manager: the kit's controllers and the catalog's. clusterName
// names this cluster in the records of its artifacts (optional).
func Setup(mgr ctrl.Manager, d *Driver, clusterName string) error {
	if d.Client == nil {
		d.Client, d.Cache = mgr.GetClient(), mgr.GetCache()
	}
	if d.Live == nil {
		d.Live = mgr.GetAPIReader()
	}
	if d.Watcher == nil {
		w, err := client.NewWithWatch(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(), HTTPClient: mgr.GetHTTPClient()})
		if err != nil {
			return err
		}
		d.Watcher = w
	}
	if d.Recorder == nil {
		d.Recorder = mgr.GetEventRecorder(names.DriverName)
	}
	k := New(d)
	k.ClusterName = clusterName
	k.APIReader = mgr.GetAPIReader()
	if err := k.SetupWithManager(mgr); err != nil {
		return err
	}
	return (&Catalog{Driver: d, Clock: clock.RealClock{}}).SetupWithManager(mgr)
}

// Deadline is the strategy's deadline, DefaultDeadline when unset.
func (d *Driver) Deadline(s Strategy) time.Duration {
	if s.Spec.Deadline != nil {
		return s.Spec.Deadline.Duration
	}
	return DefaultDeadline
}

func veleroNamespace(s Strategy) string {
	if s.Spec.VeleroNamespace != "" {
		return s.Spec.VeleroNamespace
	}
	return veleroapi.DefaultVeleroNamespace
}

func orUnknown(s string) string {
	if s == "" {
		return "no reason given"
	}
	return s
}
