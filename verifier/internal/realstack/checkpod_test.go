package realstack

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/verifier/internal/etcdsnap"
)

// checkPods gives the harness the etcd-snapshot backend of the shipped Deployment
// (--etcd-check-pods), acting under the verifier's shipped RBAC, with node as its own node.
func checkPods(t *testing.T, h *harness, node string) *etcdsnap.PodBackend {
	sa := asVerifier(t)
	pb := &etcdsnap.PodBackend{Reader: sa, Client: sa, Namespace: verifierSA.Namespace, Image: "coffer/verifier:test", HostDir: snapDir, Node: node}
	h.r.Backends[securityv1.BackendEtcdSnapshot] = pb
	return pb
}

func nodeNamed(t *testing.T, name string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := cl.Create(context.Background(), n); !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
}

func checkPodOf(t *testing.T, run *securityv1.BackupVerifyRun) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{}
	require.NoError(t, cl.Get(context.Background(), client.ObjectKey{Namespace: verifierSA.Namespace, Name: etcdsnap.PodName(run)}, pod))
	return pod
}

// kubelet plays the node's kubelet: it runs the pod's check (the verifier's own PodMain, on the
// same snapshot directory) and reports the container terminated with the check's result as its
// termination message, or with reason when it is set (OOMKilled: no message).
func kubelet(t *testing.T, pod *corev1.Pod, reason string) {
	t.Helper()
	kubeletOn(t, pod, reason, snapDir)
}

// kubeletOn is kubelet on a node whose snapshot directory is dir; it runs a lister pod's listing
// (ListMain) as it runs a check pod's check.
func kubeletOn(t *testing.T, pod *corev1.Pod, reason, dir string) {
	t.Helper()
	term := &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: metav1.Now()}
	if reason != "" {
		term = &corev1.ContainerStateTerminated{ExitCode: 137, Reason: reason, FinishedAt: metav1.Now()}
	} else {
		args := append([]string(nil), pod.Spec.Containers[0].Args[1:]...)
		out := filepath.Join(t.TempDir(), "termination-log")
		args = append(args, "--dir="+dir, "--result="+out) // the hostPath, as the pod sees it at /snapshots
		var stdout bytes.Buffer
		main := etcdsnap.PodMain
		if pod.Spec.Containers[0].Args[0] == etcdsnap.ListCommand {
			main = etcdsnap.ListMain
		}
		require.Equal(t, 0, main(args, &stdout))
		msg, err := os.ReadFile(out)
		require.NoError(t, err)
		require.LessOrEqual(t, len(msg), 4096, "within the kubelet's bound on termination messages")
		term.Message = string(msg)
	}
	pod.Status.Phase = corev1.PodSucceeded
	if reason != "" {
		pod.Status.Phase = corev1.PodFailed
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "check", Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: term}}}
	require.NoError(t, cl.Status().Update(context.Background(), pod))
}

// The etcd-snapshot check of the shipped Deployment runs as a pod on the node that holds the
// snapshot, with only what reading it takes, and reports back through its termination message.
func TestEtcdCheckPod(t *testing.T) {
	ctx := context.Background()
	etcdSnapshot(t, "checkpod.db")
	nodeNamed(t, "cp-1")
	nodeNamed(t, "cp-2")

	h := newHarness(t)
	checkPods(t, h, "cp-1")
	run := etcdRun(t, "checkpod", "checkpod.db")
	h.step(run)
	require.Equal(t, securityv1.RunRunning, run.Status.Phase)
	pod := checkPodOf(t, run)
	assert.Equal(t, "cp-1", pod.Spec.NodeName, "the verifier's own node, the run naming none")
	assert.Equal(t, string(run.UID), pod.Labels[securityv1.LabelRunUID])
	assert.Equal(t, corev1.RestartPolicyNever, pod.Spec.RestartPolicy)
	assert.False(t, *pod.Spec.AutomountServiceAccountToken, "no API token in the pod")
	require.NotNil(t, pod.Spec.ActiveDeadlineSeconds, "the pod ends by the run's deadline")
	assert.LessOrEqual(t, *pod.Spec.ActiveDeadlineSeconds, int64(5*60+1))
	require.Len(t, pod.Spec.Volumes, 1)
	assert.Equal(t, snapDir, pod.Spec.Volumes[0].HostPath.Path)
	c := pod.Spec.Containers[0]
	assert.Equal(t, []string{etcdsnap.CheckCommand, "--dir=/snapshots", "--ref=checkpod.db"}, c.Args)
	require.Len(t, c.VolumeMounts, 1)
	assert.True(t, c.VolumeMounts[0].ReadOnly)
	sc := c.SecurityContext
	assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	assert.Equal(t, []corev1.Capability{"DAC_READ_SEARCH"}, sc.Capabilities.Add, "reading root's files, nothing else")
	assert.False(t, *sc.AllowPrivilegeEscalation)
	assert.True(t, *sc.ReadOnlyRootFilesystem)
	assert.False(t, *sc.Privileged)
	assert.NotNil(t, c.Resources.Limits.Memory())
	progressing := meta.FindStatusCondition(run.Status.Conditions, securityv1.ConditionProgressing)
	require.NotNil(t, progressing)
	assert.Contains(t, progressing.Message, "check pod "+verifierSA.Namespace+"/"+pod.Name+" on node cp-1")

	h.step(run) // the pod has not ended: the run waits
	require.Equal(t, securityv1.RunRunning, run.Status.Phase)
	kubelet(t, pod, "")
	h.finish(run)
	assert.Equal(t, securityv1.RunSucceeded, run.Status.Phase, run.Status.Message)
	res := result(t, run)
	assert.Equal(t, securityv1.SeverityInfo, res.Status.WorstSeverity, "a real snapshot, checked clean: %v", res.Spec.Findings)
	assert.NotEmpty(t, res.Spec.Details["revision"], "the check's details came back through the termination message")
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, res.Spec.ComputedChecksum)
	assert.True(t, apierrors.IsNotFound(cl.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})), "the pod is deleted once read")

	t.Run("on the node the run names", func(t *testing.T) {
		run := newRun(t, "checkpod-cp2", securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendEtcdSnapshot,
			BackupRef: securityv1.BackupRef{Name: "checkpod.db", Node: "cp-2"}, Timeout: &metav1.Duration{Duration: 5 * time.Minute}})
		h.step(run)
		assert.Equal(t, "cp-2", checkPodOf(t, run).Spec.NodeName)
	})
	t.Run("a check out of memory is a failed run", func(t *testing.T) {
		run := etcdRun(t, "checkpod-oom", "checkpod.db")
		h.step(run)
		kubelet(t, checkPodOf(t, run), "OOMKilled")
		h.finish(run)
		assertVerifyFailed(t, run)
		assert.Contains(t, run.Status.Message, "ran out of memory")
	})
	t.Run("a node that does not exist is a failed run", func(t *testing.T) {
		run := newRun(t, "checkpod-nonode", securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendEtcdSnapshot,
			BackupRef: securityv1.BackupRef{Name: "checkpod.db", Node: "cp-9"}, Timeout: &metav1.Duration{Duration: 5 * time.Minute}})
		h.finish(run)
		assertVerifyFailed(t, run)
		assert.Contains(t, run.Status.Message, "node cp-9 does not exist")
	})
	t.Run("a pod of that name that is not the run's is refused", func(t *testing.T) {
		run := etcdRun(t, "checkpod-planted", "checkpod.db")
		planted := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: etcdsnap.PodName(run), Namespace: verifierSA.Namespace},
			Spec: corev1.PodSpec{NodeName: "cp-1", Containers: []corev1.Container{{Name: "x", Image: "x"}}}}
		require.NoError(t, cl.Create(ctx, planted))
		h.finish(run)
		assertVerifyFailed(t, run)
		assert.Contains(t, run.Status.Message, "is not this run's check pod")
	})
	t.Run("the pods of runs gone or ended are swept", func(t *testing.T) {
		gone := etcdRun(t, "checkpod-gone", "checkpod.db")
		h.step(gone)
		pod := checkPodOf(t, gone)
		live := etcdRun(t, "checkpod-live", "checkpod.db")
		h.step(live)
		require.NoError(t, cl.Delete(ctx, gone))
		sw := &etcdsnap.PodSweeper{Reader: cl, Runs: cl, Client: cl, Namespace: verifierSA.Namespace, Clock: clocktesting.NewFakeClock(time.Now())}
		n, err := sw.Sweep(ctx)
		require.NoError(t, err)
		assert.Zero(t, n, "a minute's grace")
		sw.Clock = clocktesting.NewFakeClock(time.Now().Add(2 * time.Minute))
		_, err = sw.Sweep(ctx)
		require.NoError(t, err)
		// Deleted (a pod bound to a node waits for its kubelet, which this API server has not).
		err = cl.Get(ctx, client.ObjectKeyFromObject(pod), pod)
		assert.True(t, apierrors.IsNotFound(err) || err == nil && !pod.DeletionTimestamp.IsZero(), "the gone run's pod is swept")
		assert.True(t, checkPodOf(t, live).DeletionTimestamp.IsZero(), "the live run's stays")
	})
}
