package driverkit_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
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
