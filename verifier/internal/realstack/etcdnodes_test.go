package realstack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/verifier/internal/etcdsnap"
	"github.com/coffer-backup/coffer/verifier/internal/policy"
)

// labelledNode creates node name with labels (or gives it those labels).
func labelledNode(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{}
	err := cl.Get(ctx, client.ObjectKey{Name: name}, n)
	if apierrors.IsNotFound(err) {
		n = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
		require.NoError(t, cl.Create(ctx, n))
		t.Cleanup(func() { _ = cl.Delete(context.Background(), n) })
		return
	}
	require.NoError(t, err)
	patch := client.MergeFrom(n.DeepCopy())
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	for k, v := range labels {
		n.Labels[k] = v
	}
	require.NoError(t, cl.Patch(ctx, n, patch))
}

// listerPods are the policy's lister pods, by node.
func listerPods(t *testing.T, pol *securityv1.BackupVerifyPolicy) map[string]*corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	require.NoError(t, cl.List(context.Background(), pods, client.InNamespace(verifierSA.Namespace),
		client.MatchingLabels{etcdsnap.LabelPolicyUID: string(pol.UID)}))
	out := map[string]*corev1.Pod{}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp.IsZero() {
			out[p.Spec.NodeName] = p
		}
	}
	return out
}

// On an HA control plane each node saves its own etcd snapshots: an etcd-snapshot policy of the
// shipped install lists each control-plane node's directory through a short-lived pod on that
// node (acting under the verifier's shipped RBAC), and each snapshot is verified by a check pod
// on the node that holds it. A node it cannot list makes the policy not Ready, naming the node,
// while the other nodes' snapshots are verified; a snapshot removed from its node has its run
// pruned, and only then.
func TestPolicyVerifiesEachNodesSnapshots(t *testing.T) {
	ctx := context.Background()
	cp := map[string]string{policy.ControlPlaneLabel: ""}
	labelledNode(t, "hacp-a", cp)
	labelledNode(t, "hacp-b", cp)
	labelledNode(t, "hacp-worker", nil)
	// Two snapshot directories standing for the two nodes' --etcd-snapshot-dir.
	dirs := map[string]string{}
	for _, n := range []string{"hacp-a", "hacp-b"} {
		dirs[n] = filepath.Join(snapDir, n)
		require.NoError(t, os.MkdirAll(dirs[n], 0o700))
	}
	etcdSnapshot(t, "hacp-a/nightly.db")
	etcdSnapshot(t, "hacp-b/nightly.db") // the same name on both nodes: two snapshots
	require.NoError(t, os.WriteFile(filepath.Join(dirs["hacp-b"], "other.db.sha256"), []byte("x"), 0o600))

	pol := verifyPolicy(t, uniq("etcd-ha"), securityv1.BackupVerifyPolicySpec{Backend: securityv1.BackendEtcdSnapshot,
		EtcdSnapshots: &securityv1.EtcdSnapshotSource{Pattern: "*.db", Settle: &metav1.Duration{Duration: time.Second}},
		RunNamespace:  "default", MaxConcurrentRuns: ptr(int32(10))})
	// The snapshots were saved before the policy existed; a policy verifies those saved after it.
	later := time.Now().Add(time.Minute)
	for _, d := range dirs {
		require.NoError(t, os.Chtimes(filepath.Join(d, "nightly.db"), later, later))
	}
	clock := clocktesting.NewFakeClock(time.Now().Add(2 * time.Minute))
	sa := asVerifier(t)
	pb := &etcdsnap.PodBackend{Reader: sa, Client: sa, Namespace: verifierSA.Namespace, Image: "coffer/verifier:test", HostDir: "/var/lib/etcd-snapshots"}
	reconciler := func() *policy.Reconciler {
		return &policy.Reconciler{Client: sa, Reader: sa, Clock: clock, Recorder: &events.FakeRecorder{}, SnapshotDir: "/var/lib/etcd-snapshots", Lister: pb}
	}
	r := reconciler()
	step := func() (*securityv1.BackupVerifyPolicy, reconcile.Result) {
		t.Helper()
		res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pol)})
		require.NoError(t, err)
		got := &securityv1.BackupVerifyPolicy{}
		require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(pol), got))
		return got, res
	}

	got, res := step()
	pods := listerPods(t, pol)
	require.Len(t, pods, 2, "one lister pod on each control-plane node, none on the worker")
	assert.Less(t, res.RequeueAfter, policy.Poll, "the policy looks again soon at pods it waits for")
	assert.Empty(t, policyRuns(t, got), "nothing listed yet")
	assert.Equal(t, "listing the snapshot directories of node(s) hacp-a, hacp-b", readyOf(got).Message)
	for node, p := range pods {
		assert.Contains(t, dirs, node)
		c := p.Spec.Containers[0]
		assert.Equal(t, []string{etcdsnap.ListCommand, "--dir=/snapshots", "--pattern=*.db"}, c.Args)
		assert.Equal(t, "/var/lib/etcd-snapshots", p.Spec.Volumes[0].HostPath.Path)
		assert.True(t, c.VolumeMounts[0].ReadOnly)
		assert.Equal(t, []corev1.Capability{"DAC_READ_SEARCH"}, c.SecurityContext.Capabilities.Add, "reading root's files, nothing else")
		assert.False(t, *p.Spec.AutomountServiceAccountToken)
		assert.NotNil(t, p.Spec.ActiveDeadlineSeconds)
	}
	step() // the pods have not ended: still waiting, no second pod
	assert.Len(t, listerPods(t, pol), 2)

	for node, p := range pods {
		kubeletOn(t, p, "", dirs[node])
	}
	got, res = step()
	assert.Equal(t, policy.Poll, res.RequeueAfter)
	assert.Empty(t, listerPods(t, pol), "each lister pod is deleted once read")
	runs := policyRuns(t, got)
	require.Len(t, runs, 2, "one run per node's snapshot; the sidecar is none")
	byNode := map[string]*securityv1.BackupVerifyRun{}
	for i := range runs {
		byNode[runs[i].Spec.BackupRef.Node] = &runs[i]
		assert.Equal(t, "nightly.db", runs[i].Spec.BackupRef.Name)
	}
	require.Contains(t, byNode, "hacp-a")
	require.Contains(t, byNode, "hacp-b")
	assert.NotEqual(t, byNode["hacp-a"].Name, byNode["hacp-b"].Name)
	assert.Equal(t, int32(2), got.Status.Backups)
	assert.Equal(t, metav1.ConditionTrue, readyOf(got).Status, readyOf(got).Message)
	assert.Equal(t, "verifying 2 etcd snapshot(s) on node(s) hacp-a, hacp-b", readyOf(got).Message)

	// A restarted verifier lists again, and makes no second run of either snapshot.
	r = reconciler()
	step()
	for node, p := range listerPods(t, pol) {
		kubeletOn(t, p, "", dirs[node])
	}
	got, _ = step()
	assert.Len(t, policyRuns(t, got), 2)

	// Each snapshot is verified on the node that holds it.
	h := newHarness(t)
	h.r.Backends[securityv1.BackendEtcdSnapshot] = pb
	for node, run := range byNode {
		h.step(run)
		check := checkPodOf(t, run)
		assert.Equal(t, node, check.Spec.NodeName)
		kubeletOn(t, check, "", dirs[node])
		h.finish(run)
		assert.Equal(t, securityv1.RunSucceeded, run.Status.Phase, run.Status.Message)
		assert.Equal(t, securityv1.SeverityInfo, run.Status.WorstSeverity, "%s: %v", node, result(t, run).Spec.Findings)
	}

	// Node hacp-b's snapshot is removed, and node hacp-a's directory cannot be read: the policy
	// says which node it could not list, and keeps hacp-a's run (no listing said it is gone);
	// hacp-b's run, whose snapshot a complete listing lacks, is pruned.
	require.NoError(t, os.Remove(filepath.Join(dirs["hacp-b"], "nightly.db")))
	clock.Step(policy.ListEvery)
	step()
	pods = listerPods(t, pol)
	require.Len(t, pods, 2, "listed again after ListEvery")
	kubeletOn(t, pods["hacp-a"], "", filepath.Join(snapDir, "no-such-dir"))
	kubeletOn(t, pods["hacp-b"], "", dirs["hacp-b"])
	got, _ = step()
	assert.Equal(t, metav1.ConditionFalse, readyOf(got).Status)
	assert.Equal(t, securityv1.ReasonSnapshotDirUnreadable, readyOf(got).Reason)
	assert.Contains(t, readyOf(got).Message, "node hacp-a")
	runs = policyRuns(t, got)
	require.Len(t, runs, 1)
	assert.Equal(t, "hacp-a", runs[0].Spec.BackupRef.Node)

	t.Run("a lister pod that never runs is given up, naming its node", func(t *testing.T) {
		pol := verifyPolicy(t, uniq("etcd-stuck"), securityv1.BackupVerifyPolicySpec{Backend: securityv1.BackendEtcdSnapshot,
			EtcdSnapshots: &securityv1.EtcdSnapshotSource{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/hostname": "hacp-worker"}}},
			RunNamespace:  "default"})
		labelledNode(t, "hacp-worker", map[string]string{"kubernetes.io/hostname": "hacp-worker"})
		pb := &etcdsnap.PodBackend{Reader: sa, Client: sa, Namespace: verifierSA.Namespace, Image: "coffer/verifier:test", HostDir: "/var/lib/etcd-snapshots",
			Clock: clocktesting.NewFakeClock(time.Now().Add(4 * time.Minute))}
		r := &policy.Reconciler{Client: sa, Reader: sa, Clock: clock, Recorder: &events.FakeRecorder{}, SnapshotDir: "/var/lib/etcd-snapshots", Lister: pb}
		for range 2 { // created; then, 4 minutes on and never run, given up
			_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pol)})
			require.NoError(t, err)
		}
		got := &securityv1.BackupVerifyPolicy{}
		require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(pol), got))
		assert.Equal(t, securityv1.ReasonSnapshotDirUnreadable, readyOf(got).Reason)
		assert.Contains(t, readyOf(got).Message, "the lister pod on node hacp-worker did not list")
	})

	t.Run("a nodeSelector selecting none, or too many", func(t *testing.T) {
		for _, c := range []struct {
			nodes  int
			reason string
		}{{0, securityv1.ReasonNoSnapshotNodes}, {policy.MaxSnapshotNodes + 1, securityv1.ReasonTooManySnapshotNodes}} {
			label := uniq("coffer-test-many")
			for i := range c.nodes {
				labelledNode(t, fmt.Sprintf("%s-%d", label, i), map[string]string{"coffer-test": label})
			}
			pol := verifyPolicy(t, uniq("etcd-sel"), securityv1.BackupVerifyPolicySpec{Backend: securityv1.BackendEtcdSnapshot,
				EtcdSnapshots: &securityv1.EtcdSnapshotSource{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"coffer-test": label}}},
				RunNamespace:  "default"})
			_, err := reconciler().Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pol)})
			require.NoError(t, err)
			got := &securityv1.BackupVerifyPolicy{}
			require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(pol), got))
			assert.Equal(t, c.reason, readyOf(got).Reason, readyOf(got).Message)
			assert.Empty(t, listerPods(t, pol), "no pod for a policy that lists no node")
		}
	})

	t.Run("a snapshot still settling is looked at once it has settled, not a listing later", func(t *testing.T) {
		clock.Step(policy.ListEvery)
		step()
		pods := listerPods(t, pol)
		require.Len(t, pods, 2)
		late := filepath.Join(dirs["hacp-b"], "late.db")
		require.NoError(t, os.WriteFile(late, []byte("x"), 0o600))
		require.NoError(t, os.Chtimes(late, clock.Now(), clock.Now()))
		for node, p := range pods {
			kubeletOn(t, p, "", dirs[node])
		}
		got, res := step()
		assert.Empty(t, listerPods(t, pol))
		assert.Less(t, res.RequeueAfter, policy.Poll, "looked at again when late.db has settled")
		for _, run := range policyRuns(t, got) {
			assert.NotEqual(t, "late.db", run.Spec.BackupRef.Name, "not settled")
		}
		clock.Step(2 * time.Second)
		step()
		pods = listerPods(t, pol)
		require.Len(t, pods, 1, "hacp-b's directory listed again; hacp-a's listing stands")
		require.Contains(t, pods, "hacp-b")
		kubeletOn(t, pods["hacp-b"], "", dirs["hacp-b"])
		got, _ = step()
		var refs []string
		for _, run := range policyRuns(t, got) {
			refs = append(refs, run.Spec.BackupRef.Node+":"+run.Spec.BackupRef.Name)
		}
		assert.Contains(t, refs, "hacp-b:late.db")
	})

	t.Run("lister pods older than any listing read are swept", func(t *testing.T) {
		clock.Step(policy.ListEvery)
		step() // a pass whose pods are never read (the policy deleted, the verifier gone)
		left := listerPods(t, pol)
		require.Len(t, left, 2)
		names := []string{}
		for _, p := range left {
			names = append(names, p.Name)
		}
		sort.Strings(names)
		sw := &etcdsnap.PodSweeper{Reader: cl, Runs: cl, Client: cl, Namespace: verifierSA.Namespace, Clock: clocktesting.NewFakeClock(time.Now())}
		_, err := sw.Sweep(ctx)
		require.NoError(t, err)
		assert.Len(t, listerPods(t, pol), len(left), "young lister pods stay")
		sw.Clock = clocktesting.NewFakeClock(time.Now().Add(11 * time.Minute))
		_, err = sw.Sweep(ctx)
		require.NoError(t, err)
		assert.Empty(t, listerPods(t, pol), "swept: %v", names)
	})
}
