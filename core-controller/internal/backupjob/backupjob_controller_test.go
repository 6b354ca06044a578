package backupjob

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/core-controller/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

func ptr[T any](v T) *T { return &v }

type harness struct {
	t      *testing.T
	ctx    context.Context
	ns     string
	clock  *clocktesting.FakeClock
	events *events.FakeRecorder
	r      *Reconciler
}

func newHarness(t *testing.T) *harness {
	h := &harness{t: t, ctx: context.Background(), ns: env.Namespace(t), events: events.NewFakeRecorder(100)}
	h.clock = clocktesting.NewFakeClock(time.Now())
	h.r = &Reconciler{Client: env.Client, Clock: h.clock, Recorder: h.events, ClaimTimeout: 5 * time.Minute, Started: time.Now().Add(-time.Hour)}
	return h
}

func (h *harness) job(class string) *backupsv1.BackupJob {
	j := &backupsv1.BackupJob{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "job-", Namespace: h.ns},
		Spec:       backupsv1.BackupJobSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "VirtualMachine", Name: "vm1"}, BackupClassName: class},
	}
	require.NoError(h.t, env.Client.Create(h.ctx, j))
	h.clock.SetTime(j.CreationTimestamp.Time)
	return j
}

func (h *harness) reconcile(j *backupsv1.BackupJob) reconcile.Result {
	h.t.Helper()
	res, err := h.r.Reconcile(h.ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(j)})
	require.NoError(h.t, err)
	require.NoError(h.t, env.Client.Get(h.ctx, client.ObjectKeyFromObject(j), j))
	return res
}

func createClass(t *testing.T, name string, strategies ...backupsv1.BackupClassStrategy) {
	c := &backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: backupsv1.BackupClassSpec{Strategies: strategies}}
	require.NoError(t, env.Client.Create(context.Background(), c))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), c) })
}

func TestUnclaimedBackupJob(t *testing.T) {
	createClass(t, "velero-vms", backupsv1.BackupClassStrategy{
		Application: backupsv1.ApplicationSelector{Kind: "VirtualMachine"},
		StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr("velerodriver.backups.cozystack.io"), Kind: "VeleroBackupStrategy", Name: "vm"},
	})
	createClass(t, "databases-only", backupsv1.BackupClassStrategy{
		Application: backupsv1.ApplicationSelector{Kind: "Postgres"},
		StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr("jobdriver.backups.cozystack.io"), Kind: "JobBackupStrategy", Name: "pg"},
	})
	tests := []struct {
		class string
		msg   string
	}{
		{"velero-vms", `BackupClass "velero-vms" resolves to VeleroBackupStrategy "vm" (group velerodriver.backups.cozystack.io); is the driver for that strategy kind installed and running?`},
		{"databases-only", `BackupClass "databases-only" has no strategy for applications of kind "VirtualMachine" in group "apps.cozystack.io"; add a strategy`},
		{"missing", `BackupClass "missing" not found; create it or fix spec.backupClassName`},
	}
	for _, tt := range tests {
		t.Run(tt.class, func(t *testing.T) {
			h := newHarness(t)
			j := h.job(tt.class)

			h.clock.Step(time.Minute)
			res := h.reconcile(j)
			assert.Equal(t, 4*time.Minute, res.RequeueAfter, "waits out the claim timeout precisely")
			assert.Empty(t, j.Status.Conditions)

			h.clock.Step(4*time.Minute + time.Second)
			res = h.reconcile(j)
			assert.Zero(t, res.RequeueAfter)
			c := meta.FindStatusCondition(j.Status.Conditions, backupsv1.ConditionAccepted)
			require.NotNil(t, c)
			assert.Equal(t, metav1.ConditionFalse, c.Status)
			assert.Equal(t, backupsv1.ReasonNoDriverClaimed, c.Reason)
			assert.Equal(t, "No driver claimed this BackupJob within 5m0s", c.Message[:len("No driver claimed this BackupJob within 5m0s")])
			assert.Contains(t, c.Message, tt.msg)
			assert.Equal(t, backupsv1.BackupJobPending, j.Status.Phase, "flagged, not failed")
			assert.Nil(t, j.Status.CompletedAt)
			ev := <-h.events.Events
			assert.True(t, strings.HasPrefix(ev, "Warning NoDriverClaimed No driver claimed"), ev)

			rv := j.ResourceVersion
			h.reconcile(j)
			assert.Equal(t, rv, j.ResourceVersion, "said once")

			// A driver installed later claims it; core leaves it alone from then on.
			meta.SetStatusCondition(&j.Status.Conditions, metav1.Condition{Type: backupsv1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: backupsv1.ReasonClaimed, Message: "claimed"})
			j.Status.Phase = backupsv1.BackupJobRunning
			j.Status.StartedAt = &metav1.Time{Time: h.clock.Now()}
			require.NoError(t, env.Client.Status().Update(h.ctx, j))
			rv = j.ResourceVersion
			h.clock.Step(time.Hour)
			h.reconcile(j)
			assert.Equal(t, rv, j.ResourceVersion)
			assert.Equal(t, metav1.ConditionTrue, meta.FindStatusCondition(j.Status.Conditions, backupsv1.ConditionAccepted).Status)
		})
	}
}

func TestClaimedJobIsNeverFlagged(t *testing.T) {
	h := newHarness(t)
	j := h.job("any")
	j.Status.Phase = backupsv1.BackupJobRunning
	require.NoError(t, env.Client.Status().Update(h.ctx, j))
	rv := j.ResourceVersion
	h.clock.Step(time.Hour)
	h.reconcile(j)
	assert.Equal(t, rv, j.ResourceVersion)
}

func TestDurationObservedOncePerRun(t *testing.T) {
	h := newHarness(t)
	j := h.job("any")
	start := time.Now().Add(-30 * time.Second)
	j.Status.Phase = backupsv1.BackupJobSucceeded
	j.Status.StartedAt = &metav1.Time{Time: start}
	j.Status.CompletedAt = &metav1.Time{Time: start.Add(20 * time.Second)}
	require.NoError(t, env.Client.Status().Update(h.ctx, j))

	n0 := sampleCount(t, string(backupsv1.BackupJobSucceeded))
	h.reconcile(j)
	h.reconcile(j)
	assert.Equal(t, n0+1, sampleCount(t, string(backupsv1.BackupJobSucceeded)), "one observation however often it is reconciled")

	// A run that completed before this process started was observed by an earlier one.
	old := h.job("any")
	old.Status.Phase = backupsv1.BackupJobFailed
	old.Status.StartedAt = &metav1.Time{Time: h.r.Started.Add(-time.Hour)}
	old.Status.CompletedAt = &metav1.Time{Time: h.r.Started.Add(-time.Minute)}
	require.NoError(t, env.Client.Status().Update(h.ctx, old))
	n1 := sampleCount(t, string(backupsv1.BackupJobFailed))
	h.reconcile(old)
	assert.Equal(t, n1, sampleCount(t, string(backupsv1.BackupJobFailed)))
}
