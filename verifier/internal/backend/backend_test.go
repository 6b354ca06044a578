package backend

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRestoreTookAddsUpTheSteps: a run restoring objects, then volume data, records the sum of
// both restores' own durations; a restore without a completion time adds nothing.
func TestRestoreTookAddsUpTheSteps(t *testing.T) {
	start := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: start.Add(d)} }
	o := &Outcome{}
	_, ok := RestoreSeconds(o.Details)
	assert.False(t, ok, "nothing recorded yet")
	o.RestoreTook(*at(0), at(40*time.Second))
	took, ok := RestoreSeconds(o.Details)
	assert.True(t, ok)
	assert.Equal(t, 40*time.Second, took)
	o.RestoreTook(*at(time.Minute), nil) // the volume restore has not completed
	took, _ = RestoreSeconds(o.Details)
	assert.Equal(t, 40*time.Second, took)
	o.RestoreTook(*at(time.Minute), at(3*time.Minute))
	took, _ = RestoreSeconds(o.Details)
	assert.Equal(t, 160*time.Second, took, "objects 40 s, then data 120 s")
	o.RestoreTook(*at(time.Minute), at(0)) // a clock gone backwards records nothing
	took, _ = RestoreSeconds(o.Details)
	assert.Equal(t, 160*time.Second, took)
}

// TestMergeDetailsAddsRestoreTimes: merged details replace o's, but the restore times add up.
func TestMergeDetailsAddsRestoreTimes(t *testing.T) {
	o := &Outcome{Details: map[string]string{"a": "1", "restoreSeconds": "30"}}
	o.MergeDetails(map[string]string{"a": "2", "b": "3", "restoreSeconds": "12"})
	assert.Equal(t, map[string]string{"a": "2", "b": "3", "restoreSeconds": "42"}, o.Details)
	o = &Outcome{}
	o.MergeDetails(map[string]string{"b": "3"})
	assert.Equal(t, map[string]string{"b": "3"}, o.Details)
}
