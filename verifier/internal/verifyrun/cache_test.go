package verifyrun

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/coffer-backup/coffer/apis/cachetrim"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
)

// endedRun is run i of namespace ns as a policy's checksum-only run leaves it: labelled, with its
// Result, message and two conditions.
func endedRun(ns string, i int) *securityv1.BackupVerifyRun {
	done := metav1.NewTime(v0.Add(time.Duration(i) * time.Second))
	name := fmt.Sprintf("p-%05d-%d-checksum-%08x", i%1000, done.Unix(), i)
	msg := fmt.Sprintf("Verification succeeded: %d bytes match the recorded sha256:%s", 1<<30, strings.Repeat("ab", 32))
	return &securityv1.BackupVerifyRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			securityv1.LabelPolicy: "nightly", securityv1.LabelBackupUID: fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i),
			securityv1.LabelPlan: fmt.Sprintf("p-%05d", i%1000)}},
		Spec: securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendCoffer, Mode: securityv1.ModeChecksumOnly,
			BackupRef: securityv1.BackupRef{Name: strings.TrimSuffix(name, fmt.Sprintf("-checksum-%08x", i)), Namespace: ns}},
		Status: securityv1.BackupVerifyRunStatus{Phase: securityv1.RunSucceeded, StartTime: &done, CompletionTime: &done,
			ResultRef: &securityv1.ResultReference{Name: securityv1.ResultName(name)}, WorstSeverity: securityv1.SeverityInfo, Message: msg,
			Conditions: []metav1.Condition{
				{Type: securityv1.ConditionReady, Status: metav1.ConditionTrue, Reason: securityv1.EventBackupVerifyCompleted, Message: msg, LastTransitionTime: done},
				{Type: securityv1.ConditionProgressing, Status: metav1.ConditionFalse, Reason: securityv1.EventBackupVerifyCompleted, Message: "the run ended", LastTransitionTime: done},
			}},
	}
}

// An ended run keeps what is read of it (the policy's label and the Backup's UID, its spec, phase,
// times, Result, worst severity, Ready's status and reason); a run in flight is kept whole.
func TestTrimEndedRun(t *testing.T) {
	ended := endedRun("shop", 7)
	got := ended.DeepCopy()
	TrimEndedRun(got)
	assert.Equal(t, map[string]string{securityv1.LabelPolicy: "nightly", securityv1.LabelBackupUID: ended.Labels[securityv1.LabelBackupUID]}, got.Labels)
	assert.Equal(t, ended.Spec, got.Spec)
	assert.Equal(t, ended.Name, got.Name)
	assert.Equal(t, ended.Namespace, got.Namespace)
	assert.Equal(t, ended.Status.Phase, got.Status.Phase)
	assert.Equal(t, ended.Status.CompletionTime, got.Status.CompletionTime)
	assert.Equal(t, ended.Status.StartTime, got.Status.StartTime)
	assert.Equal(t, ended.Status.ResultRef, got.Status.ResultRef)
	assert.Equal(t, ended.Status.WorstSeverity, got.Status.WorstSeverity)
	assert.Empty(t, got.Status.Message)
	require.Len(t, got.Status.Conditions, 1)
	ready := meta.FindStatusCondition(got.Status.Conditions, securityv1.ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, metav1.ConditionTrue, ready.Status)
	assert.Equal(t, securityv1.EventBackupVerifyCompleted, ready.Reason)
	assert.Empty(t, ready.Message)
	assert.True(t, endedWithVerdict(got), "the verdict controller decides alike on the trimmed run")
	assert.Equal(t, endedWithVerdict(ended), endedWithVerdict(got))

	for _, phase := range []securityv1.RunPhase{"", securityv1.RunPending, securityv1.RunRunning} {
		running := endedRun("shop", 8)
		running.Status.Phase = phase
		got := running.DeepCopy()
		TrimEndedRun(got)
		assert.Equal(t, running, got, "a run in flight (%q) is cached whole", phase)
	}
}

// BenchmarkCachedRunBytes measures what an ended run costs in the verifier's informer, whole (the
// transform every cached object gets) and cut by TrimEndedRun: COFFER_BENCH_RUNS (default 2,000)
// runs as a policy's checksum-only runs end, the heap after a collection.
func BenchmarkCachedRunBytes(b *testing.B) {
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("COFFER_BENCH_RUNS")); err == nil && v > 0 {
		n = v
	}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "run-bytes-"}}
	require.NoError(b, cl.Create(ctx, ns))
	require.NoError(b, cluster.Parallel(n, 16, func(i int) error {
		run := endedRun(ns.Name, i)
		status := run.Status
		if err := cl.Create(ctx, run); err != nil {
			return err
		}
		run.Status = status
		return cl.Status().Update(ctx, run)
	}))
	measure := func(transform func(any) (any, error)) float64 {
		bytes, err := cluster.CachedBytes(ctx, restConfig, cache.Options{Scheme: cluster.Scheme, DefaultTransform: transform,
			DefaultNamespaces: map[string]cache.Config{ns.Name: {}}}, &securityv1.BackupVerifyRunList{}, n)
		require.NoError(b, err)
		return bytes
	}
	b.ResetTimer()
	for range b.N {
		whole := measure(cachetrim.Transform(nil))
		trimmed := measure(cachetrim.Transform(nil, TrimEndedRun))
		b.ReportMetric(whole, "bytes/run-whole")
		b.ReportMetric(trimmed, "bytes/run-trimmed")
	}
}
