package plan

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/core-controller/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

// harness is one Plan under test with a fake clock and a recorder.
type harness struct {
	t      *testing.T
	ctx    context.Context
	ns     string
	clock  *clocktesting.FakeClock
	events *events.FakeRecorder
	// logs holds what the reconciler logged, V(1) included, one line per call.
	logs *bytes.Buffer
	r    *Reconciler
	plan *backupsv1.Plan
}

func newHarness(t *testing.T, mutate func(*backupsv1.Plan)) *harness {
	t.Helper()
	h := &harness{t: t, ns: env.Namespace(t), events: events.NewFakeRecorder(100), logs: &bytes.Buffer{}}
	h.ctx = ctrl.LoggerInto(context.Background(), funcr.New(func(prefix, args string) {
		h.logs.WriteString(args + "\n")
	}, funcr.Options{Verbosity: 1}))
	h.plan = &backupsv1.Plan{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: h.ns},
		Spec: backupsv1.PlanSpec{
			ApplicationRef:  corev1.TypedLocalObjectReference{Kind: "VirtualMachine", Name: "vm1"},
			BackupClassName: "default",
			Schedule:        backupsv1.PlanSchedule{Cron: "0 * * * *"},
		},
	}
	if mutate != nil {
		mutate(h.plan)
	}
	ensureDefaultClass(t)
	require.NoError(t, env.Client.Create(h.ctx, h.plan))
	// The clock starts at the Plan's creation, which the API server set.
	h.clock = clocktesting.NewFakeClock(h.plan.CreationTimestamp.Time)
	h.r = h.newReconciler()
	return h
}

// newReconciler is a fresh instance, as after a restart.
func (h *harness) newReconciler() *Reconciler {
	return &Reconciler{Client: env.Client, APIReader: env.Client, Clock: h.clock, Recorder: h.events}
}

// reconcile runs the reconciler as the watches would: again after each write of its own (the
// creation of a BackupJob or a status write triggers one), until a pass writes nothing.
func (h *harness) reconcile() reconcile.Result {
	h.t.Helper()
	var res reconcile.Result
	for range 4 {
		rv, jobs := h.plan.ResourceVersion, len(h.jobs())
		var err error
		res, err = h.r.Reconcile(h.ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(h.plan)})
		require.NoError(h.t, err)
		h.refresh()
		if h.plan.ResourceVersion == rv && len(h.jobs()) == jobs {
			return res
		}
	}
	h.t.Fatal("the reconciler did not converge")
	return res
}

// reconcileOnce is one pass, as a single event would trigger.
func (h *harness) reconcileOnce() reconcile.Result {
	h.t.Helper()
	res, err := h.r.Reconcile(h.ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(h.plan)})
	require.NoError(h.t, err)
	h.refresh()
	return res
}

func (h *harness) refresh() {
	h.t.Helper()
	require.NoError(h.t, env.Client.Get(h.ctx, client.ObjectKeyFromObject(h.plan), h.plan))
}

func (h *harness) jobs() []backupsv1.BackupJob {
	h.t.Helper()
	list := &backupsv1.BackupJobList{}
	require.NoError(h.t, env.Client.List(h.ctx, list, client.InNamespace(h.ns)))
	return list.Items
}

// nextTick is the first whole hour after the Plan's creation (its schedule is hourly by default).
func (h *harness) hour(n int) time.Time {
	return h.plan.CreationTimestamp.Time.Truncate(time.Hour).Add(time.Duration(n) * time.Hour).UTC()
}

func (h *harness) drainEvents() []string {
	var out []string
	for {
		select {
		case e := <-h.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// setJobPhase writes a BackupJob's status as a driver would.
func (h *harness) setJobPhase(name string, phase backupsv1.BackupJobPhase, completed time.Time) {
	h.t.Helper()
	j := &backupsv1.BackupJob{}
	require.NoError(h.t, env.Client.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: name}, j))
	j.Status.Phase = phase
	j.Status.StartedAt = &metav1.Time{Time: completed.Add(-time.Minute)}
	if phase.IsTerminal() {
		j.Status.CompletedAt = &metav1.Time{Time: completed}
	}
	require.NoError(h.t, env.Client.Status().Update(h.ctx, j))
}

// ensureDefaultClass creates the BackupClass "default", which resolves VirtualMachines, the
// harness Plan's application, to a strategy. BackupClasses are cluster-scoped: tests that change
// a class use their own.
func ensureDefaultClass(t *testing.T) {
	t.Helper()
	require.NoError(t, client.IgnoreAlreadyExists(env.Client.Create(context.Background(), vmClass("default"))))
}

// vmClass is a BackupClass that resolves VirtualMachines to a Velero strategy.
func vmClass(name string) *backupsv1.BackupClass {
	return &backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: backupsv1.BackupClassSpec{
		Strategies: []backupsv1.BackupClassStrategy{{Application: backupsv1.ApplicationSelector{Kind: "VirtualMachine"},
			StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr("velerodriver.backups.cozystack.io"), Kind: "VeleroBackupStrategy", Name: "vm"}}},
	}}
}
