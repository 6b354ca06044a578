package v1alpha1

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSeverityOrder(t *testing.T) {
	order := []Severity{"", SeverityInfo, SeverityLow, SeverityMedium, SeverityHigh, SeverityCritical}
	for i := 1; i < len(order); i++ {
		assert.Greater(t, order[i].Rank(), order[i-1].Rank(), "%s > %s", order[i], order[i-1])
		assert.True(t, order[i].AtLeast(order[i-1]))
		assert.False(t, order[i-1].AtLeast(order[i]))
	}
	assert.Equal(t, 0, Severity("severe").Rank(), "unknown ranks lowest")
}

func TestWorstSeverityAndTopFinding(t *testing.T) {
	tests := []struct {
		name      string
		findings  []Finding
		worst     Severity
		topCode   string
		eventType string
		failed    bool
	}{
		{name: "none", worst: "", eventType: EventBackupVerifyCompleted},
		{name: "info only", findings: []Finding{{Code: CodeChecksumMatch, Severity: SeverityInfo}},
			worst: SeverityInfo, topCode: CodeChecksumMatch, eventType: EventBackupVerifyCompleted},
		{name: "medium stays compliance", findings: []Finding{{Code: CodeChecksumNotRecorded, Severity: SeverityMedium}, {Code: CodeChecksumMatch, Severity: SeverityInfo}},
			worst: SeverityMedium, topCode: CodeChecksumNotRecorded, eventType: EventBackupVerifyCompleted},
		{name: "high flips to mismatch", findings: []Finding{{Code: CodeChecksumMatch, Severity: SeverityInfo}, {Code: CodeVeleroBackupNotFound, Severity: SeverityHigh}},
			worst: SeverityHigh, topCode: CodeVeleroBackupNotFound, eventType: EventBackupVerifyMismatch, failed: true},
		{name: "tie broken by code priority, not order", findings: []Finding{
			{Code: CodeObjectMissing, Severity: SeverityHigh}, {Code: CodeRestorePartiallyFailed, Severity: SeverityHigh}, {Code: CodeVeleroBackupNotFound, Severity: SeverityHigh}},
			worst: SeverityHigh, topCode: CodeVeleroBackupNotFound, eventType: EventBackupVerifyMismatch},
		{name: "severity beats priority", findings: []Finding{{Code: CodeChecksumMismatch, Severity: SeverityHigh}, {Code: CodeCleanupFailed, Severity: SeverityCritical}},
			worst: SeverityCritical, topCode: CodeCleanupFailed, eventType: EventBackupVerifyMismatch},
		{name: "unknown code ranks last in a tie", findings: []Finding{{Code: "vendor-thing", Severity: SeverityLow}, {Code: CodeCleanupFailed, Severity: SeverityLow}},
			worst: SeverityLow, topCode: CodeCleanupFailed, eventType: EventBackupVerifyFailed, failed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.worst, WorstSeverity(tt.findings))
			top := TopFinding(tt.findings)
			if tt.topCode == "" {
				assert.Nil(t, top)
			} else {
				require.NotNil(t, top)
				assert.Equal(t, tt.topCode, top.Code)
			}
			phase := RunSucceeded
			if tt.failed {
				phase = RunFailed
			}
			assert.Equal(t, tt.eventType, TerminalEventType(phase, tt.findings))
		})
	}
}

func TestEventClassOf(t *testing.T) {
	assert.Equal(t, ClassCompliance, EventClassOf(EventBackupVerifyStarted), "as ugallu classifies it")
	assert.Equal(t, ClassCompliance, EventClassOf(EventBackupVerifyCompleted))
	assert.Equal(t, ClassDetection, EventClassOf(EventBackupVerifyMismatch))
	assert.Equal(t, ClassAnomaly, EventClassOf(EventBackupVerifyFailed))
	assert.Equal(t, ClassAudit, EventClassFor(EventBackupVerifyCompleted, ChecksumNone), "compared nothing: no compliance")
	assert.Equal(t, ClassCompliance, EventClassFor(EventBackupVerifyCompleted, ChecksumFirstVerification))
	assert.Equal(t, ClassCompliance, EventClassFor(EventBackupVerifyCompleted, ChecksumRecorded))
	assert.Equal(t, ClassCompliance, EventClassFor(EventBackupVerifyCompleted, ""), "no checksum compared (a full-restore)")
	assert.Equal(t, ClassDetection, EventClassFor(EventBackupVerifyMismatch, ChecksumNone))
	assert.Equal(t, ClassAnomaly, EventClassFor(EventBackupVerifyFailed, ChecksumNone))
}

func TestRunPhaseTerminal(t *testing.T) {
	assert.False(t, RunPhase("").IsTerminal())
	assert.False(t, RunPending.IsTerminal())
	assert.False(t, RunRunning.IsTerminal())
	assert.True(t, RunSucceeded.IsTerminal())
	assert.True(t, RunFailed.IsTerminal())
}

func TestCodePrioritiesAreDistinct(t *testing.T) {
	seen := map[int]string{}
	for code, p := range codePriority {
		if other, dup := seen[p]; dup {
			t.Fatalf("codes %s and %s share priority %d", code, other, p)
		}
		seen[p] = code
	}
}
