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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/core-controller/internal/testenv"
)

// className is a BackupClass name of the test's own (classes are cluster-scoped).
func className(t *testing.T) string {
	return "class-" + strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
}

func (h *harness) ready() *metav1.Condition {
	h.t.Helper()
	ready := meta.FindStatusCondition(h.plan.Status.Conditions, backupsv1.ConditionReady)
	require.NotNil(h.t, ready)
	return ready
}

// TestReadyShowsTheClass: a Plan says at once, before any tick, that its class is missing or has no
// strategy for its application, and turns Ready when the class is fixed. It keeps scheduling all
// along: each tick's BackupJob says the same in its turn, and no tick is lost to the flips.
func TestReadyShowsTheClass(t *testing.T) {
	class := className(t)
	h := newHarness(t, func(p *backupsv1.Plan) { p.Spec.BackupClassName = class })

	h.reconcile()
	ready := h.ready()
	assert.Equal(t, metav1.ConditionFalse, ready.Status)
	assert.Equal(t, backupsv1.ReasonBackupClassNotFound, ready.Reason)
	assert.Contains(t, ready.Message, `BackupClass "`+class+`" not found: create it, or set spec.backupClassName to an existing class`)
	assert.Equal(t, h.plan.Generation, ready.ObservedGeneration)
	require.NotNil(t, h.plan.Status.NextScheduleTime, "the Plan still schedules")
	assert.Equal(t, h.hour(1), h.plan.Status.NextScheduleTime.Time.UTC())
	assert.Equal(t, []string{"Warning BackupClassNotFound " + ready.Message}, h.drainEvents())
	rv := h.plan.ResourceVersion
	h.reconcile()
	assert.Equal(t, rv, h.plan.ResourceVersion, "reported once")
	assert.Empty(t, h.drainEvents(), "one warning, not one per reconcile")

	h.clock.SetTime(h.hour(1).Add(time.Second))
	h.reconcile()
	jobs := h.jobs()
	require.Len(t, jobs, 1, "the tick fires: a class created late costs no backup")
	assert.Equal(t, class, jobs[0].Spec.BackupClassName)
	h.setJobPhase(jobs[0].Name, backupsv1.BackupJobFailed, h.clock.Now())

	// A class without a strategy for VirtualMachines.
	c := vmClass(class)
	c.Spec.Strategies[0].Application.Kind = "Bucket"
	require.NoError(t, env.Client.Create(h.ctx, c))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), c) })
	h.clock.Step(time.Minute)
	h.reconcile()
	ready = h.ready()
	assert.Equal(t, metav1.ConditionFalse, ready.Status)
	assert.Equal(t, backupsv1.ReasonNoMatchingStrategy, ready.Reason)
	assert.Contains(t, ready.Message, `BackupClass "`+class+`" has no strategy for applications of kind "VirtualMachine" in group "apps.cozystack.io": add a strategy for VirtualMachine to the class`)

	// Fixed: Ready.
	c.Spec.Strategies = append(c.Spec.Strategies, vmClass(class).Spec.Strategies...)
	require.NoError(t, env.Client.Update(h.ctx, c))
	h.clock.Step(time.Minute)
	h.reconcile()
	ready = h.ready()
	assert.Equal(t, metav1.ConditionTrue, ready.Status)
	assert.Equal(t, backupsv1.ReasonScheduling, ready.Reason)
	assert.Contains(t, ready.Message, `BackupClass "`+class+`" resolves`)

	// Deleted: not Ready again.
	require.NoError(t, env.Client.Delete(h.ctx, c))
	h.clock.Step(time.Minute)
	h.reconcile()
	assert.Equal(t, backupsv1.ReasonBackupClassNotFound, h.ready().Reason)

	h.clock.SetTime(h.hour(2).Add(time.Second))
	h.reconcile()
	assert.Len(t, h.jobs(), 2, "the next tick fires")
	assert.Zero(t, h.plan.Status.SkippedTicks, "no tick was lost to the changes of Ready")
}

// TestReadyShowsClassNotAllowed: a Plan whose class's namespaceSelector does not select the Plan's
// namespace is Ready=False BackupClassNotAllowed and fires no tick (its BackupJobs would be refused
// at admission); once the namespace carries the label, the Plan schedules again and the next tick
// fires.
func TestReadyShowsClassNotAllowed(t *testing.T) {
	class := className(t)
	c := vmClass(class)
	c.Spec.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "backups.example.com/tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"gold"}}}}
	require.NoError(t, env.Client.Create(context.Background(), c))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), c) })
	h := newHarness(t, func(p *backupsv1.Plan) { p.Spec.BackupClassName = class })

	h.reconcile()
	ready := h.ready()
	assert.Equal(t, metav1.ConditionFalse, ready.Status)
	assert.Equal(t, backupsv1.ReasonBackupClassNotAllowed, ready.Reason)
	assert.Contains(t, ready.Message, `BackupClass "`+class+`" may not be used in namespace "`+h.ns+`": its spec.namespaceSelector does not select the namespace's labels`)
	assert.Nil(t, h.plan.Status.NextScheduleTime, "no tick is scheduled")
	assert.Equal(t, []string{"Warning BackupClassNotAllowed " + ready.Message}, h.drainEvents())

	h.clock.SetTime(h.hour(1).Add(time.Second))
	h.reconcile()
	assert.Empty(t, h.jobs(), "no BackupJob for a class that refuses the namespace")

	ns := &corev1.Namespace{}
	require.NoError(t, env.Client.Get(h.ctx, client.ObjectKey{Name: h.ns}, ns))
	ns.Labels = map[string]string{"backups.example.com/tier": "gold"}
	require.NoError(t, env.Client.Update(h.ctx, ns))
	h.clock.Step(time.Minute)
	h.reconcile()
	assert.Equal(t, metav1.ConditionTrue, h.ready().Status)
	assert.Equal(t, backupsv1.ReasonScheduling, h.ready().Reason)
	assert.Empty(t, h.jobs(), "ticks passed while the class refused the namespace never fire")

	h.clock.SetTime(h.hour(2).Add(time.Second))
	h.reconcile()
	assert.Len(t, h.jobs(), 1, "the next tick fires")
}

// TestSuspendedPlanWithoutClassResumesWithoutBurst: resuming a suspended Plan whose class is
// missing fires none of the ticks that passed while it was suspended, as for any Plan.
func TestSuspendedPlanWithoutClassResumesWithoutBurst(t *testing.T) {
	h := newHarness(t, func(p *backupsv1.Plan) {
		p.Spec.BackupClassName = className(t)
		p.Spec.Suspend = ptr(true)
	})
	h.reconcile() // suspended since its creation, ticks pass
	assert.Equal(t, backupsv1.ReasonSuspended, h.ready().Reason, "suspended comes first")
	h.clock.SetTime(h.hour(3).Add(time.Minute))
	h.reconcile()

	h.plan.Spec.Suspend = ptr(false)
	require.NoError(t, env.Client.Update(h.ctx, h.plan))
	h.clock.Step(time.Minute)
	h.reconcile()
	assert.Equal(t, backupsv1.ReasonBackupClassNotFound, h.ready().Reason)
	assert.Empty(t, h.jobs(), "resuming fires none of the ticks passed while suspended")
	assert.Zero(t, h.plan.Status.SkippedTicks)

	h.clock.SetTime(h.hour(4).Add(time.Second))
	h.reconcile()
	assert.Len(t, h.jobs(), 1, "the next tick fires")
}

// TestClassChangesReachThePlan runs the controller as core wires it: creating, changing and
// deleting the BackupClass re-evaluates the Plans that name it, with no change to the Plan.
func TestClassChangesReachThePlan(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := env.Namespace(t)
	class := className(t)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  testenv.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
	})
	require.NoError(t, err)
	rec := events.NewFakeRecorder(100)
	r := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Clock: clock.RealClock{}, Recorder: rec}
	require.NoError(t, r.SetupWithManager(ctx, mgr, 1))
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	plans := map[string]*backupsv1.Plan{}
	for _, name := range []string{"db", "vm"} {
		p := &backupsv1.Plan{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: backupsv1.PlanSpec{
			ApplicationRef:  corev1.TypedLocalObjectReference{Kind: "VirtualMachine", Name: name},
			BackupClassName: class,
			Schedule:        backupsv1.PlanSchedule{Cron: "@yearly"},
		}}
		require.NoError(t, env.Client.Create(ctx, p))
		plans[name] = p
	}

	waitReason := func(what, reason string) {
		t.Helper()
		for name, p := range plans {
			err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
					return false, err
				}
				ready := meta.FindStatusCondition(p.Status.Conditions, backupsv1.ConditionReady)
				return ready != nil && ready.Reason == reason, nil
			})
			require.NoError(t, err, "waiting for Plan %s to be %s after %s", name, reason, what)
		}
	}
	waitReason("its creation", backupsv1.ReasonBackupClassNotFound)

	c := vmClass(class)
	require.NoError(t, env.Client.Create(ctx, c))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), c) })
	waitReason("the class was created", backupsv1.ReasonScheduling)

	c.Spec.Strategies[0].Application.Kind = "Bucket"
	require.NoError(t, env.Client.Update(ctx, c))
	waitReason("the class lost its VirtualMachine strategy", backupsv1.ReasonNoMatchingStrategy)

	require.NoError(t, env.Client.Delete(ctx, c))
	waitReason("the class was deleted", backupsv1.ReasonBackupClassNotFound)
}

// TestUnreadableClassNeverKeepsATickFromFiring: when the BackupClass cannot be read, the due tick
// fires all the same, Ready stays as it was, and the reconcile fails so that it is retried.
func TestUnreadableClassNeverKeepsATickFromFiring(t *testing.T) {
	h := newHarness(t, nil)
	h.reconcile()
	require.Equal(t, backupsv1.ReasonScheduling, h.ready().Reason)
	before := *h.ready()

	h.clock.SetTime(h.hour(1).Add(time.Second))
	fault := errors.New("injected: the cache could not be read")
	r := h.newReconciler()
	r.Client = interceptor.NewClient(env.Client, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*backupsv1.BackupClass); ok {
				return fault
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	_, err := r.Reconcile(h.ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(h.plan)})
	require.ErrorIs(t, err, fault, "retried")
	require.Len(t, h.jobs(), 1, "the tick fired")
	h.refresh()
	assert.Equal(t, before, *h.ready(), "Ready is left as it was")

	h.reconcile() // the class can be read again
	assert.Equal(t, h.hour(1), h.plan.Status.LastScheduleTime.Time.UTC())
	assert.Len(t, h.jobs(), 1)
	assert.Equal(t, backupsv1.ReasonScheduling, h.ready().Reason)
}
