package schedule

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

func ptr[T any](v T) *T { return &v }

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	require.NoError(t, err)
	return v.UTC()
}

func TestParse(t *testing.T) {
	tests := []struct {
		name       string
		sched      backupsv1.PlanSchedule
		wantReason string
		wantMsg    string
	}{
		{name: "five fields", sched: backupsv1.PlanSchedule{Cron: "0 2 * * *"}},
		{name: "explicit type", sched: backupsv1.PlanSchedule{Type: "cron", Cron: "*/5 * * * *"}},
		{name: "descriptor", sched: backupsv1.PlanSchedule{Cron: "@daily"}},
		{name: "zone", sched: backupsv1.PlanSchedule{Cron: "@hourly", TimeZone: ptr("America/New_York")}},
		{name: "six fields rejected", sched: backupsv1.PlanSchedule{Cron: "0 0 2 * * *"}, wantReason: backupsv1.ReasonInvalidSchedule, wantMsg: `schedule.cron "0 0 2 * * *": expected exactly 5 fields, found 6`},
		{name: "garbage", sched: backupsv1.PlanSchedule{Cron: "every day"}, wantReason: backupsv1.ReasonInvalidSchedule, wantMsg: `schedule.cron "every day"`},
		{name: "out of range", sched: backupsv1.PlanSchedule{Cron: "61 * * * *"}, wantReason: backupsv1.ReasonInvalidSchedule, wantMsg: "end of range (61) above maximum (59)"},
		{name: "never fires", sched: backupsv1.PlanSchedule{Cron: "0 0 30 2 *"}, wantReason: backupsv1.ReasonInvalidSchedule, wantMsg: "never fires"},
		{name: "unknown zone", sched: backupsv1.PlanSchedule{Cron: "@daily", TimeZone: ptr("Mars/Olympus")}, wantReason: backupsv1.ReasonInvalidTimeZone, wantMsg: `schedule.timeZone "Mars/Olympus"`},
		{name: "local zone refused", sched: backupsv1.PlanSchedule{Cron: "@daily", TimeZone: ptr("Local")}, wantReason: backupsv1.ReasonInvalidTimeZone, wantMsg: "not an IANA zone name"},
		{name: "unknown type", sched: backupsv1.PlanSchedule{Type: "interval", Cron: "@daily"}, wantReason: backupsv1.ReasonInvalidSchedule, wantMsg: `"interval" is not supported`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse(tt.sched)
			if tt.wantReason == "" {
				require.NoError(t, err)
				require.NotNil(t, s)
				return
			}
			var serr *Error
			require.True(t, errors.As(err, &serr), "typed error, got %v", err)
			assert.Equal(t, tt.wantReason, serr.Reason)
			assert.Contains(t, err.Error(), tt.wantMsg)
		})
	}
}

func TestDueAt(t *testing.T) {
	hourly, err := Parse(backupsv1.PlanSchedule{Cron: "0 * * * *"})
	require.NoError(t, err)
	tests := []struct {
		name       string
		since, now string
		tick       string // empty: nothing due
		missed     int64
		lastMissed string // empty: none
		next       string
	}{
		{name: "before the first tick", since: "2026-01-01T10:00:00Z", now: "2026-01-01T10:59:59Z", next: "2026-01-01T11:00:00Z"},
		{name: "exactly at the tick", since: "2026-01-01T10:00:00Z", now: "2026-01-01T11:00:00Z", tick: "2026-01-01T11:00:00Z", next: "2026-01-01T12:00:00Z"},
		{name: "the tick already dealt with", since: "2026-01-01T11:00:00Z", now: "2026-01-01T11:30:00Z", next: "2026-01-01T12:00:00Z"},
		{name: "three ticks missed, the last fires", since: "2026-01-01T10:00:00Z", now: "2026-01-01T13:10:00Z", tick: "2026-01-01T13:00:00Z", missed: 2, lastMissed: "2026-01-01T12:00:00Z", next: "2026-01-01T14:00:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := hourly.DueAt(mustTime(t, tt.since), mustTime(t, tt.now))
			if tt.tick == "" {
				assert.Nil(t, d.Tick)
			} else {
				require.NotNil(t, d.Tick)
				assert.Equal(t, mustTime(t, tt.tick), *d.Tick)
			}
			assert.Equal(t, tt.missed, d.Missed)
			if tt.lastMissed == "" {
				assert.Nil(t, d.LastMissed)
			} else if assert.NotNil(t, d.LastMissed, "the newest missed tick") {
				assert.Equal(t, mustTime(t, tt.lastMissed), *d.LastMissed)
			}
			assert.False(t, d.MissedIsLowerBound)
			assert.Equal(t, mustTime(t, tt.next), d.Next)
		})
	}
}

func TestDueAtManyMissedTicks(t *testing.T) {
	everyMinute, err := Parse(backupsv1.PlanSchedule{Cron: "* * * * *"})
	require.NoError(t, err)
	since := mustTime(t, "2025-01-01T00:00:00Z")
	now := mustTime(t, "2026-01-01T00:00:30Z")
	d := everyMinute.DueAt(since, now)
	require.NotNil(t, d.Tick)
	assert.Equal(t, mustTime(t, "2026-01-01T00:00:00Z"), *d.Tick, "the most recent tick is still found")
	assert.True(t, d.MissedIsLowerBound)
	assert.GreaterOrEqual(t, d.Missed, int64(maxTickScan-1))
	require.NotNil(t, d.LastMissed)
	assert.Equal(t, mustTime(t, "2025-12-31T23:59:00Z"), *d.LastMissed, "the newest missed tick, just before the one that fires")
}

// TestDaylightSaving checks a daily 02:30 schedule in Europe/Berlin across both changes of 2026:
// on 29 March 02:30 does not exist (it fires once, shifted by the gap, at 03:30 local), and on
// 25 October it exists twice (it fires once). robfig/cron alone would skip the March night.
func TestDaylightSaving(t *testing.T) {
	s, err := Parse(backupsv1.PlanSchedule{Cron: "30 2 * * *", TimeZone: ptr("Europe/Berlin")})
	require.NoError(t, err)
	berlin := s.Location

	var spring []time.Time
	for tick := s.Next(time.Date(2026, 3, 27, 12, 0, 0, 0, berlin)); tick.Before(time.Date(2026, 3, 31, 0, 0, 0, 0, berlin)); tick = s.Next(tick) {
		spring = append(spring, tick)
	}
	require.Len(t, spring, 3, "one tick a day, none lost or doubled: %v", spring)
	assert.Equal(t, "2026-03-28T02:30:00+01:00", spring[0].In(berlin).Format(time.RFC3339))
	assert.Equal(t, "2026-03-29T03:30:00+02:00", spring[1].In(berlin).Format(time.RFC3339), "the missing 02:30 fires once, after the gap")
	assert.Equal(t, "2026-03-30T02:30:00+02:00", spring[2].In(berlin).Format(time.RFC3339))

	var autumn []time.Time
	for tick := s.Next(time.Date(2026, 10, 24, 12, 0, 0, 0, berlin)); tick.Before(time.Date(2026, 10, 27, 0, 0, 0, 0, berlin)); tick = s.Next(tick) {
		autumn = append(autumn, tick)
	}
	require.Len(t, autumn, 2, "the repeated 02:30 fires once: %v", autumn)
	assert.Contains(t, []string{"2026-10-25T02:30:00+02:00", "2026-10-25T02:30:00+01:00"}, autumn[0].In(berlin).Format(time.RFC3339))
	assert.Equal(t, "2026-10-26T02:30:00+01:00", autumn[1].In(berlin).Format(time.RFC3339))

}

// TestHourlyAcrossDaylightSaving: an hourly schedule keeps firing, strictly increasing, through both
// transitions, and never twice at one instant.
func TestHourlyAcrossDaylightSaving(t *testing.T) {
	s, err := Parse(backupsv1.PlanSchedule{Cron: "0 * * * *", TimeZone: ptr("Europe/Berlin")})
	require.NoError(t, err)
	for _, day := range []time.Time{mustTime(t, "2026-03-28T20:00:00Z"), mustTime(t, "2026-10-24T20:00:00Z")} {
		prev := day
		n := 0
		for tick := s.Next(day); tick.Before(day.Add(12 * time.Hour)); tick = s.Next(tick) {
			assert.True(t, tick.After(prev), "strictly increasing: %s after %s", tick, prev)
			assert.LessOrEqual(t, tick.Sub(prev), 2*time.Hour)
			prev = tick
			n++
		}
		assert.GreaterOrEqual(t, n, 10)
	}
}
