package claim

import (
	"testing"
	"time"
)

func TestDeadline(t *testing.T) {
	created := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		started time.Time
		want    time.Time
	}{
		{"controller running before the run", created.Add(-time.Hour), created.Add(5 * time.Minute)},
		{"controller started after the run (outage, upgrade)", created.Add(time.Hour), created.Add(time.Hour + 5*time.Minute)},
	}
	for _, tt := range tests {
		if got := Deadline(created, tt.started, 5*time.Minute); !got.Equal(tt.want) {
			t.Errorf("%s: Deadline = %s, want %s", tt.name, got, tt.want)
		}
	}
}
