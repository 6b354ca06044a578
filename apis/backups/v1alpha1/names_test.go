package v1alpha1

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestBoundedName(t *testing.T) {
	long := strings.Repeat("a", 70)
	tests := []struct {
		name  string
		parts []string
		want  string
	}{
		{"short kept", []string{"plan", "123"}, "plan-123"},
		{"exactly at limit kept", []string{strings.Repeat("b", 59), "123"}, strings.Repeat("b", 59) + "-123"},
		{"long cut and hashed", []string{long, "1"}, strings.Repeat("a", 52) + "-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BoundedName(MaxGeneratedNameLength, tt.parts...)
			assert.LessOrEqual(t, len(got), MaxGeneratedNameLength)
			assert.True(t, strings.HasPrefix(got, tt.want), "%q has prefix %q", got, tt.want)
			assert.Empty(t, validation.IsDNS1123Label(got), "usable as a label value and Job name")
			assert.Equal(t, got, BoundedName(MaxGeneratedNameLength, tt.parts...), "deterministic")
		})
	}
	a := BoundedName(MaxGeneratedNameLength, long, "1")
	b := BoundedName(MaxGeneratedNameLength, long, "2")
	assert.NotEqual(t, a, b, "distinct long names stay distinct")
	assert.Len(t, a, MaxGeneratedNameLength)
}

func TestBoundedNameTrimsSeparatorBeforeHash(t *testing.T) {
	got := BoundedName(20, "abcdefgh-", "ijklmnopqrstuvwxyz")
	assert.Len(t, got, 19)
	assert.True(t, strings.HasPrefix(got, "abcdefgh-"))
	assert.NotContains(t, got, "--")
	assert.Empty(t, validation.IsDNS1123Label(got))
}

func TestPlanBackupJobName(t *testing.T) {
	tick := time.Date(2026, 4, 29, 2, 0, 0, 0, time.UTC)
	assert.Equal(t, "nightly-29623800", PlanBackupJobName("nightly", tick))
	assert.Equal(t, PlanBackupJobName("nightly", tick), PlanBackupJobName("nightly", tick.Add(59*time.Second)),
		"one tick (minute) gives one name")
	assert.NotEqual(t, PlanBackupJobName("nightly", tick), PlanBackupJobName("nightly", tick.Add(time.Minute)))
	berlin, err := time.LoadLocation("Europe/Berlin")
	if assert.NoError(t, err) {
		assert.Equal(t, PlanBackupJobName("p", tick), PlanBackupJobName("p", tick.In(berlin)), "time zone does not change the name")
	}
}
