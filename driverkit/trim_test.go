package driverkit_test

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/apis/cachetrim"
	"github.com/coffer-backup/coffer/driverkit"
)

// checking is the script driver with an ArtifactChecker: check says what a look finds.
type checking struct {
	*script
	check func(b *backupsv1.Backup) *metav1.Condition
}

func (d *checking) CheckArtifact(_ context.Context, b *backupsv1.Backup) (*metav1.Condition, error) {
	return d.check(b), nil
}

// trimming reads Backups as a driver's trimmed cache holds them (driverkit.TrimBackup).
type trimming struct{ client.Client }

func (c trimming) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := c.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	driverkit.TrimBackup(obj, "kept")
	return nil
}

// trimmingCache starts, until ctx ends, a cache of the fixture driver's Backups trimmed as a driver
// trims them (keeping the driverMetadata keys keep), and returns it with a client reading from it.
func (f *fixture) trimmingCache(ctx context.Context, keep ...string) (cache.Cache, client.Client) {
	t := f.t
	t.Helper()
	opts := driverkit.CacheBackupsOf(cache.Options{Scheme: scheme, DefaultTransform: cachetrim.Transform(driverkit.CacheAnnotations, driverkit.BackupTrimmer(keep...))}, f.kit.Strategy)
	c, err := cache.New(restConfig, opts)
	require.NoError(t, err)
	go func() { _ = c.Start(ctx) }()
	require.True(t, c.WaitForCacheSync(ctx))
	cached, err := client.New(restConfig, client.Options{Scheme: scheme, Cache: &client.CacheOptions{Reader: c}})
	require.NoError(t, err)
	return c, cached
}

// counting counts the reads of a reader.
type counting struct {
	client.Reader
	n atomic.Int64
}

func (c *counting) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.n.Add(1)
	return c.Reader.Get(ctx, key, obj, opts...)
}

// wholeBackup creates a Ready Backup of the fixture's driver as a driver leaves a good one (labels,
// annotations, driver metadata, an artifact, conditions with messages, a verdict), its
// ArtifactAvailable condition aa (none when aa.Type is empty).
func (f *fixture) wholeBackup(aa metav1.Condition, finalizers ...string) *backupsv1.Backup {
	f.t.Helper()
	b := f.readyBackup(finalizers...)
	orig := b.DeepCopy()
	b.Labels = map[string]string{backupsv1.LabelManagedBy: driverName, backupsv1.LabelBackupJobUID: "0000-1111", backupsv1.LabelPlan: "nightly"}
	b.Annotations = map[string]string{backupsv1.AnnotationSourceCluster: "elsewhere", "example.com/note": "kept on the server"}
	require.NoError(f.t, cl.Patch(f.ctx, b, client.MergeFrom(orig)))
	b.Status.Conditions = []metav1.Condition{
		{Type: backupsv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "BackupSucceeded", Message: "The backup completed", LastTransitionTime: metav1.NewTime(f.clock.Now().Add(-time.Hour))},
		{Type: backupsv1.ConditionPartiallyFailed, Status: metav1.ConditionTrue, Reason: "ItemsFailed", Message: "2 items failed: pods/a, pods/b", LastTransitionTime: metav1.NewTime(f.clock.Now().Add(-time.Hour))},
	}
	if aa.Type != "" {
		b.Status.Conditions = append(b.Status.Conditions, aa)
	}
	b.Status.Verification = &backupsv1.BackupVerification{Checksum: &backupsv1.VerificationVerdict{Result: backupsv1.VerificationPassed, Time: metav1.NewTime(f.clock.Now()), Message: "the checksum matched"}}
	require.NoError(f.t, cl.Status().Update(f.ctx, b))
	return b
}

// metadataBackup creates a Ready Backup of the fixture's driver with driver metadata (set at
// creation), holding the driver's finalizer.
func (f *fixture) metadataBackup() *backupsv1.Backup {
	f.t.Helper()
	b := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{GenerateName: "meta-", Namespace: f.ns, Finalizers: []string{finalizer}},
		Spec: backupsv1.BackupSpec{ApplicationRef: corev1.TypedLocalObjectReference{APIGroup: ptr.To(backupsv1.DefaultApplicationAPIGroup), Kind: "Shop", Name: "shop"}, StrategyRef: f.strategyRef(), TakenAt: metav1.NewTime(f.clock.Now()),
			DriverMetadata: map[string]string{"kept": "where", "dropped": "by the cache"}}}
	f.create(b)
	b.Status = backupsv1.BackupStatus{Phase: backupsv1.BackupReady, Artifact: artifact.DeepCopy(), Conditions: []metav1.Condition{
		{Type: backupsv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "BackupSucceeded", Message: "The backup completed", LastTransitionTime: metav1.NewTime(f.clock.Now())},
		{Type: backupsv1.ConditionArtifactAvailable, Status: metav1.ConditionTrue, Reason: backupsv1.ReasonArtifactPresent, Message: "Stored", LastTransitionTime: metav1.NewTime(f.clock.Now())},
	}}
	require.NoError(f.t, cl.Status().Update(f.ctx, b))
	return b
}

// The kit decides the same on a trimmed cached Backup as on the whole one, for every
// ArtifactAvailable a Backup may hold and every answer of the driver's check: the same requeue, and
// the same status on the server afterwards (the trimmed side's written from an uncached read,
// every field the cache dropped intact). Where the whole side writes nothing, the trimmed side
// makes no uncached read: a look at a Backup whose condition stands costs no request.
func TestTrimmedBackupsDecideAlike(t *testing.T) {
	f := newFixture(t)
	now := f.clock.Now()
	cond := func(status metav1.ConditionStatus, reason, msg string, ago time.Duration) metav1.Condition {
		return metav1.Condition{Type: backupsv1.ConditionArtifactAvailable, Status: status, Reason: reason, Message: msg, LastTransitionTime: metav1.NewTime(now.Add(-ago)), ObservedGeneration: 1}
	}
	held := []metav1.Condition{
		{},
		cond(metav1.ConditionTrue, backupsv1.ReasonArtifactPresent, "found", time.Hour),
		cond(metav1.ConditionTrue, backupsv1.ReasonArtifactPresent, "found elsewhere", time.Hour),
		cond(metav1.ConditionUnknown, backupsv1.ReasonArtifactAbsenceUnconfirmed, "gone; checked again before the Backup counts as missing", time.Minute),
		cond(metav1.ConditionUnknown, backupsv1.ReasonArtifactAbsenceUnconfirmed, "gone; checked again before the Backup counts as missing", time.Hour),
		cond(metav1.ConditionUnknown, backupsv1.ReasonArtifactAbsenceUnconfirmed, "unsure", time.Minute),
		cond(metav1.ConditionUnknown, "Checking", "unsure", time.Hour),
		cond(metav1.ConditionFalse, backupsv1.ReasonArtifactMissing, "gone", time.Hour),
	}
	found := []*metav1.Condition{
		nil,
		{Type: backupsv1.ConditionArtifactAvailable, Status: metav1.ConditionTrue, Reason: backupsv1.ReasonArtifactPresent, Message: "found"},
		{Type: backupsv1.ConditionArtifactAvailable, Status: metav1.ConditionFalse, Reason: backupsv1.ReasonArtifactMissing, Message: "gone"},
		{Type: backupsv1.ConditionArtifactAvailable, Status: metav1.ConditionUnknown, Reason: backupsv1.ReasonArtifactAbsenceUnconfirmed, Message: "unsure"},
	}
	n, silent := 0, 0
	for _, h := range held {
		for _, c := range found {
			name := fmt.Sprintf("held %s/%s %q, found %+v", h.Status, h.Reason, h.Message, c)
			whole, trimmed := f.wholeBackup(h), f.wholeBackup(h)
			check := func(*backupsv1.Backup) *metav1.Condition { return c.DeepCopy() }
			kit := &driverkit.Kit[S]{Name: driverName, Strategy: f.kit.Strategy, NewStrategy: newStrategyObject, Finalizer: finalizer,
				Driver: &checking{script: f.driver, check: check}, Client: cl, Clock: f.clock, Recorder: f.events}
			resWhole, err := kit.BackupReconciler().Reconcile(f.ctx, request(whole))
			require.NoError(t, err, name)

			live := &counting{Reader: cl}
			kit.Client, kit.APIReader = trimming{cl}, live
			resTrimmed, err := kit.BackupReconciler().Reconcile(f.ctx, request(trimmed))
			require.NoError(t, err, name)
			assert.Equal(t, resWhole, resTrimmed, name)

			rv := whole.ResourceVersion
			f.get(whole)
			f.get(trimmed)
			assert.Equal(t, whole.Status, trimmed.Status, name)
			assert.Equal(t, whole.Labels, trimmed.Labels, name)
			assert.Equal(t, whole.Annotations, trimmed.Annotations, name)
			if whole.ResourceVersion == rv {
				assert.Zero(t, live.n.Load(), "%s: nothing to write, no uncached read", name)
				silent++
			}
			n++
		}
	}
	assert.Equal(t, len(held)*len(found), n)
	assert.Positive(t, silent)
	t.Logf("%d cases, %d without a write", n, silent)
}

// A driver's trimmed cache holds little of a Backup, and what the kit writes from it loses none of
// what the cache dropped: a status write (the artifact check's), a deletion's (DeletionFailing and
// the release), and a restore hands the driver the whole Backup.
func TestAStatusWriteAfterTrimmingKeepsWhatTheCacheDropped(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	_, cached := f.trimmingCache(ctx, "kept")

	b := f.metadataBackup()
	orig := b.DeepCopy()
	b.Labels = map[string]string{backupsv1.LabelManagedBy: driverName, backupsv1.LabelBackupJobUID: "0000-1111"}
	b.Annotations = map[string]string{backupsv1.AnnotationRecord: "s3://bucket/record.json", "example.com/note": "kept on the server"}
	require.NoError(t, cl.Patch(f.ctx, b, client.MergeFrom(orig)))
	f.get(b)
	whole := b.DeepCopy()

	// The cache holds the trimmed copy.
	inCache := &backupsv1.Backup{}
	require.Eventually(t, func() bool {
		return cached.Get(ctx, client.ObjectKeyFromObject(b), inCache) == nil && inCache.ResourceVersion == b.ResourceVersion
	}, 30*time.Second, 50*time.Millisecond)
	assert.Empty(t, inCache.Status.Artifact.Checksum, "the cache drops the checksum")
	assert.Equal(t, artifact.URI, inCache.Status.Artifact.URI)
	assert.Equal(t, map[string]string{"kept": "where"}, inCache.Spec.DriverMetadata)
	assert.Nil(t, inCache.Labels, "a Backup not imported keeps no label")
	assert.Equal(t, map[string]string{backupsv1.AnnotationRecord: "s3://bucket/record.json"}, inCache.Annotations)
	require.Len(t, inCache.Status.Conditions, 1, "only ArtifactAvailable")
	assert.Equal(t, "Stored", inCache.Status.Conditions[0].Message)

	kept := func(what string) {
		t.Helper()
		now := &backupsv1.Backup{}
		require.NoError(t, cl.Get(f.ctx, client.ObjectKeyFromObject(b), now), what)
		assert.Equal(t, whole.Status.Artifact, now.Status.Artifact, what)
		assert.Equal(t, whole.Spec.DriverMetadata, now.Spec.DriverMetadata, what)
		assert.Equal(t, whole.Labels, now.Labels, what)
		assert.Equal(t, whole.Annotations, now.Annotations, what)
		ready := meta.FindStatusCondition(now.Status.Conditions, backupsv1.ConditionReady)
		require.NotNil(t, ready, what)
		assert.Equal(t, "The backup completed", ready.Message, what)
	}

	// The artifact check finds the artifact gone: the kit writes Unknown from an uncached read.
	live := &counting{Reader: cl}
	f.kit.Client, f.kit.APIReader = cached, live
	f.kit.Driver = &checking{script: f.driver, check: func(got *backupsv1.Backup) *metav1.Condition {
		assert.Empty(t, got.Status.Artifact.Checksum, "the check decides from the cached copy")
		return &metav1.Condition{Type: backupsv1.ConditionArtifactAvailable, Status: metav1.ConditionFalse, Reason: backupsv1.ReasonArtifactMissing, Message: "gone"}
	}}
	_, err := f.reconcileBackup(b)
	require.NoError(t, err)
	assert.EqualValues(t, 1, live.n.Load(), "one uncached read before the write")
	kept("after the artifact check's write")
	f.get(b)
	aa := meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionArtifactAvailable)
	require.NotNil(t, aa)
	assert.Equal(t, backupsv1.ReasonArtifactAbsenceUnconfirmed, aa.Reason)

	// A restore hands the driver the whole Backup.
	f.driver.restore = func(_ context.Context, run *driverkit.RestoreRun[S]) (driverkit.RestoreOutcome, error) {
		assert.Equal(t, artifact.Checksum, run.Backup.Status.Artifact.Checksum, "the driver restores from the whole Backup")
		assert.Equal(t, "by the cache", run.Backup.Spec.DriverMetadata["dropped"])
		return driverkit.RestoreOutcome{Waiting: "restoring"}, nil
	}
	rj := f.restoreJob(b.Name)
	require.Eventually(t, func() bool {
		return cached.Get(ctx, client.ObjectKeyFromObject(rj), &backupsv1.RestoreJob{}) == nil
	}, 30*time.Second, 50*time.Millisecond)
	_, err = f.reconcileRestore(rj)
	require.NoError(t, err)
	assert.Equal(t, driverName, rj.ClaimedBy())
	f.driver.mu.Lock()
	assert.Len(t, f.driver.restores, 1)
	f.driver.mu.Unlock()

	// The Backup is deleted and its artifact's deletion fails: DeletionFailing is written from
	// an uncached read, then the deletion succeeds and the finalizer is released.
	require.NoError(t, cl.Delete(f.ctx, b))
	require.Eventually(t, func() bool {
		return cached.Get(ctx, client.ObjectKeyFromObject(b), inCache) == nil && !inCache.DeletionTimestamp.IsZero()
	}, 30*time.Second, 50*time.Millisecond)
	f.driver.delete = func(_ context.Context, got *backupsv1.Backup) (driverkit.DeleteOutcome, error) {
		assert.Equal(t, artifact.Checksum, got.Status.Artifact.Checksum, "the driver deletes from the whole Backup")
		return driverkit.DeleteOutcome{}, driverkit.Failf("StoreDown", "the store is down")
	}
	_, err = f.reconcileBackup(b)
	require.NoError(t, err)
	kept("after DeletionFailing")
	f.get(b)
	del := meta.FindStatusCondition(b.Status.Conditions, driverkit.ConditionArtifactDeletion)
	require.NotNil(t, del)
	assert.True(t, strings.Contains(del.Message, "the store is down"), del.Message)

	f.driver.delete = func(context.Context, *backupsv1.Backup) (driverkit.DeleteOutcome, error) {
		return driverkit.DeleteOutcome{Done: true}, nil
	}
	_, err = f.reconcileBackup(b)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return cl.Get(f.ctx, client.ObjectKeyFromObject(b), &backupsv1.Backup{}) != nil
	}, 30*time.Second, 50*time.Millisecond, "released and gone")
}

// TestCachedBackupBytes measures what a driver's informer holds per Backup of its kind, whole
// (before TrimBackup) and trimmed: COFFER_MEASURE_CACHED_BACKUPS=N Backups as a driver leaves a
// good one (as e2e/bench's BenchmarkScale makes them), each cache's live heap after a collection,
// over N (default 1,000; docs/benchmarks.md, "Scale", measured at 10,000). The trimmed Backup
// must cost under three quarters of the whole one (a third at 10,000; the heap measure is noisy).
func TestCachedBackupBytes(t *testing.T) {
	f := newFixture(t)
	whole, trimmed := f.cachedBytes(t, f.benchBackup)
	t.Logf("%d Backups of the driver's kind in its informer: %.0f bytes each whole, %.0f trimmed", cachedCount(), whole, trimmed)
	assert.Less(t, trimmed, whole*3/4, "a trimmed Backup costs well under a whole one")
}

// TestCachedImportedBackupBytes is TestCachedBackupBytes for Backups a catalog imported, as
// BenchmarkCatalogSync (driver-job) leaves them: the catalog's labels and annotations, the
// record's artifact, the catalog's ArtifactAvailable.
func TestCachedImportedBackupBytes(t *testing.T) {
	f := newFixture(t)
	whole, trimmed := f.cachedBytes(t, f.importedBackup)
	t.Logf("%d imported Backups in the informer: %.0f bytes each whole, %.0f trimmed", cachedCount(), whole, trimmed)
	assert.Less(t, trimmed, whole*3/4, "a trimmed imported Backup costs well under a whole one")
}

func cachedCount() int {
	n, _ := strconv.Atoi(os.Getenv("COFFER_MEASURE_CACHED_BACKUPS"))
	if n <= 0 {
		n = 1000
	}
	return n
}

// cachedBytes creates cachedCount() Backups made by build in the fixture's namespace and returns
// what a driver's informer holds of each, whole and trimmed (its live heap after a collection, over
// their count).
func (f *fixture) cachedBytes(t *testing.T, build func(int) *backupsv1.Backup) (whole, trimmed float64) {
	n := cachedCount()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				b := build(i)
				status := b.Status
				if err := cl.Create(f.ctx, b); err != nil {
					errs <- err
					return
				}
				b.Status = status
				if err := cl.Status().Update(f.ctx, b); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	require.NoError(t, <-errs)

	measure := func(transform func(any) (any, error)) float64 {
		ctx, cancel := context.WithCancel(f.ctx)
		defer cancel()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&before)
		c, err := cache.New(restConfig, driverkit.CacheBackupsOf(cache.Options{Scheme: scheme, DefaultTransform: transform,
			DefaultNamespaces: map[string]cache.Config{f.ns: {}}}, f.kit.Strategy))
		require.NoError(t, err)
		go func() { _ = c.Start(ctx) }()
		list := &backupsv1.BackupList{}
		require.Eventually(t, func() bool {
			return c.List(ctx, list, client.InNamespace(f.ns), client.UnsafeDisableDeepCopy) == nil && len(list.Items) == n
		}, 5*time.Minute, 100*time.Millisecond)
		list = nil
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(c)
		return float64(after.HeapAlloc-min(after.HeapAlloc, before.HeapAlloc)) / float64(n)
	}
	return measure(cachetrim.Transform(driverkit.CacheAnnotations)),
		measure(cachetrim.Transform(driverkit.CacheAnnotations, driverkit.BackupTrimmer("param.bucket")))
}

// importedBackup is Backup i as a catalog sync imports it from a record of another cluster
// (driverkit's Catalog.imported and its status write).
func (f *fixture) importedBackup(i int) *backupsv1.Backup {
	b := f.benchBackup(i)
	record := fmt.Sprintf("catalog/records/%s/%s.json", f.ns, b.Name)
	b.Labels = map[string]string{backupsv1.LabelImported: "true", backupsv1.LabelCatalog: "dr", backupsv1.LabelManagedBy: driverName,
		backupsv1.LabelPlan: b.Labels[backupsv1.LabelPlan]}
	b.Annotations = map[string]string{
		backupsv1.AnnotationSourceCluster:     "3f1c0b9e-5d1e-4c1a-9c59-2a7c9e3d1b20",
		backupsv1.AnnotationSourceClusterName: "production",
		backupsv1.AnnotationSourceUID:         fmt.Sprintf("%08x-0000-4000-8000-%012x", i*7907, i),
		backupsv1.AnnotationRecord:            record,
	}
	b.Finalizers = nil
	b.Status.Conditions = []metav1.Condition{{Type: backupsv1.ConditionArtifactAvailable, Status: metav1.ConditionTrue, Reason: driverkit.ReasonImported,
		Message: "Imported from the record " + record + ", written by cluster production", LastTransitionTime: b.Spec.TakenAt}}
	return b
}

// benchBackup is Backup i of the fixture's driver as e2e/bench's scaleBackup makes one: a good
// Backup as a driver leaves it (labels, driver metadata, an artifact, three conditions with
// messages).
func (f *fixture) benchBackup(i int) *backupsv1.Backup {
	plan := fmt.Sprintf("p-%05d", i%10000)
	taken := metav1.NewTime(f.clock.Now().Add(-time.Duration(i/10000+1) * 24 * time.Hour).Truncate(time.Second))
	app := corev1.TypedLocalObjectReference{APIGroup: ptr.To("apps.cozystack.io"), Kind: "VirtualMachine", Name: "vm-" + plan}
	labels := backupsv1.ApplicationLabels(app)
	labels[backupsv1.LabelBackupJobUID] = fmt.Sprintf("%08x-0000-4000-8000-%012x", i*7919, i)
	labels[backupsv1.LabelManagedBy] = driverName
	labels[backupsv1.LabelPlan] = backupsv1.PlanLabelValue(plan)
	name := fmt.Sprintf("%s-%d", plan, i)
	cond := func(t, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: reason, Message: msg, LastTransitionTime: taken}
	}
	return &backupsv1.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Labels: labels, Finalizers: []string{finalizer}},
		Spec: backupsv1.BackupSpec{ApplicationRef: app, PlanRef: &corev1.LocalObjectReference{Name: plan}, StrategyRef: f.strategyRef(), TakenAt: taken,
			DriverMetadata: map[string]string{"param.bucket": "coffer", "toy.example.com/run": name, "toy.example.com/location": "default"}},
		Status: backupsv1.BackupStatus{
			Phase: backupsv1.BackupReady,
			Artifact: &backupsv1.BackupArtifact{URI: "s3://coffer/" + f.ns + "/" + name + ".tar", SizeBytes: 1 << 30,
				Checksum: "sha256:" + strings.Repeat(strconv.FormatInt(int64(i%16), 16), 64)},
			Conditions: []metav1.Condition{
				cond(backupsv1.ConditionReady, "BackupSucceeded", "The backup completed and its artifact is stored"),
				cond(backupsv1.ConditionArtifactAvailable, "ArtifactFound", "The artifact was found in storage at the last check"),
				cond(backupsv1.ConditionVerified, backupsv1.ReasonRestoreVerified, "A full-restore verification restored the backup into a sandbox and matched every object"),
			},
		},
	}
}

// An imported Backup keeps what the catalog reads of it: the labels it matches by, its origin's
// annotations (the record and source UID in the table of origins: ImportOrigin), its finalizers, its artifact's URI and size (and its checksum where the driver's
// catalog reuses what it measured: TrimOptions.ImportedChecksum), and its ArtifactAvailable
// without the message the catalog wrote on import (the kept annotations say the same).
func TestATrimmedImportedBackupKeepsWhatTheCatalogReads(t *testing.T) {
	imported := metav1.Condition{Type: backupsv1.ConditionArtifactAvailable, Status: metav1.ConditionTrue, Reason: driverkit.ReasonImported,
		Message: "Imported from the record s3://x/r.json, written by cluster elsewhere", ObservedGeneration: 1, LastTransitionTime: metav1.Unix(1e9, 0)}
	b := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns", UID: "u", Finalizers: []string{finalizer},
		Labels:      map[string]string{backupsv1.LabelImported: "true", backupsv1.LabelCatalog: "dr", backupsv1.LabelManagedBy: driverName, backupsv1.LabelPlan: "nightly"},
		Annotations: map[string]string{backupsv1.AnnotationSourceCluster: "elsewhere", backupsv1.AnnotationSourceUID: "0000", backupsv1.AnnotationRecord: "s3://x/r.json", backupsv1.AnnotationAdopted: "true"}},
		Status: backupsv1.BackupStatus{Phase: backupsv1.BackupReady, Artifact: artifact.DeepCopy(), Conditions: []metav1.Condition{imported}}}
	trimmed := b.DeepCopy()
	driverkit.TrimBackup(trimmed)
	assert.Equal(t, map[string]string{backupsv1.LabelImported: "true", backupsv1.LabelCatalog: "dr", backupsv1.LabelManagedBy: driverName}, trimmed.Labels)
	assert.Equal(t, map[string]string{backupsv1.AnnotationSourceCluster: "elsewhere", backupsv1.AnnotationAdopted: "true"}, trimmed.Annotations)
	record, sourceUID, ok := driverkit.ImportOrigin(trimmed)
	assert.True(t, ok, "the trim keeps the origin of the Backup it cut")
	assert.Equal(t, "s3://x/r.json", record)
	assert.Equal(t, "0000", sourceUID)
	assert.Equal(t, b.Finalizers, trimmed.Finalizers)
	assert.Equal(t, &backupsv1.BackupArtifact{URI: artifact.URI, SizeBytes: artifact.SizeBytes}, trimmed.Status.Artifact)
	want := imported
	want.Message = ""
	assert.Equal(t, []metav1.Condition{want}, trimmed.Status.Conditions, "the catalog's message is not kept; the rest of the condition is")
	assert.Equal(t, b.UID, trimmed.UID)
	assert.True(t, trimmed.Imported())
	assert.True(t, trimmed.Adopted())

	whole := b.DeepCopy()
	driverkit.TrimOptions{ImportedChecksum: true}.Trimmer()(whole)
	assert.Equal(t, b.Status.Artifact, whole.Status.Artifact, "the checksum is kept where the driver asks")

	// Any other ArtifactAvailable (a check's answer) keeps its message, on an imported Backup too.
	checked := b.DeepCopy()
	checked.Status.Conditions[0].Reason, checked.Status.Conditions[0].Message = backupsv1.ReasonArtifactPresent, "found at the last check"
	driverkit.TrimBackup(checked)
	assert.Equal(t, "found at the last check", checked.Status.Conditions[0].Message)
}

// TestTrimmerKeepsOwnValuesAsTheyAre: TrimOptions.Own keeps the shared and own driverMetadata
// keys and drops the others; a shared value becomes the interned copy, an own value (each
// Backup's own name) stays the string decoded with the object, never entered in the intern table.
func TestTrimmerKeepsOwnValuesAsTheyAre(t *testing.T) {
	name := strings.Clone("velero-backup-of-this-backup-only")
	b := &backupsv1.Backup{Spec: backupsv1.BackupSpec{DriverMetadata: map[string]string{
		"namespace": strings.Clone("velero"), "backupName": name, "other": "dropped"}}}
	driverkit.TrimOptions{Shared: []string{"namespace"}, Own: []string{"backupName"}}.Trimmer()(b)
	assert.Equal(t, map[string]string{"namespace": "velero", "backupName": name}, b.Spec.DriverMetadata)
	assert.Same(t, unsafe.StringData(cachetrim.Intern("velero")), unsafe.StringData(b.Spec.DriverMetadata["namespace"]), "a shared value is interned")
	assert.Same(t, unsafe.StringData(name), unsafe.StringData(b.Spec.DriverMetadata["backupName"]), "an own value is kept as decoded")
}

// TestTrimmedImportedBackupsShareTheirAnnotations: the annotations an imported Backup keeps in the
// cache but its origin (the cluster it comes from), alike on every Backup of a catalog, are one
// shared map; its record and source UID, its own, are kept as decoded in the
// table of origins.
func TestTrimmedImportedBackupsShareTheirAnnotations(t *testing.T) {
	imported := func(n int) (*backupsv1.Backup, string) {
		record := strings.Clone(fmt.Sprintf("catalog/records/shop/nightly-%d.json", n))
		return &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{UID: types.UID(fmt.Sprintf("share-%d", n)), Labels: map[string]string{backupsv1.LabelImported: "true"},
			Annotations: map[string]string{
				backupsv1.AnnotationSourceCluster:     strings.Clone("3f1c0b9e-5d1e-4c1a-9c59-2a7c9e3d1b20"),
				backupsv1.AnnotationSourceClusterName: strings.Clone("production"),
				backupsv1.AnnotationSourceUID:         strings.Clone(fmt.Sprintf("8e0d4a8c-7a61-4f0e-b2cb-5f8f2d0c9a%02d", n)),
				backupsv1.AnnotationRecord:            record,
			}}}, record
	}
	a, recordA := imported(1)
	b, recordB := imported(2)
	driverkit.TrimBackup(a)
	driverkit.TrimBackup(b)
	assert.Equal(t, map[string]string{backupsv1.AnnotationSourceCluster: "3f1c0b9e-5d1e-4c1a-9c59-2a7c9e3d1b20", backupsv1.AnnotationSourceClusterName: "production"}, b.Annotations)
	assert.Equal(t, reflect.ValueOf(a.Annotations).UnsafePointer(), reflect.ValueOf(b.Annotations).UnsafePointer(), "one map for both")
	for _, c := range []struct {
		b      *backupsv1.Backup
		record string
		uid    string
	}{{a, recordA, "8e0d4a8c-7a61-4f0e-b2cb-5f8f2d0c9a01"}, {b, recordB, "8e0d4a8c-7a61-4f0e-b2cb-5f8f2d0c9a02"}} {
		record, uid, ok := driverkit.ImportOrigin(c.b)
		require.True(t, ok)
		assert.Equal(t, c.uid, uid)
		assert.Same(t, unsafe.StringData(c.record), unsafe.StringData(record), "its own values are kept as decoded")
	}
}
