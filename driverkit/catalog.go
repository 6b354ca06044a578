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
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// DefaultCatalogWorkers is how many Backups a catalog sync makes at once.
const DefaultCatalogWorkers = 8

// ReasonImported is the reason of an imported Backup's ArtifactAvailable condition.
const ReasonImported = "Imported"

// CatalogEntry is one record a catalog found in storage, and where (the record's URI). A driver
// need not hold the record: the identity below is what a sync decides on (which Backup the record
// makes, and whether an existing Backup is its import); the record itself is needed only when its
// Backup must be made or completed, and Load reads it then.
type CatalogEntry struct {
	// Location is the record's URI, unique in a sync.
	Location string
	// Skip, when set, says why the record is not imported (invalid, its artifact gone...); the
	// rest of the entry is then unset.
	Skip string
	// Unreadable, when set, is why the record could not be read in this sync: nothing is decided
	// on it, and no imported Backup is removed (the sync is incomplete).
	Unreadable error
	// The record's identity: the Backup it is of in its cluster, the cluster that wrote it, and
	// that Backup's UID.
	Namespace, Name string
	SourceCluster   string
	UID             types.UID
	// Record is the record, when the driver holds it; else Load reads it again. Load must return
	// the record as it was when the entry was made (driver-job reads it at the ETag it listed), or
	// an error: the entry's record is then taken as unreadable in this sync.
	Record *backupsv1.ArtifactRecord
	Load   func(context.Context) (*backupsv1.ArtifactRecord, error)
}

// EntryOf is the entry of record r, read from location.
func EntryOf(r *backupsv1.ArtifactRecord, location string) CatalogEntry {
	return CatalogEntry{Location: location, Namespace: r.Namespace, Name: r.Name, SourceCluster: r.SourceCluster.ID, UID: r.UID, Record: r}
}

// load returns the entry's record, read again if the driver did not keep it, and checks that it is
// the record the entry names.
func (e CatalogEntry) load(ctx context.Context) (*backupsv1.ArtifactRecord, error) {
	r := e.Record
	if r == nil {
		if e.Load == nil {
			return nil, fmt.Errorf("the record %s was not kept and cannot be read again", e.Location)
		}
		var err error
		if r, err = e.Load(ctx); err != nil {
			return nil, err
		}
	}
	if r.Namespace != e.Namespace || r.Name != e.Name || r.SourceCluster.ID != e.SourceCluster || r.UID != e.UID {
		return nil, fmt.Errorf("the record %s changed since it was read (it is now of %s/%s, UID %s, cluster %s)", e.Location, r.Namespace, r.Name, r.UID, r.SourceCluster.ID)
	}
	return r, nil
}

// CatalogRecords yields a sync's records to yield, in Location order, each Location once, until
// yield returns false. A driver may read them while the catalog imports those it already yielded.
type CatalogRecords func(yield func(CatalogEntry) bool)

// Catalog is one catalog sync (contract rule BK-12): the records a driver found in storage,
// turned into Backups of this cluster. The driver lists and parses the records (it alone knows
// its storage); the catalog does the rest, the same for every driver.
type Catalog struct {
	Client client.Client
	// Cache, when set, is the cache Client reads: the Backups a sync imported before are walked
	// in its store, not copied into a list (EachCached). Nil lists them with Client.
	Cache cache.Cache
	// Live reads a Backup uncached before the catalog writes it (a driver's cache holds Backups
	// trimmed: TrimBackup); nil reads with Client.
	Live client.Reader
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
	// Progress, when set, is told how far the sync is: CatalogReading while the driver still
	// yields records (done: the records yielded), then CatalogImporting (done: the records whose
	// Backup is made, found made, or that are skipped).
	Progress Progress
}

// CatalogResult is what a sync did and found.
type CatalogResult struct {
	Records, Own, Imported, Created, Removed int
	// Skipped says, per record location, why it was not imported.
	Skipped map[string]string
	// Unreadable counts the records that could not be read (the log names them): the sync was
	// incomplete, and removed nothing.
	Unreadable int
}

// imports is what a sync keeps of an imported Backup it listed: whether a record is its import
// and whether it is complete, not the Backup (a catalog may hold 100,000).
type imports struct {
	record, sourceCluster, sourceUID string
	uid                              types.UID
	// complete: Ready with its artifact, and with the finalizer if adopted (nothing to write).
	complete, deleting bool
}

// keyState is what a sync knows of one Backup key, in one map (at 100,000 records, three maps
// and an object per Backup cost about 45 MB more at the sync's peak): the imported Backup there
// when it has one (has), whether a record of this sync claimed the key, and whether that record's
// Backup was found or made (seen: its record exists, so whatever it imported stays).
type keyState struct {
	imports
	has, claimed, seen bool
}

// importsOf is what a sync keeps of b; ok is false when b is a cached Backup whose origin the
// cache's table does not know (ImportOrigin): read it uncached (knownImport).
func (c *Catalog) importsOf(b *backupsv1.Backup) (i *imports, ok bool) {
	record, sourceUID, ok := ImportOrigin(b)
	return &imports{record: record, sourceCluster: b.Annotations[backupsv1.AnnotationSourceCluster],
		sourceUID: sourceUID, uid: b.UID, deleting: !b.DeletionTimestamp.IsZero(),
		complete: b.Status.Phase == backupsv1.BackupReady && b.Status.Artifact != nil && !c.needsFinalizer(b)}, ok
}

// knownImport returns b, or b read uncached when the cache's table does not know its origin (nil
// when it is gone meanwhile).
func (c *Catalog) knownImport(ctx context.Context, b *backupsv1.Backup) (*backupsv1.Backup, error) {
	if _, _, ok := ImportOrigin(b); ok {
		return b, nil
	}
	return c.readOrigin(ctx, client.ObjectKeyFromObject(b))
}

// readOrigin reads Backup key uncached (nil when it is gone) and, for an imported one, keeps its
// origin in the table from then on, as if the cache's trim had seen it.
func (c *Catalog) readOrigin(ctx context.Context, key client.ObjectKey) (*backupsv1.Backup, error) {
	b, err := c.readLive(ctx, key)
	if b != nil && b.Imported() {
		record, sourceUID, _ := ImportOrigin(b)
		rememberOrigin(b.UID, importOrigin{record: record, sourceUID: sourceUID})
	}
	return b, err
}

// readLive reads Backup key uncached: nil when it is gone.
func (c *Catalog) readLive(ctx context.Context, key client.ObjectKey) (*backupsv1.Backup, error) {
	r := c.Live
	if r == nil {
		r = c.Client
	}
	b := &backupsv1.Backup{}
	if err := r.Get(ctx, key, b); apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("reading imported Backup %s: %w", key, err)
	}
	return b, nil
}

// mustImports is importsOf for a Backup read uncached or just written (its annotations whole).
func (c *Catalog) mustImports(b *backupsv1.Backup) *imports {
	i, _ := c.importsOf(b)
	return i
}

func (c *Catalog) needsFinalizer(b *backupsv1.Backup) bool {
	return b.Adopted() && c.Finalizer != "" && !controllerutil.ContainsFinalizer(b, c.Finalizer) && b.DeletionTimestamp.IsZero()
}

func (i *imports) of(e CatalogEntry) bool {
	return i.sourceCluster == e.SourceCluster && i.sourceUID == string(e.UID) && i.record == e.Location
}

// Sync makes one imported Backup per record of another cluster, and completes those a crash left
// without their status. It never changes or deletes a Backup it did not import (a name taken by
// another Backup skips the record), never creates a namespace (a missing one skips the record),
// and imports a record of this cluster never. Of two records of the same Backup, the first in
// Location order makes it. total is how many records the driver will yield (for Progress). It
// imports records as records yields them, Workers at a time. When complete (every record was
// read), Backups of this catalog whose record is gone are deleted: the source deleted the
// artifact. An imported Backup carries no finalizer, so deleting it never touches the artifact,
// unless an admin adopted it (AnnotationAdopted). Sync is idempotent: a second run over the same
// records changes nothing.
func (c *Catalog) Sync(ctx context.Context, self backupsv1.SourceCluster, total int, records CatalogRecords) (CatalogResult, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("catalog", c.Name)
	res := CatalogResult{Skipped: map[string]string{}}
	keys := map[client.ObjectKey]keyState{}
	var unknown []client.ObjectKey // whose origin the cache's table does not know
	// The cache's own objects, read here and never kept.
	err := EachBackup(ctx, c.Cache, c.Client, func(b *backupsv1.Backup) {
		if b.Labels[backupsv1.LabelManagedBy] != c.Driver {
			return
		}
		if i, ok := c.importsOf(b); ok {
			keys[client.ObjectKeyFromObject(b)] = keyState{imports: *i, has: true}
		} else {
			unknown = append(unknown, client.ObjectKeyFromObject(b))
		}
	}, client.MatchingLabels{backupsv1.LabelImported: "true", backupsv1.LabelCatalog: backupsv1.LabelValue(c.Name)})
	if err != nil {
		return res, fmt.Errorf("reading the Backups of catalog %s: %w", c.Name, err)
	}
	for _, key := range unknown {
		b, err := c.readOrigin(ctx, key)
		if err != nil {
			return res, err
		}
		if b != nil && c.importedHere(b) {
			keys[key] = keyState{imports: *c.mustImports(b), has: true}
		}
	}
	type item struct {
		key client.ObjectKey
		e   CatalogEntry
	}
	var (
		mu         sync.Mutex
		firstErr   error
		wg         sync.WaitGroup
		yielded    int
		done       int
		reading    = true
		lastRecord string
	)
	// progress is what to report, with mu held; report it once mu is released.
	progress := func() func() {
		if c.Progress == nil {
			return func() {}
		}
		phase, n := backupsv1.CatalogImporting, done
		if reading {
			phase, n = backupsv1.CatalogReading, yielded
		}
		return func() { c.Progress(phase, n, total) }
	}
	unreadable := func(loc string, err error) { // with mu held
		res.Unreadable++
		log.Info("Reading a record failed; it is not imported in this sync", "record", loc, "error", err.Error())
	}
	work := make(chan item)
	workers := c.Workers
	if workers <= 0 {
		workers = DefaultCatalogWorkers
	}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range work {
				mu.Lock()
				var prev *imports
				if s := keys[it.key]; s.has {
					prev = &s.imports
				}
				stop := firstErr != nil
				mu.Unlock()
				if stop {
					continue
				}
				o := c.ensure(ctx, it.key, it.e, prev)
				mu.Lock()
				s := keys[it.key]
				done++
				switch {
				case o.err != nil:
					if firstErr == nil {
						firstErr = o.err
					}
				case o.unreadable != nil:
					s.seen = true // its record exists: whatever it imported stays
					unreadable(it.e.Location, o.unreadable)
				case o.skip != "":
					res.Skipped[it.e.Location] = o.skip
					log.Info("Skipped a record", "record", it.e.Location, "reason", o.skip)
				default:
					s.seen = true
					if o.created {
						res.Created++
						log.Info("Imported Backup", "backup", klog.KRef(it.key.Namespace, it.key.Name), "record", it.e.Location)
					}
					if o.imports != nil {
						s.imports, s.has = *o.imports, true
					}
				}
				keys[it.key] = s
				report := progress()
				mu.Unlock()
				report()
			}
		}()
	}
	// Which record makes which Backup is decided as the records come, in Location order; the
	// Backups are made Workers at a time.
	records(func(e CatalogEntry) bool {
		mu.Lock()
		if firstErr != nil {
			mu.Unlock()
			return false
		}
		if res.Records > 0 && e.Location <= lastRecord {
			firstErr = fmt.Errorf("the driver yielded record %s after %s, not in order", e.Location, lastRecord)
			mu.Unlock()
			return false
		}
		lastRecord = e.Location
		res.Records++
		yielded++
		var key client.ObjectKey
		send := false
		switch {
		case e.Unreadable != nil:
			unreadable(e.Location, e.Unreadable)
		case e.Skip != "":
			res.Skipped[e.Location] = e.Skip
		case e.SourceCluster == self.ID:
			res.Own++
		default:
			key = client.ObjectKey{Namespace: e.Namespace, Name: e.Name}
			if ns, ok := c.NamespaceMapping[e.Namespace]; ok {
				key.Namespace = ns
			}
			if s := keys[key]; s.claimed {
				res.Skipped[e.Location] = fmt.Sprintf("another record of this sync imports Backup %s", key)
			} else {
				s.claimed = true
				keys[key] = s
				send = true
			}
		}
		if !send {
			done++
		}
		report := progress()
		mu.Unlock()
		report()
		if send {
			work <- item{key, e}
		}
		return true
	})
	close(work)
	mu.Lock()
	reading = false
	report := progress()
	mu.Unlock()
	report()
	wg.Wait()
	if firstErr != nil {
		return res, firstErr
	}
	for key, b := range keys {
		if !b.has {
			continue
		}
		// A record we could not read is not a record that is gone.
		if b.seen || b.deleting || res.Unreadable > 0 {
			res.Imported++
			continue
		}
		obj := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		if err := c.Client.Delete(ctx, obj, client.Preconditions{UID: &b.uid}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return res, fmt.Errorf("deleting imported Backup %s, whose record %s is gone: %w", key, b.record, err)
		}
		res.Removed++
		log.Info("Removed imported Backup: its record is gone from storage", "backup", klog.KRef(key.Namespace, key.Name), "record", b.record)
	}
	return res, nil
}

// outcome is what ensure did with one record: made or found its Backup (imports, created), or
// skipped it (skip), or could not read it (unreadable), or failed (err, the API server's).
type outcome struct {
	imports    *imports
	created    bool
	skip       string
	unreadable error
	err        error
}

// ensure creates the Backup of one record, or finds the one an earlier sync made, and completes
// its status and (once adopted) its finalizer. A record it does not import gets the reason why.
// It reads the record only when it writes the Backup.
func (c *Catalog) ensure(ctx context.Context, key client.ObjectKey, e CatalogEntry, prev *imports) outcome {
	var b *backupsv1.Backup
	var r *backupsv1.ArtifactRecord
	load := func() (err error) {
		if r == nil {
			r, err = e.load(ctx)
		}
		return err
	}
	var created bool
	switch {
	case prev == nil:
		if err := load(); err != nil {
			return outcome{unreadable: err}
		}
		b = c.imported(key, e, r)
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
				return outcome{skip: fmt.Sprintf("a Backup %s exists that this driver's cache does not hold (another strategy kind's, or one not seen yet); it is left alone", key)}
			} else if err != nil {
				return outcome{err: fmt.Errorf("reading Backup %s, which exists: %w", key, err)}
			}
			if existing, err = c.knownImport(ctx, existing); err != nil {
				return outcome{err: err}
			} else if existing == nil {
				return outcome{skip: fmt.Sprintf("Backup %s was deleted while this sync imported its record; the next sync imports it again", key)}
			}
			if !c.importOf(existing, e) {
				return outcome{skip: fmt.Sprintf("a Backup %s exists and was not imported from this record; it is left alone", key)}
			}
			if existing.Status.Phase == backupsv1.BackupReady && existing.Status.Artifact != nil && !c.needsFinalizer(existing) {
				return outcome{imports: c.mustImports(existing)}
			}
			var err error
			if b, err = c.live(ctx, key, e); b == nil || err != nil {
				return outcome{imports: c.mustImports(existing), err: err}
			}
		case apierrors.IsNotFound(err):
			return outcome{skip: fmt.Sprintf("namespace %s does not exist here (create it, or map %s with namespaceMapping)", key.Namespace, e.Namespace)}
		case apierrors.IsInvalid(err) || apierrors.IsForbidden(err):
			return outcome{skip: fmt.Sprintf("the API server refused its Backup %s: %v", key, err)}
		default:
			return outcome{err: fmt.Errorf("creating imported Backup %s: %w", key, err)}
		}
	case !prev.of(e):
		return outcome{skip: fmt.Sprintf("Backup %s was imported from another record (%s); it is left alone", key, prev.record)}
	case prev.complete:
		return outcome{imports: prev}
	default:
		var err error
		if b, err = c.live(ctx, key, e); b == nil || err != nil {
			return outcome{imports: prev, err: err}
		}
	}
	if c.needsFinalizer(b) {
		orig := b.DeepCopy()
		b.Finalizers = append(b.Finalizers, c.Finalizer)
		if err := c.Client.Patch(ctx, b, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return outcome{err: fmt.Errorf("adding the finalizer to adopted Backup %s: %w", key, err)}
		}
	}
	if b.Status.Phase == backupsv1.BackupReady && b.Status.Artifact != nil {
		return outcome{imports: c.mustImports(b), created: created}
	}
	if err := load(); err != nil {
		return outcome{unreadable: err, created: created}
	}
	orig := b.DeepCopy()
	b.Status.Phase = backupsv1.BackupReady
	b.Status.Artifact = r.Artifact.DeepCopy()
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: backupsv1.ConditionArtifactAvailable, Status: metav1.ConditionTrue,
		Reason: ReasonImported, Message: fmt.Sprintf("Imported from the record %s, written by cluster %s", e.Location, clusterName(r.SourceCluster))})
	var err error
	if created {
		// Just created, so the whole status is this sync's and the create's resourceVersion is the
		// lock: an update costs the API server less than a merge patch (no read and merge of the
		// stored object), which is most of an import's cost.
		stamp(b)
		err = c.Client.Status().Update(ctx, b)
	} else {
		_, err = PatchStatus(ctx, c.Client, b, orig)
	}
	if err != nil {
		return outcome{err: fmt.Errorf("recording the artifact of imported Backup %s: %w", key, err)}
	}
	return outcome{imports: c.mustImports(b), created: created}
}

// live reads the imported Backup key uncached, to write it: nil when it is gone meanwhile (the next
// sync imports it again) or is no longer the import of e (a replaced Backup is left alone).
func (c *Catalog) live(ctx context.Context, key client.ObjectKey, e CatalogEntry) (*backupsv1.Backup, error) {
	b, err := c.readLive(ctx, key)
	if b == nil || err != nil || !c.importOf(b, e) {
		return nil, err
	}
	return b, nil
}

// importOf tells whether b, whose origin is known (read uncached, or knownImport), is this
// catalog's import of the record e.
func (c *Catalog) importOf(b *backupsv1.Backup, e CatalogEntry) bool {
	return c.importedHere(b) && c.mustImports(b).of(e)
}

// importedHere tells whether b is an import of this catalog.
func (c *Catalog) importedHere(b *backupsv1.Backup) bool {
	return b.Imported() && b.Labels[backupsv1.LabelManagedBy] == c.Driver && b.Labels[backupsv1.LabelCatalog] == backupsv1.LabelValue(c.Name)
}

// imported is the Backup a record makes here.
func (c *Catalog) imported(key client.ObjectKey, e CatalogEntry, r *backupsv1.ArtifactRecord) *backupsv1.Backup {
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
