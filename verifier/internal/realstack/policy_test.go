package realstack

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
	"github.com/coffer-backup/coffer/verifier/internal/etcdsnap"
	"github.com/coffer-backup/coffer/verifier/internal/policy"
)

func verifyPolicy(t *testing.T, name string, spec securityv1.BackupVerifyPolicySpec) *securityv1.BackupVerifyPolicy {
	t.Helper()
	pol := &securityv1.BackupVerifyPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	require.NoError(t, cl.Create(context.Background(), pol))
	t.Cleanup(func() { _ = cl.Delete(context.Background(), pol) })
	return pol
}

// reconcilePolicy runs a fresh policy reconciler once, as a verifier just restarted would (a
// kill -9 loses nothing a policy needs: its runs are found by name).
func reconcilePolicy(t *testing.T, pol *securityv1.BackupVerifyPolicy, clock *clocktesting.FakeClock, snapshots string) *securityv1.BackupVerifyPolicy {
	t.Helper()
	r := &policy.Reconciler{Client: cl, Reader: cl, Clock: clock, Recorder: &events.FakeRecorder{}, SnapshotDir: snapshots}
	res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pol)})
	require.NoError(t, err)
	if pol.Spec.Backend != securityv1.BackendCoffer {
		assert.Equal(t, policy.Poll, res.RequeueAfter, "nothing notifies a velero or etcd-snapshot policy: it polls")
	}
	got := &securityv1.BackupVerifyPolicy{}
	require.NoError(t, cl.Get(context.Background(), client.ObjectKeyFromObject(pol), got))
	return got
}

func policyRuns(t *testing.T, pol *securityv1.BackupVerifyPolicy) []securityv1.BackupVerifyRun {
	t.Helper()
	list := &securityv1.BackupVerifyRunList{}
	require.NoError(t, cl.List(context.Background(), list, client.MatchingLabels{securityv1.LabelPolicy: pol.Name}))
	return list.Items
}

func readyOf(pol *securityv1.BackupVerifyPolicy) *metav1.Condition {
	return meta.FindStatusCondition(pol.Status.Conditions, securityv1.ConditionReady)
}

// A policy verifies a Velero Schedule's backups as Velero makes them, each once, across restarts
// of the verifier: checksum-only (trust on first use) for each, full-restore for every Nth.
func TestPolicyVerifiesAVeleroSchedule(t *testing.T) {
	ctx := context.Background()
	ns := uniq("sched")
	namespaceWithData(t, ns)
	clock := clocktesting.NewFakeClock(time.Now())
	// A backup taken before the policy existed, of the same schedule name, is not the policy's.
	before := veleroBackup(t, uniq("before"), false, ns)
	before.Labels = map[string]string{policy.LabelVeleroSchedule: ns}
	require.NoError(t, cl.Update(ctx, before))
	time.Sleep(time.Until(before.CreationTimestamp.Add(time.Second))) // creation times are stamped to the second

	pol := verifyPolicy(t, uniq("velero-sched"), securityv1.BackupVerifyPolicySpec{Backend: securityv1.BackendVelero,
		Velero: &securityv1.VeleroBackupSource{Namespace: velerostack.Namespace, BackupSelector: &metav1.LabelSelector{
			MatchLabels: map[string]string{policy.LabelVeleroSchedule: ns}}},
		RunNamespace: "default", FullRestore: &securityv1.FullRestorePolicy{Every: 2}, MaxConcurrentRuns: ptr(int32(10))})

	got := reconcilePolicy(t, pol, clock, "")
	assert.Empty(t, policyRuns(t, got), "no backup of the schedule yet")
	require.NotNil(t, readyOf(got))
	assert.Equal(t, metav1.ConditionTrue, readyOf(got).Status, readyOf(got).Message)

	// Velero's own Schedule, daily. Velero 1.18 takes a Schedule's first backup one period after
	// its last one (else after its creation): the Schedule says its last backup was a day ago, so
	// Velero's schedule controller takes one now (Schedules have no status subresource).
	sched := &velerov1.Schedule{ObjectMeta: metav1.ObjectMeta{Name: ns, Namespace: velerostack.Namespace},
		Spec: velerov1.ScheduleSpec{Schedule: "@every 24h", Template: velerov1.BackupSpec{IncludedNamespaces: []string{ns},
			StorageLocation: velerostack.BSLName, SnapshotVolumes: ptr(false)}},
		Status: velerov1.ScheduleStatus{LastBackup: &metav1.Time{Time: time.Now().Add(-25 * time.Hour)}}}
	require.NoError(t, cl.Create(ctx, sched))
	t.Cleanup(func() { _ = cl.Delete(ctx, sched) })
	var first *velerov1.Backup
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list := &velerov1.BackupList{}
		if err := cl.List(ctx, list, client.InNamespace(velerostack.Namespace), client.MatchingLabels{policy.LabelVeleroSchedule: ns}); err != nil {
			return false, err
		}
		for i := range list.Items {
			if list.Items[i].Name != before.Name && list.Items[i].Status.Phase == velerov1.BackupPhaseCompleted {
				first = &list.Items[i]
				return true, nil
			}
		}
		return false, nil
	}), "the Schedule's first backup; velero log:\n%s", stack.VeleroLog())
	require.Equal(t, ns, first.Labels[policy.LabelVeleroSchedule], "Velero labels a Schedule's backups")

	got = reconcilePolicy(t, pol, clock, "")
	runs := policyRuns(t, got)
	require.Len(t, runs, 2, "a checksum-only run and (the first backup of the schedule) a full-restore")
	assert.Equal(t, int32(1), got.Status.Backups)
	for _, run := range runs {
		assert.Equal(t, securityv1.BackendVelero, run.Spec.Backend)
		assert.Equal(t, first.Name, run.Spec.BackupRef.Name)
		assert.Equal(t, velerostack.Namespace, run.Spec.BackupRef.Namespace)
		assert.Equal(t, velerostack.BSLName, run.Spec.BackupRef.StorageLocation)
		assert.Equal(t, "default", run.Namespace)
		assert.Equal(t, securityv1.VeleroPolicyRunName(first.Name, first.UID, run.Spec.Mode), run.Name)
		if run.Spec.Mode == securityv1.ModeFullRestore {
			assert.Equal(t, securityv1.VeleroPolicySandboxName(first.Name, first.UID), run.Spec.SandboxNamespace)
		}
	}

	// The verifier killed and restarted, twice: nothing is made again.
	reconcilePolicy(t, pol, clock, "")
	reconcilePolicy(t, pol, clock, "")
	assert.Len(t, policyRuns(t, got), 2, "each backup and mode once")

	// The checksum-only run verifies the schedule's backup: trust on first use.
	h := newHarness(t)
	trusting(t, h)
	for i := range runs {
		run := &runs[i]
		if run.Spec.Mode != securityv1.ModeChecksumOnly {
			continue
		}
		h.finish(run)
		assert.Equal(t, securityv1.RunSucceeded, run.Status.Phase, run.Status.Message)
		res := result(t, run)
		assert.Equal(t, []string{securityv1.CodeChecksumFirstUse}, codes(res.Spec.Findings))
		assert.Equal(t, securityv1.ChecksumNone, res.Spec.ChecksumBasis)
	}

	// The backup gone (Velero deleted it): its ended runs go too; a run still running stays.
	for i := range runs {
		if runs[i].Spec.Mode == securityv1.ModeFullRestore {
			require.NoError(t, cl.Delete(ctx, &runs[i]))
		}
	}
	require.NoError(t, cl.Create(ctx, &velerov1.DeleteBackupRequest{ObjectMeta: metav1.ObjectMeta{GenerateName: "del-", Namespace: velerostack.Namespace},
		Spec: velerov1.DeleteBackupRequestSpec{BackupName: first.Name}}))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := cl.Get(ctx, client.ObjectKeyFromObject(first), &velerov1.Backup{})
		return client.IgnoreNotFound(err) == nil && err != nil, client.IgnoreNotFound(err)
	}))
	got = reconcilePolicy(t, pol, clock, "")
	assert.Empty(t, policyRuns(t, got), "the runs of a backup that is gone are pruned")
}

// A policy verifies each etcd snapshot saved into the verifier's snapshot directory once it has
// settled, each once across restarts; a snapshot saved again under its name is verified again; a
// sidecar, a file etcdctl is still writing, a young file and a snapshot older than the policy are
// not runs.
func TestPolicyVerifiesEtcdSnapshotsAsTheyAppear(t *testing.T) {
	ctx := context.Background()
	dir, err := os.MkdirTemp(snapDir, "policy-")
	require.NoError(t, err)
	old := filepath.Join(dir, "old.db")
	require.NoError(t, os.WriteFile(old, []byte("before the policy"), 0o600))
	require.NoError(t, os.Chtimes(old, time.Now().Add(-time.Hour), time.Now().Add(-time.Hour)))

	pol := verifyPolicy(t, uniq("etcd-snaps"), securityv1.BackupVerifyPolicySpec{Backend: securityv1.BackendEtcdSnapshot,
		EtcdSnapshots: &securityv1.EtcdSnapshotSource{Pattern: "*.db"}, RunNamespace: "default", MaxConcurrentRuns: ptr(int32(10))})
	clock := clocktesting.NewFakeClock(time.Now())

	// A real snapshot, as etcdctl saves it (0600), and what lies beside snapshots.
	etcdSnapshot(t, filepath.Join(filepath.Base(dir), "nightly.db"))
	for _, f := range []string{"other.db.sha256", "next.db.part", "notes.txt"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600))
	}
	got := reconcilePolicy(t, pol, clock, dir)
	assert.Empty(t, policyRuns(t, got), "nothing has settled yet")
	assert.Equal(t, metav1.ConditionTrue, readyOf(got).Status)

	clock.Step(policy.DefaultSettle + time.Second)
	got = reconcilePolicy(t, pol, clock, dir)
	runs := policyRuns(t, got)
	require.Len(t, runs, 1, "one run, of nightly.db only")
	run := &runs[0]
	assert.Equal(t, securityv1.BackendEtcdSnapshot, run.Spec.Backend)
	assert.Equal(t, "nightly.db", run.Spec.BackupRef.Name)
	assert.Equal(t, securityv1.ModeChecksumOnly, run.Spec.Mode)
	reconcilePolicy(t, pol, clock, dir) // a restart
	assert.Len(t, policyRuns(t, got), 1)

	h := newHarness(t)
	h.r.Backends[securityv1.BackendEtcdSnapshot] = &etcdsnap.Backend{Dir: dir}
	h.finish(run)
	assert.Equal(t, securityv1.RunSucceeded, run.Status.Phase, run.Status.Message)
	assert.Equal(t, securityv1.SeverityInfo, run.Status.WorstSeverity, "a real snapshot verifies clean: %v", result(t, run).Spec.Findings)

	// Saved again under the same name: another snapshot, another run; the first one's run, whose
	// snapshot is gone, is pruned.
	require.NoError(t, os.Remove(filepath.Join(dir, "nightly.db")))
	etcdSnapshot(t, filepath.Join(filepath.Base(dir), "nightly.db"))
	clock.Step(policy.DefaultSettle + time.Second)
	got = reconcilePolicy(t, pol, clock, dir)
	runs = policyRuns(t, got)
	require.Len(t, runs, 1)
	assert.NotEqual(t, run.Name, runs[0].Name, "the new snapshot has a run of its own")
	assert.Equal(t, int32(1), got.Status.Backups)

	// A verifier without a snapshot directory (the managed install) says so.
	r := &policy.Reconciler{Client: cl, Reader: cl, Clock: clock, Recorder: &events.FakeRecorder{}}
	_, err = r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pol)})
	require.NoError(t, err)
	require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(pol), got))
	assert.Equal(t, metav1.ConditionFalse, readyOf(got).Status)
	assert.Equal(t, securityv1.ReasonSnapshotDirNotConfigured, readyOf(got).Reason)
}
