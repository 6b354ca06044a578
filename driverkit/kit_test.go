package driverkit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/driverkit"
)

// The claim is written, with the strategy it resolved, before the driver is first called; the
// status and its conditions carry the generation they are about.
func TestClaimRecordsTheStrategyBeforeTheDriverRuns(t *testing.T) {
	f := newFixture(t)
	job := f.backupJob(f.class)
	f.driver.backup = func(ctx context.Context, run *driverkit.BackupRun[S]) (driverkit.BackupOutcome, error) {
		live := &backupsv1.BackupJob{}
		require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(job), live))
		assert.Equal(t, driverName, live.ClaimedBy(), "BJ-9: claimed before the driver runs")
		assert.NotNil(t, live.Status.Strategy, "BJ-10: the claim records the strategy")
		return driverkit.BackupOutcome{Waiting: "copying"}, nil
	}

	res, err := f.reconcileJob(job)
	require.NoError(t, err)
	assert.Equal(t, reconcile.Result{RequeueAfter: 10 * time.Minute}, res, "an in-progress run is looked at again at its deadline at the latest")
	assert.Equal(t, backupsv1.BackupJobRunning, job.Status.Phase)
	assert.Equal(t, driverName, job.ClaimedBy())
	require.NotNil(t, job.Status.StartedAt)
	assert.True(t, job.Status.StartedAt.Time.Equal(f.clock.Now()), "startedAt is the kit's clock")
	assert.Equal(t, &backupsv1.RunStrategy{BackupClassName: f.class, StrategyRef: f.strategyRef(), Parameters: f.params}, job.Status.Strategy)
	assert.Equal(t, job.Generation, job.Status.ObservedGeneration, "status.observedGeneration")
	for _, c := range job.Status.Conditions {
		assert.Equal(t, job.Generation, c.ObservedGeneration, "observedGeneration of condition %s", c.Type)
	}

	require.Len(t, f.driver.backups, 1)
	run := f.driver.backups[0]
	assert.Equal(t, f.strategy, run.Strategy.GetName(), "the driver gets the strategy object")
	assert.Equal(t, f.params, run.Resolved.Parameters)
	assert.Nil(t, run.Backup)
	assert.True(t, run.Deadline.Equal(f.clock.Now().Add(10*time.Minute)), "deadline %s", run.Deadline)
	assert.Contains(t, f.emitted(), "Normal Started Backing up with Strategy "+f.strategy)
	err = cl.Get(f.ctx, client.ObjectKeyFromObject(job), &backupsv1.Backup{})
	assert.True(t, apierrors.IsNotFound(err), "no Backup while the run is in progress: %v", err)
}

// A finished run creates its Backup, records it, and is never written again.
func TestASucceededRunRecordsItsBackup(t *testing.T) {
	f := newFixture(t)
	reg := prometheus.NewRegistry()
	f.kit.Metrics = driverkit.NewMetrics("kit_test", driverName, reg)
	f.driver.backup = stored
	job := f.backupJob(f.class)
	_, err := f.reconcileJob(job)
	require.NoError(t, err)
	require.Equal(t, backupsv1.BackupJobSucceeded, job.Status.Phase, job.Status.Message)
	assert.Equal(t, &corev1.LocalObjectReference{Name: job.Name}, job.Status.BackupRef)
	assert.NotNil(t, job.Status.CompletedAt)

	b := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: job.Name}}
	f.get(b)
	assert.Equal(t, string(job.UID), b.Labels[backupsv1.LabelBackupJobUID])
	assert.Equal(t, driverName, b.Labels[backupsv1.LabelManagedBy])
	assert.Equal(t, []string{finalizer}, b.Finalizers, "Finalize puts the driver's finalizer on the Backup")
	assert.Empty(t, b.OwnerReferences, "BK-2")
	assert.Equal(t, ptr.To(backupsv1.DefaultApplicationAPIGroup), b.Spec.ApplicationRef.APIGroup, "BK-1: applicationRef normalized")
	assert.Equal(t, f.strategyRef(), b.Spec.StrategyRef)
	assert.True(t, b.Spec.TakenAt.Time.Equal(f.clock.Now()))
	assert.Equal(t, map[string]string{"object": "x"}, b.Spec.DriverMetadata)
	assert.Equal(t, backupsv1.BackupReady, b.Status.Phase)
	assert.Equal(t, &artifact, b.Status.Artifact)
	available := meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionArtifactAvailable)
	require.NotNil(t, available)
	assert.Equal(t, metav1.ConditionTrue, available.Status)
	assert.Equal(t, b.Generation, available.ObservedGeneration, "observedGeneration stamped on the Backup's conditions")

	assert.Equal(t, 1.0, testutil.ToFloat64(f.kit.Metrics.Runs.WithLabelValues("backup", "Succeeded")))
	assert.Equal(t, 42.0, testutil.ToFloat64(f.kit.Metrics.ArtifactBytes))

	rv := job.ResourceVersion
	_, err = f.reconcileJob(job)
	require.NoError(t, err)
	assert.Equal(t, rv, job.ResourceVersion, "BJ-6: a terminal run is never written again")
	assert.Len(t, f.driver.backups, 1, "nor handed to the driver again")
}

// A run claimed with a strategy finishes with it, whatever happened to its class since.
func TestAClaimedRunFinishesWithItsRecordedStrategy(t *testing.T) {
	edit := func(f *fixture, change func(*backupsv1.BackupClassStrategy)) {
		c := &backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: f.class}}
		f.get(c)
		change(&c.Spec.Strategies[0])
		require.NoError(t, cl.Update(f.ctx, c))
	}
	for name, change := range map[string]func(*fixture){
		"class deleted": func(f *fixture) {
			require.NoError(t, cl.Delete(f.ctx, &backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: f.class}}))
		},
		"class now names another driver's strategy": func(f *fixture) {
			edit(f, func(s *backupsv1.BackupClassStrategy) {
				s.StrategyRef = corev1.TypedLocalObjectReference{APIGroup: ptr.To("other.example.com"), Kind: "Other", Name: "other"}
			})
		},
		"class now names another strategy with other parameters": func(f *fixture) {
			other := f.newStrategy()
			edit(f, func(s *backupsv1.BackupClassStrategy) {
				s.StrategyRef.Name, s.Parameters = other, map[string]string{"location": "secondary"}
			})
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.driver.backup = inProgress("copying")
			job := f.backupJob(f.class)
			_, err := f.reconcileJob(job)
			require.NoError(t, err)
			recorded := job.Status.Strategy.DeepCopy()
			require.NotNil(t, recorded)

			change(f)
			f.driver.backup = stored
			_, err = f.reconcileJob(job)
			require.NoError(t, err)
			require.Equal(t, backupsv1.BackupJobSucceeded, job.Status.Phase, "BJ-10: %s", job.Status.Message)
			assert.Equal(t, recorded, job.Status.Strategy, "status.strategy is never rewritten")
			last := f.driver.backups[len(f.driver.backups)-1]
			assert.Equal(t, f.strategy, last.Strategy.GetName(), "the driver gets the recorded strategy")
			assert.Equal(t, f.params, last.Resolved.Parameters, "and the recorded parameters")
			b := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: job.Name}}
			f.get(b)
			assert.Equal(t, f.strategyRef(), b.Spec.StrategyRef, "the Backup names the recorded strategy")
		})
	}
}

// Runs that are not this driver's are never written, nor handed to the driver.
func TestRunsOfOthersAreUntouched(t *testing.T) {
	claimedElsewhere := func(f *fixture, obj client.Object) {
		switch o := obj.(type) {
		case *backupsv1.BackupJob:
			o.MarkRunning(metav1.NewTime(f.clock.Now()), "other-driver")
		case *backupsv1.RestoreJob:
			o.MarkRunning(metav1.NewTime(f.clock.Now()), "other-driver")
		}
		require.NoError(t, cl.Status().Update(f.ctx, obj))
	}
	for name, run := range map[string]func(f *fixture) (client.Object, reconcile.Reconciler){
		"a BackupJob another driver claimed, whose class now resolves to this driver": func(f *fixture) (client.Object, reconcile.Reconciler) {
			job := f.backupJob(f.class)
			claimedElsewhere(f, job)
			return job, f.kit.BackupJobReconciler()
		},
		"a BackupJob whose class resolves to another driver": func(f *fixture) (client.Object, reconcile.Reconciler) {
			return f.backupJob(f.newClass("other.example.com", "Other", "other", nil)), f.kit.BackupJobReconciler()
		},
		"a BackupJob whose class does not exist": func(f *fixture) (client.Object, reconcile.Reconciler) {
			return f.backupJob("no-such-class"), f.kit.BackupJobReconciler()
		},
		"a RestoreJob another driver claimed": func(f *fixture) (client.Object, reconcile.Reconciler) {
			rj := f.restoreJob(f.readyBackup().Name)
			claimedElsewhere(f, rj)
			return rj, f.kit.RestoreJobReconciler()
		},
		"a RestoreJob whose Backup does not exist": func(f *fixture) (client.Object, reconcile.Reconciler) {
			return f.restoreJob("no-such-backup"), f.kit.RestoreJobReconciler()
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.driver.backup, f.driver.restore = stored, func(context.Context, *driverkit.RestoreRun[S]) (driverkit.RestoreOutcome, error) {
				return driverkit.RestoreOutcome{Done: true}, nil
			}
			obj, r := run(f)
			rv := obj.GetResourceVersion()
			res, err := r.Reconcile(f.ctx, request(obj))
			require.NoError(t, err)
			assert.Equal(t, reconcile.Result{}, res)
			f.get(obj)
			assert.Equal(t, rv, obj.GetResourceVersion(), "GEN-2, BJ-9, RJ-7: the run was written")
			assert.Empty(t, f.driver.backups, "the driver was asked to back up")
			assert.Empty(t, f.driver.restores, "the driver was asked to restore")
			err = cl.Get(f.ctx, client.ObjectKeyFromObject(obj), &backupsv1.Backup{})
			assert.True(t, apierrors.IsNotFound(err), "a Backup was made: %v", err)
		})
	}
}

// A restore whose Backup is deleted, or being deleted, while it runs fails with BackupNotFound,
// without the driver being asked to go on.
func TestABackupDeletedMidRestoreFailsTheRestore(t *testing.T) {
	for _, gone := range []bool{false, true} {
		name := map[bool]string{false: "being deleted", true: "gone"}[gone]
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.driver.restore = func(context.Context, *driverkit.RestoreRun[S]) (driverkit.RestoreOutcome, error) {
				return driverkit.RestoreOutcome{Waiting: "restoring"}, nil
			}
			b := f.readyBackup(finalizer)
			rj := f.restoreJob(b.Name)
			_, err := f.reconcileRestore(rj)
			require.NoError(t, err)
			require.Equal(t, backupsv1.RestoreJobRunning, rj.Status.Phase)
			require.Equal(t, driverName, rj.ClaimedBy())

			require.NoError(t, cl.Delete(f.ctx, b))
			if gone {
				f.get(b)
				b.Finalizers = nil
				require.NoError(t, cl.Update(f.ctx, b))
			}
			_, err = f.reconcileRestore(rj)
			require.NoError(t, err)
			require.Equal(t, backupsv1.RestoreJobFailed, rj.Status.Phase)
			ready := meta.FindStatusCondition(rj.Status.Conditions, backupsv1.ConditionReady)
			require.NotNil(t, ready)
			assert.Equal(t, metav1.ConditionFalse, ready.Status)
			assert.Equal(t, backupsv1.ReasonBackupNotFound, ready.Reason, "RJ-8")
			assert.Equal(t, rj.Generation, ready.ObservedGeneration)
			assert.Contains(t, rj.Status.Message, b.Name)
			assert.Contains(t, rj.Status.Message, "create a RestoreJob of another Backup", "the message says what to do (GEN-4)")
			assert.NotNil(t, rj.Status.CompletedAt)
			assert.Len(t, f.driver.restores, 1, "the driver is not asked to go on")
		})
	}
}

// A driver error that is not a Failure is retried until the run's deadline, then fails the run
// with a reason naming the cause.
func TestInfrastructureErrorsAreRetriedUntilTheDeadline(t *testing.T) {
	// nobody is a client the API server authenticates but authorizes for nothing.
	nobodyConfig := rest.CopyConfig(restConfig)
	nobodyConfig.Impersonate = rest.ImpersonationConfig{UserName: "nobody"}
	nobody, err := client.New(nobodyConfig, client.Options{Scheme: scheme})
	require.NoError(t, err)

	for _, tc := range []struct {
		name, reason, message string
		err                   func(ctx context.Context, ns string) error
	}{
		{"Transient", driverkit.ReasonObjectStoreUnavailable, "bucket unreachable", func(context.Context, string) error {
			return driverkit.Transientf(driverkit.ReasonObjectStoreUnavailable, "bucket unreachable")
		}},
		{"Forbidden by the API server", driverkit.ReasonForbidden, `cannot get resource "configmaps"`, func(ctx context.Context, ns string) error {
			return nobody.Get(ctx, client.ObjectKey{Namespace: ns, Name: "x"}, &corev1.ConfigMap{})
		}},
		{"any other error", backupsv1.ReasonDeadlineExceeded, "connection reset", func(context.Context, string) error {
			return errors.New("connection reset")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.driver.backup = func(ctx context.Context, run *driverkit.BackupRun[S]) (driverkit.BackupOutcome, error) {
				return driverkit.BackupOutcome{}, tc.err(ctx, run.Job.Namespace)
			}
			job := f.backupJob(f.class)
			for _, step := range []time.Duration{0, 9 * time.Minute} {
				f.clock.Step(step)
				_, err := f.reconcileJob(job)
				require.Error(t, err, "before the deadline the error is returned, to be retried")
				assert.Contains(t, err.Error(), tc.message)
				assert.Equal(t, backupsv1.BackupJobRunning, job.Status.Phase)
			}
			f.clock.Step(time.Minute)
			res, err := f.reconcileJob(job)
			require.NoError(t, err)
			assert.Equal(t, reconcile.Result{}, res)
			require.Equal(t, backupsv1.BackupJobFailed, job.Status.Phase)
			ready := meta.FindStatusCondition(job.Status.Conditions, backupsv1.ConditionReady)
			require.NotNil(t, ready)
			assert.Equal(t, tc.reason, ready.Reason)
			assert.Contains(t, job.Status.Message, "still failing at the run's deadline")
			assert.Contains(t, job.Status.Message, tc.message)
			assert.Contains(t, f.emitted(), "Warning "+tc.reason+" "+job.Status.Message)
		})
	}
}

// An in-progress run is looked at again no later than its deadline, and fails there, quoting what
// it waited for.
func TestAnInProgressRunFailsAtItsDeadline(t *testing.T) {
	f := newFixture(t)
	f.driver.backup = func(context.Context, *driverkit.BackupRun[S]) (driverkit.BackupOutcome, error) {
		return driverkit.BackupOutcome{Waiting: "velero backup x is InProgress", RequeueAfter: time.Minute}, nil
	}
	job := f.backupJob(f.class)
	for _, step := range []struct{ after, requeue time.Duration }{
		{0, time.Minute}, // the driver's RequeueAfter
		{9*time.Minute + 30*time.Second, 30 * time.Second}, // capped at the time left
	} {
		f.clock.Step(step.after)
		res, err := f.reconcileJob(job)
		require.NoError(t, err)
		assert.Equal(t, reconcile.Result{RequeueAfter: step.requeue}, res)
		assert.Equal(t, backupsv1.BackupJobRunning, job.Status.Phase)
	}
	f.clock.Step(30 * time.Second)
	_, err := f.reconcileJob(job)
	require.NoError(t, err)
	require.Equal(t, backupsv1.BackupJobFailed, job.Status.Phase)
	ready := meta.FindStatusCondition(job.Status.Conditions, backupsv1.ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, backupsv1.ReasonDeadlineExceeded, ready.Reason, "BJ-7")
	assert.Contains(t, job.Status.Message, "velero backup x is InProgress")
	assert.Equal(t, job.Generation, ready.ObservedGeneration)
}

// A Backup of the run's name that the run did not make is never adopted.
func TestABackupNameTakenByAnotherObjectFailsTheRun(t *testing.T) {
	f := newFixture(t)
	f.driver.backup = stored
	job := f.backupJob(f.class)
	other := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: job.Name, Namespace: f.ns},
		Spec: backupsv1.BackupSpec{ApplicationRef: job.Spec.ApplicationRef, StrategyRef: f.strategyRef(), TakenAt: metav1.Now()}}
	f.create(other)

	_, err := f.reconcileJob(job)
	require.NoError(t, err)
	require.Equal(t, backupsv1.BackupJobFailed, job.Status.Phase)
	assert.Equal(t, backupsv1.ReasonNameConflict, meta.FindStatusCondition(job.Status.Conditions, backupsv1.ConditionReady).Reason, "GEN-6")
	assert.Contains(t, job.Status.Message, other.Name)
	assert.Nil(t, job.Status.BackupRef)
	rv := other.ResourceVersion
	f.get(other)
	assert.Equal(t, rv, other.ResourceVersion, "the other Backup was written")
	assert.Empty(t, f.driver.backups, "the driver ran for a run that cannot record its Backup")
}

// Deleting a Backup deletes its artifact behind the driver's finalizer.
func TestArtifactDeletion(t *testing.T) {
	deleteBackup := func(f *fixture) *backupsv1.Backup {
		b := f.readyBackup(finalizer)
		require.NoError(t, cl.Delete(f.ctx, b))
		return b
	}
	gone := func(f *fixture, b *backupsv1.Backup) bool {
		err := cl.Get(f.ctx, client.ObjectKeyFromObject(b), &backupsv1.Backup{})
		require.NoError(t, client.IgnoreNotFound(err))
		return apierrors.IsNotFound(err)
	}

	t.Run("Done releases the finalizer", func(t *testing.T) {
		f := newFixture(t)
		f.driver.delete = func(context.Context, *backupsv1.Backup) (driverkit.DeleteOutcome, error) {
			return driverkit.DeleteOutcome{Done: true, Message: "removed test://bucket/x"}, nil
		}
		b := deleteBackup(f)
		res, err := f.reconcileBackup(b)
		require.NoError(t, err)
		assert.Equal(t, reconcile.Result{}, res)
		assert.True(t, gone(f, b), "BK-5: the Backup is released")
		assert.Contains(t, f.emitted(), "Normal ArtifactDeleted removed test://bucket/x")
	})

	t.Run("a Failure keeps the Backup and retries with backoff", func(t *testing.T) {
		f := newFixture(t)
		failing := true
		f.driver.delete = func(context.Context, *backupsv1.Backup) (driverkit.DeleteOutcome, error) {
			if failing {
				return driverkit.DeleteOutcome{}, driverkit.Failf("BucketGone", "bucket x does not exist")
			}
			return driverkit.DeleteOutcome{Done: true}, nil
		}
		b := deleteBackup(f)
		res, err := f.reconcileBackup(b)
		require.NoError(t, err)
		assert.Equal(t, reconcile.Result{RequeueAfter: driverkit.DeletionRetryDelay}, res)
		f.get(b)
		assert.Equal(t, []string{finalizer}, b.Finalizers, "BK-7: the Backup is kept")
		c := meta.FindStatusCondition(b.Status.Conditions, driverkit.ConditionArtifactDeletion)
		require.NotNil(t, c, "BK-7: ArtifactDeletion condition")
		assert.Equal(t, metav1.ConditionFalse, c.Status)
		assert.Equal(t, driverkit.ReasonDeletionFailing, c.Reason)
		assert.Contains(t, c.Message, "bucket x does not exist")
		assert.Contains(t, c.Message, finalizer, "the message says how to release the Backup by hand")
		assert.Equal(t, b.Generation, c.ObservedGeneration)

		f.clock.Step(driverkit.DeletionRetryBackoffAfter + time.Minute)
		res, err = f.reconcileBackup(b)
		require.NoError(t, err)
		assert.Equal(t, reconcile.Result{RequeueAfter: driverkit.DeletionRetryMaxDelay}, res, "after failing for long, it backs off")

		failing = false
		_, err = f.reconcileBackup(b)
		require.NoError(t, err)
		assert.True(t, gone(f, b))
	})

	t.Run("a namespace being deleted releases the Backup and keeps the artifact", func(t *testing.T) {
		f := newFixture(t)
		f.events.Verbose = true // the events name the object they regard
		var seen error
		// The deletion needs an object in the Backup's namespace (as a cleanup Job would), which a
		// namespace being deleted refuses.
		f.driver.delete = func(ctx context.Context, b *backupsv1.Backup) (driverkit.DeleteOutcome, error) {
			seen = cl.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "cleanup-", Namespace: b.Namespace}})
			if seen != nil {
				return driverkit.DeleteOutcome{}, seen
			}
			return driverkit.DeleteOutcome{Done: true}, nil
		}
		b := f.readyBackup(finalizer)
		// envtest runs no namespace controller: the namespace stays Terminating, with the Backup.
		require.NoError(t, cl.Delete(f.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}))
		require.Eventually(t, func() bool { // the admission plugin learns of it from its informer
			err := cl.Create(f.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: f.ns}})
			return apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause)
		}, 10*time.Second, 50*time.Millisecond)
		require.NoError(t, cl.Delete(f.ctx, b))

		res, err := f.reconcileBackup(b)
		require.NoError(t, err)
		assert.Equal(t, reconcile.Result{}, res)
		require.True(t, apierrors.HasStatusCause(seen, corev1.NamespaceTerminatingCause), "the API server refused with NamespaceTerminating: %v", seen)
		assert.True(t, gone(f, b), "BK-7: the Backup does not hold the namespace")
		var kept []string
		for _, e := range f.emitted() {
			if strings.HasPrefix(e, "Warning ArtifactKept ") {
				kept = append(kept, e)
			}
		}
		require.Len(t, kept, 1, "an ArtifactKept warning")
		assert.Contains(t, kept[0], artifact.URI, "it names the artifact left in storage")
		assert.Contains(t, kept[0], "Backup "+b.Name, "and the Backup")
		// An event regarding the Backup would be refused in its terminating namespace (and deleted
		// with it): this one regards the Namespace, cluster-scoped, and outlives it.
		assert.Contains(t, kept[0], "{kind=Namespace,apiVersion=v1}", "the warning regards the Namespace")
	})
}

// A crash after the Backup is created and before the run records it yields, on the next
// reconcile, exactly one Backup and a Succeeded run.
func TestACrashBeforeTheStatusWriteYieldsExactlyOneBackup(t *testing.T) {
	for _, tc := range []struct {
		name    string
		crashOn func(client.Object) bool
	}{
		{"before the Backup's status is written", func(o client.Object) bool { _, ok := o.(*backupsv1.Backup); return ok }},
		{"before the BackupJob's terminal status is written", func(o client.Object) bool {
			j, ok := o.(*backupsv1.BackupJob)
			return ok && j.IsTerminal()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			crashed := false
			f.kit.Client = interceptor.NewClient(cl, interceptor.Funcs{
				SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
					if !crashed && tc.crashOn(obj) {
						crashed = true
						return errors.New("killed")
					}
					return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
				}})
			f.driver.backup = stored
			job := f.backupJob(f.class)
			_, err := f.reconcileJob(job)
			require.Error(t, err)
			require.True(t, crashed)
			require.Equal(t, backupsv1.BackupJobRunning, job.Status.Phase, "the crash left the run unrecorded")

			_, err = f.reconcileJob(job)
			require.NoError(t, err)
			require.Equal(t, backupsv1.BackupJobSucceeded, job.Status.Phase, job.Status.Message)
			list := &backupsv1.BackupList{}
			require.NoError(t, cl.List(f.ctx, list, client.InNamespace(f.ns)))
			require.Len(t, list.Items, 1, "BJ-8: exactly one Backup")
			b := list.Items[0]
			assert.Equal(t, job.Name, b.Name)
			assert.Equal(t, string(job.UID), b.Labels[backupsv1.LabelBackupJobUID])
			assert.Equal(t, backupsv1.BackupReady, b.Status.Phase)
			assert.Equal(t, &artifact, b.Status.Artifact)
			require.Len(t, f.driver.backups, 2)
			assert.NotNil(t, f.driver.backups[1].Backup, "the second reconcile hands the driver the Backup the first created")
		})
	}
}

// A claimed run whose strategy cannot be read (here a Forbidden read, injected) still ends, at
// UnreadableStrategyDeadline, with the reason Forbidden; before, its deadline was unknown and it
// was retried for ever.
func TestARunWhoseStrategyCannotBeReadStillEnds(t *testing.T) {
	f := newFixture(t)
	f.driver.backup = func(context.Context, *driverkit.BackupRun[S]) (driverkit.BackupOutcome, error) {
		return driverkit.BackupOutcome{Waiting: "the store"}, nil
	}
	job := f.backupJob(f.class)
	_, err := f.reconcileJob(job) // claimed with the strategy readable
	require.NoError(t, err)
	require.Equal(t, backupsv1.BackupJobRunning, job.Status.Phase)
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: group, Resource: "strategies"}, f.strategy, errors.New("RBAC: no rule"))
	f.kit.Client = interceptor.NewClient(cl, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if obj.GetObjectKind().GroupVersionKind().Kind == kind {
				return forbidden
			}
			return c.Get(ctx, key, obj, opts...)
		}})
	f.clock.Step(driverkit.UnreadableStrategyDeadline - time.Second)
	_, err = f.reconcileJob(job)
	require.Error(t, err, "retried before the bound")
	require.Equal(t, backupsv1.BackupJobRunning, job.Status.Phase)
	f.clock.Step(time.Second)
	_, err = f.reconcileJob(job)
	require.NoError(t, err)
	require.Equal(t, backupsv1.BackupJobFailed, job.Status.Phase)
	assert.Equal(t, driverkit.ReasonForbidden, meta.FindStatusCondition(job.Status.Conditions, backupsv1.ConditionReady).Reason)
	assert.Contains(t, job.Status.Message, "RBAC: no rule")
}

// The record template (contract BK-11) a driver takes while its backup runs is the record of the
// Backup the run then makes, but for the artifact (the backup process's to add) and the UID the
// API server gives the Backup; the source cluster is the UID of kube-system and the kit's name.
func TestTheRecordTemplateIsTheRecordOfTheBackupToBe(t *testing.T) {
	f := newFixture(t)
	f.kit.ClusterName = "cluster-a"
	var template *backupsv1.ArtifactRecord
	f.driver.backup = func(ctx context.Context, run *driverkit.BackupRun[S]) (driverkit.BackupOutcome, error) {
		var err error
		if template, err = f.kit.RecordTemplate(ctx, run, map[string]string{"object": "x"}); err != nil {
			return driverkit.BackupOutcome{}, err
		}
		return stored(ctx, run)
	}
	job := f.backupJob(f.class)
	job.Labels = map[string]string{backupsv1.LabelPlan: "nightly"}
	require.NoError(t, cl.Update(f.ctx, job))
	_, err := f.reconcileJob(job)
	require.NoError(t, err)
	require.Equal(t, backupsv1.BackupJobSucceeded, job.Status.Phase, job.Status.Message)

	b := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: job.Name}}
	f.get(b)
	ks := &corev1.Namespace{}
	require.NoError(t, cl.Get(f.ctx, client.ObjectKey{Name: driverkit.ClusterIDNamespace}, ks))
	want, err := backupsv1.NewArtifactRecord(b, backupsv1.SourceCluster{ID: string(ks.UID), Name: "cluster-a"})
	require.NoError(t, err)
	want.UID, want.Artifact = "", backupsv1.BackupArtifact{}
	assert.Equal(t, want, template)
	assert.Equal(t, "nightly", template.Labels[backupsv1.LabelPlan])
}

// spec.options.restoreRBAC (contract RJ-14): a value other than "true" or "false" fails the run
// InvalidOption, and "true" runs only once the admission policy coffer-restore-rbac is bound, so
// that the API server checked the creator's right to bind and escalate roles; the driver is not
// asked to restore otherwise.
func TestRestoreRBACRunsOnlyAdmitted(t *testing.T) {
	f := newFixture(t)
	f.driver.restore = func(context.Context, *driverkit.RestoreRun[S]) (driverkit.RestoreOutcome, error) {
		return driverkit.RestoreOutcome{Done: true, Message: "restored"}, nil
	}
	b := f.readyBackup()
	withRBAC := func(value string) *backupsv1.RestoreJob {
		rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{GenerateName: "restore-", Namespace: f.ns},
			Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: b.Name},
				Options: backupsv1.StringOptions(map[string]string{backupsv1.OptionRestoreRBAC: value})}}
		f.create(rj)
		return rj
	}
	failed := func(rj *backupsv1.RestoreJob, reason string) {
		t.Helper()
		_, err := f.reconcileRestore(rj)
		require.NoError(t, err)
		require.Equal(t, backupsv1.RestoreJobFailed, rj.Status.Phase, rj.Status.Message)
		ready := meta.FindStatusCondition(rj.Status.Conditions, backupsv1.ConditionReady)
		require.NotNil(t, ready)
		assert.Equal(t, metav1.ConditionFalse, ready.Status)
		assert.Equal(t, reason, ready.Reason)
	}

	bad := withRBAC("yes")
	failed(bad, backupsv1.ReasonInvalidOption)
	assert.Contains(t, bad.Status.Message, `spec.options.restoreRBAC is "yes"; it must be "true" or "false"`)

	unchecked := withRBAC("true")
	failed(unchecked, driverkit.ReasonRBACNotAuthorized)
	assert.Contains(t, unchecked.Status.Message, "needs the admission policy coffer-restore-rbac, which is not installed")
	assert.Empty(t, f.driver.restores, "the driver was not asked to restore")

	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: backupsv1.RestoreRBACPolicy},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: backupsv1.RestoreRBACPolicy,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}}
	f.create(binding)
	t.Cleanup(func() { _ = cl.Delete(context.Background(), binding) })
	for _, value := range []string{"true", "false"} {
		rj := withRBAC(value)
		_, err := f.reconcileRestore(rj)
		require.NoError(t, err)
		require.Equal(t, backupsv1.RestoreJobSucceeded, rj.Status.Phase, "%s: %s", value, rj.Status.Message)
	}
	assert.Len(t, f.driver.restores, 2)
}

// spec.options is any JSON object of scalars, as Cozystack's RestoreJobs write them; the kit
// decodes it into the options the driver declares (driverkit.RestoreOptioner) and fails the run
// InvalidOption, the driver never asked, on an option the driver does not take or of another type;
// the options it takes, typed as it declares them, reach it.
func TestRestoreOptionsTypedByTheDriver(t *testing.T) {
	f := newFixture(t)
	f.driver.restore = func(context.Context, *driverkit.RestoreRun[S]) (driverkit.RestoreOutcome, error) {
		return driverkit.RestoreOutcome{Done: true, Message: "restored"}, nil
	}
	b := f.readyBackup()
	with := func(opts map[string]any) *backupsv1.RestoreJob {
		rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{GenerateName: "restore-", Namespace: f.ns},
			Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: b.Name}, Options: backupsv1.Options(opts)}}
		f.create(rj)
		return rj
	}
	for _, tt := range []struct {
		opts map[string]any
		want string
	}{
		{map[string]any{"keepOriginalPVC": true}, "spec.options.keepOriginalPVC is not an option of this driver; it takes failIfTargetExists, restoreTimeoutSeconds, targetNamespace, restoreRBAC, inert"},
		{map[string]any{"failIfTargetExists": "yes"}, "spec.options.failIfTargetExists is a string; it must be a boolean"},
		{map[string]any{"restoreTimeoutSeconds": 1.5}, "spec.options.restoreTimeoutSeconds is a number 1.5; it must be an integer"},
		{map[string]any{"inert": true}, "spec.options.inert is true; it must be a string"},
	} {
		rj := with(tt.opts)
		_, err := f.reconcileRestore(rj)
		require.NoError(t, err)
		require.Equal(t, backupsv1.RestoreJobFailed, rj.Status.Phase, "%v: %s", tt.opts, rj.Status.Message)
		ready := meta.FindStatusCondition(rj.Status.Conditions, backupsv1.ConditionReady)
		require.NotNil(t, ready)
		assert.Equal(t, backupsv1.ReasonInvalidOption, ready.Reason)
		assert.Contains(t, rj.Status.Message, tt.want)
	}
	assert.Empty(t, f.driver.restores, "the driver was not asked to restore")

	ok := with(map[string]any{"failIfTargetExists": true, "restoreTimeoutSeconds": 600})
	_, err := f.reconcileRestore(ok)
	require.NoError(t, err)
	require.Len(t, f.driver.restores, 1, ok.Status.Message)
	var got scriptOptions
	require.NoError(t, f.driver.restores[0].RestoreJob.Spec.DecodeOptions(&got))
	assert.Equal(t, scriptOptions{FailIfTargetExists: true, TimeoutSeconds: 600}, got)
}
