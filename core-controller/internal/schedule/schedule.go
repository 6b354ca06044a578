// Package schedule turns a Plan's schedule into ticks: which tick is due now, how many were
// missed, and when the next one comes. Pure functions over an injected "now"; no I/O.
package schedule

import (
	"fmt"
	"time"
	_ "time/tzdata" // every IANA zone, even in a minimal image

	"github.com/robfig/cron/v3"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// maxTickScan bounds how many ticks are walked between two reconciles; beyond it the count of
// missed ticks is reported as a lower bound.
const maxTickScan = 100000

// Schedule is a parsed Plan schedule.
type Schedule struct {
	cron     cron.Schedule
	Location *time.Location
}

// Error is an invalid schedule; Reason is the condition reason to report.
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Parse reads a Plan schedule: a standard five-field cron expression or a descriptor such as
// "@daily" (the dialect of the Kubernetes CronJob), in the IANA zone timeZone (UTC when unset).
func Parse(s backupsv1.PlanSchedule) (*Schedule, error) {
	if s.Type != backupsv1.PlanScheduleTypeEmpty && s.Type != backupsv1.PlanScheduleTypeCron {
		return nil, &Error{Reason: backupsv1.ReasonInvalidSchedule, Err: fmt.Errorf("schedule type %q is not supported; use \"cron\"", s.Type)}
	}
	loc := time.UTC
	if s.TimeZone != nil {
		l, err := time.LoadLocation(*s.TimeZone)
		if err != nil || *s.TimeZone == "" || *s.TimeZone == "Local" {
			if err == nil {
				err = fmt.Errorf("not an IANA zone name")
			}
			return nil, &Error{Reason: backupsv1.ReasonInvalidTimeZone, Err: fmt.Errorf("schedule.timeZone %q: %w", *s.TimeZone, err)}
		}
		loc = l
	}
	c, err := cron.ParseStandard(s.Cron)
	if err != nil {
		return nil, &Error{Reason: backupsv1.ReasonInvalidSchedule, Err: fmt.Errorf("schedule.cron %q: %w", s.Cron, err)}
	}
	// robfig/cron gives up after five years without a match: such an expression never fires.
	if c.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, loc)).IsZero() {
		return nil, &Error{Reason: backupsv1.ReasonInvalidSchedule, Err: fmt.Errorf("schedule.cron %q never fires", s.Cron)}
	}
	return &Schedule{cron: c, Location: loc}, nil
}

// Next returns the first tick strictly after t, or the zero time if there is none.
//
// The cron expression is matched against wall-clock time in the Plan's zone, so daylight saving
// never loses or doubles a day's tick: a tick in a skipped hour (02:30 on a spring-forward night)
// fires once, shifted forward by the gap (03:30); a tick in a repeated hour fires once.
func (s *Schedule) Next(t time.Time) time.Time {
	lt := t.In(s.Location)
	wall := time.Date(lt.Year(), lt.Month(), lt.Day(), lt.Hour(), lt.Minute(), lt.Second(), lt.Nanosecond(), time.UTC)
	// A wall-clock tick can map to an instant at or before t only around a transition; a few steps
	// always get past it.
	for range 8 {
		wall = s.cron.Next(wall)
		if wall.IsZero() {
			return time.Time{}
		}
		tick := time.Date(wall.Year(), wall.Month(), wall.Day(), wall.Hour(), wall.Minute(), 0, 0, s.Location)
		if tick.After(t) {
			return tick.UTC()
		}
	}
	return time.Time{}
}

// Due says what to do at now, given that every tick at or before since has been dealt with.
type Due struct {
	// Tick is the most recent tick in (since, now], if any.
	Tick *time.Time
	// Missed counts the older ticks in (since, Tick) that will never fire.
	Missed int64
	// LastMissed is the newest of the missed ticks (the one just before Tick), when Missed > 0.
	LastMissed *time.Time
	// MissedIsLowerBound is set when there were too many ticks to count.
	MissedIsLowerBound bool
	// Next is the first tick after now.
	Next time.Time
}

// DueAt computes the ticks between since and now. At most the most recent tick may fire; every
// earlier one is counted as missed.
func (s *Schedule) DueAt(since, now time.Time) Due {
	d := Due{Next: s.Next(now)}
	var last *time.Time
	for t, n := s.Next(since), 0; !t.IsZero() && !t.After(now); t, n = s.Next(t), n+1 {
		if n >= maxTickScan {
			// Jump: everything up to now is missed; find the most recent tick cheaply.
			d.MissedIsLowerBound = true
			break
		}
		if last != nil {
			d.Missed++
			d.LastMissed = last
		}
		tt := t
		last = &tt
	}
	if d.MissedIsLowerBound {
		if recent := s.lastBefore(now); !recent.IsZero() {
			last = &recent
			if prev := s.lastBefore(recent.Add(-time.Nanosecond)); !prev.IsZero() {
				d.LastMissed = &prev
			}
		}
	}
	d.Tick = last
	return d
}

// lastBefore finds the most recent tick at or before now by scanning back in widening windows
// (a schedule that fires at all fires at least once in five years).
func (s *Schedule) lastBefore(now time.Time) time.Time {
	for window := time.Hour; window < 6*365*24*time.Hour; window *= 2 {
		var last time.Time
		for t := s.Next(now.Add(-window)); !t.After(now); t = s.Next(t) {
			last = t
		}
		if !last.IsZero() {
			return last
		}
	}
	return time.Time{}
}
