package backend

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var start = time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)

func at(d time.Duration) *metav1.Time { return &metav1.Time{Time: start.Add(d)} }

func took(t *testing.T, o *Outcome) time.Duration {
	t.Helper()
	d, ok := RestoreSeconds(o.Details)
	assert.True(t, ok, "a restore time is recorded: %v", o.Details)
	return d
}

// TestRestoreTookCoversTheUnionOfTheRestores: restores one after the other add up, time they ran
// at once counts once; a restore without a completion time, or one that ends before it began, adds
// nothing.
func TestRestoreTookCoversTheUnionOfTheRestores(t *testing.T) {
	o := &Outcome{}
	_, ok := RestoreSeconds(o.Details)
	assert.False(t, ok, "nothing recorded yet")
	o.RestoreTook(*at(0), at(40*time.Second))
	assert.Equal(t, 40*time.Second, took(t, o))
	o.RestoreTook(*at(time.Minute), nil) // the volume restore has not completed
	assert.Equal(t, 40*time.Second, took(t, o))
	o.RestoreTook(*at(time.Minute), at(3*time.Minute))
	assert.Equal(t, 160*time.Second, took(t, o), "objects 40 s, then data 120 s")
	o.RestoreTook(*at(time.Minute), at(0))
	assert.Equal(t, 160*time.Second, took(t, o))

	// Started together, the objects restored in 10 s, the data in 30 s: 30 s.
	o = &Outcome{}
	o.RestoreTook(*at(time.Second), at(31*time.Second))
	o.RestoreTook(*at(0), at(10*time.Second))
	assert.Equal(t, 31*time.Second, took(t, o))
	// Nested, and a third after a gap.
	o.RestoreTook(*at(5 * time.Second), at(20*time.Second))
	o.RestoreTook(*at(time.Minute), at(61*time.Second))
	assert.Equal(t, 32*time.Second, took(t, o))
}

// TestMergeCoversBothOutcomesRestores: merged details replace o's, and the restore time covers
// the restores of both outcomes.
func TestMergeCoversBothOutcomesRestores(t *testing.T) {
	o := &Outcome{Details: map[string]string{"a": "1"}}
	o.RestoreTook(*at(0), at(30*time.Second)) // the driver's RestoreJob
	other := &Outcome{Details: map[string]string{"a": "2", "b": "3"}}
	other.RestoreTook(*at(40 * time.Second), at(52*time.Second)) // the volume restore, after the comparison
	o.Merge(other)
	assert.Equal(t, map[string]string{"a": "2", "b": "3", "restoreSeconds": "42"}, o.Details)
	o = &Outcome{}
	o.Merge(&Outcome{Details: map[string]string{"b": "3"}})
	assert.Equal(t, map[string]string{"b": "3"}, o.Details)
}
