package driverkit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/driverkit"
)

// A run created before its class (both applied at once, the class reaching the driver's cache
// second) is claimed once the class arrives: the class's event wakes it. Without that, nothing
// looks at the run again and core fails it unclaimed after its claim timeout.
func TestAClassCreatedAfterItsRunWakesTheRun(t *testing.T) {
	f := newFixture(t)
	f.driver.backup = inProgress("copying")
	late := f.ns + "-late"
	job := f.backupJob(late)

	ctx := f.startKit()

	// The kit has seen the run with its class missing (not this driver's yet) and left it.
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return reconciles(t, driverName+"-backupjob") > 0, nil
	}), "the kit never reconciled the run")
	f.get(job)
	require.Empty(t, job.ClaimedBy(), "no class yet: nobody claims the run")

	class := &backupsv1.BackupClass{}
	require.NoError(t, cl.Get(f.ctx, client.ObjectKey{Name: f.class}, class))
	class.ObjectMeta = metav1.ObjectMeta{Name: late}
	f.create(class)
	t.Cleanup(func() { _ = cl.Delete(context.Background(), class) })

	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		f.get(job)
		return job.ClaimedBy() == driverName, nil
	})
	require.NoError(t, err, "the run was not claimed after its class appeared (phase %q)", job.Status.Phase)
	require.Equal(t, backupsv1.BackupJobRunning, job.Status.Phase)
}

// reconciles is controller-runtime's count of finished reconciles of the named controller.
func reconciles(t *testing.T, controller string) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	require.NoError(t, err)
	var n float64
	for _, mf := range families {
		if mf.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == controller {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// A Backup deleted under a running restore wakes the restore at once (contract RJ-8): the
// Backup's event finds its unfinished RestoreJobs through the kit's index, among many finished
// ones of the same namespace, and the restore fails BackupNotFound long before its own requeue.
func TestABackupDeletedWakesItsRunningRestore(t *testing.T) {
	f := newFixture(t)
	f.driver.restore = func(context.Context, *driverkit.RestoreRun[S]) (driverkit.RestoreOutcome, error) {
		return driverkit.RestoreOutcome{Waiting: "restoring", RequeueAfter: time.Hour}, nil
	}
	b := f.readyBackup()
	for range 20 {
		done := f.restoreJob(b.Name)
		done.Status.Phase = backupsv1.RestoreJobSucceeded
		require.NoError(t, cl.Status().Update(f.ctx, done))
	}
	rj := f.restoreJob(b.Name)

	ctx := f.startKit()

	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		f.get(rj)
		return rj.ClaimedBy() == driverName && rj.Status.Phase == backupsv1.RestoreJobRunning, nil
	}), "the restore was not claimed")
	require.NoError(t, cl.Delete(f.ctx, b))
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		f.get(rj)
		return rj.IsTerminal(), nil
	})
	require.NoError(t, err, "the restore was not woken by its Backup's deletion (phase %q)", rj.Status.Phase)
	require.Equal(t, backupsv1.RestoreJobFailed, rj.Status.Phase)
	c := meta.FindStatusCondition(rj.Status.Conditions, backupsv1.ConditionReady)
	require.NotNil(t, c)
	require.Equal(t, backupsv1.ReasonBackupNotFound, c.Reason)
}

// startKit runs a kit of the fixture's driver in a manager on the API server until the test ends,
// and returns the manager's context once its caches have synced.
func (f *fixture) startKit(tune ...func(*driverkit.Kit[S])) context.Context {
	f.t.Helper()
	return f.startKitCaching(cache.Options{}, tune...)
}

// startKitCaching is startKit with a manager whose cache has the options c.
func (f *fixture) startKitCaching(c cache.Options, tune ...func(*driverkit.Kit[S])) context.Context {
	t := f.t
	t.Helper()
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{Scheme: scheme, Cache: c,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	require.NoError(t, err)
	kit := &driverkit.Kit[S]{Name: driverName, Strategy: f.kit.Strategy, NewStrategy: newStrategyObject,
		Finalizer: finalizer, Driver: f.driver, Clock: f.clock, Recorder: f.events}
	for _, fn := range tune {
		fn(kit)
	}
	require.NoError(t, kit.SetupWithManager(mgr))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	require.True(t, mgr.GetCache().WaitForCacheSync(ctx))
	return ctx
}

// A Backup the driver calls unremarkable (Kit.Unremarkable) is not queued when the cache hands it
// over at start, and is looked at once it changes; the others are looked at from the start.
func TestUnremarkableBackupsAreNotQueuedAtStart(t *testing.T) {
	f := newFixture(t)
	quiet, other := f.readyBackup(), f.readyBackup()
	var mu sync.Mutex
	checked := map[string]int{}
	driver := &checking{script: f.driver, check: func(b *backupsv1.Backup) *metav1.Condition {
		mu.Lock()
		defer mu.Unlock()
		checked[b.Name]++
		return nil
	}}
	count := func(name string) int {
		mu.Lock()
		defer mu.Unlock()
		return checked[name]
	}
	ctx := f.startKit(func(k *driverkit.Kit[S]) {
		k.Driver = driver
		k.Unremarkable = func(b *backupsv1.Backup) bool { return b.Name == quiet.Name }
	})
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return count(other.Name) > 0, nil
	}), "the other Backup was not looked at")
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return reconciles(t, driverName+"-backup") >= 1, nil
	}))
	require.Zero(t, count(quiet.Name), "the unremarkable Backup was looked at on its way into the cache")

	f.get(quiet)
	quiet.Annotations = map[string]string{"touched": "yes"}
	require.NoError(t, cl.Update(f.ctx, quiet))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return count(quiet.Name) > 0, nil
	}), "a change of the unremarkable Backup was not looked at")
}
