package v1alpha1

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestBackupJobTransitions(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	j := &BackupJob{}
	j.Generation = 1
	j.MarkRunning(t0, "coffer-driver-velero")
	assert.Equal(t, BackupJobRunning, j.Status.Phase)
	assert.Equal(t, t0, *j.Status.StartedAt)
	assert.True(t, j.IsClaimed())
	acc := meta.FindStatusCondition(j.Status.Conditions, ConditionAccepted)
	require.NotNil(t, acc)
	assert.Equal(t, "Claimed by coffer-driver-velero", acc.Message)

	j.MarkRunning(t1, "coffer-driver-velero")
	assert.Equal(t, t0, *j.Status.StartedAt, "startedAt is set once")

	ok := j.DeepCopy()
	ok.MarkSucceeded(t1, "b1")
	assert.Equal(t, BackupJobSucceeded, ok.Status.Phase)
	assert.Equal(t, "b1", ok.Status.BackupRef.Name)
	assert.Equal(t, t1, *ok.Status.CompletedAt)
	assert.Empty(t, ok.Status.Message)
	assert.True(t, meta.IsStatusConditionTrue(ok.Status.Conditions, ConditionReady))

	bad := j.DeepCopy()
	bad.MarkFailed(t1, ReasonTemplateRenderFailed, "rendering $.ttl: boom")
	assert.Equal(t, BackupJobFailed, bad.Status.Phase)
	assert.Equal(t, "rendering $.ttl: boom", bad.Status.Message)
	ready := meta.FindStatusCondition(bad.Status.Conditions, ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, metav1.ConditionFalse, ready.Status)
	assert.Equal(t, ReasonTemplateRenderFailed, ready.Reason)
	assert.True(t, bad.IsTerminal())
}

func TestRestoreJobTransitions(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r := &RestoreJob{}
	r.MarkRunning(t0, "d")
	assert.Equal(t, RestoreJobRunning, r.Status.Phase)
	f := r.DeepCopy()
	f.MarkFailed(t0, ReasonBackupNotFound, "Backup b not found")
	assert.Equal(t, RestoreJobFailed, f.Status.Phase)
	assert.Equal(t, "Backup b not found", f.Status.Message)
	s := r.DeepCopy()
	s.MarkSucceeded(t0, "restored")
	assert.Equal(t, RestoreJobSucceeded, s.Status.Phase)
	assert.True(t, meta.IsStatusConditionTrue(s.Status.Conditions, ConditionReady))
}

func TestClaimedBy(t *testing.T) {
	now := metav1.Now()
	j := &BackupJob{}
	if j.ClaimedBy() != "" || !j.ClaimableBy("a") {
		t.Fatalf("an unclaimed run is claimable by anyone")
	}
	meta.SetStatusCondition(&j.Status.Conditions, metav1.Condition{Type: ConditionAccepted, Status: metav1.ConditionFalse, Reason: ReasonNoDriverClaimed, Message: "no driver"})
	if j.ClaimedBy() != "" || !j.ClaimableBy("a") {
		t.Fatalf("NoDriverClaimed is not a claim")
	}
	j.MarkRunning(now, "driver-a")
	if got := j.ClaimedBy(); got != "driver-a" {
		t.Fatalf("ClaimedBy = %q", got)
	}
	if !j.ClaimableBy("driver-a") || j.ClaimableBy("driver-b") {
		t.Fatalf("only the claimer may act")
	}
	j.MarkSucceeded(now, "b")
	if j.ClaimedBy() != "driver-a" {
		t.Fatalf("a finished run keeps its claimer")
	}
	r := &RestoreJob{}
	r.MarkRunning(now, "driver-b")
	if r.ClaimedBy() != "driver-b" || r.ClaimableBy("driver-a") {
		t.Fatalf("RestoreJob claim: %q", r.ClaimedBy())
	}
}
