package driverkit_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/driverkit"
)

// TestEachCached: a cache of the whole cluster is walked in its informer's store, a cache of some
// namespaces (no single store) through a list; both hand every cached object once, and stop when
// told to.
func TestEachCached(t *testing.T) {
	f := newFixture(t)
	var want []string
	for i := range 3 {
		b := f.benchBackup(i)
		require.NoError(t, cl.Create(f.ctx, b))
		want = append(want, b.Name)
	}
	sort.Strings(want)
	for name, opts := range map[string]cache.Options{
		// The API server is shared with other tests: the whole cluster's cache is narrowed to
		// this namespace by a field selector, which keeps it one store.
		"cluster":    {Scheme: scheme, DefaultFieldSelector: fields.OneTermEqualSelector("metadata.namespace", f.ns)},
		"namespaces": {Scheme: scheme, DefaultNamespaces: map[string]cache.Config{f.ns: {}}},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(f.ctx)
			c, err := cache.New(restConfig, opts)
			require.NoError(t, err)
			stopped := make(chan struct{})
			defer func() { cancel(); <-stopped }()
			go func() { _ = c.Start(ctx); close(stopped) }()
			require.True(t, c.WaitForCacheSync(ctx))
			var seen []string
			require.Eventually(t, func() bool {
				seen = nil
				require.NoError(t, driverkit.EachCached(ctx, c, &backupsv1.Backup{}, &backupsv1.BackupList{}, func(o client.Object) bool {
					seen = append(seen, o.GetName())
					return true
				}))
				sort.Strings(seen)
				return len(seen) == len(want)
			}, 30*time.Second, 50*time.Millisecond)
			assert.Equal(t, want, seen)
			calls := 0
			require.NoError(t, driverkit.EachCached(ctx, c, &backupsv1.Backup{}, &backupsv1.BackupList{}, func(client.Object) bool {
				calls++
				return false
			}))
			assert.Equal(t, 1, calls, "the walk ends when fn says so")

			// EachBackup applies a label selector and a namespace alike, walked (cache) or listed.
			for _, walked := range []cache.Cache{c, nil} {
				var picked []string
				require.NoError(t, driverkit.EachBackup(ctx, walked, c, func(b *backupsv1.Backup) { picked = append(picked, b.Name) },
					client.MatchingLabels{backupsv1.LabelPlan: backupsv1.PlanLabelValue("p-00001")}, client.InNamespace(f.ns)))
				assert.Equal(t, []string{want[1]}, picked)
				if name == "cluster" { // a cache of some namespaces refuses a list of another
					picked = nil
					require.NoError(t, driverkit.EachBackup(ctx, walked, c, func(b *backupsv1.Backup) { picked = append(picked, b.Name) },
						client.InNamespace("elsewhere")))
					assert.Empty(t, picked)
				}
			}
			// A field selector cannot be walked: refused, not ignored.
			err = driverkit.EachBackup(ctx, c, c, func(*backupsv1.Backup) { t.Error("a walk with a field selector called fn") },
				client.MatchingFields{"metadata.name": want[0]})
			assert.ErrorContains(t, err, "namespace and labels only")
		})
	}
}
