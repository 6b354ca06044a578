package v1alpha1

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestJobPhases(t *testing.T) {
	tests := []struct {
		phase             BackupJobPhase
		terminal, claimed bool
	}{
		{"", false, false},
		{BackupJobPending, false, false},
		{BackupJobRunning, false, true},
		{BackupJobSucceeded, true, true},
		{BackupJobFailed, true, true},
	}
	for _, tt := range tests {
		t.Run(string(tt.phase), func(t *testing.T) {
			j := &BackupJob{Status: BackupJobStatus{Phase: tt.phase}}
			assert.Equal(t, tt.terminal, j.IsTerminal())
			assert.Equal(t, tt.claimed, j.IsClaimed())
			r := &RestoreJob{Status: RestoreJobStatus{Phase: RestoreJobPhase(tt.phase)}}
			assert.Equal(t, tt.terminal, r.IsTerminal())
			assert.Equal(t, tt.claimed, r.IsClaimed())
		})
	}
	accepted := &BackupJob{Status: BackupJobStatus{Phase: BackupJobPending, Conditions: []metav1.Condition{{Type: ConditionAccepted, Status: metav1.ConditionTrue}}}}
	assert.True(t, accepted.IsClaimed())
	refused := &BackupJob{Status: BackupJobStatus{Conditions: []metav1.Condition{{Type: ConditionAccepted, Status: metav1.ConditionFalse, Reason: ReasonNoDriverClaimed}}}}
	assert.False(t, refused.IsClaimed(), "core's Accepted=False is not a claim")
}

func TestBackupIsGood(t *testing.T) {
	now := metav1.Now()
	cond := func(t string, s metav1.ConditionStatus) metav1.Condition { return metav1.Condition{Type: t, Status: s} }
	tests := []struct {
		name string
		b    Backup
		want bool
	}{
		{"ready", Backup{Status: BackupStatus{Phase: BackupReady}}, true},
		{"ready with artifact available", Backup{Status: BackupStatus{Phase: BackupReady, Conditions: []metav1.Condition{cond(ConditionArtifactAvailable, metav1.ConditionTrue)}}}, true},
		{"pending", Backup{Status: BackupStatus{Phase: BackupPending}}, false},
		{"failed", Backup{Status: BackupStatus{Phase: BackupFailed}}, false},
		{"artifact gone", Backup{Status: BackupStatus{Phase: BackupReady, Conditions: []metav1.Condition{cond(ConditionArtifactAvailable, metav1.ConditionFalse)}}}, false},
		{"partially failed", Backup{Status: BackupStatus{Phase: BackupReady, Conditions: []metav1.Condition{cond(ConditionPartiallyFailed, metav1.ConditionTrue)}}}, false},
		{"being deleted", Backup{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}, Status: BackupStatus{Phase: BackupReady}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { assert.Equal(t, tt.want, tt.b.IsGood()) })
	}
}
