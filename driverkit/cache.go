package driverkit

import (
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/apis/cachetrim"
)

// CacheAnnotations are the annotations driverkit reads on the objects a driver caches: the origin
// of an imported Backup (the catalog) and an administrator's adoption of one. A driver's manager
// keeps these, and its own, in its cache transform (cachetrim.Transform) and drops the rest.
var CacheAnnotations = cachetrim.Keep{
	backupsv1.AnnotationSourceCluster:     64,
	backupsv1.AnnotationSourceClusterName: 253,
	backupsv1.AnnotationSourceUID:         64,
	backupsv1.AnnotationRecord:            4096,
	backupsv1.AnnotationAdopted:           8,
}

// BackupSelector selects the Backups of strategy kind k, server-side: the Backup CRD's selectable
// fields spec.strategyRef.apiGroup and spec.strategyRef.kind.
func (k StrategyKind) BackupSelector() fields.Selector {
	return fields.SelectorFromSet(fields.Set{"spec.strategyRef.apiGroup": k.Group, "spec.strategyRef.kind": k.Kind})
}

// CacheBackupsOf makes a driver's manager cache only the Backups of its strategy kind k: a
// driver reads no other driver's Backups, so it neither holds nor watches them (another
// driver's Backups are, to it, as if they did not exist: a RestoreJob of one is left to its
// driver, a name a catalog finds taken by one is skipped). opts.ByObject gains the selector.
func CacheBackupsOf(opts cache.Options, k StrategyKind) cache.Options {
	by := make(map[client.Object]cache.ByObject, len(opts.ByObject)+1)
	for o, b := range opts.ByObject {
		by[o] = b
	}
	by[&backupsv1.Backup{}] = cache.ByObject{Field: k.BackupSelector()}
	opts.ByObject = by
	return opts
}

// TrimBackup cuts a Backup a driver caches (obj; any other object passes unchanged) to what the
// kit, its catalog and the driver decide from on a look at it, so that a driver holding every
// Backup of its kind holds little of each (docs/benchmarks.md, "Scale"): its name, namespace, UID,
// version, generation, creation and deletion, finalizers, on an imported Backup the labels the
// catalog matches by (imported, catalog, managed-by; none on another), the annotations its cache transform keeps
// (CacheAnnotations and the driver's; on an imported Backup, its origin goes to a table by UID,
// read with ImportOrigin, and the rest is one map shared with alike Backups), spec.strategyRef, the driverMetadata keys the driver names
// in keep (one shared map for the Backups whose kept entries are alike: cachetrim.InternMap),
// status.phase, the artifact's URI and size (and its checksum on an imported Backup where the
// driver asks for it: TrimOptions.ImportedChecksum), and the ArtifactAvailable condition whole but
// for the message the catalog gives it on import (ReasonImported: it says what the Backup's kept
// annotations say, on every imported Backup, about 100 bytes each). Repeated
// strings are shared (cachetrim.Intern). It drops the application and Plan, the other labels and
// driverMetadata, the checksum, every other condition, the verification verdicts and the
// underlying resources.
//
// A trimmed Backup is good for deciding whether to act, never for writing: before the kit writes
// a Backup's status or releases it, it reads the Backup uncached (Kit.APIReader) and computes the
// patch from that copy, with an optimistic lock. A driver does the same, or patches only the
// fields it owns (a merge patch of one annotation).
func TrimBackup(obj any, keep ...string) { TrimOptions{Shared: keep}.trim(obj) }

// TrimOptions say what TrimBackup keeps of a Backup beyond what it always keeps.
type TrimOptions struct {
	// Shared are driverMetadata keys whose values many Backups share (a namespace, a location):
	// kept, interned.
	Shared []string
	// Own are driverMetadata keys whose values are each Backup's own (the name of its backend
	// object): kept as decoded, not interned (interning a string no other object holds costs the
	// intern table's entry and saves nothing).
	Own []string
	// ImportedChecksum keeps the artifact's checksum on an imported Backup, for a driver whose
	// catalog sync reuses what an earlier one measured (driver-velero measures each Velero
	// tarball once). Without it, an imported Backup keeps its artifact's URI and size as every
	// other does (about 80 bytes less each).
	ImportedChecksum bool
}

// Trimmer returns TrimBackup with these options, for a driver's cache transform
// (cachetrim.Transform(annotations, o.Trimmer())).
func (o TrimOptions) Trimmer() func(obj any) { return o.trim }

func (o TrimOptions) trim(obj any) {
	shared, own := o.Shared, o.Own
	b, ok := obj.(*backupsv1.Backup)
	if !ok {
		return
	}
	kept := backupsv1.Backup{TypeMeta: b.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: b.Name, Namespace: cachetrim.Intern(b.Namespace), UID: b.UID, ResourceVersion: b.ResourceVersion, Generation: b.Generation,
		CreationTimestamp: b.CreationTimestamp, DeletionTimestamp: b.DeletionTimestamp, Annotations: b.Annotations,
	}}
	for _, f := range b.Finalizers {
		kept.Finalizers = append(kept.Finalizers, cachetrim.Intern(f))
	}
	if b.Imported() {
		// Its origin (the record and the source Backup's UID), each Backup's own, goes to the
		// table of origins; the other annotations (the cluster it comes from, whether adopted) are
		// alike on many Backups of a catalog: one shared map.
		ann := map[string]string{}
		var o importOrigin
		for k, v := range kept.Annotations {
			switch k {
			case backupsv1.AnnotationRecord:
				o.record = v
			case backupsv1.AnnotationSourceUID:
				o.sourceUID = v
			default:
				ann[k] = cachetrim.Intern(v)
			}
		}
		rememberOrigin(b.UID, o)
		kept.Annotations = cachetrim.InternMap(ann)
		// Alike on every Backup of a catalog: one map shared among them.
		labels := map[string]string{}
		for _, l := range []string{backupsv1.LabelImported, backupsv1.LabelCatalog, backupsv1.LabelManagedBy} {
			if v, ok := b.Labels[l]; ok {
				labels[l] = v
			}
		}
		kept.Labels = cachetrim.InternMap(labels)
	}
	ref := b.Spec.StrategyRef
	kept.Spec.StrategyRef = corev1.TypedLocalObjectReference{APIGroup: cachetrim.InternPtr(ref.APIGroup), Kind: cachetrim.Intern(ref.Kind), Name: cachetrim.Intern(ref.Name)}
	var md map[string]string
	for i, k := range slices.Concat(shared, own) {
		if v, ok := b.Spec.DriverMetadata[k]; ok {
			if md == nil {
				md = map[string]string{}
			}
			if i < len(shared) {
				v = cachetrim.Intern(v)
			}
			md[cachetrim.Intern(k)] = v
		}
	}
	kept.Spec.DriverMetadata = cachetrim.InternMap(md)
	kept.Status.Phase = backupsv1.BackupPhase(cachetrim.Intern(string(b.Status.Phase)))
	if a := b.Status.Artifact; a != nil {
		kept.Status.Artifact = &backupsv1.BackupArtifact{URI: a.URI, SizeBytes: a.SizeBytes}
		if b.Imported() && o.ImportedChecksum {
			kept.Status.Artifact.Checksum = a.Checksum
		}
	}
	if c := meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionArtifactAvailable); c != nil {
		msg := c.Message
		if c.Reason == ReasonImported {
			// No check answers with the catalog's reason (shown never finds it alike), and the
			// kit writes a status from an uncached read: nothing reads this message cached.
			msg = ""
		}
		kept.Status.Conditions = []metav1.Condition{{Type: cachetrim.Intern(c.Type), Status: metav1.ConditionStatus(cachetrim.Intern(string(c.Status))),
			ObservedGeneration: c.ObservedGeneration, LastTransitionTime: c.LastTransitionTime, Reason: cachetrim.Intern(c.Reason), Message: msg}}
	}
	*b = kept
}

// importOrigin is what the catalog reads of an imported Backup beyond what the cache keeps: the
// location of the record it was made from (AnnotationRecord) and the UID of the Backup it is a
// copy of (AnnotationSourceUID).
type importOrigin struct{ record, sourceUID string }

// origins holds, by UID, the origin of each imported Backup a driver's cache trimmed (TrimBackup):
// in a table of one entry per Backup, where the two annotations kept on the cached object took a
// map of their own per Backup (about 310 bytes more each, measured). The cache's transform fills
// it, so a restarted driver has it again once its cache has synced, at no request, and the kit
// forgets a Backup's entry when the cache drops the Backup (ForgetDeleted, on the informer of a
// kit's manager): it holds what the cache holds, whatever a tenant creates and deletes. A Backup
// the table does not know (never seen by a trimming cache) is read uncached: the table saves
// reads and memory, it never decides alone.
var origins = struct {
	sync.RWMutex
	m map[types.UID]importOrigin
}{m: map[types.UID]importOrigin{}}

func rememberOrigin(uid types.UID, o importOrigin) {
	origins.Lock()
	origins.m[uid] = o
	origins.Unlock()
}

// ImportOrigin is the record an imported Backup was made from and the UID of its source Backup:
// from its annotations when it has them (a Backup read uncached), else from what the cache's trim
// kept of them. ok is false when neither knows: read the Backup uncached.
func ImportOrigin(b *backupsv1.Backup) (record, sourceUID string, ok bool) {
	r, hasRecord := b.Annotations[backupsv1.AnnotationRecord]
	u, hasUID := b.Annotations[backupsv1.AnnotationSourceUID]
	if hasRecord || hasUID {
		return r, u, true
	}
	origins.RLock()
	o, ok := origins.m[b.UID]
	origins.RUnlock()
	return o.record, o.sourceUID, ok
}

// ForgetDeleted forgets the origin of a Backup the cache dropped (obj, or the tombstone of one): an
// informer's delete handler.
func ForgetDeleted(obj any) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if m, err := meta.Accessor(obj); err == nil {
		origins.Lock()
		delete(origins.m, m.GetUID())
		origins.Unlock()
	}
}

// BackupTrimmer returns TrimBackup keeping the driverMetadata keys keep, for a driver's cache
// transform (cachetrim.Transform(annotations, driverkit.BackupTrimmer(...))).
func BackupTrimmer(keep ...string) func(obj any) {
	return TrimOptions{Shared: keep}.Trimmer()
}
