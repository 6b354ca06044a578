package retention

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

func i32(v int32) *int32 { return &v }

func ready(name, at string) Item {
	t, err := time.Parse(time.RFC3339, at)
	if err != nil {
		panic(err)
	}
	return Item{Name: name, TakenAt: t, Phase: backupsv1.BackupReady, Good: true}
}

func with(it Item, phase backupsv1.BackupPhase, good bool) Item {
	it.Phase, it.Good = phase, good
	return it
}

// missing marks the artifact of a Ready backup as gone (ArtifactAvailable=False).
func missing(it Item) Item {
	it.Good, it.ArtifactMissing = false, true
	return it
}

// of sets the application a backup was taken of.
func of(app string, it Item) Item {
	it.Application = app
	return it
}

func names(ds []Decision) []string {
	out := []string{}
	for _, d := range ds {
		out = append(out, d.Name)
	}
	sort.Strings(out)
	return out
}

// daily returns n Ready backups at 02:00 UTC on consecutive days ending 2026-03-31.
func daily(n int) []Item {
	var items []Item
	end := time.Date(2026, 3, 31, 2, 0, 0, 0, time.UTC)
	for i := 0; i < n; i++ {
		t := end.AddDate(0, 0, -i)
		items = append(items, Item{Name: t.Format("b-0102"), TakenAt: t, Phase: backupsv1.BackupReady, Good: true})
	}
	return items
}

func TestSelect(t *testing.T) {
	now := time.Date(2026, 3, 31, 12, 0, 0, 0, time.UTC)
	berlin, _ := time.LoadLocation("Europe/Berlin")
	tests := []struct {
		name   string
		items  []Item
		policy *backupsv1.RetentionPolicy
		loc    *time.Location
		prune  []string
	}{
		{name: "no policy prunes nothing", items: daily(5), policy: nil, prune: []string{}},
		{name: "empty policy prunes nothing", items: daily(5), policy: &backupsv1.RetentionPolicy{}, prune: []string{}},
		{name: "keepLast", items: daily(5), policy: &backupsv1.RetentionPolicy{KeepLast: i32(2)},
			prune: []string{"b-0327", "b-0328", "b-0329"}},
		{name: "keepLast 0 still keeps the newest good", items: daily(3), policy: &backupsv1.RetentionPolicy{KeepLast: i32(0)},
			prune: []string{"b-0329", "b-0330"}},
		{name: "keepDaily keeps the newest of each day", policy: &backupsv1.RetentionPolicy{KeepDaily: i32(2)},
			items: []Item{ready("a", "2026-03-31T10:00:00Z"), ready("b", "2026-03-31T02:00:00Z"), ready("c", "2026-03-30T23:00:00Z"), ready("d", "2026-03-30T01:00:00Z"), ready("e", "2026-03-29T01:00:00Z")},
			prune: []string{"b", "d", "e"}},
		{name: "keepDaily buckets in the Plan's zone", policy: &backupsv1.RetentionPolicy{KeepDaily: i32(2)}, loc: berlin,
			// 23:00 UTC on the 30th is already the 31st in Berlin, so it shares a day with a and b.
			items: []Item{ready("a", "2026-03-31T10:00:00Z"), ready("b", "2026-03-31T02:00:00Z"), ready("c", "2026-03-30T23:00:00Z"), ready("d", "2026-03-30T01:00:00Z"), ready("e", "2026-03-29T01:00:00Z")},
			prune: []string{"b", "c", "e"}},
		{name: "keepWeekly uses ISO weeks", items: daily(15), policy: &backupsv1.RetentionPolicy{KeepWeekly: i32(2)},
			// 31 Mar 2026 is a Tuesday: week 14 holds 30-31 Mar, week 13 holds 23-29 Mar.
			prune: nil /* computed below */},
		{name: "keepMonthly", policy: &backupsv1.RetentionPolicy{KeepMonthly: i32(2)},
			items: []Item{ready("mar2", "2026-03-20T00:00:00Z"), ready("mar1", "2026-03-01T00:00:00Z"), ready("feb", "2026-02-15T00:00:00Z"), ready("jan", "2026-01-15T00:00:00Z")},
			prune: []string{"jan", "mar1"}},
		{name: "rules combine as a union", policy: &backupsv1.RetentionPolicy{KeepLast: i32(1), KeepMonthly: i32(2)},
			items: []Item{ready("mar2", "2026-03-20T00:00:00Z"), ready("mar1", "2026-03-01T00:00:00Z"), ready("feb", "2026-02-15T00:00:00Z"), ready("jan", "2026-01-15T00:00:00Z")},
			prune: []string{"jan", "mar1"}},
		{name: "maxAge alone", items: daily(5), policy: &backupsv1.RetentionPolicy{MaxAge: &metav1.Duration{Duration: 72 * time.Hour}},
			prune: []string{"b-0327", "b-0328"}},
		{name: "maxAge overrides keep rules", items: daily(5), policy: &backupsv1.RetentionPolicy{KeepLast: i32(5), MaxAge: &metav1.Duration{Duration: 48 * time.Hour}},
			prune: []string{"b-0327", "b-0328", "b-0329"}},
		{name: "maxAge never prunes the last good backup", items: daily(3), policy: &backupsv1.RetentionPolicy{MaxAge: &metav1.Duration{Duration: time.Hour}},
			prune: []string{"b-0329", "b-0330"}},
		{name: "last good is kept even when newer ones are partial or failed", policy: &backupsv1.RetentionPolicy{KeepLast: i32(1), MaxAge: &metav1.Duration{Duration: time.Hour}},
			items: []Item{
				with(ready("partial", "2026-03-31T11:00:00Z"), backupsv1.BackupReady, false),
				with(ready("failed", "2026-03-31T10:00:00Z"), backupsv1.BackupFailed, false),
				ready("good-old", "2026-03-01T00:00:00Z"),
				ready("good-older", "2026-02-01T00:00:00Z"),
			},
			prune: []string{"failed", "good-older"}},
		{name: "partial backups count for keepLast but are not the last good", policy: &backupsv1.RetentionPolicy{KeepLast: i32(1)},
			items: []Item{with(ready("partial", "2026-03-31T11:00:00Z"), backupsv1.BackupReady, false), ready("good", "2026-03-30T00:00:00Z"), ready("good-older", "2026-03-29T00:00:00Z")},
			prune: []string{"good-older"}},
		{name: "failed backups are kept by no rule", policy: &backupsv1.RetentionPolicy{KeepLast: i32(5)},
			items: []Item{with(ready("failed", "2026-03-31T11:00:00Z"), backupsv1.BackupFailed, false), ready("good", "2026-03-30T00:00:00Z")},
			prune: []string{"failed"}},
		{name: "pending backups are never pruned", policy: &backupsv1.RetentionPolicy{KeepLast: i32(1), MaxAge: &metav1.Duration{Duration: time.Minute}},
			items: []Item{with(ready("pending", "2026-03-01T00:00:00Z"), backupsv1.BackupPending, false), with(ready("unset", "2026-03-01T00:00:00Z"), "", false), ready("good", "2026-03-30T00:00:00Z")},
			prune: []string{}},
		{name: "no good backup at all: rules apply", policy: &backupsv1.RetentionPolicy{KeepLast: i32(1)},
			items: []Item{with(ready("p1", "2026-03-31T00:00:00Z"), backupsv1.BackupReady, false), with(ready("p2", "2026-03-30T00:00:00Z"), backupsv1.BackupReady, false)},
			prune: []string{"p2"}},
		{name: "a missing artifact is neither good nor kept by a rule", policy: &backupsv1.RetentionPolicy{KeepLast: i32(1)},
			items: []Item{missing(ready("gone", "2026-03-31T00:00:00Z")), ready("good", "2026-03-30T00:00:00Z"), ready("older", "2026-03-29T00:00:00Z")},
			prune: []string{"gone", "older"}},
		{name: "a missing artifact never shields an older good backup from maxAge", policy: &backupsv1.RetentionPolicy{MaxAge: &metav1.Duration{Duration: time.Hour}},
			items: []Item{missing(ready("gone", "2026-03-31T00:00:00Z")), ready("good", "2026-03-30T00:00:00Z"), ready("older", "2026-03-29T00:00:00Z")},
			prune: []string{"gone", "older"}},
		// The Plan backed up app-a, then was pointed at app-b: keepLast counts each application's
		// Backups, and maxAge leaves app-a its newest good Backup although app-b's are newer.
		{name: "re-pointed Plan keeps the newest good backup of each application",
			policy: &backupsv1.RetentionPolicy{KeepLast: i32(2), MaxAge: &metav1.Duration{Duration: 240 * time.Hour}},
			items: []Item{
				of("app-b", ready("b2", "2026-03-31T02:00:00Z")), of("app-b", ready("b1", "2026-03-30T02:00:00Z")),
				of("app-a", with(ready("a4", "2026-03-05T02:00:00Z"), backupsv1.BackupFailed, false)),
				of("app-a", ready("a3", "2026-03-04T02:00:00Z")), of("app-a", ready("a2", "2026-03-03T02:00:00Z")), of("app-a", ready("a1", "2026-03-02T02:00:00Z")),
			},
			prune: []string{"a1", "a2", "a4"}},
		{name: "re-pointed Plan whose old application has no good backup prunes none of it by age",
			policy: &backupsv1.RetentionPolicy{MaxAge: &metav1.Duration{Duration: 24 * time.Hour}},
			items: []Item{
				of("app-b", ready("b2", "2026-03-31T02:00:00Z")), of("app-b", ready("b1", "2026-03-20T02:00:00Z")),
				of("app-a", with(ready("a2", "2026-03-03T02:00:00Z"), backupsv1.BackupReady, false)),
				of("app-a", missing(ready("a1", "2026-03-02T02:00:00Z"))),
			},
			prune: []string{"b1"}},
		// The Plan was deleted and created again under its name (a new UID): the Backups of the old
		// one name it too. The new one has not made a good Backup yet, so the old one's newest stays.
		{name: "re-created Plan keeps its predecessor's newest good backup",
			policy: &backupsv1.RetentionPolicy{KeepLast: i32(1), MaxAge: &metav1.Duration{Duration: 24 * time.Hour}},
			items: []Item{
				with(ready("new-2", "2026-03-31T11:00:00Z"), backupsv1.BackupReady, false),
				with(ready("new-1", "2026-03-31T10:00:00Z"), backupsv1.BackupFailed, false),
				with(ready("new-0", "2026-03-31T09:00:00Z"), backupsv1.BackupPending, false),
				ready("old-2", "2026-03-02T02:00:00Z"), ready("old-1", "2026-03-01T02:00:00Z"),
			},
			prune: []string{"new-1", "old-1"}},
		{name: "all-bad history: age prunes nothing, keep rules keep the newest usable",
			policy: &backupsv1.RetentionPolicy{KeepLast: i32(1), MaxAge: &metav1.Duration{Duration: time.Hour}},
			items: []Item{
				with(ready("partial-new", "2026-03-31T00:00:00Z"), backupsv1.BackupReady, false),
				missing(ready("gone", "2026-03-30T00:00:00Z")),
				with(ready("partial-old", "2026-03-20T00:00:00Z"), backupsv1.BackupReady, false),
				with(ready("failed", "2026-03-10T00:00:00Z"), backupsv1.BackupFailed, false),
				with(ready("pending", "2026-03-01T00:00:00Z"), backupsv1.BackupPending, false),
			},
			prune: []string{"failed", "gone", "partial-old"}},
		{name: "all-bad history under maxAge alone: nothing is pruned",
			policy: &backupsv1.RetentionPolicy{MaxAge: &metav1.Duration{Duration: time.Hour}},
			items: []Item{
				with(ready("partial", "2026-03-31T00:00:00Z"), backupsv1.BackupReady, false),
				missing(ready("gone", "2026-03-30T00:00:00Z")),
				with(ready("failed", "2026-03-10T00:00:00Z"), backupsv1.BackupFailed, false),
			},
			prune: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loc := tt.loc
			if loc == nil {
				loc = time.UTC
			}
			got := Select(tt.items, tt.policy, nil, loc, now)
			if tt.name == "keepWeekly uses ISO weeks" {
				// Kept: 31 Mar (week 14) and 29 Mar (newest of week 13); everything else goes.
				want := []string{}
				for _, it := range daily(15) {
					if it.Name != "b-0331" && it.Name != "b-0329" {
						want = append(want, it.Name)
					}
				}
				sort.Strings(want)
				assert.Equal(t, want, names(got))
				return
			}
			assert.Equal(t, tt.prune, names(got))
			for _, d := range got {
				assert.NotEmpty(t, d.Reason, "every prune says why")
			}
		})
	}
}

func TestSelectNeverPrunesNewestGood(t *testing.T) {
	now := time.Date(2026, 3, 31, 12, 0, 0, 0, time.UTC)
	policies := []*backupsv1.RetentionPolicy{
		{KeepLast: i32(0)}, {KeepDaily: i32(0)}, {MaxAge: &metav1.Duration{Duration: time.Nanosecond}},
		{KeepLast: i32(0), KeepDaily: i32(0), KeepWeekly: i32(0), KeepMonthly: i32(0), MaxAge: &metav1.Duration{}},
	}
	for i, p := range policies {
		for n := 1; n <= 6; n++ {
			items := daily(n)
			// Make the newest ones not good, so the newest good one is in the middle.
			for j := 0; j < n/2; j++ {
				items[j].Good = false
			}
			newestGood := items[n/2].Name
			for _, d := range Select(items, p, nil, time.UTC, now) {
				assert.NotEqual(t, newestGood, d.Name, fmt.Sprintf("policy %d with %d backups", i, n))
			}
		}
	}
}

// TestSelectNeverPrunesNewestGoodOfEachApplication mixes the Backups of three applications, some of
// them bad, under every policy: the newest good Backup of each application survives, and an
// application without a good Backup loses nothing to maxAge.
func TestSelectNeverPrunesNewestGoodOfEachApplication(t *testing.T) {
	now := time.Date(2026, 3, 31, 12, 0, 0, 0, time.UTC)
	apps := []string{"apps.cozystack.io/VirtualMachine/vm1", "apps.cozystack.io/VirtualMachine/vm2", "apps.cozystack.io/Bucket/vm1"}
	policies := []*backupsv1.RetentionPolicy{
		{KeepLast: i32(1)}, {KeepDaily: i32(1)}, {KeepMonthly: i32(1)},
		{MaxAge: &metav1.Duration{Duration: time.Nanosecond}},
		{KeepLast: i32(1), KeepWeekly: i32(1), MaxAge: &metav1.Duration{Duration: time.Hour}},
	}
	for i, p := range policies {
		for n := 3; n <= 12; n++ {
			items := daily(n)
			newestGood := map[string]string{}
			for j := range items {
				items[j].Application = apps[j%len(apps)]
				switch j % 4 { // newest first: spoil some of the newer ones
				case 1:
					items[j].Good = false // partially failed
				case 2:
					items[j] = missing(items[j])
				}
				if app := items[j].Application; items[j].Good && newestGood[app] == "" {
					newestGood[app] = items[j].Name
				}
			}
			for _, d := range Select(items, p, nil, time.UTC, now) {
				for app, name := range newestGood {
					assert.NotEqual(t, name, d.Name, "policy %d with %d backups: the newest good backup of %s", i, n, app)
				}
				if p.MaxAge != nil && d.Reason == fmt.Sprintf("older than maxAge %s", p.MaxAge.Duration) {
					for _, it := range items {
						if it.Name == d.Name {
							assert.NotEmpty(t, newestGood[it.Application], "policy %d: maxAge pruned %s of %s, which has no good backup", i, d.Name, it.Application)
						}
					}
				}
			}
		}
	}
}

// verifiedBad marks a Ready backup found bad by a verification (Verified=False).
func verifiedBad(it Item) Item {
	it.Good, it.VerifyFailed = false, true
	return it
}

// restorable marks a good backup proven restorable by a full-restore verification.
func restorable(it Item) Item {
	it.RestoreVerified = true
	return it
}

// TestSelectTrustsVerification: a Backup a verification found bad is kept by no rule (and pruned
// with that reason), so keepLast keeps the next usable one instead; and the newest Backup a
// full-restore proved restorable survives every policy, even when newer good ones exist.
func TestSelectTrustsVerification(t *testing.T) {
	now := time.Date(2026, 3, 31, 12, 0, 0, 0, time.UTC)
	items := daily(5) // b-0331 (newest) ... b-0327
	items[0] = verifiedBad(items[0])
	ds := Select(items, &backupsv1.RetentionPolicy{KeepLast: i32(2)}, nil, time.UTC, now)
	assert.Equal(t, []string{"b-0327", "b-0328", "b-0331"}, names(ds), "keepLast 2 keeps the two newest usable backups, b-0330 and b-0329")
	for _, d := range ds {
		if d.Name == "b-0331" {
			assert.Equal(t, "a verification found it bad", d.Reason)
		}
	}

	for i, p := range []*backupsv1.RetentionPolicy{
		{KeepLast: i32(0)}, {KeepLast: i32(1)}, {KeepDaily: i32(1)},
		{MaxAge: &metav1.Duration{Duration: time.Nanosecond}},
		{KeepLast: i32(0), KeepDaily: i32(0), KeepWeekly: i32(0), KeepMonthly: i32(0), MaxAge: &metav1.Duration{}},
	} {
		items := daily(6)
		items[3] = restorable(items[3])
		items[5] = restorable(items[5]) // older, also proven: may go
		pruned := names(Select(items, p, nil, time.UTC, now))
		assert.NotContains(t, pruned, items[3].Name, "policy %d: the newest restore-verified backup is kept", i)
		assert.NotContains(t, pruned, items[0].Name, "policy %d: the newest good backup is kept", i)
		assert.Contains(t, pruned, items[4].Name, "policy %d: an unprotected older backup is pruned", i)
	}
}

// TestSelectNeverActsOnOneSignal: the only good Backup of a keepLast: 7 Plan, found bad by one
// verification (or its artifact seen gone once), is not pruned; once the failure is confirmed
// (WasGood false) it is. The scenario of a transport fault taken for corruption.
func TestSelectNeverActsOnOneSignal(t *testing.T) {
	now := time.Date(2026, 3, 31, 12, 0, 0, 0, time.UTC)
	p := &backupsv1.RetentionPolicy{KeepLast: i32(7), MaxAge: &metav1.Duration{Duration: time.Hour}}
	only := ready("only", "2026-03-30T02:00:00Z")
	only = verifiedBad(only)
	only.WasGood = true // one failed verification: unconfirmed
	assert.Empty(t, names(Select([]Item{only}, p, nil, time.UTC, now)), "one unconfirmed verdict never prunes the newest Backup that was good")

	older, oldest := ready("older", "2026-03-29T02:00:00Z"), ready("oldest", "2026-03-28T02:00:00Z")
	older.WasGood, oldest.WasGood = true, true
	assert.Equal(t, []string{"oldest"}, names(Select([]Item{only, older, oldest}, p, nil, time.UTC, now)),
		"the newest Backup that was good and the newest good one are kept; an older one goes by maxAge")

	only.WasGood = false // confirmed: two verifications agree
	assert.Equal(t, []string{"only"}, names(Select([]Item{only}, p, nil, time.UTC, now)), "a confirmed failure is pruned")
}

// TestSelectFloor: a tenant's keepLast: 1, maxAge: 1ns cannot go below the class's floor.
func TestSelectFloor(t *testing.T) {
	now := time.Date(2026, 3, 31, 12, 0, 0, 0, time.UTC)
	hostile := &backupsv1.RetentionPolicy{KeepLast: i32(1), MaxAge: &metav1.Duration{Duration: time.Nanosecond}}
	items := daily(10) // b-0331 ... b-0322
	assert.Len(t, Select(items, hostile, nil, time.UTC, now), 9, "without a floor every Backup but the newest good one goes")

	floor := &backupsv1.RetentionFloor{MinKeepLast: i32(3), MinAge: &metav1.Duration{Duration: 5 * 24 * time.Hour}}
	pruned := names(Select(items, hostile, floor, time.UTC, now))
	// minAge 5 days keeps b-0331 ... b-0327 (b-0326 is 5 days 10 hours old).
	assert.Equal(t, []string{"b-0322", "b-0323", "b-0324", "b-0325", "b-0326"}, pruned)

	floor = &backupsv1.RetentionFloor{MinKeepLast: i32(7)}
	assert.Equal(t, []string{"b-0322", "b-0323", "b-0324"}, names(Select(items, hostile, floor, time.UTC, now)),
		"minKeepLast keeps the newest 7 even against maxAge")
	assert.Empty(t, Select(items, nil, floor, time.UTC, now), "a floor never prunes on its own")
}
