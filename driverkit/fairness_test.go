package driverkit_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/driverkit"
)

// A tenant that floods its namespace with RestoreJobs does not make another tenant's restore wait
// for the flood: the kit's queue (fairqueue) serves the namespaces in turn. Both tenants' runs
// exist before the driver starts, as after a restart, and the flooding namespace is the one the
// API server lists first, so a first-come queue would hand the driver every run of the flood
// before the other tenant's.
func TestAFloodOfRestoreJobsDoesNotStarveAnotherTenant(t *testing.T) {
	const flood = 300
	a, b := newFixture(t), newFixture(t)
	if b.ns < a.ns {
		a, b = b, a
	}
	// The runs the driver is handed, in order, first calls only: read when the kit calls, as the
	// kit goes on writing the RestoreJob it handed over once the call returns.
	var (
		mu    sync.Mutex
		order []string
	)
	a.driver.restore = func(_ context.Context, run *driverkit.RestoreRun[S]) (driverkit.RestoreOutcome, error) {
		mu.Lock()
		defer mu.Unlock()
		if key := run.RestoreJob.Namespace + "/" + run.RestoreJob.Name; !slices.Contains(order, key) {
			order = append(order, key)
		}
		return driverkit.RestoreOutcome{Done: true}, nil
	}
	ab := a.readyBackup()
	for range flood {
		a.restoreJob(ab.Name)
	}
	quiet := b.restoreJob(b.readyBackup().Name)

	ctx := a.startKit(func(k *driverkit.Kit[S]) { k.Recorder = events.NewFakeRecorder(8 * flood) })

	require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		b.get(quiet)
		return quiet.IsTerminal(), nil
	}), "the other tenant's restore did not end (phase %q)", quiet.Status.Phase)
	require.Equal(t, backupsv1.RestoreJobSucceeded, quiet.Status.Phase)

	mu.Lock()
	// Of the two tenants' runs (the API server holds other tests' too).
	order = slices.DeleteFunc(order, func(key string) bool {
		return !strings.HasPrefix(key, a.ns+"/") && !strings.HasPrefix(key, b.ns+"/")
	})
	at := slices.Index(order, b.ns+"/"+quiet.Name)
	mu.Unlock()
	require.GreaterOrEqual(t, at, 0)
	t.Logf("the other tenant's restore was handed to the driver after %d of the flood's %d runs", at, flood)
	// Before it, at most what the workers held and one turn each: not the flood.
	require.LessOrEqual(t, at, 2*driverkit.DefaultWorkers, "the other tenant's restore was handed to the driver after %d of the flood's %d", at, flood)
}
