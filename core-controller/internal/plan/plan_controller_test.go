package plan

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/core-controller/internal/testenv"
)

func TestFiresAtTheTick(t *testing.T) {
	h := newHarness(t, nil)
	tick := h.hour(1)

	res := h.reconcile()
	assert.Empty(t, h.jobs(), "nothing is due before the first tick")
	assert.Equal(t, tick.Sub(h.clock.Now()), res.RequeueAfter, "requeued exactly at the next tick")
	require.NotNil(t, h.plan.Status.NextScheduleTime)
	assert.Equal(t, tick, h.plan.Status.NextScheduleTime.Time.UTC())
	ready := meta.FindStatusCondition(h.plan.Status.Conditions, backupsv1.ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, metav1.ConditionTrue, ready.Status)
	assert.Equal(t, backupsv1.ReasonScheduling, ready.Reason)

	h.clock.SetTime(tick.Add(5 * time.Second))
	res = h.reconcile()
	jobs := h.jobs()
	require.Len(t, jobs, 1)
	j := jobs[0]
	assert.Equal(t, backupsv1.PlanBackupJobName("nightly", tick), j.Name)
	assert.Equal(t, &corev1.LocalObjectReference{Name: "nightly"}, j.Spec.PlanRef)
	require.NotNil(t, j.Spec.ApplicationRef.APIGroup, "applicationRef is normalized")
	assert.Equal(t, backupsv1.DefaultApplicationAPIGroup, *j.Spec.ApplicationRef.APIGroup)
	assert.Equal(t, "vm1", j.Spec.ApplicationRef.Name)
	assert.Equal(t, "default", j.Spec.BackupClassName)
	assert.True(t, metav1.IsControlledBy(&j, h.plan), "owned by the Plan")
	assert.Equal(t, "nightly", j.Labels[backupsv1.LabelPlan])
	assert.Equal(t, tick.Format(time.RFC3339), j.Annotations[backupsv1.AnnotationScheduledTime])

	require.NotNil(t, h.plan.Status.LastScheduleTime)
	assert.Equal(t, tick, h.plan.Status.LastScheduleTime.Time.UTC())
	assert.Equal(t, []corev1.LocalObjectReference{{Name: j.Name}}, h.plan.Status.Active)
	assert.Equal(t, h.plan.Generation, h.plan.Status.ObservedGeneration)
	assert.Equal(t, tick.Add(time.Hour).Sub(h.clock.Now()), res.RequeueAfter)
	assert.Contains(t, strings.Join(h.drainEvents(), "\n"), "Normal BackupJobCreated Created BackupJob "+j.Name)

	// Convergence: a further reconcile writes nothing.
	rv := h.plan.ResourceVersion
	h.reconcile()
	assert.Equal(t, rv, h.plan.ResourceVersion, "no status write")
	assert.Len(t, h.jobs(), 1)
	assert.Empty(t, h.drainEvents())
}

// TestRestartBetweenCreateAndStatusWrite stops the controller right after it created a tick's
// BackupJob, before any status write recorded it; a new instance records it and creates nothing.
func TestRestartBetweenCreateAndStatusWrite(t *testing.T) {
	h := newHarness(t, nil)
	tick := h.hour(1)
	h.clock.SetTime(tick.Add(time.Second))

	h.reconcileOnce() // creates the BackupJob; the status write is left to the next pass
	require.Len(t, h.jobs(), 1, "the BackupJob was created")
	assert.Nil(t, h.plan.Status.LastScheduleTime, "not recorded yet")

	h.r = h.newReconciler() // restart
	h.reconcile()
	jobs := h.jobs()
	require.Len(t, jobs, 1, "exactly one BackupJob for the tick")
	require.NotNil(t, h.plan.Status.LastScheduleTime)
	assert.Equal(t, tick, h.plan.Status.LastScheduleTime.Time.UTC())
	assert.Equal(t, []corev1.LocalObjectReference{{Name: jobs[0].Name}}, h.plan.Status.Active)
	assert.Zero(t, h.plan.Status.SkippedTicks)

	// Even a whole tick later, the unrecorded tick counts as fired, not missed.
	h2 := newHarness(t, func(p *backupsv1.Plan) { p.Name = "late"; p.Spec.ConcurrencyPolicy = backupsv1.ConcurrencyAllow })
	h2.clock.SetTime(h2.hour(1).Add(time.Second))
	h2.reconcileOnce()
	h2.r = h2.newReconciler()
	h2.clock.SetTime(h2.hour(2).Add(time.Second))
	h2.reconcile()
	assert.Len(t, h2.jobs(), 2, "one BackupJob per tick")
	assert.Zero(t, h2.plan.Status.SkippedTicks, "%+v", h2.plan.Status.Conditions)
	assert.Equal(t, h2.hour(2), h2.plan.Status.LastScheduleTime.Time.UTC())
}

// TestCrashBeforeStatusWriteWithMissedTicks: when a fire also has missed ticks to record, the
// status is written at once; a crash there leaves exactly one BackupJob and counts the misses once.
func TestCrashBeforeStatusWriteWithMissedTicks(t *testing.T) {
	h := newHarness(t, nil)
	h.clock.SetTime(h.hour(3).Add(time.Second))
	crash := errors.New("crashed before the status write")
	r := h.newReconciler()
	r.Client = interceptor.NewClient(env.Client, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			return crash
		},
	})
	_, err := r.Reconcile(h.ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(h.plan)})
	require.ErrorIs(t, err, crash)
	require.Len(t, h.jobs(), 1)
	h.r = h.newReconciler()
	h.reconcile()
	assert.Len(t, h.jobs(), 1)
	assert.Equal(t, int64(2), h.plan.Status.SkippedTicks, "the two older ticks, counted once")
}

// TestStaleCacheWritesNothing gives the reconciler a cache that lags behind its last reconcile: the
// Plan without the status write and a BackupJob list without the new job. It must neither create a
// second BackupJob nor overwrite the status.
func TestStaleCacheWritesNothing(t *testing.T) {
	h := newHarness(t, func(p *backupsv1.Plan) { p.Spec.SuccessfulJobsHistoryLimit = ptr(int32(0)) })
	stale := h.plan.DeepCopy()
	h.clock.SetTime(h.hour(1).Add(time.Second))
	h.reconcile()
	require.Len(t, h.jobs(), 1)
	h.setJobPhase(h.jobs()[0].Name, backupsv1.BackupJobSucceeded, h.clock.Now())
	h.reconcile()
	require.Len(t, h.jobs(), 1, "history limit 0 still keeps the BackupJob of the newest tick")
	fresh := h.plan.DeepCopy()

	staleCache := interceptor.NewClient(env.Client, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if p, ok := obj.(*backupsv1.Plan); ok {
				stale.DeepCopyInto(p)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*backupsv1.BackupJobList); ok {
				return nil // the new job is not in the cache yet
			}
			return c.List(ctx, list, opts...)
		},
	})
	r := h.newReconciler()
	r.Client = staleCache
	_, err := r.Reconcile(h.ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(h.plan)})
	if err != nil {
		assert.True(t, apierrors.IsConflict(errors.Unwrap(err)), "only a refused stale status write may fail: %v", err)
	}
	assert.Len(t, h.jobs(), 1, "no second BackupJob for the tick")
	h.refresh()
	assert.Equal(t, fresh.Status, h.plan.Status, "the status is not overwritten from a stale view")
}

func TestControllerDownAcrossThreeTicks(t *testing.T) {
	t.Run("the most recent tick fires within the deadline", func(t *testing.T) {
		h := newHarness(t, func(p *backupsv1.Plan) { p.Spec.StartingDeadlineSeconds = ptr(int64(900)) })
		h.clock.SetTime(h.hour(3).Add(10 * time.Minute))
		h.reconcile()
		jobs := h.jobs()
		require.Len(t, jobs, 1, "only the most recent missed tick fires")
		assert.Equal(t, backupsv1.PlanBackupJobName("nightly", h.hour(3)), jobs[0].Name)
		assert.Equal(t, int64(2), h.plan.Status.SkippedTicks)
		skipped := meta.FindStatusCondition(h.plan.Status.Conditions, backupsv1.ConditionTickSkipped)
		require.NotNil(t, skipped)
		assert.Equal(t, metav1.ConditionTrue, skipped.Status)
		assert.Equal(t, backupsv1.ReasonMissedDeadline, skipped.Reason)
		assert.Contains(t, skipped.Message, "2 tick(s) before "+h.hour(3).Format(time.RFC3339)+" were missed")
		assert.Contains(t, strings.Join(h.drainEvents(), "\n"), "Warning TickSkipped 2 tick(s)")
	})
	t.Run("past the deadline nothing fires and all three are counted", func(t *testing.T) {
		h := newHarness(t, func(p *backupsv1.Plan) { p.Spec.StartingDeadlineSeconds = ptr(int64(300)) })
		h.clock.SetTime(h.hour(3).Add(10 * time.Minute))
		h.reconcile()
		assert.Empty(t, h.jobs())
		assert.Equal(t, int64(3), h.plan.Status.SkippedTicks)
		require.NotNil(t, h.plan.Status.LastSkippedTime)
		assert.Equal(t, h.hour(3), h.plan.Status.LastSkippedTime.Time.UTC())
		skipped := meta.FindStatusCondition(h.plan.Status.Conditions, backupsv1.ConditionTickSkipped)
		require.NotNil(t, skipped)
		assert.Equal(t, backupsv1.ReasonMissedDeadline, skipped.Reason)
		assert.Contains(t, skipped.Message, "more than startingDeadlineSeconds (300s)")
		assert.Len(t, h.drainEvents(), 2, "one event for the older ticks, one for the last")

		// Counted once: the same view again changes nothing.
		rv := h.plan.ResourceVersion
		h.reconcile()
		assert.Equal(t, rv, h.plan.ResourceVersion)
		assert.Equal(t, int64(3), h.plan.Status.SkippedTicks)

		// The next tick fires normally and clears the condition.
		h.clock.SetTime(h.hour(4).Add(time.Second))
		h.reconcile()
		assert.Len(t, h.jobs(), 1)
		skipped = meta.FindStatusCondition(h.plan.Status.Conditions, backupsv1.ConditionTickSkipped)
		assert.Equal(t, metav1.ConditionFalse, skipped.Status)
		assert.Equal(t, backupsv1.ReasonTickFired, skipped.Reason)
	})
}

func TestConcurrencyPolicy(t *testing.T) {
	t.Run("Forbid skips and records a tick while a run is active", func(t *testing.T) {
		h := newHarness(t, nil)
		h.clock.SetTime(h.hour(1).Add(time.Second))
		h.reconcile()
		first := h.jobs()[0].Name
		h.setJobPhase(first, backupsv1.BackupJobRunning, h.clock.Now())

		h.clock.SetTime(h.hour(2).Add(time.Second))
		h.reconcile()
		assert.Len(t, h.jobs(), 1, "the second tick did not fire")
		assert.Equal(t, int64(1), h.plan.Status.SkippedTicks)
		skipped := meta.FindStatusCondition(h.plan.Status.Conditions, backupsv1.ConditionTickSkipped)
		require.NotNil(t, skipped)
		assert.Equal(t, backupsv1.ReasonConcurrencyForbidden, skipped.Reason)
		assert.Contains(t, skipped.Message, "BackupJob "+first+" is still running")

		// The run ends before the next tick: the skipped tick stays skipped.
		h.setJobPhase(first, backupsv1.BackupJobSucceeded, h.clock.Now())
		h.reconcile()
		assert.Len(t, h.jobs(), 1)
		assert.Empty(t, h.plan.Status.Active)
		require.NotNil(t, h.plan.Status.LastSuccessfulTime)

		h.clock.SetTime(h.hour(3).Add(time.Second))
		h.reconcile()
		assert.Len(t, h.jobs(), 2)
	})
	t.Run("Allow runs side by side", func(t *testing.T) {
		h := newHarness(t, func(p *backupsv1.Plan) { p.Spec.ConcurrencyPolicy = backupsv1.ConcurrencyAllow })
		h.clock.SetTime(h.hour(1).Add(time.Second))
		h.reconcile()
		h.setJobPhase(h.jobs()[0].Name, backupsv1.BackupJobRunning, h.clock.Now())
		h.clock.SetTime(h.hour(2).Add(time.Second))
		h.reconcile()
		assert.Len(t, h.jobs(), 2)
		assert.Len(t, h.plan.Status.Active, 2)
		assert.Zero(t, h.plan.Status.SkippedTicks)
	})
}

func TestSuspendAndResumeWithoutBurst(t *testing.T) {
	h := newHarness(t, func(p *backupsv1.Plan) { p.Spec.Suspend = ptr(true) })
	h.clock.SetTime(h.hour(3).Add(time.Minute))
	res := h.reconcile()
	assert.Empty(t, h.jobs())
	assert.Zero(t, res.RequeueAfter, "nothing to wait for while suspended")
	ready := meta.FindStatusCondition(h.plan.Status.Conditions, backupsv1.ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, metav1.ConditionFalse, ready.Status)
	assert.Equal(t, backupsv1.ReasonSuspended, ready.Reason)
	assert.Nil(t, h.plan.Status.NextScheduleTime)

	h.plan.Spec.Suspend = ptr(false)
	require.NoError(t, env.Client.Update(h.ctx, h.plan))
	h.clock.Step(time.Minute)
	h.reconcile()
	assert.Empty(t, h.jobs(), "resuming fires none of the ticks passed while suspended")
	assert.Zero(t, h.plan.Status.SkippedTicks, "suspended ticks are not missed ticks")

	h.clock.SetTime(h.hour(4).Add(time.Second))
	h.reconcile()
	assert.Len(t, h.jobs(), 1, "the next tick fires")
}

func TestInvalidSchedule(t *testing.T) {
	tests := []struct {
		name, cron string
		zone       *string
		reason     string
		msg        string
	}{
		{"bad cron", "0 0 25 * * *", nil, backupsv1.ReasonInvalidSchedule, `schedule.cron "0 0 25 * * *": expected exactly 5 fields, found 6`},
		{"bad zone", "@daily", ptr("Europe/Atlantis"), backupsv1.ReasonInvalidTimeZone, `schedule.timeZone "Europe/Atlantis": unknown time zone Europe/Atlantis`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, func(p *backupsv1.Plan) { p.Spec.Schedule = backupsv1.PlanSchedule{Cron: tt.cron, TimeZone: tt.zone} })
			h.clock.SetTime(h.hour(2))
			res := h.reconcile()
			assert.Equal(t, reconcile.Result{}, res, "no requeue loop")
			assert.Empty(t, h.jobs())
			ready := meta.FindStatusCondition(h.plan.Status.Conditions, backupsv1.ConditionReady)
			require.NotNil(t, ready)
			assert.Equal(t, metav1.ConditionFalse, ready.Status)
			assert.Equal(t, tt.reason, ready.Reason)
			assert.Contains(t, ready.Message, tt.msg)
			assert.Len(t, h.drainEvents(), 1)

			rv := h.plan.ResourceVersion
			h.reconcile()
			assert.Equal(t, rv, h.plan.ResourceVersion, "reported once")
			assert.Empty(t, h.drainEvents(), "one warning, not one per reconcile")

			// Fixing the spec recovers, and the ticks passed while invalid do not fire in a burst.
			h.plan.Spec.Schedule = backupsv1.PlanSchedule{Cron: "0 * * * *"}
			require.NoError(t, env.Client.Update(h.ctx, h.plan))
			h.reconcile()
			assert.Equal(t, metav1.ConditionTrue, meta.FindStatusCondition(h.plan.Status.Conditions, backupsv1.ConditionReady).Status)
			assert.Empty(t, h.jobs())
		})
	}
}

func TestForeignObjectHoldsTheName(t *testing.T) {
	h := newHarness(t, nil)
	tick := h.hour(1)
	foreign := &backupsv1.BackupJob{
		ObjectMeta: metav1.ObjectMeta{Name: backupsv1.PlanBackupJobName("nightly", tick), Namespace: h.ns,
			Labels: map[string]string{backupsv1.LabelPlan: "nightly"}}, // the right label, but no ownerReference
		Spec: backupsv1.BackupJobSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Other", Name: "x"}, BackupClassName: "c"},
	}
	require.NoError(t, env.Client.Create(h.ctx, foreign))
	h.clock.SetTime(tick.Add(time.Second))
	h.reconcile()
	assert.Nil(t, h.plan.Status.LastScheduleTime, "no status advance")
	assert.Contains(t, strings.Join(h.drainEvents(), "\n"), "Warning NameConflict BackupJob "+foreign.Name)
	require.Len(t, h.jobs(), 1)
	assert.Equal(t, "Other", h.jobs()[0].Spec.ApplicationRef.Kind, "the foreign object is untouched")

	// The tick waited: once the name is free, it fires.
	require.NoError(t, env.Client.Delete(h.ctx, foreign))
	h.clock.Step(time.Minute)
	h.reconcile()
	jobs := h.jobs()
	require.Len(t, jobs, 1, "the tick fired once the name was free")
	assert.True(t, metav1.IsControlledBy(&jobs[0], h.plan))
	require.NotNil(t, h.plan.Status.LastScheduleTime)
	assert.Equal(t, tick, h.plan.Status.LastScheduleTime.Time.UTC())
}

func ptr[T any](v T) *T { return &v }

// TestTenantJobCannotStopTheTicks: a tenant (holding coffer-tenant in her namespace, as `edit`
// aggregates it) creates a BackupJob labelled and owned by her Plan, with a scheduled time a month
// ahead, and lets it finish. It is a run like any other, but no tick: the Plan's next tick fires.
func TestTenantJobCannotStopTheTicks(t *testing.T) {
	h := newHarness(t, nil)
	env.AsCoreController(t) // installs the shipped roles, coffer-tenant among them
	tenant := asTenant(t, h.ns)
	future := h.hour(1).Add(30 * 24 * time.Hour)
	forged := &backupsv1.BackupJob{
		ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: h.ns,
			Labels:          map[string]string{backupsv1.LabelPlan: backupsv1.PlanLabelValue(h.plan.Name)},
			Annotations:     map[string]string{backupsv1.AnnotationScheduledTime: future.UTC().Format(time.RFC3339)},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(h.plan, backupsv1.GroupVersion.WithKind("Plan"))}},
		Spec: backupsv1.BackupJobSpec{PlanRef: &corev1.LocalObjectReference{Name: h.plan.Name},
			ApplicationRef: h.plan.Spec.ApplicationRef, BackupClassName: h.plan.Spec.BackupClassName},
	}
	forged.OwnerReferences[0].BlockOwnerDeletion = nil
	require.NoError(t, tenant.Create(h.ctx, forged), "a tenant may create BackupJobs owned by her Plan")
	h.setJobPhase(forged.Name, backupsv1.BackupJobSucceeded, h.plan.CreationTimestamp.Time)
	// A job with the name of a future tick is no tick either.
	early := forged.DeepCopy()
	early.ResourceVersion, early.Name = "", backupsv1.PlanBackupJobName(h.plan.Name, future)
	require.NoError(t, tenant.Create(h.ctx, early))
	h.setJobPhase(early.Name, backupsv1.BackupJobSucceeded, h.plan.CreationTimestamp.Time)

	h.clock.SetTime(h.hour(1).Add(time.Second))
	h.reconcile()
	require.NotNil(t, h.plan.Status.LastScheduleTime, "the tick fired")
	assert.Equal(t, h.hour(1), h.plan.Status.LastScheduleTime.Time.UTC())
	var fired bool
	for _, j := range h.jobs() {
		fired = fired || j.Name == backupsv1.PlanBackupJobName(h.plan.Name, h.hour(1))
	}
	assert.True(t, fired, "the tick's BackupJob exists")
}

// asTenant is a client acting as a tenant bound to coffer-tenant in ns.
func asTenant(t *testing.T, ns string) client.Client {
	t.Helper()
	ctx := context.Background()
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: ns},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "tenant@" + ns}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "coffer-tenant"}}
	require.NoError(t, env.Client.Create(ctx, rb))
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "tenant@" + ns, Groups: []string{"system:authenticated"}}
	cl, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	require.NoError(t, err)
	require.Eventually(t, func() bool { // the authorizer learns of the binding from its informer
		return cl.List(ctx, &backupsv1.BackupJobList{}, client.InNamespace(ns)) == nil
	}, 10*time.Second, 50*time.Millisecond)
	return cl
}
