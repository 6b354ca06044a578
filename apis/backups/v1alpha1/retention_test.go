package v1alpha1

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestRetentionSpan(t *testing.T) {
	n := func(v int32) *int32 { return &v }
	age := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	day := 24 * time.Hour
	tests := []struct {
		name    string
		policy  *RetentionPolicy
		bounded bool
		span    time.Duration
		rule    string
	}{
		{"nil policy keeps everything", nil, false, 0, "no retention (every Backup is kept)"},
		{"empty policy keeps everything", &RetentionPolicy{}, false, 0, "no rule (every Backup is kept)"},
		{"keepLast alone is a count", &RetentionPolicy{KeepLast: n(7)}, false, 0, "keepLast: 7 without maxAge (a count of Backups, not an age)"},
		{"keepDaily", &RetentionPolicy{KeepDaily: n(7)}, true, 7 * day, "keepDaily: 7 (7 days)"},
		{"keepWeekly", &RetentionPolicy{KeepWeekly: n(4)}, true, 28 * day, "keepWeekly: 4 (4 weeks)"},
		{"keepMonthly counts 31 days a month", &RetentionPolicy{KeepMonthly: n(6)}, true, 186 * day, "keepMonthly: 6 (6 × 31 days)"},
		{"the longest keep rule", &RetentionPolicy{KeepDaily: n(60), KeepWeekly: n(4), KeepMonthly: n(1)}, true, 60 * day, "keepDaily: 60 (60 days)"},
		{"keepLast adds nothing without maxAge", &RetentionPolicy{KeepLast: n(100), KeepWeekly: n(2)}, true, 14 * day, "keepWeekly: 2 (2 weeks)"},
		{"maxAge alone", &RetentionPolicy{MaxAge: age(720 * time.Hour)}, true, 720 * time.Hour, "maxAge 720h0m0s"},
		{"maxAge bounds keepLast", &RetentionPolicy{KeepLast: n(3), MaxAge: age(48 * time.Hour)}, true, 48 * time.Hour, "maxAge 48h0m0s"},
		{"maxAge cuts a longer keep rule", &RetentionPolicy{KeepMonthly: n(12), MaxAge: age(90 * day)}, true, 90 * day, "maxAge 2160h0m0s"},
		{"a shorter keep rule under maxAge", &RetentionPolicy{KeepDaily: n(7), MaxAge: age(90 * day)}, true, 7 * day, "keepDaily: 7 (7 days)"},
		{"keepLast under maxAge may keep up to maxAge", &RetentionPolicy{KeepLast: n(3), KeepDaily: n(7), MaxAge: age(90 * day)}, true, 90 * day, "maxAge 2160h0m0s"},
		{"the sample Plan", &RetentionPolicy{KeepLast: n(3), KeepDaily: n(7), KeepWeekly: n(4), KeepMonthly: n(6), MaxAge: age(4380 * time.Hour)}, true, 4380 * time.Hour, "maxAge 4380h0m0s"},
		{"a span beyond time.Duration is capped", &RetentionPolicy{KeepMonthly: n(10000)}, true, time.Duration(math.MaxInt64), "keepMonthly: 10000 (10000 × 31 days)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.policy.Span()
			assert.Equal(t, tt.bounded, got.Bounded)
			if tt.bounded {
				assert.Equal(t, tt.span, got.Duration)
			}
			assert.Equal(t, tt.rule, got.Rule)
		})
	}
}

func TestRetentionHeldUnder(t *testing.T) {
	age := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	n := func(v int32) *int32 { return &v }
	week := 7 * RetentionDay
	tests := []struct {
		name    string
		policy  *RetentionPolicy
		floor   *RetentionFloor
		bounded bool
		total   time.Duration
		rule    string
	}{
		{"no floor", &RetentionPolicy{KeepDaily: n(7)}, nil, true, week, "keepDaily: 7 (7 days)"},
		{"minAge raises a shorter span", &RetentionPolicy{MaxAge: age(48 * time.Hour)}, &RetentionFloor{MinAge: age(week)}, true, week, "the class's minAge 168h0m0s"},
		{"minAge under the span changes nothing", &RetentionPolicy{MaxAge: age(2 * week)}, &RetentionFloor{MinAge: age(week)}, true, 2 * week, "maxAge 336h0m0s"},
		{"deletionDelay is added", &RetentionPolicy{MaxAge: age(week)}, &RetentionFloor{DeletionDelay: age(48 * time.Hour)}, true, week + 48*time.Hour, "maxAge 168h0m0s"},
		{"both", &RetentionPolicy{MaxAge: age(24 * time.Hour)}, &RetentionFloor{MinAge: age(week), DeletionDelay: age(time.Hour)}, true, week + time.Hour, "the class's minAge 168h0m0s"},
		{"minAge does not bound a count", &RetentionPolicy{KeepLast: n(3)}, &RetentionFloor{MinAge: age(week)}, false, 0, "keepLast: 3 without maxAge (a count of Backups, not an age)"},
		{"the total is capped", &RetentionPolicy{KeepMonthly: n(10000)}, &RetentionFloor{DeletionDelay: age(time.Hour)}, true, time.Duration(math.MaxInt64), "keepMonthly: 10000 (10000 × 31 days)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.policy.HeldUnder(tt.floor)
			assert.Equal(t, tt.bounded, got.Bounded)
			if tt.bounded {
				assert.Equal(t, tt.total, got.Total())
			}
			assert.Equal(t, tt.rule, got.Rule)
		})
	}
}
