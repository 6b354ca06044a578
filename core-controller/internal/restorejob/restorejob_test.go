package restorejob

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
	t     *testing.T
	ctx   context.Context
	ns    string
	clock *clocktesting.FakeClock
	rec   *events.FakeRecorder
	logs  *bytes.Buffer
	r     *Reconciler
}

func newHarness(t *testing.T) *harness {
	h := &harness{t: t, ns: env.Namespace(t), rec: events.NewFakeRecorder(10), logs: &bytes.Buffer{}}
	h.ctx = ctrl.LoggerInto(context.Background(), funcr.New(func(prefix, args string) {
		h.logs.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: 1}))
	h.clock = clocktesting.NewFakeClock(time.Now())
	h.r = &Reconciler{Settings: claim.Settings{Client: env.Client, Clock: h.clock, Recorder: h.rec, ClaimTimeout: time.Minute, Started: time.Now().Add(-time.Hour)}}
	return h
}

func (h *harness) backup(name string) *backupsv1.Backup {
	b := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns}, Spec: backupsv1.BackupSpec{
		ApplicationRef: corev1.TypedLocalObjectReference{Kind: "VirtualMachine", Name: "vm1"}, TakenAt: metav1.Now(),
		StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr("velerodriver.backups.cozystack.io"), Kind: "VeleroBackupStrategy", Name: "s"}}}
	require.NoError(h.t, env.Client.Create(h.ctx, b))
	return b
}

func (h *harness) restore(name, backupName string) *backupsv1.RestoreJob {
	rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns},
		Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: backupName}}}
	require.NoError(h.t, env.Client.Create(h.ctx, rj))
	return rj
}

func (h *harness) run(rj *backupsv1.RestoreJob) reconcile.Result {
	h.t.Helper()
	res, err := h.r.Reconcile(h.ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(rj)})
	require.NoError(h.t, err)
	require.NoError(h.t, env.Client.Get(h.ctx, client.ObjectKeyFromObject(rj), rj))
	return res
}

// A RestoreJob nobody claims is failed after the claim timeout (contract CORE-7): BackupNotFound
// when its Backup does not exist, NoDriverClaimed naming the strategy kind when it does, each with
// what to do; claimed and finished ones are left alone, and a failed one is never written again.
func TestUnclaimedRestoreJobsFail(t *testing.T) {
	h := newHarness(t)
	h.backup("b1")
	missing, orphan, claimed := h.restore("missing", "no-such-backup"), h.restore("orphan", "b1"), h.restore("claimed", "b1")
	claimed.MarkRunning(metav1.Now(), "coffer-driver-velero")
	require.NoError(t, env.Client.Status().Update(h.ctx, claimed))
	h.clock.SetTime(missing.CreationTimestamp.Time)
	failedBefore := testutil.ToFloat64(metrics.UnclaimedFailed.WithLabelValues(h.ns, "RestoreJob", backupsv1.ReasonBackupNotFound))

	res := h.run(missing)
	require.Equal(t, time.Minute, res.RequeueAfter, "waits for the claim timeout, precisely")
	require.Empty(t, missing.Status.Conditions)

	h.clock.Step(time.Minute)
	res = h.run(missing)
	assert.Zero(t, res.RequeueAfter)
	assert.Equal(t, backupsv1.RestoreJobFailed, missing.Status.Phase)
	require.NotNil(t, missing.Status.CompletedAt)
	assert.Equal(t, missing.Generation, missing.Status.ObservedGeneration)
	for _, typ := range []string{backupsv1.ConditionAccepted, backupsv1.ConditionReady} {
		c := meta.FindStatusCondition(missing.Status.Conditions, typ)
		require.NotNil(t, c, typ)
		assert.Equal(t, metav1.ConditionFalse, c.Status, typ)
		assert.Equal(t, backupsv1.ReasonBackupNotFound, c.Reason, typ)
		assert.Equal(t, missing.Generation, c.ObservedGeneration, typ)
		assert.Equal(t, missing.Status.Message, c.Message, typ)
	}
	assert.Equal(t, `No driver claimed this RestoreJob within 1m0s: Backup "no-such-backup" does not exist in namespace `+h.ns+
		`; create a new RestoreJob whose spec.backupRef names an existing Backup`, missing.Status.Message)
	assert.Equal(t, failedBefore+1, testutil.ToFloat64(metrics.UnclaimedFailed.WithLabelValues(h.ns, "RestoreJob", backupsv1.ReasonBackupNotFound)))
	assert.Contains(t, h.logs.String(), `"msg"="Failed unclaimed RestoreJob" "restoreJob"={"name"="missing" "namespace"="`+h.ns+`"} "reason"="BackupNotFound"`)

	// orphan may have been created a second after missing: its own claim timeout, then.
	if at := orphan.CreationTimestamp.Add(time.Minute); at.After(h.clock.Now()) {
		h.clock.SetTime(at)
	}
	h.run(orphan)
	assert.Equal(t, backupsv1.RestoreJobFailed, orphan.Status.Phase)
	c := meta.FindStatusCondition(orphan.Status.Conditions, backupsv1.ConditionReady)
	require.NotNil(t, c)
	assert.Equal(t, backupsv1.ReasonNoDriverClaimed, c.Reason)
	assert.Contains(t, c.Message, `Backup "b1" was made with VeleroBackupStrategy "s" (group velerodriver.backups.cozystack.io)`)
	assert.Contains(t, c.Message, "install or start that driver, then create a new RestoreJob")

	rv := claimed.ResourceVersion
	h.run(claimed)
	assert.Equal(t, rv, claimed.ResourceVersion, "a claimed RestoreJob is the driver's")
	rv = missing.ResourceVersion
	h.clock.Step(time.Hour)
	h.run(missing)
	assert.Equal(t, rv, missing.ResourceVersion, "a failed RestoreJob is never written again")
	require.Len(t, h.rec.Events, 2, "one Warning per failed RestoreJob")
	assert.True(t, strings.HasPrefix(<-h.rec.Events, "Warning BackupNotFound No driver claimed"))
}

// A driver's claim and core's failure race for one RestoreJob: exactly one lands.
func TestClaimRacesFailure(t *testing.T) {
	t.Run("the driver claims between core's read and its write: the claim wins", func(t *testing.T) {
		h := newHarness(t)
		rj := h.restore("raced", "no-such-backup")
		h.clock.SetTime(rj.CreationTimestamp.Add(time.Hour))
		h.r.Client = interceptor.NewClient(env.Client, interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				driver := &backupsv1.RestoreJob{}
				require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(obj), driver))
				driver.MarkRunning(metav1.Now(), "coffer-driver-velero")
				require.NoError(t, c.Status().Update(ctx, driver))
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		})
		res, err := h.r.Reconcile(h.ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(rj)})
		require.NoError(t, err, "a lost race is no error")
		assert.Equal(t, time.Second, res.RequeueAfter, "looked at again")
		require.NoError(t, env.Client.Get(h.ctx, client.ObjectKeyFromObject(rj), rj))
		assert.Equal(t, backupsv1.RestoreJobRunning, rj.Status.Phase)
		assert.Equal(t, "coffer-driver-velero", rj.ClaimedBy())
		assert.Nil(t, rj.Status.CompletedAt)
		assert.Nil(t, meta.FindStatusCondition(rj.Status.Conditions, backupsv1.ConditionReady))
		assert.Empty(t, h.rec.Events, "no failure reported")

		h.r.Client = env.Client
		rv := rj.ResourceVersion
		h.run(rj)
		assert.Equal(t, rv, rj.ResourceVersion, "the retry sees the claim and writes nothing")
	})
	t.Run("core fails first: a claim from the same read is refused", func(t *testing.T) {
		h := newHarness(t)
		rj := h.restore("failed-first", "no-such-backup")
		driverView := rj.DeepCopy()
		h.clock.SetTime(rj.CreationTimestamp.Add(time.Hour))
		h.run(rj)
		require.Equal(t, backupsv1.RestoreJobFailed, rj.Status.Phase)
		driverView.MarkRunning(metav1.Now(), "coffer-driver-velero")
		err := env.Client.Status().Update(h.ctx, driverView)
		require.True(t, apierrors.IsConflict(err), "the driver's claim, written with an optimistic lock, is refused: %v", err)
		require.NoError(t, env.Client.Get(h.ctx, client.ObjectKeyFromObject(rj), rj))
		assert.Equal(t, backupsv1.RestoreJobFailed, rj.Status.Phase)
		assert.Empty(t, rj.ClaimedBy())
	})
}

// After a restart, a RestoreJob created long ago gets a whole claim timeout from the start: the
// drivers coming back with core may still claim it.
func TestClaimTimeoutCountsFromStart(t *testing.T) {
	h := newHarness(t)
	rj := h.restore("old", "no-such-backup")
	h.r.Started = rj.CreationTimestamp.Add(time.Hour)
	h.clock.SetTime(h.r.Started.Add(10 * time.Second))
	res := h.run(rj)
	assert.Equal(t, 50*time.Second, res.RequeueAfter)
	assert.Empty(t, rj.Status.Phase)
	h.clock.Step(50 * time.Second)
	h.run(rj)
	assert.Equal(t, backupsv1.RestoreJobFailed, rj.Status.Phase)
}
