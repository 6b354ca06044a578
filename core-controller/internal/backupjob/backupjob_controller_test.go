package backupjob

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/core-controller/internal/claim"
	"github.com/coffer-backup/coffer/core-controller/internal/metrics"
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
	logs   *bytes.Buffer
	r      *Reconciler
}

func newHarness(t *testing.T) *harness {
	h := &harness{t: t, ns: env.Namespace(t), events: events.NewFakeRecorder(100), logs: &bytes.Buffer{}}
	h.ctx = ctrl.LoggerInto(context.Background(), funcr.New(func(prefix, args string) {
		h.logs.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: 1}))
	h.clock = clocktesting.NewFakeClock(time.Now())
	h.r = &Reconciler{Settings: claim.Settings{Client: env.Client, Clock: h.clock, Recorder: h.events, ClaimTimeout: 5 * time.Minute, Started: time.Now().Add(-time.Hour)}, APIReader: env.Client}
	return h
}

func (h *harness) job(class string) *backupsv1.BackupJob { return h.newJob(class, nil) }

func (h *harness) newJob(class string, mutate func(*backupsv1.BackupJob)) *backupsv1.BackupJob {
	j := &backupsv1.BackupJob{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "job-", Namespace: h.ns},
		Spec:       backupsv1.BackupJobSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "VirtualMachine", Name: "vm1"}, BackupClassName: class},
	}
	if mutate != nil {
		mutate(j)
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

// A BackupJob no driver claims is failed once the claim timeout has passed (contract CORE-5):
// phase Failed, Accepted=False and Ready=False with the reason (the class is missing, has no
// strategy for the application, or resolves to a strategy kind whose driver did not take it), a
// message saying what to fix, an event, a metric and a log line; it is never written again.
func TestUnclaimedBackupJobFails(t *testing.T) {
	createClass(t, "velero-vms", backupsv1.BackupClassStrategy{
		Application: backupsv1.ApplicationSelector{Kind: "VirtualMachine"},
		StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr("velerodriver.backups.cozystack.io"), Kind: "VeleroBackupStrategy", Name: "vm"},
	})
	createClass(t, "databases-only", backupsv1.BackupClassStrategy{
		Application: backupsv1.ApplicationSelector{Kind: "Postgres"},
		StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr("jobdriver.backups.cozystack.io"), Kind: "JobBackupStrategy", Name: "pg"},
	})
	goldOnly := &backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: "gold-only"}, Spec: backupsv1.BackupClassSpec{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"backups.example.com/tier": "gold"}},
		Strategies: []backupsv1.BackupClassStrategy{{Application: backupsv1.ApplicationSelector{Kind: "VirtualMachine"},
			StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr("velerodriver.backups.cozystack.io"), Kind: "VeleroBackupStrategy", Name: "vm"}}}}}
	require.NoError(t, env.Client.Create(context.Background(), goldOnly))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), goldOnly) })
	tests := []struct {
		class  string
		plan   string // the job's planRef, if any
		reason string
		msg    string
	}{
		{"velero-vms", "", backupsv1.ReasonNoDriverClaimed, `: BackupClass "velero-vms" resolves to VeleroBackupStrategy "vm" (group velerodriver.backups.cozystack.io), and no driver of that strategy kind took it; install or start that driver, or point the class at a strategy whose driver runs; then create a new BackupJob (this one's spec cannot change)`},
		{"databases-only", "", backupsv1.ReasonNoMatchingStrategy, `: BackupClass "databases-only" has no strategy for applications of kind "VirtualMachine" in group "apps.cozystack.io"; add a strategy for this application to the class, or use another class; then create a new BackupJob (this one's spec cannot change)`},
		{"missing", "", backupsv1.ReasonBackupClassNotFound, `: BackupClass "missing" not found; create it or use another class; then create a new BackupJob (this one's spec cannot change)`},
		{"gold-only", "", backupsv1.ReasonBackupClassNotAllowed, `: BackupClass "gold-only" may not be used in namespace "NS": its spec.namespaceSelector does not select the namespace's labels; use a class allowed in this namespace, or ask an administrator to select it; then create a new BackupJob (this one's spec cannot change)`},
		{"missing", "nightly", backupsv1.ReasonBackupClassNotFound, `: BackupClass "missing" not found; create it or set spec.backupClassName of Plan nightly to an existing class; Plan nightly creates a new BackupJob at its next tick`},
	}
	for _, tt := range tests {
		t.Run(tt.class+"/"+tt.plan, func(t *testing.T) {
			h := newHarness(t)
			j := h.newJob(tt.class, func(j *backupsv1.BackupJob) {
				if tt.plan != "" {
					j.Spec.PlanRef = &corev1.LocalObjectReference{Name: tt.plan}
				}
			})
			failed := testutil.ToFloat64(metrics.UnclaimedFailed.WithLabelValues(h.ns, "BackupJob", tt.reason))

			h.clock.Step(time.Minute)
			res := h.reconcile(j)
			assert.Equal(t, 4*time.Minute, res.RequeueAfter, "waits out the claim timeout precisely")
			assert.Empty(t, j.Status.Conditions)
			assert.Empty(t, j.Status.Phase)

			h.clock.Step(4*time.Minute + time.Second)
			res = h.reconcile(j)
			assert.Zero(t, res.RequeueAfter)
			assert.Equal(t, backupsv1.BackupJobFailed, j.Status.Phase, "failed, so that it blocks nothing")
			require.NotNil(t, j.Status.CompletedAt)
			assert.Nil(t, j.Status.StartedAt, "it never started")
			assert.Equal(t, "No driver claimed this BackupJob within 5m0s"+strings.ReplaceAll(tt.msg, `"NS"`, `"`+h.ns+`"`), j.Status.Message)
			assert.Equal(t, j.Generation, j.Status.ObservedGeneration)
			for _, typ := range []string{backupsv1.ConditionAccepted, backupsv1.ConditionReady} {
				c := meta.FindStatusCondition(j.Status.Conditions, typ)
				require.NotNil(t, c, typ)
				assert.Equal(t, metav1.ConditionFalse, c.Status, typ)
				assert.Equal(t, tt.reason, c.Reason, typ)
				assert.Equal(t, j.Status.Message, c.Message, typ)
				assert.Equal(t, j.Generation, c.ObservedGeneration, typ)
			}
			ev := <-h.events.Events
			assert.True(t, strings.HasPrefix(ev, "Warning "+tt.reason+" No driver claimed"), ev)
			assert.Equal(t, failed+1, testutil.ToFloat64(metrics.UnclaimedFailed.WithLabelValues(h.ns, "BackupJob", tt.reason)))
			assert.Contains(t, h.logs.String(), `"msg"="Failed unclaimed BackupJob" "backupJob"={"name"="`+j.Name+`" "namespace"="`+h.ns+`"} "reason"="`+tt.reason+`"`)

			rv := j.ResourceVersion
			h.clock.Step(time.Hour)
			h.reconcile(j)
			assert.Equal(t, rv, j.ResourceVersion, "a failed BackupJob is never written again")
			assert.Empty(t, h.events.Events)
		})
	}
}

// A driver's claim and core's failure race for one BackupJob: exactly one lands.
func TestClaimRacesFailure(t *testing.T) {
	t.Run("the driver claims between core's read and its write: the claim wins", func(t *testing.T) {
		h := newHarness(t)
		j := h.job("missing")
		h.clock.Step(time.Hour)
		h.r.Client = interceptor.NewClient(env.Client, interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				driver := &backupsv1.BackupJob{}
				require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(obj), driver))
				driver.MarkRunning(metav1.Now(), "coffer-driver-velero")
				require.NoError(t, c.Status().Update(ctx, driver))
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		})
		res, err := h.r.Reconcile(h.ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(j)})
		require.NoError(t, err, "a lost race is no error")
		assert.Equal(t, time.Second, res.RequeueAfter, "looked at again")
		require.NoError(t, env.Client.Get(h.ctx, client.ObjectKeyFromObject(j), j))
		assert.Equal(t, backupsv1.BackupJobRunning, j.Status.Phase)
		assert.Equal(t, "coffer-driver-velero", j.ClaimedBy())
		assert.Nil(t, j.Status.CompletedAt)
		assert.Nil(t, meta.FindStatusCondition(j.Status.Conditions, backupsv1.ConditionReady))
		assert.Empty(t, h.events.Events, "no failure reported")
		assert.NotContains(t, h.logs.String(), "Failed unclaimed BackupJob")

		h.r.Client = env.Client
		rv := j.ResourceVersion
		h.reconcile(j)
		assert.Equal(t, rv, j.ResourceVersion, "the retry sees the claim and writes nothing")
	})
	t.Run("core fails first: a claim from the same read is refused", func(t *testing.T) {
		h := newHarness(t)
		j := h.job("missing")
		driverView := j.DeepCopy()
		h.clock.Step(time.Hour)
		h.reconcile(j)
		require.Equal(t, backupsv1.BackupJobFailed, j.Status.Phase)
		driverView.MarkRunning(metav1.Now(), "coffer-driver-velero")
		err := env.Client.Status().Update(h.ctx, driverView)
		require.True(t, apierrors.IsConflict(err), "the driver's claim, written with an optimistic lock, is refused: %v", err)
		require.NoError(t, env.Client.Get(h.ctx, client.ObjectKeyFromObject(j), j))
		assert.Equal(t, backupsv1.BackupJobFailed, j.Status.Phase)
		assert.Empty(t, j.ClaimedBy())
	})
}

// After a restart, a BackupJob created long ago gets a whole claim timeout from the start: the
// drivers coming back with core may still claim it.
func TestClaimTimeoutCountsFromStart(t *testing.T) {
	h := newHarness(t)
	j := h.job("missing")
	h.r.Started = j.CreationTimestamp.Add(time.Hour)
	h.clock.SetTime(h.r.Started.Add(time.Minute))
	res := h.reconcile(j)
	assert.Equal(t, 4*time.Minute, res.RequeueAfter)
	assert.Empty(t, j.Status.Phase)
	h.clock.Step(4 * time.Minute)
	h.reconcile(j)
	assert.Equal(t, backupsv1.BackupJobFailed, j.Status.Phase)
}

// A BackupJob a driver claimed after core could have failed it (phase Running, or Accepted=True
// alone) is the driver's.
func TestClaimedJobIsNeverFailed(t *testing.T) {
	for name, claim := range map[string]func(*backupsv1.BackupJob){
		"Running":       func(j *backupsv1.BackupJob) { j.Status.Phase = backupsv1.BackupJobRunning },
		"Accepted=True": func(j *backupsv1.BackupJob) { j.MarkRunning(metav1.Now(), "third-party"); j.Status.Phase = "" },
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			j := h.job("missing")
			claim(j)
			require.NoError(t, env.Client.Status().Update(h.ctx, j))
			rv := j.ResourceVersion
			h.clock.Step(time.Hour)
			h.reconcile(j)
			assert.Equal(t, rv, j.ResourceVersion)
		})
	}
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
