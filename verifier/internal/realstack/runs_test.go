package realstack

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
	"github.com/coffer-backup/coffer/verifier/internal/velerocheck"
	"github.com/coffer-backup/coffer/verifier/internal/verifyrun"
)

// sampleCount is the number of observations of a histogram, or the value of a counter, summed
// over its labels, in the controller-runtime registry the verifier serves.
func sampleCount(t *testing.T, name string) uint64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	var n uint64
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			n += m.GetHistogram().GetSampleCount() + uint64(m.GetCounter().GetValue())
		}
	}
	return n
}

// assertVerifyFailed: the run ended Failed because the verification could not be carried out:
// Ready=False with reason BackupVerifyFailed, one terminal SecurityEvent of that type (class
// Anomaly), and no finding of high or worse (nothing is claimed about the backup).
func assertVerifyFailed(t *testing.T, run *securityv1.BackupVerifyRun) {
	t.Helper()
	assert.Equal(t, securityv1.RunFailed, run.Status.Phase)
	ready := meta.FindStatusCondition(run.Status.Conditions, securityv1.ConditionReady)
	require.NotNil(t, ready, "conditions: %v", run.Status.Conditions)
	assert.Equal(t, metav1.ConditionFalse, ready.Status)
	assert.Equal(t, securityv1.ReasonBackupVerifyFailed, ready.Reason)
	assert.Equal(t, run.Generation, ready.ObservedGeneration)
	progressing := meta.FindStatusCondition(run.Status.Conditions, securityv1.ConditionProgressing)
	require.NotNil(t, progressing)
	assert.Equal(t, metav1.ConditionFalse, progressing.Status)
	ev := securityEvents(t, run)
	require.Len(t, ev[securityv1.EventBackupVerifyFailed], 1, "events: %v", ev)
	assert.Equal(t, securityv1.ClassAnomaly, ev[securityv1.EventBackupVerifyFailed][0].Spec.Class)
	assert.Empty(t, ev[securityv1.EventBackupVerifyMismatch])
	assert.Empty(t, ev[securityv1.EventBackupVerifyCompleted])
	res := result(t, run)
	assert.False(t, securityv1.WorstSeverity(res.Spec.Findings).AtLeast(securityv1.SeverityHigh), "no finding claims anything about the backup: %v", res.Spec.Findings)
	assert.NotEmpty(t, res.Spec.Details[securityv1.DetailFailure])
	assert.Equal(t, securityv1.EventBackupVerifyFailed, securityv1.TerminalEventType(run.Status.Phase, res.Spec.Findings), "the event the Result calls for")
}

// etcdSnapshot saves a real snapshot of the test cluster's etcd as snapDir/name (once).
func etcdSnapshot(t *testing.T, name string) {
	t.Helper()
	path := filepath.Join(snapDir, name)
	if _, err := os.Stat(path); err == nil {
		return
	}
	assets, err := cluster.AssetsDir()
	require.NoError(t, err)
	out, err := exec.Command(filepath.Join(assets, "etcdctl"), "--endpoints="+lc.EtcdURL, "snapshot", "save", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
}

func etcdRun(t *testing.T, name, ref string) *securityv1.BackupVerifyRun {
	return newRun(t, name, securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendEtcdSnapshot, BackupRef: securityv1.BackupRef{Name: ref},
		Timeout: &metav1.Duration{Duration: 5 * time.Minute}})
}

// TestRunRecreatedUnderTheSameName: a run deleted and created again under the same name meets
// the Result of the earlier one. Before, the new run refused it ("belongs to another run") on
// every pass and never ended. A Result now belongs to its run (ownerReference, run-uid label, so
// the garbage collector deletes it with the run); one left behind (orphaned, or not yet
// collected) is deleted and the new run writes its own, adopting nothing.
func TestRunRecreatedUnderTheSameName(t *testing.T) {
	ctx := context.Background()
	etcdSnapshot(t, "same.db")
	h := newHarness(t)
	first := etcdRun(t, "same-name", "same.db")
	h.finish(first)
	require.Equal(t, securityv1.RunSucceeded, first.Status.Phase, first.Status.Message)
	firstRes := result(t, first)
	require.Len(t, firstRes.OwnerReferences, 1)
	owner := firstRes.OwnerReferences[0]
	assert.Equal(t, first.UID, owner.UID)
	assert.Equal(t, "BackupVerifyRun", owner.Kind)
	assert.True(t, owner.Controller != nil && *owner.Controller)
	assert.Equal(t, string(first.UID), firstRes.Labels[securityv1.LabelRunUID])

	// Deleted with --cascade=orphan: the garbage collector strips the Result's ownerReference and
	// leaves it, as a Result written before Results had owners is left.
	require.NoError(t, cl.Delete(ctx, first, client.PropagationPolicy(metav1.DeletePropagationOrphan)))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := cl.Get(ctx, client.ObjectKeyFromObject(first), &securityv1.BackupVerifyRun{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}))
	stale := &securityv1.BackupVerifyResult{}
	require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(firstRes), stale), "the orphaned Result is still there")
	require.Empty(t, stale.OwnerReferences)

	second := etcdRun(t, "same-name", "same.db")
	require.NotEqual(t, first.UID, second.UID)
	h.finish(second)
	assert.Equal(t, securityv1.RunSucceeded, second.Status.Phase, second.Status.Message)
	res := result(t, second)
	assert.Equal(t, second.UID, res.Spec.RunRef.UID)
	assert.NotEqual(t, stale.UID, res.UID, "a new Result, not the earlier run's")
	require.Len(t, res.OwnerReferences, 1)
	assert.Equal(t, second.UID, res.OwnerReferences[0].UID)
	assert.Equal(t, string(second.UID), res.Labels[securityv1.LabelRunUID])
	assert.Len(t, securityEvents(t, second)[securityv1.EventBackupVerifyCompleted], 1)

	// Deleted the usual way and created again at once: the new run meets the old Result or not,
	// depending on how fast the collector is, and ends with its own either way.
	require.NoError(t, cl.Delete(ctx, second))
	var third *securityv1.BackupVerifyRun
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		third = &securityv1.BackupVerifyRun{ObjectMeta: metav1.ObjectMeta{Name: "same-name", Namespace: "default"}, Spec: second.Spec}
		err := cl.Create(ctx, third)
		return err == nil, client.IgnoreAlreadyExists(err)
	}))
	h.finish(third)
	assert.Equal(t, securityv1.RunSucceeded, third.Status.Phase, third.Status.Message)
	assert.Equal(t, third.UID, result(t, third).Spec.RunRef.UID)
}

// TestStartedEventSurvivesAFailedEmit: the first attempt to emit BackupVerifyStarted fails.
// Before, the run was already Running and the event was never emitted; now the start is recorded
// only once the event exists, and a retry emits it: exactly one.
func TestStartedEventSurvivesAFailedEmit(t *testing.T) {
	etcdSnapshot(t, "started.db")
	h := newHarness(t)
	failed := false
	r := h.reconciler(cl)
	r.Client = interceptor.NewClient(cl, interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if se, ok := obj.(*securityv1.SecurityEvent); ok && se.Spec.Type == securityv1.EventBackupVerifyStarted && !failed {
			failed = true
			return apierrors.NewServiceUnavailable("injected: the API server is briefly unavailable")
		}
		return c.Create(ctx, obj, opts...)
	}})
	h.r = r
	run := etcdRun(t, "started-once", "started.db")
	_, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(run)})
	require.Error(t, err)
	require.NoError(t, cl.Get(context.Background(), client.ObjectKeyFromObject(run), run))
	assert.Empty(t, run.Status.Phase, "not started while its event is missing")
	h.finish(run)
	assert.Equal(t, securityv1.RunSucceeded, run.Status.Phase, run.Status.Message)
	ev := securityEvents(t, run)
	assert.Len(t, ev[securityv1.EventBackupVerifyStarted], 1, "exactly one BackupVerifyStarted")
	assert.Len(t, ev[securityv1.EventBackupVerifyCompleted], 1)
	ready := meta.FindStatusCondition(run.Status.Conditions, securityv1.ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, metav1.ConditionTrue, ready.Status)
	assert.Equal(t, securityv1.ReasonBackupVerifyCompleted, ready.Reason)
}

// TestEtcdCheckKilled: the child process of the etcd check is killed by SIGKILL, as the OOM
// killer kills it (the child of this test binary honours the knob; the verifier's never does).
// Before, it was an etcd-snapshot-corrupt finding (critical, Detection) about a sound snapshot;
// now the run fails as not carried out (BackupVerifyFailed, Anomaly), saying what to check.
func TestEtcdCheckKilled(t *testing.T) {
	etcdSnapshot(t, "killed.db")
	t.Setenv("COFFER_ETCDSNAP_TEST_SELF_SIGNAL", "KILL") // etcdsnap's testSignalEnv
	h := newHarness(t)
	run := etcdRun(t, "etcd-killed", "killed.db")
	h.finish(run)
	assertVerifyFailed(t, run)
	assert.NotContains(t, codes(result(t, run).Spec.Findings), securityv1.CodeEtcdSnapshotCorrupt)
	assert.Contains(t, run.Status.Message, "memory limit")
}

// TestVeleroBackupReadErrors: errors reading the Velero Backup other than a definite NotFound
// (a Forbidden, a timeout) were velero-backup-not-found findings (high, Detection) about a
// backup that exists. Now they are retried within the run's timeout; one that passes leaves no
// trace in the Result, one that lasts fails the run as not carried out, saying what to check.
func TestVeleroBackupReadErrors(t *testing.T) {
	ns := uniq("re")
	namespaceWithData(t, ns)
	vb := veleroBackup(t, ns, true, ns)
	for i, tt := range []struct {
		name string
		err  error
		hint string
	}{
		{"forbidden", apierrors.NewForbidden(schema.GroupResource{Group: "velero.io", Resource: "backups"}, vb.Name, nil), "RBAC"},
		{"timeout", apierrors.NewTimeoutError("injected", 1), "health"},
	} {
		failing := func(times *int) client.Reader {
			return interceptor.NewClient(cl, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if _, ok := obj.(*velerov1.Backup); ok && *times != 0 {
					*times--
					return tt.err
				}
				return c.Get(ctx, key, obj, opts...)
			}})
		}
		t.Run(tt.name+": passing", func(t *testing.T) {
			times := 2
			h := newHarness(t)
			h.r = h.reconciler(failing(&times))
			run := veleroRun(t, "re-pass-"+string(rune('a'+i)), vb.Name, securityv1.ModeChecksumOnly, "")
			res := h.step(run)
			assert.Equal(t, securityv1.RunRunning, run.Status.Phase)
			c := meta.FindStatusCondition(run.Status.Conditions, securityv1.ConditionProgressing)
			require.NotNil(t, c)
			assert.Equal(t, securityv1.ReasonRetrying, c.Reason)
			assert.Contains(t, c.Message, tt.hint)
			assert.Positive(t, res.RequeueAfter)
			assert.LessOrEqual(t, res.RequeueAfter, verifyrun.RetryMax, "backs off, never a 1 ms requeue, never past the deadline")
			h.finish(run)
			assert.Equal(t, securityv1.RunSucceeded, run.Status.Phase, run.Status.Message)
			assert.Equal(t, []string{securityv1.CodeChecksumMatch}, codes(result(t, run).Spec.Findings))
		})
		t.Run(tt.name+": lasting", func(t *testing.T) {
			times := -1
			h := newHarness(t)
			h.r = h.reconciler(failing(&times))
			run := veleroRun(t, "re-last-"+string(rune('a'+i)), vb.Name, securityv1.ModeChecksumOnly, "")
			res := h.step(run)
			require.Equal(t, securityv1.RunRunning, run.Status.Phase)
			h.clock.Step(res.RequeueAfter)
			h.step(run)
			require.Equal(t, securityv1.RunRunning, run.Status.Phase)
			h.clock.Step(10 * time.Minute) // the run's timeout
			h.step(run)
			assertVerifyFailed(t, run)
			r := result(t, run)
			assert.NotContains(t, codes(r.Spec.Findings), securityv1.CodeVeleroBackupNotFound)
			assert.Equal(t, []string{securityv1.CodeTimeout}, codes(r.Spec.Findings))
			assert.Contains(t, run.Status.Message, tt.hint, "says what to check")
			assert.Contains(t, run.Status.Message, "velero.io")
		})
	}
}

// TestRestoreOfAnotherRunIsNotAFinding: the run's Restore name is taken by a Restore of another
// run (an earlier run of the same name deleted mid-restore). Before, that was a restore-failed
// finding (critical, Detection) about a sound backup, and the cleanup deleted the other run's
// Restore. Now the run fails at once as not carried out (a retry cannot fix it; BackupVerifyFailed
// is reachable) and the Restore is left alone.
func TestRestoreOfAnotherRunIsNotAFinding(t *testing.T) {
	ctx := context.Background()
	ns := uniq("ar")
	namespaceWithData(t, ns)
	vb := veleroBackup(t, ns, true, ns)
	name := "fr-other-restore"
	foreign := &velerov1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: velerostack.Namespace,
		Name:   velerocheck.RestoreName(&securityv1.BackupVerifyRun{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}),
		Labels: map[string]string{securityv1.LabelRunUID: "0badc0de-0000-0000-0000-000000000000"}},
		Spec: velerov1.RestoreSpec{BackupName: "no-such-backup"}}
	require.NoError(t, cl.Create(ctx, foreign))
	h := newHarness(t)
	run := veleroRun(t, name, vb.Name, securityv1.ModeFullRestore, ns+"-bvsandbox")
	h.step(run)
	require.True(t, run.Status.Phase.IsTerminal(), "a retry cannot fix it: the run ends at once")
	assertVerifyFailed(t, run)
	assert.NotContains(t, codes(result(t, run).Spec.Findings), securityv1.CodeRestoreFailed)
	assert.Contains(t, run.Status.Message, "does not belong to this run")
	got := &velerov1.Restore{}
	require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(foreign), got))
	assert.True(t, got.DeletionTimestamp.IsZero(), "another run's Restore is never deleted")
}

// stallingTransport accepts every request and answers none until the request's context ends: an
// object store that stopped answering mid-verification.
type stallingTransport struct{}

func (stallingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	<-req.Context().Done()
	return nil, req.Context().Err()
}

// TestTimeoutHoldsOnVeleroPaths: the object store stops answering in the middle of a checksum-only
// and of a full-restore verification. Before, the Velero paths had no deadline and the pass hung
// for as long as the store did; now spec.timeout holds there as on the etcd path: the run ends
// Failed (timeout finding, BackupVerifyFailed) within its timeout plus a few seconds.
func TestTimeoutHoldsOnVeleroPaths(t *testing.T) {
	ns := uniq("st")
	namespaceWithData(t, ns)
	vb := veleroBackup(t, ns, true, ns)
	const timeout = 5 * time.Second
	for i, m := range []securityv1.Mode{securityv1.ModeChecksumOnly, securityv1.ModeFullRestore} {
		t.Run(string(m), func(t *testing.T) {
			h := newHarness(t)
			h.velero().HTTP = &http.Client{Transport: stallingTransport{}}
			run := newRun(t, "stall-"+string(rune('a'+i)), securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendVelero,
				BackupRef: securityv1.BackupRef{Name: vb.Name, Namespace: velerostack.Namespace}, Mode: m, SandboxNamespace: ns + "-" + string(rune('a'+i)) + "-bvsandbox",
				Timeout: &metav1.Duration{Duration: timeout}})
			start := time.Now()
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = h.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(run)})
			}()
			select {
			case <-done:
			case <-time.After(timeout + time.Minute):
				t.Fatalf("the pass did not end within %s of the run's timeout of %s", time.Minute, timeout)
			}
			elapsed := time.Since(start)
			assert.Less(t, elapsed, timeout+CleanupBound, "ends within the timeout plus the stated bound")
			require.NoError(t, cl.Get(context.Background(), client.ObjectKeyFromObject(run), run))
			assertVerifyFailed(t, run)
			assert.Equal(t, []string{securityv1.CodeTimeout}, codes(result(t, run).Spec.Findings))
			assert.True(t, strings.Contains(run.Status.Message, "timeout of 5s"), run.Status.Message)
		})
	}
}

// CleanupBound is what the tests allow past a run's timeout: one pass's terminal writes and a
// full-restore's cleanup (verifyrun.CleanupTimeout at most).
const CleanupBound = verifyrun.CleanupTimeout + 10*time.Second
