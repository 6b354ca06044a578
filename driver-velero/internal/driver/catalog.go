package driver

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/internal/names"
	"github.com/coffer-backup/coffer/driverkit"
	"github.com/coffer-backup/coffer/velerokit/download"
)

// DefaultMeasureThreads is how many tarballs a catalog sync measures at once.
const DefaultMeasureThreads = 4

// Catalog keeps the catalogs of VeleroBackupStrategies with spec.catalog (contract BK-12). It
// builds on Velero's own sync of its storage locations: the Velero backups Velero brings back from
// storage carry the record of their Coffer Backup (AnnotationRecord, written when the driver
// created them in the source cluster). The catalog reads those records, measures each tarball it
// has not measured yet (the record cannot hold a checksum Velero stored before it was known), and
// hands them to driverkit's Catalog, which imports the Backups of other clusters.
type Catalog struct {
	// Driver measures tarballs; its Client, Recorder and kit serve the catalog too.
	Driver *Driver
	Clock  clock.PassiveClock
	// MeasureThreads is how many tarballs are measured at once (default DefaultMeasureThreads).
	MeasureThreads int
}

// SetupWithManager registers the catalog controller. Spec changes wake it, and so do Velero
// backups with a record that appear or go (Velero's sync, a deletion); its own status writes and
// the updates of Velero backups do not.
func (c *Catalog) SetupWithManager(mgr ctrl.Manager) error {
	recorded := predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return e.Object.GetAnnotations()[veleroapi.AnnotationRecord] != "" },
		// A backup settled (settle.go) leaves the cache; it is this cluster's own, not gone.
		DeleteFunc: func(e event.DeleteEvent) bool {
			return e.Object.GetAnnotations()[veleroapi.AnnotationRecord] != "" && e.Object.GetLabels()[names.LabelSettled] != "true"
		},
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	return ctrl.NewControllerManagedBy(mgr).Named(names.DriverName+"-catalog").
		For(&veleroapi.VeleroBackupStrategy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&velerov1.Backup{}, handler.EnqueueRequestsFromMapFunc(c.catalogsOf), builder.WithPredicates(recorded)).
		Complete(c)
}

// catalogsOf maps a Velero backup to the strategies whose catalog reads its namespace.
func (c *Catalog) catalogsOf(ctx context.Context, o client.Object) []reconcile.Request {
	list := &veleroapi.VeleroBackupStrategyList{}
	if err := c.Driver.Client.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the VeleroBackupStrategies of catalogs")
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		s := &list.Items[i]
		if s.Spec.Catalog != nil && veleroNamespace(s) == o.GetNamespace() {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(s)})
		}
	}
	return reqs
}

// Reconcile syncs one strategy's catalog and comes back after its interval.
func (c *Catalog) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	d := c.Driver
	strat := &veleroapi.VeleroBackupStrategy{}
	if err := d.Client.Get(ctx, req.NamespacedName, strat); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	src := strat.Spec.Catalog
	if src == nil || !strat.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	where := "the Velero backups of namespace " + veleroNamespace(strat)
	if src.StorageLocation != "" {
		where += ", location " + src.StorageLocation
	}
	return driverkit.SyncCatalog(ctx, d.Client, d.Recorder, metav1.NewTime(c.Clock.Now()), strat, &strat.Status.Conditions, &strat.Status.Catalog,
		src.IntervalSeconds, where, func(p driverkit.Progress) (driverkit.CatalogResult, string, error) { return c.sync(ctx, strat, p) })
}

// sync reads the records of the synced Velero backups and imports them. An error with a reason is
// the storage's (a tarball that could not be measured); one without is the API server's.
func (c *Catalog) sync(ctx context.Context, strat Strategy, progress driverkit.Progress) (driverkit.CatalogResult, string, error) {
	d, src := c.Driver, strat.Spec.Catalog
	self, err := d.kit.SourceCluster(ctx)
	if err != nil {
		return driverkit.CatalogResult{}, "", err
	}
	// What earlier syncs measured is on the Backups they imported: measured once per record. The
	// cache's own objects are walked, read only (a copy of each, every sync, would double what the
	// cache holds; the records are parsed anew).
	measured := map[string]*backupsv1.BackupArtifact{} // record location → artifact
	if err := driverkit.EachBackup(ctx, d.Cache, d.Client, func(b *backupsv1.Backup) {
		if b.Status.Artifact != nil && b.Labels[backupsv1.LabelManagedBy] == names.DriverName {
			// A Backup whose origin the cache no longer knows is measured again.
			if record, _, ok := driverkit.ImportOrigin(b); ok {
				measured[record] = b.Status.Artifact
			}
		}
	}, client.MatchingLabels{backupsv1.LabelImported: "true", backupsv1.LabelCatalog: backupsv1.LabelValue(strat.Name)}); err != nil {
		return driverkit.CatalogResult{}, "", fmt.Errorf("listing the Backups of catalog %s: %w", strat.Name, err)
	}
	skipped := map[string]string{}
	var (
		entries   []driverkit.CatalogEntry
		toMeasure []measurement
	)
	err = driverkit.Each(ctx, d.Cache, d.Client, &velerov1.Backup{}, &velerov1.BackupList{}, func(o client.Object) bool {
		vb, ok := o.(*velerov1.Backup)
		if !ok {
			return true
		}
		text, ok := vb.Annotations[veleroapi.AnnotationRecord]
		if !ok || (src.StorageLocation != "" && vb.Spec.StorageLocation != src.StorageLocation) || vb.Status.Phase == velerov1.BackupPhaseDeleting {
			return true
		}
		location := "velero backup " + vb.Namespace + "/" + vb.Name
		r, err := backupsv1.ParseRecordTemplate([]byte(text))
		if err != nil {
			skipped[location] = err.Error()
			return true
		}
		if r.SourceCluster.ID == self.ID {
			entries = append(entries, driverkit.CatalogEntry{Record: r, Location: location}) // counted as own, never imported
			return true
		}
		if vb.Status.Phase != velerov1.BackupPhaseCompleted && vb.Status.Phase != velerov1.BackupPhasePartiallyFailed {
			skipped[location] = fmt.Sprintf("the Velero backup is %s, not Completed", orUnknown(string(vb.Status.Phase)))
			return true
		}
		// The driver confines each backup to its run's namespace: a record that names another
		// namespace than the backup holds is not one it wrote.
		if len(vb.Spec.IncludedNamespaces) != 1 || vb.Spec.IncludedNamespaces[0] != r.Namespace {
			skipped[location] = fmt.Sprintf("the record is of a Backup in namespace %s, but the Velero backup holds %v", r.Namespace, vb.Spec.IncludedNamespaces)
			return true
		}
		// Where the Velero backup is here, whatever the record says: restores read this one.
		r.Spec.DriverMetadata = veleroMetadata(client.ObjectKeyFromObject(vb), vb.Spec.StorageLocation)
		r.Spec.DriverMetadata[names.MetaSourceNamespace] = r.Namespace
		if vb.Status.StartTimestamp != nil { // as the source's Backup has it (complete)
			r.Spec.TakenAt = *vb.Status.StartTimestamp.DeepCopy()
		}
		entries = append(entries, driverkit.CatalogEntry{Record: r, Location: location})
		if a := measured[location]; a != nil {
			r.Artifact = *a
		} else {
			// The measurement reads the cached object during this sync, and never changes it.
			toMeasure = append(toMeasure, measurement{vb, entries[len(entries)-1]})
		}
		return true
	}, client.InNamespace(veleroNamespace(strat)))
	if err != nil {
		return driverkit.CatalogResult{}, "", fmt.Errorf("listing the Velero backups of namespace %s: %w", veleroNamespace(strat), err)
	}
	failed := c.measureAll(ctx, toMeasure)
	all := make([]driverkit.CatalogEntry, 0, len(entries)+len(skipped))
	for _, e := range entries {
		switch {
		case e.Record.SourceCluster.ID == self.ID:
		case failed[e.Location] != nil:
			all = append(all, driverkit.CatalogEntry{Location: e.Location, Unreadable: failed[e.Location]})
			continue
		case e.Record.Artifact.Checksum == "":
			continue // not measured, and no error: cannot be (measureAll)
		default:
			if err := e.Record.Validate(); err != nil {
				skipped[e.Location] = err.Error()
				continue
			}
		}
		all = append(all, driverkit.EntryOf(e.Record, e.Location))
	}
	for loc, why := range skipped {
		all = append(all, driverkit.CatalogEntry{Location: loc, Skip: why})
	}
	sort.Slice(all, func(i, k int) bool { return all[i].Location < all[k].Location })
	cat := driverkit.Catalog{Client: d.Client, Cache: d.Cache, Live: d.Live, Driver: names.DriverName, Name: strat.Name, Finalizer: names.Finalizer,
		StrategyRef:      corev1.TypedLocalObjectReference{APIGroup: ptr.To(veleroapi.Group), Kind: veleroapi.Kind, Name: strat.Name},
		NamespaceMapping: map[string]string{}, Progress: progress}
	for from, to := range src.NamespaceMapping {
		cat.NamespaceMapping[from] = string(to)
	}
	res, err := cat.Sync(ctx, self, len(all), func(yield func(driverkit.CatalogEntry) bool) {
		for _, e := range all {
			if !yield(e) {
				return
			}
		}
	})
	if err != nil {
		return res, "", err
	}
	if res.Unreadable > 0 {
		var which []string
		for loc, err := range failed {
			which = append(which, fmt.Sprintf("%s: %v", loc, err))
		}
		sort.Strings(which)
		return res, backupsv1.ReasonCatalogUnreadable, fmt.Errorf("%d of %d Velero backup tarball(s) could not be measured (%s); the others were imported, and no imported Backup was removed",
			res.Unreadable, res.Records, strings.Join(which[:min(len(which), 3)], "; "))
	}
	return res, "", nil
}

// measurement is a tarball to measure, and the entry whose record gets its artifact.
type measurement struct {
	vb    *velerov1.Backup
	entry driverkit.CatalogEntry
}

// measureAll measures the tarballs of todo, MeasureThreads at once, and fills in the artifacts of
// their records; it returns what failed, by record location.
func (c *Catalog) measureAll(ctx context.Context, todo []measurement) map[string]error {
	threads := c.MeasureThreads
	if threads <= 0 {
		threads = DefaultMeasureThreads
	}
	var (
		mu     sync.Mutex
		failed = map[string]error{}
		wg     sync.WaitGroup
	)
	work := make(chan measurement)
	for range min(threads, max(len(todo), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range work {
				a, err := c.Driver.measure(ctx, m.vb)
				_ = download.Cleanup(context.WithoutCancel(ctx), c.Driver.Client, m.vb.Namespace, names.Download(m.vb.Name))
				if err != nil {
					mu.Lock()
					failed[m.entry.Location] = err
					mu.Unlock()
					continue
				}
				m.entry.Record.Artifact = *a // each record is written by one worker only
			}
		}()
	}
	for _, m := range todo {
		work <- m
	}
	close(work)
	wg.Wait()
	return failed
}
