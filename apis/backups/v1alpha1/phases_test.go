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
		{"verified", Backup{Status: BackupStatus{Phase: BackupReady, Conditions: []metav1.Condition{cond(ConditionVerified, metav1.ConditionTrue)}}}, true},
		{"found bad by a verification", Backup{Status: BackupStatus{Phase: BackupReady, Conditions: []metav1.Condition{cond(ConditionVerified, metav1.ConditionFalse)}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { assert.Equal(t, tt.want, tt.b.IsGood()) })
	}
}

func TestBackupRestoreVerified(t *testing.T) {
	verified := func(status metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: ConditionVerified, Status: status, Reason: reason}
	}
	ready := func(conds ...metav1.Condition) Backup {
		return Backup{Status: BackupStatus{Phase: BackupReady, Conditions: conds}}
	}
	tests := []struct {
		name string
		b    Backup
		want bool
	}{
		{"never verified", ready(), false},
		{"checksum only", ready(verified(metav1.ConditionTrue, ReasonChecksumVerified)), false},
		{"restored", ready(verified(metav1.ConditionTrue, ReasonRestoreVerified)), true},
		{"restore failed", ready(verified(metav1.ConditionFalse, ReasonRestoreMismatch)), false},
		{"restored, then the checksum failed", ready(verified(metav1.ConditionFalse, ReasonChecksumMismatch)), false},
		{"restored, artifact gone since", ready(verified(metav1.ConditionTrue, ReasonRestoreVerified),
			metav1.Condition{Type: ConditionArtifactAvailable, Status: metav1.ConditionFalse}), false},
		{"restored, not Ready", Backup{Status: BackupStatus{Phase: BackupFailed, Conditions: []metav1.Condition{verified(metav1.ConditionTrue, ReasonRestoreVerified)}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { assert.Equal(t, tt.want, tt.b.RestoreVerified()) })
	}
}
