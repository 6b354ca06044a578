package v1alpha1

import (
	"fmt"
	"math"
	"time"
)

// Periods of the keep rules in RetentionSpan: a day, an ISO week, and a month counted at its
// longest, so that the span is never shorter than what the rule can keep.
const (
	RetentionDay   = 24 * time.Hour
	RetentionWeek  = 7 * RetentionDay
	RetentionMonth = 31 * RetentionDay
)

// RetentionSpan is how long a Plan's retention can keep a Backup, for storage that expires
// artifacts on its own (contract BK-9): such storage must keep each artifact at least this long.
//
// +kubebuilder:object:generate=false
type RetentionSpan struct {
	// Bounded is false when no rule bounds the span in time: there is then nothing to compare
	// with (see RetentionPolicy.Span).
	Bounded bool
	// Duration is the span when Bounded (time.Duration's maximum when a rule covers more).
	Duration time.Duration
	// Rule names the rule that sets the span, for messages: "maxAge 720h0m0s",
	// "keepMonthly: 6 (6 × 31 days)".
	Rule string
}

// Span returns how long the policy's rules can keep a Backup by its age. It leaves out the newest
// good Backup of each application, which retention keeps whatever its age and which no finite span
// covers.
//
//   - maxAge bounds every rule: the span is maxAge, or shorter when keepLast is unset and the
//     longest of keepDaily, keepWeekly and keepMonthly covers less (keepDaily N: N days,
//     keepWeekly N: N weeks, keepMonthly N: N × 31 days).
//   - Without maxAge, the span is what the longest of keepDaily, keepWeekly and keepMonthly covers,
//     while the Plan makes a Backup every day, week or month they count.
//   - keepLast keeps a number of Backups, not an age: how long depends on the schedule and on how
//     many runs fail. Without maxAge it adds nothing to the span; keepLast alone is unbounded, and
//     so are a nil policy (every Backup is kept) and a policy without any rule.
//
// Span works on a nil policy.
func (p *RetentionPolicy) Span() RetentionSpan {
	if p == nil {
		return RetentionSpan{Rule: "no retention (every Backup is kept)"}
	}
	var keep RetentionSpan
	for _, r := range []struct {
		name   string
		n      *int32
		period time.Duration
		unit   string
	}{
		{"keepDaily", p.KeepDaily, RetentionDay, "days"},
		{"keepWeekly", p.KeepWeekly, RetentionWeek, "weeks"},
		{"keepMonthly", p.KeepMonthly, RetentionMonth, "× 31 days"},
	} {
		if r.n == nil || *r.n < 1 {
			continue
		}
		if d := multiply(*r.n, r.period); !keep.Bounded || d > keep.Duration {
			keep = RetentionSpan{Bounded: true, Duration: d, Rule: fmt.Sprintf("%s: %d (%d %s)", r.name, *r.n, *r.n, r.unit)}
		}
	}
	if p.MaxAge != nil && p.MaxAge.Duration > 0 {
		if p.KeepLast == nil && keep.Bounded && keep.Duration < p.MaxAge.Duration {
			return keep
		}
		return RetentionSpan{Bounded: true, Duration: p.MaxAge.Duration, Rule: "maxAge " + p.MaxAge.Duration.String()}
	}
	switch {
	case keep.Bounded:
		return keep
	case p.KeepLast != nil:
		return RetentionSpan{Rule: fmt.Sprintf("keepLast: %d without maxAge (a count of Backups, not an age)", *p.KeepLast)}
	}
	return RetentionSpan{Rule: "no rule (every Backup is kept)"}
}

// multiply is n × period, capped at time.Duration's maximum (keepMonthly: 10000 is 849 years).
func multiply(n int32, period time.Duration) time.Duration {
	if time.Duration(n) > time.Duration(math.MaxInt64)/period {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(n) * period
}

// RetentionHold is how long a Backup can exist under a Plan's retention and its class's
// retention floor: what storage that expires or locks artifacts on its own must cover.
//
// +kubebuilder:object:generate=false
type RetentionHold struct {
	// RetentionSpan is the Plan's span, raised to the floor's minAge when that is longer (Rule
	// then names the floor). Unbounded when the Plan's span is.
	RetentionSpan
	// DeletionDelay is the floor's deletionDelay: a Backup retention selects waits this long
	// before it (and its artifact) is deleted.
	DeletionDelay time.Duration
}

// Total is the span plus the deletion delay, at most time.Duration's maximum.
func (h RetentionHold) Total() time.Duration { return AddCapped(h.Duration, h.DeletionDelay) }

// AddCapped is a+b for non-negative durations, capped at the largest Duration instead of
// overflowing.
func AddCapped(a, b time.Duration) time.Duration {
	if a > time.Duration(math.MaxInt64)-b {
		return time.Duration(math.MaxInt64)
	}
	return a + b
}

// HeldUnder returns how long the policy can hold a Backup under floor (which may be nil): the
// policy's Span, at least the floor's minAge (which keeps younger Backups whatever the policy
// says), and the floor's deletionDelay. The floor's minKeepLast, like keepLast, counts Backups
// and adds no age. A span no age bounds stays unbounded: minAge alone does not bound it.
func (p *RetentionPolicy) HeldUnder(floor *RetentionFloor) RetentionHold {
	h := RetentionHold{RetentionSpan: p.Span()}
	if floor == nil {
		return h
	}
	if h.Bounded && floor.MinAge != nil && floor.MinAge.Duration > h.Duration {
		h.Duration, h.Rule = floor.MinAge.Duration, "the class's minAge "+floor.MinAge.Duration.String()
	}
	if floor.DeletionDelay != nil && floor.DeletionDelay.Duration > 0 {
		h.DeletionDelay = floor.DeletionDelay.Duration
	}
	return h
}
