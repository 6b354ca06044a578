package driverkit

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// DefaultCatalogWorkers is how many Backups a catalog sync makes at once.
const DefaultCatalogWorkers = 8

// ReasonImported is the reason of an imported Backup's ArtifactAvailable condition.
const ReasonImported = "Imported"

// CatalogEntry is one record a catalog found in storage, and where (the record's URI).
type CatalogEntry struct {
	Record   *backupsv1.ArtifactRecord
	Location string
}

// Catalog is one catalog sync (contract rule BK-12): the records a driver found in storage,
// turned into Backups of this cluster. The driver lists and parses the records (it alone knows
// its storage); the catalog does the rest, the same for every driver.
type Catalog struct {
	Client client.Client
	// Driver is the importing driver's name (the managed-by label of the Backups it makes).
	Driver string
	// Name names the catalog (the LabelCatalog value of its Backups): one per strategy.
	Name string
	// StrategyRef is the strategy imported Backups name: the importing cluster's, which restores
	// them.
	StrategyRef corev1.TypedLocalObjectReference
	// NamespaceMapping maps a record's namespace to the one its Backup is imported into.
	NamespaceMapping map[string]string
	// Finalizer is put on adopted Backups, whose deletion then deletes the artifact; empty when
	// the strategy cannot delete artifacts.
	Finalizer string
	// Workers is how many Backups are made at once (default DefaultCatalogWorkers).
	Workers int
	// DriverMetadata, when set, makes the spec.driverMetadata of each imported Backup from the
	// record's: a record is hostile input, so a driver keeps only what it may trust, and adds
	// what a restore here needs (driver-job: the catalog's class parameters, never the record's,
	// whose endpoint could send a restore's credentials elsewhere).
	DriverMetadata func(recorded map[string]string) map[string]string
	// Progress, when set, is told how many records' Backups are made so far (CatalogImporting).
	Progress Progress
}

// CatalogResult is what a sync did and found.
type CatalogResult struct {
	Records, Own, Imported, Created, Removed int
	// Skipped says, per record location, why it was not imported.
	Skipped map[string]string
}

// Sync makes one imported Backup per record of another cluster, and completes those a crash left
// without their status. It never changes or deletes a Backup it did not import (a name taken by
// another Backup skips the record), never creates a namespace (a missing one skips the record),
// and imports a record of this cluster never. When complete (the driver read every record),
// Backups of this catalog whose record is gone are deleted: the source deleted the artifact. An
// imported Backup carries no finalizer, so deleting it never touches the artifact, unless an admin
// adopted it (AnnotationAdopted). Sync is idempotent: a second run over the same records changes
// nothing.
func (c *Catalog) Sync(ctx context.Context, self backupsv1.SourceCluster, entries []CatalogEntry, complete bool) (CatalogResult, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("catalog", c.Name)
	res := CatalogResult{Records: len(entries), Skipped: map[string]string{}}
	existing := &backupsv1.BackupList{}
	if err := c.Client.List(ctx, existing, client.MatchingLabels{backupsv1.LabelImported: "true", backupsv1.LabelCatalog: backupsv1.LabelValue(c.Name)}); err != nil {
		return res, fmt.Errorf("listing the Backups of catalog %s: %w", c.Name, err)
	}
	ours := map[client.ObjectKey]*backupsv1.Backup{}
	for i := range existing.Items {
		b := &existing.Items[i]
		if b.Labels[backupsv1.LabelManagedBy] == c.Driver {
			ours[client.ObjectKeyFromObject(b)] = b
		}
	}
	// Which record makes which Backup is decided first, in a stable order; the Backups are then
	// made Workers at a time.
	type item struct {
		key client.ObjectKey
		e   CatalogEntry
	}
	var items []item
	claimed := map[client.ObjectKey]bool{}
	sort.Slice(entries, func(i, k int) bool { return entries[i].Location < entries[k].Location })
	for _, e := range entries {
		r := e.Record
		if r.SourceCluster.ID == self.ID {
			res.Own++
			continue
		}
		key := client.ObjectKey{Namespace: r.Namespace, Name: r.Name}
		if ns, ok := c.NamespaceMapping[r.Namespace]; ok {
			key.Namespace = ns
		}
		if claimed[key] {
			res.Skipped[e.Location] = fmt.Sprintf("another record of this sync imports Backup %s", key)
			continue
		}
		claimed[key] = true
		items = append(items, item{key, e})
	}
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	seen := map[client.ObjectKey]bool{}
	done := 0
	work := make(chan item)
	workers := c.Workers
	if workers <= 0 {
		workers = DefaultCatalogWorkers
	}
	for range min(workers, max(len(items), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range work {
				mu.Lock()
				prev := ours[it.key]
				stop := firstErr != nil
				mu.Unlock()
				if stop {
					continue
				}
				b, created, skip, err := c.ensure(ctx, it.key, it.e, prev)
				mu.Lock()
				done++
				n := done
				switch {
				case err != nil:
					if firstErr == nil {
						firstErr = err
					}
				case skip != "":
					res.Skipped[it.e.Location] = skip
					log.Info("Skipped a record", "record", it.e.Location, "reason", skip)
				default:
					seen[it.key] = true
					if created {
						res.Created++
						log.Info("Imported Backup", "backup", klog.KObj(b), "record", it.e.Location)
					}
					ours[it.key] = b
				}
				mu.Unlock()
				if c.Progress != nil {
					c.Progress(backupsv1.CatalogImporting, n, len(items))
				}
			}
		}()
	}
	for _, it := range items {
		work <- it
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return res, firstErr
	}
	for key, b := range ours {
		if seen[key] || !b.DeletionTimestamp.IsZero() {
			continue
		}
		if !complete {
			continue // a record we could not read is not a record that is gone
		}
		if err := c.Client.Delete(ctx, b, client.Preconditions{UID: &b.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return res, fmt.Errorf("deleting imported Backup %s, whose record %s is gone: %w", key, b.Annotations[backupsv1.AnnotationRecord], err)
		}
		res.Removed++
		delete(ours, key)
		log.Info("Removed imported Backup: its record is gone from storage", "backup", klog.KObj(b), "record", b.Annotations[backupsv1.AnnotationRecord])
	}
	res.Imported = len(ours)
	return res, nil
}

// ensure creates the Backup of one record, or finds the one an earlier sync made, and completes
// its status and (once adopted) its finalizer. A record it does not import gets the reason why.
func (c *Catalog) ensure(ctx context.Context, key client.ObjectKey, e CatalogEntry, b *backupsv1.Backup) (_ *backupsv1.Backup, created bool, _ string, _ error) {
	r := e.Record
	if b == nil {
		b = c.imported(key, e)
		err := c.Client.Create(ctx, b)
		switch {
		case err == nil:
			created = true
		case apierrors.IsAlreadyExists(err):
			// Ours, and not yet in the cache that listed them, or someone else's.
			existing := &backupsv1.Backup{}
			if err := c.Client.Get(ctx, key, existing); apierrors.IsNotFound(err) {
				// A driver caches only the Backups of its strategy kind (CacheBackupsOf): another
				// driver's, or one of ours the cache has not seen yet (the next sync finds it).
				return nil, false, fmt.Sprintf("a Backup %s exists that this driver's cache does not hold (another strategy kind's, or one not seen yet); it is left alone", key), nil
			} else if err != nil {
				return nil, false, "", fmt.Errorf("reading Backup %s, which exists: %w", key, err)
			}
			if !c.importOf(existing, e) {
				return nil, false, fmt.Sprintf("a Backup %s exists and was not imported from this record; it is left alone", key), nil
			}
			b = existing
		case apierrors.IsNotFound(err):
			return nil, false, fmt.Sprintf("namespace %s does not exist here (create it, or map %s with namespaceMapping)", key.Namespace, r.Namespace), nil
		case apierrors.IsInvalid(err) || apierrors.IsForbidden(err):
			return nil, false, fmt.Sprintf("the API server refused its Backup %s: %v", key, err), nil
		default:
			return nil, false, "", fmt.Errorf("creating imported Backup %s: %w", key, err)
		}
	} else if !c.importOf(b, e) {
		return nil, false, fmt.Sprintf("Backup %s was imported from another record (%s); it is left alone", key, b.Annotations[backupsv1.AnnotationRecord]), nil
	}
	if b.Adopted() && c.Finalizer != "" && !controllerutil.ContainsFinalizer(b, c.Finalizer) && b.DeletionTimestamp.IsZero() {
		orig := b.DeepCopy()
		b.Finalizers = append(b.Finalizers, c.Finalizer)
		if err := c.Client.Patch(ctx, b, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return nil, false, "", fmt.Errorf("adding the finalizer to adopted Backup %s: %w", key, err)
		}
	}
	if b.Status.Phase == backupsv1.BackupReady && b.Status.Artifact != nil {
		return b, created, "", nil
	}
	orig := b.DeepCopy()
	b.Status.Phase = backupsv1.BackupReady
	b.Status.Artifact = r.Artifact.DeepCopy()
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: backupsv1.ConditionArtifactAvailable, Status: metav1.ConditionTrue,
		Reason: ReasonImported, Message: fmt.Sprintf("Imported from the record %s, written by cluster %s", e.Location, clusterName(r.SourceCluster))})
	if _, err := PatchStatus(ctx, c.Client, b, orig); err != nil {
		return nil, false, "", fmt.Errorf("recording the artifact of imported Backup %s: %w", key, err)
	}
	return b, created, "", nil
}

// importOf tells whether b is this catalog's import of the record e.
func (c *Catalog) importOf(b *backupsv1.Backup, e CatalogEntry) bool {
	return b.Imported() && b.Labels[backupsv1.LabelManagedBy] == c.Driver && b.Labels[backupsv1.LabelCatalog] == backupsv1.LabelValue(c.Name) &&
		b.Annotations[backupsv1.AnnotationSourceCluster] == e.Record.SourceCluster.ID &&
		b.Annotations[backupsv1.AnnotationSourceUID] == string(e.Record.UID) && b.Annotations[backupsv1.AnnotationRecord] == e.Location
}

// imported is the Backup a record makes here.
func (c *Catalog) imported(key client.ObjectKey, e CatalogEntry) *backupsv1.Backup {
	r := e.Record
	labels := map[string]string{}
	for k, v := range r.Labels { // the contract's labels only (Validate)
		labels[k] = v
	}
	labels[backupsv1.LabelImported] = "true"
	labels[backupsv1.LabelCatalog] = backupsv1.LabelValue(c.Name)
	labels[backupsv1.LabelManagedBy] = c.Driver
	spec := *r.Spec.DeepCopy()
	spec.StrategyRef = c.StrategyRef
	if c.DriverMetadata != nil {
		spec.DriverMetadata = c.DriverMetadata(spec.DriverMetadata)
	}
	return &backupsv1.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: labels, Annotations: map[string]string{
			backupsv1.AnnotationSourceCluster:     r.SourceCluster.ID,
			backupsv1.AnnotationSourceClusterName: r.SourceCluster.Name,
			backupsv1.AnnotationSourceUID:         string(r.UID),
			backupsv1.AnnotationRecord:            e.Location,
		}},
		Spec: spec,
	}
}

func clusterName(s backupsv1.SourceCluster) string {
	if s.Name != "" {
		return s.Name + " (" + s.ID + ")"
	}
	return s.ID
}

// SkippedSummary says which records a sync skipped and why, in at most max entries.
func (r CatalogResult) SkippedSummary(max int) string {
	keys := make([]string, 0, len(r.Skipped))
	for k := range r.Skipped {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for i, k := range keys {
		if i == max {
			parts = append(parts, fmt.Sprintf("and %d more", len(keys)-max))
			break
		}
		parts = append(parts, k+": "+r.Skipped[k])
	}
	return strings.Join(parts, "; ")
}

// catalogReport is what a catalog sync says on the strategy that enables it: its CatalogSynced
// condition and, after a sync that ended, its counts.
type catalogReport struct {
	Condition metav1.Condition
	Status    *backupsv1.CatalogStatus // nil when the sync failed
}

// reportCatalog makes the report of a sync of the catalog of obj (generation gen) that read the
// records of where (the storage, as a user names it): res when err is nil; else err, said with
// reason (a storage or credentials fault, or an incomplete read). It emits a Warning event on obj
// for a failed sync and for skipped records.
func reportCatalog(rec events.EventRecorder, obj runtime.Object, gen int64, now metav1.Time, where string, res CatalogResult, reason string, err error) catalogReport {
	cond := metav1.Condition{Type: backupsv1.ConditionCatalogSynced, Status: metav1.ConditionTrue, Reason: backupsv1.ReasonCatalogSynced, ObservedGeneration: gen}
	if err != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, reason, err.Error()
		rec.Eventf(obj, nil, corev1.EventTypeWarning, reason, "Catalog", "%s", err.Error())
		return catalogReport{Condition: cond}
	}
	cond.Message = fmt.Sprintf("%d record(s) in %s: %d imported Backup(s) (%d new, %d removed), %d of this cluster, %d skipped",
		res.Records, where, res.Imported, res.Created, res.Removed, res.Own, len(res.Skipped))
	if len(res.Skipped) > 0 {
		cond.Message += ": " + res.SkippedSummary(10)
		rec.Eventf(obj, nil, corev1.EventTypeWarning, "RecordsSkipped", "Catalog", "%d record(s) not imported: %s", len(res.Skipped), res.SkippedSummary(5))
	}
	return catalogReport{Condition: cond, Status: &backupsv1.CatalogStatus{LastSyncTime: &now, Records: int32(res.Records), Imported: int32(res.Imported),
		Created: int32(res.Created), Removed: int32(res.Removed), Own: int32(res.Own), Skipped: int32(len(res.Skipped))}}
}

// SyncCatalog runs one sync of the catalog of strategy obj and writes its report into obj's status
// (conditions and status, fields of obj) with a status patch. sync returns the result, or an
// error with a reason (storage, credentials: reported on obj) or without (the API server's:
// returned, for a retry with backoff). The next sync comes after intervalSeconds.
func SyncCatalog(ctx context.Context, c client.Client, rec events.EventRecorder, now metav1.Time, obj client.Object, conditions *[]metav1.Condition,
	status **backupsv1.CatalogStatus, intervalSeconds *int32, where string, sync func(Progress) (CatalogResult, string, error)) (ctrl.Result, error) {
	orig := obj.DeepCopyObject().(client.Object)
	pw := &progressWriter{ctx: ctx, c: c, obj: obj, status: *status, start: now, last: time.Now()}
	res, reason, err := sync(pw.report)
	if rv, err := pw.clear(); err != nil {
		return ctrl.Result{}, err
	} else if rv != "" { // the report is written over the progress
		orig.SetResourceVersion(rv)
		obj.SetResourceVersion(rv)
	}
	if err != nil && reason == "" {
		return ctrl.Result{}, err
	}
	report := reportCatalog(rec, obj, obj.GetGeneration(), now, where, res, reason, err)
	if report.Status != nil {
		*status = report.Status
	}
	meta.SetStatusCondition(conditions, report.Condition)
	if err := c.Status().Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, fmt.Errorf("writing the catalog status of %s: %w", obj.GetName(), err)
	}
	return ctrl.Result{RequeueAfter: catalogInterval(intervalSeconds)}, nil
}

// catalogInterval is the time between two syncs: intervalSeconds, or the default.
func catalogInterval(intervalSeconds *int32) time.Duration {
	if intervalSeconds != nil {
		return time.Duration(*intervalSeconds) * time.Second
	}
	return time.Duration(backupsv1.DefaultCatalogInterval) * time.Second
}

// Progress is told how far a catalog sync is: in phase (backupsv1.CatalogReading or
// CatalogImporting), done of total records. It may be called from several goroutines.
type Progress func(phase string, done, total int)

// CatalogProgressEvery is how often a sync under way writes its progress on the strategy
// (status.catalog.syncing), from this long after it began: a sync shorter than that writes none.
var CatalogProgressEvery = 10 * time.Second

// progressWriter writes a sync's progress into the strategy's status.catalog.syncing, at most
// every CatalogProgressEvery, each write a merge patch of status.catalog alone on a copy of the
// strategy (the sync reads the strategy meanwhile); clear removes it when the sync ends.
type progressWriter struct {
	ctx    context.Context
	c      client.Client
	obj    client.Object
	status *backupsv1.CatalogStatus // the strategy's catalog status when the sync began
	start  metav1.Time

	mu    sync.Mutex
	last  time.Time
	wrote bool
}

func (p *progressWriter) report(phase string, done, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.last) < CatalogProgressEvery {
		return
	}
	p.last = time.Now()
	st := backupsv1.CatalogStatus{}
	if p.status != nil {
		st = *p.status.DeepCopy()
	}
	st.Syncing = &backupsv1.CatalogProgress{StartTime: p.start, Phase: phase, Done: int32(done), Total: int32(total)}
	if err := p.patch(&st); err != nil { // the whole catalog status: its counts are required fields
		ctrl.LoggerFrom(p.ctx).V(1).Info("Writing the catalog's progress failed; the sync goes on", "error", err.Error())
		return
	}
	p.wrote = true
}

// clear removes the progress a sync wrote, and returns the strategy's resourceVersion after it
// ("" when the sync wrote none).
func (p *progressWriter) clear() (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.wrote {
		return "", nil
	}
	cp := p.obj.DeepCopyObject().(client.Object)
	if err := p.c.Status().Patch(p.ctx, cp, client.RawPatch(types.MergePatchType, []byte(`{"status":{"catalog":{"syncing":null}}}`))); err != nil {
		return "", fmt.Errorf("clearing the catalog's progress on %s: %w", p.obj.GetName(), err)
	}
	p.wrote = false
	return cp.GetResourceVersion(), nil
}

func (p *progressWriter) patch(catalog *backupsv1.CatalogStatus) error {
	data, err := json.Marshal(map[string]any{"status": map[string]any{"catalog": catalog}})
	if err != nil {
		return err
	}
	return p.c.Status().Patch(p.ctx, p.obj.DeepCopyObject().(client.Object), client.RawPatch(types.MergePatchType, data))
}
