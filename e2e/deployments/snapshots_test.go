//go:build e2e

package deployments

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
)

// verifySnapshots proves the verifier's etcd-snapshot backend as shipped: snapshots saved as
// etcdctl saves them (root-owned, 0600, in a 0700 directory), which the verifier (user 65532)
// cannot read, are checked by a pod on the node that holds them (--etcd-check-pods): user 0 with
// CAP_DAC_READ_SEARCH only, the node's snapshot directory through a read-only hostPath, the bbolt
// consistency walk in a child process of the verifier's binary inside its image, the report back
// through the pod's termination message. It saves a real snapshot of this cluster's etcd, and a
// copy whose leaf pages are corrupted (with etcd's appended SHA-256 removed, so that only the walk
// can tell): the walk crashes on it, which must end the run as a finding and leave the verifier's
// container running (finalChecks asserts no restart). A run naming a node that does not exist
// fails, saying so, with no finding about a snapshot; no check pod is left behind.
func (e *env) verifySnapshots(t *testing.T) {
	assets, err := cluster.AssetsDir()
	require.NoError(t, err)
	dir, err := os.MkdirTemp(snapshotDir, "coffer-e2e-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	good := filepath.Join(dir, "snap.db")
	out, err := exec.CommandContext(e.ctx, filepath.Join(assets, "etcdctl"), "--endpoints="+e.n.Cluster.EtcdURL, "snapshot", "save", good).CombinedOutput()
	require.NoError(t, err, "%s", out)
	data, err := os.ReadFile(good)
	require.NoError(t, err)
	bad := corruptLeaves(t, data[:len(data)-32])
	require.NoError(t, os.WriteFile(filepath.Join(dir, "corrupt.db"), bad, 0o600))
	for _, p := range []string{dir, good} {
		st, err := os.Stat(p)
		require.NoError(t, err)
		require.Zero(t, st.Mode().Perm()&0o077, "%s is root's only, as etcdctl leaves it", p)
	}

	rel := filepath.Base(dir)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "etcd-verify"}}
	require.NoError(t, e.cl.Create(e.ctx, ns))
	runs := map[string]*securityv1.BackupVerifyRun{}
	for name, node := range map[string]string{"snap": "", "corrupt": e.n.Name, "elsewhere": "no-such-node"} {
		file := name
		if name == "elsewhere" {
			file = "snap"
		}
		run := &securityv1.BackupVerifyRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns.Name},
			Spec: securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendEtcdSnapshot, BackupRef: securityv1.BackupRef{Name: rel + "/" + file + ".db", Node: node}}}
		require.NoError(t, e.cl.Create(e.ctx, run))
		runs[name] = run
	}
	began := time.Now()
	for name, run := range runs {
		e.poll(t, "etcd-snapshot run "+name+" to end", 2*time.Minute, func() (bool, error) {
			err := e.cl.Get(e.ctx, client.ObjectKeyFromObject(run), run)
			return run.Status.Phase.IsTerminal(), err
		})
	}
	t.Logf("etcd-snapshot runs ended %s after creation", time.Since(began).Round(100*time.Millisecond))
	result := func(run *securityv1.BackupVerifyRun) *securityv1.BackupVerifyResult {
		res := &securityv1.BackupVerifyResult{}
		require.NoError(t, e.cl.Get(e.ctx, client.ObjectKey{Namespace: run.Namespace, Name: run.Status.ResultName()}, res))
		return res
	}
	assert.Equal(t, securityv1.RunSucceeded, runs["snap"].Status.Phase, runs["snap"].Status.Message)
	res := result(runs["snap"])
	assert.Equal(t, securityv1.SeverityInfo, res.Status.WorstSeverity)
	assert.NotEmpty(t, res.Spec.Details["revision"], "etcdutl's status, from the child process, is in the Result")
	assert.Equal(t, int64(len(data)), res.Spec.SizeBytes)

	// As ugallu: the run was carried out (Succeeded); its verdict is a Mismatch.
	assert.Equal(t, securityv1.RunSucceeded, runs["corrupt"].Status.Phase, runs["corrupt"].Status.Message)
	assert.Equal(t, securityv1.ReasonBackupVerifyMismatch, meta.FindStatusCondition(runs["corrupt"].Status.Conditions, securityv1.ConditionReady).Reason)
	res = result(runs["corrupt"])
	var codes []string
	for _, f := range res.Spec.Findings {
		codes = append(codes, f.Code)
		if f.Code == securityv1.CodeEtcdSnapshotCorrupt {
			t.Logf("corrupt snapshot: %s", f.Message)
		}
	}
	// The snapshot on a node that does not exist: a failed run, no verdict on any snapshot.
	assert.Equal(t, securityv1.RunFailed, runs["elsewhere"].Status.Phase, runs["elsewhere"].Status.Message)
	assert.Contains(t, runs["elsewhere"].Status.Message, "node no-such-node does not exist")
	assert.False(t, securityv1.WorstSeverity(result(runs["elsewhere"]).Spec.Findings).AtLeast(securityv1.SeverityHigh))
	// Each check pod is deleted once its report is read, before its run ends; the kubelet then
	// takes a moment to let the API server remove a pod that ran (the run may end first).
	pods := &corev1.PodList{}
	require.NoError(t, e.cl.List(e.ctx, pods, client.InNamespace("ugallu-system"), client.MatchingLabels{"app.kubernetes.io/name": "coffer-etcd-check"}))
	for _, p := range pods.Items {
		assert.False(t, p.DeletionTimestamp.IsZero(), "check pod %s is being deleted once its run ended", p.Name)
	}
	assert.NoError(t, wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := e.cl.List(ctx, pods, client.InNamespace("ugallu-system"), client.MatchingLabels{"app.kubernetes.io/name": "coffer-etcd-check"})
		return err == nil && len(pods.Items) == 0, err
	}), "each check pod is deleted once its report is read")
	assert.Contains(t, codes, securityv1.CodeEtcdSnapshotCorrupt)
	assert.NotContains(t, codes, securityv1.CodeCheckNotRun, "the child process ran in the image")
	assert.True(t, strings.Contains(fmt.Sprint(res.Spec.Findings), "consistency check"), "the walk, not the hash, found it: %v", res.Spec.Findings)
}

// corruptLeaves returns a copy of a bbolt file whose leaf pages each claim a first key far larger
// than the page.
func corruptLeaves(t *testing.T, db []byte) []byte {
	out := append([]byte(nil), db...)
	const metaPageSizeOff = 24 // page header (16) + magic (4) + version (4)
	ps := int(binary.LittleEndian.Uint32(out[metaPageSizeOff:]))
	require.Positive(t, ps)
	n := 0
	for off := 2 * ps; off+ps <= len(out); off += ps {
		if binary.LittleEndian.Uint16(out[off+8:]) == 0x02 { // leaf page
			binary.LittleEndian.PutUint32(out[off+16+8:], 0x7ffffff0) // first element's key size
			n++
		}
	}
	require.NotZero(t, n, "the snapshot has leaf pages")
	return out
}

// verifySnapshotPolicy proves an etcd-snapshot policy of the shipped install on the real node:
// with the default nodeSelector (the control-plane nodes) it lists the node's snapshot directory,
// root's only, through a lister pod on the node, and a snapshot etcdctl saves after the policy
// exists is verified clean there, by one run; no lister or check pod is left.
func (e *env) verifySnapshotPolicy(t *testing.T) {
	assets, err := cluster.AssetsDir()
	require.NoError(t, err)
	prefix := fmt.Sprintf("coffer-e2e-%d-", time.Now().UnixNano())
	pol := &securityv1.BackupVerifyPolicy{ObjectMeta: metav1.ObjectMeta{Name: "etcd-nightly"},
		Spec: securityv1.BackupVerifyPolicySpec{Backend: securityv1.BackendEtcdSnapshot, RunNamespace: "etcd-verify",
			EtcdSnapshots: &securityv1.EtcdSnapshotSource{Pattern: prefix + "*.db", Settle: &metav1.Duration{Duration: time.Second}}}}
	require.NoError(t, e.cl.Create(e.ctx, pol))
	t.Cleanup(func() { _ = e.cl.Delete(e.ctx, pol) })
	listed := "verifying 0 etcd snapshot(s) on node(s) " + e.n.Name
	e.poll(t, "the policy to list the node's snapshot directory", 2*time.Minute, func() (bool, error) {
		err := e.cl.Get(e.ctx, client.ObjectKeyFromObject(pol), pol)
		c := meta.FindStatusCondition(pol.Status.Conditions, securityv1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue && c.Message == listed, err
	})

	file := filepath.Join(snapshotDir, prefix+"nightly.db")
	out, err := exec.CommandContext(e.ctx, filepath.Join(assets, "etcdctl"), "--endpoints="+e.n.Cluster.EtcdURL, "snapshot", "save", file).CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Cleanup(func() { _ = os.Remove(file) })
	st, err := os.Stat(file)
	require.NoError(t, err)
	require.Zero(t, st.Mode().Perm()&0o077, "root's only, as etcdctl leaves it")
	// A policy changed lists again at once; unchanged, the next listing would be ListEvery (5m) on.
	patch := client.MergeFrom(pol.DeepCopy())
	pol.Spec.EtcdSnapshots.Settle = &metav1.Duration{Duration: 2 * time.Second}
	require.NoError(t, e.cl.Patch(e.ctx, pol, patch))

	runs := &securityv1.BackupVerifyRunList{}
	began := time.Now()
	e.poll(t, "the policy's run of the snapshot to end", 3*time.Minute, func() (bool, error) {
		err := e.cl.List(e.ctx, runs, client.InNamespace("etcd-verify"), client.MatchingLabels{securityv1.LabelPolicy: pol.Name})
		return err == nil && len(runs.Items) > 0 && runs.Items[0].Status.Phase.IsTerminal(), err
	})
	require.Len(t, runs.Items, 1, "one run of the one snapshot")
	run := runs.Items[0]
	t.Logf("etcd-snapshot policy: run %s ended %s after the policy changed", run.Name, time.Since(began).Round(100*time.Millisecond))
	assert.Equal(t, securityv1.RunSucceeded, run.Status.Phase, run.Status.Message)
	assert.Equal(t, e.n.Name, run.Spec.BackupRef.Node, "checked on the node that holds it")
	assert.Equal(t, prefix+"nightly.db", run.Spec.BackupRef.Name)
	assert.Equal(t, securityv1.SeverityInfo, run.Status.WorstSeverity)
	e.poll(t, "no lister or check pod left", time.Minute, func() (bool, error) {
		pods := &corev1.PodList{}
		err := e.cl.List(e.ctx, pods, client.InNamespace("ugallu-system"), client.HasLabels{"app.kubernetes.io/name"})
		for _, p := range pods.Items {
			if n := p.Labels["app.kubernetes.io/name"]; n == "coffer-etcd-list" || n == "coffer-etcd-check" {
				return false, err
			}
		}
		return true, err
	})
}
