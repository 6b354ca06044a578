package driverkit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/apis/cachetrim"
	"github.com/coffer-backup/coffer/driverkit"
)

// A driver's cache holds only the Backups of its strategy kind, selected by the API server; to
// the kit, another driver's Backup is as if it did not exist: a RestoreJob of it is left to its
// driver, unclaimed, and a catalog record whose name it takes is skipped, not retried forever.
func TestDriverCachesOnlyBackupsOfItsKind(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	c, err := cache.New(restConfig, driverkit.CacheBackupsOf(cache.Options{Scheme: scheme}, f.kit.Strategy))
	require.NoError(t, err)
	go func() { _ = c.Start(ctx) }()
	require.True(t, c.WaitForCacheSync(ctx))
	cached, err := client.New(restConfig, client.Options{Scheme: scheme, Cache: &client.CacheOptions{Reader: c}})
	require.NoError(t, err)
	f.kit.Client = cached

	ours := f.readyBackup()
	other := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: f.ns},
		Spec: backupsv1.BackupSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"},
			StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr.To("other.example.com"), Kind: kind, Name: f.strategy},
			TakenAt:     metav1.NewTime(f.clock.Now())}}
	f.create(other)
	other.Status = backupsv1.BackupStatus{Phase: backupsv1.BackupReady, Artifact: artifact.DeepCopy()}
	require.NoError(t, cl.Status().Update(f.ctx, other))
	// A later Backup of our kind: once the cache has it, it has seen everything created before.
	last := f.readyBackup()
	require.Eventually(t, func() bool {
		return cached.Get(ctx, client.ObjectKeyFromObject(last), &backupsv1.Backup{}) == nil
	}, 30*time.Second, 50*time.Millisecond)

	list := &backupsv1.BackupList{}
	require.NoError(t, cached.List(ctx, list, client.InNamespace(f.ns)))
	var names []string
	for _, b := range list.Items {
		names = append(names, b.Name)
	}
	assert.ElementsMatch(t, []string{ours.Name, last.Name}, names, "the cache holds the Backups of the driver's kind, and only those")
	assert.True(t, apierrors.IsNotFound(cached.Get(ctx, client.ObjectKeyFromObject(other), &backupsv1.Backup{})))

	// A RestoreJob of the other driver's Backup: not claimed, not failed.
	rj := f.restoreJob(other.Name)
	mine := f.restoreJob(ours.Name)
	for _, r := range []*backupsv1.RestoreJob{rj, mine} {
		require.Eventually(t, func() bool {
			return cached.Get(ctx, client.ObjectKeyFromObject(r), &backupsv1.RestoreJob{}) == nil
		}, 30*time.Second, 50*time.Millisecond)
	}
	_, err = f.reconcileRestore(rj)
	require.NoError(t, err)
	assert.Empty(t, rj.Status.Phase, "the RestoreJob is left to the other driver")
	assert.Empty(t, rj.ClaimedBy())
	// One of ours is claimed as before.
	f.driver.restore = func(context.Context, *driverkit.RestoreRun[S]) (driverkit.RestoreOutcome, error) {
		return driverkit.RestoreOutcome{Waiting: "restoring"}, nil
	}
	_, err = f.reconcileRestore(mine)
	require.NoError(t, err)
	assert.Equal(t, driverName, mine.ClaimedBy())

	// A record of another cluster whose Backup name the other driver's Backup already takes.
	cat := driverkit.Catalog{Client: cached, Driver: driverName, Name: "dr", StrategyRef: f.strategyRef()}
	rec := &backupsv1.ArtifactRecord{APIVersion: backupsv1.RecordAPIVersion, Kind: backupsv1.RecordKind, Format: backupsv1.RecordFormat,
		SourceCluster: backupsv1.SourceCluster{ID: "elsewhere", Name: "elsewhere"}, Namespace: f.ns, Name: other.Name, UID: "0000",
		Spec: other.Spec, Artifact: artifact}
	res, err := cat.Sync(ctx, backupsv1.SourceCluster{ID: "here", Name: "here"}, 1, func(yield func(driverkit.CatalogEntry) bool) {
		yield(driverkit.EntryOf(rec, "s3://x/record.json"))
	})
	require.NoError(t, err, "a name taken by a Backup the driver does not cache is no error to retry")
	assert.Contains(t, res.Skipped["s3://x/record.json"], "another strategy kind's")
	assert.Zero(t, res.Created)
	require.NoError(t, cl.Get(f.ctx, client.ObjectKeyFromObject(other), other))
	assert.Equal(t, "other.example.com", *other.Spec.StrategyRef.APIGroup, "the other driver's Backup is untouched")
}

// A driver's cache keeps an imported Backup's origin (its record and source UID) out of the cached
// object, in a table its trim fills: a catalog sync decides from it without a read. A Backup the
// table does not know (as after a restart, before the cache's trim has seen it again) is read from
// the API server once, and the sync decides alike: nothing skipped, made or removed.
func TestCatalogKnowsItsImportsFromTheCacheOrTheAPIServer(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	c, cached := f.trimmingCache(ctx)
	live := &counting{Reader: cl}
	cat := driverkit.Catalog{Client: cached, Cache: c, Live: live, Driver: driverName, Name: "dr-origins", StrategyRef: f.strategyRef()}
	spec := backupsv1.BackupSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"}, StrategyRef: f.strategyRef(),
		TakenAt: metav1.NewTime(f.clock.Now())}
	names := []string{"imported-1", "imported-2", "imported-3"}
	sync := func() driverkit.CatalogResult {
		t.Helper()
		live.n.Store(0)
		res, err := cat.Sync(ctx, backupsv1.SourceCluster{ID: "here", Name: "here"}, len(names), func(yield func(driverkit.CatalogEntry) bool) {
			for i, name := range names {
				rec := &backupsv1.ArtifactRecord{APIVersion: backupsv1.RecordAPIVersion, Kind: backupsv1.RecordKind, Format: backupsv1.RecordFormat,
					SourceCluster: backupsv1.SourceCluster{ID: "elsewhere", Name: "elsewhere"}, Namespace: f.ns, Name: name,
					UID: types.UID(fmt.Sprintf("source-%d", i)), Spec: spec, Artifact: artifact}
				if !yield(driverkit.EntryOf(rec, "s3://x/"+name+".json")) {
					return
				}
			}
		})
		require.NoError(t, err)
		assert.Empty(t, res.Skipped)
		return res
	}
	res := sync()
	require.Equal(t, 3, res.Created)
	require.Eventually(t, func() bool {
		list := &backupsv1.BackupList{}
		if cached.List(ctx, list, client.InNamespace(f.ns), client.MatchingLabels{backupsv1.LabelCatalog: "dr-origins"}) != nil || len(list.Items) != 3 {
			return false
		}
		for _, b := range list.Items {
			if b.Status.Phase != backupsv1.BackupReady {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond)
	list := &backupsv1.BackupList{}
	require.NoError(t, cached.List(ctx, list, client.InNamespace(f.ns), client.MatchingLabels{backupsv1.LabelCatalog: "dr-origins"}))
	for _, b := range list.Items {
		assert.NotContains(t, b.Annotations, backupsv1.AnnotationRecord, "the cached Backup holds no origin of its own")
	}

	res = sync()
	assert.Equal(t, driverkit.CatalogResult{Records: 3, Imported: 3, Skipped: map[string]string{}}, res)
	assert.Zero(t, live.n.Load(), "every origin known from the cache's trim: nothing read")

	driverkit.ForgetImportOrigins()
	res = sync()
	assert.Equal(t, driverkit.CatalogResult{Records: 3, Imported: 3, Skipped: map[string]string{}}, res, "an unknown origin is read, not taken for another")
	assert.Equal(t, int64(3), live.n.Load(), "each Backup whose origin was unknown is read once")
	res = sync()
	assert.Equal(t, driverkit.CatalogResult{Records: 3, Imported: 3, Skipped: map[string]string{}}, res)
	assert.Zero(t, live.n.Load(), "what was read is known from then on")
	for _, name := range names {
		b := &backupsv1.Backup{}
		require.NoError(t, cl.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, b))
		assert.Equal(t, "s3://x/"+name+".json", b.Annotations[backupsv1.AnnotationRecord], "the Backup itself keeps its origin")
	}
}

// The table of origins holds what the kit's cache holds: an imported Backup's origin is known once
// the cache has it, and forgotten once the cache drops it (a tenant creating and deleting Backups
// labelled as imported grows nothing).
func TestTheOriginOfAnImportedBackupGoesWithIt(t *testing.T) {
	f := newFixture(t)
	ctx := f.startKitCaching(driverkit.CacheBackupsOf(cache.Options{DefaultTransform: cachetrim.Transform(driverkit.CacheAnnotations, driverkit.BackupTrimmer())}, f.kit.Strategy))
	b := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "imported", Namespace: f.ns,
		Labels:      map[string]string{backupsv1.LabelImported: "true", backupsv1.LabelCatalog: "dr", backupsv1.LabelManagedBy: "someone"},
		Annotations: map[string]string{backupsv1.AnnotationRecord: "s3://x/imported.json", backupsv1.AnnotationSourceUID: "source", backupsv1.AnnotationSourceCluster: "elsewhere"}},
		Spec: backupsv1.BackupSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"}, StrategyRef: f.strategyRef(),
			TakenAt: metav1.NewTime(f.clock.Now())}}
	f.create(b)
	known := func() bool {
		_, _, ok := driverkit.ImportOrigin(&backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{UID: b.UID}})
		return ok
	}
	require.Eventually(t, known, 30*time.Second, 50*time.Millisecond, "the cache's trim keeps the origin")
	record, sourceUID, _ := driverkit.ImportOrigin(&backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{UID: b.UID}})
	assert.Equal(t, "s3://x/imported.json", record)
	assert.Equal(t, "source", sourceUID)

	require.NoError(t, cl.Delete(f.ctx, b))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(cl.Get(f.ctx, client.ObjectKeyFromObject(b), &backupsv1.Backup{}))
	}, 30*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool { return !known() }, 30*time.Second, 50*time.Millisecond, "the origin goes when the cache drops the Backup")
	require.NoError(t, ctx.Err())
}
