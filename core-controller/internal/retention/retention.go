// Package retention decides which Backups of a Plan to prune. It is a pure function of the
// Backups, the policy, the Plan's time zone and now.
package retention

import (
	"fmt"
	"sort"
	"time"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// Item is what retention needs to know about one Backup of a Plan.
type Item struct {
	Name string
	// Application identifies the application the Backup was taken of (API group, kind and name).
	// The rules apply to the Backups of each application apart.
	Application string
	TakenAt     time.Time
	Phase       backupsv1.BackupPhase
	// Good is Backup.IsGood(): Ready, artifact not known missing, not partially failed.
	Good bool
	// ArtifactMissing is Backup.ArtifactMissing(): the driver found the artifact gone.
	ArtifactMissing bool
	// VerifyFailed is a Verified=False condition: a verification found the Backup bad.
	VerifyFailed bool
	// RestoreVerified is Backup.RestoreVerified(): good, and proven restorable by full-restore.
	RestoreVerified bool
	// WasGood is Backup.WasGood(): complete, and no confirmed fact (a confirmed absence, a
	// confirmed verification failure) shows it bad since.
	WasGood bool
}

// Decision is the outcome for one Backup that is pruned; Reason says which rule let it go.
type Decision struct {
	Name   string
	Reason string
}

// Select returns the Backups to prune under policy p, evaluated in loc at now.
//
// The Backups are grouped by application (a Plan re-pointed at another application keeps Backups
// of both), and each group is decided on its own:
//
//   - A nil policy prunes nothing. Pending Backups (still being written) are never pruned.
//   - keepLast, keepDaily, keepWeekly (ISO weeks) and keepMonthly keep usable Backups (Ready, and
//     the artifact not known missing, not found bad by a verification; partially failed ones
//     count): the newest N, and the newest of each of the last N days, weeks and months that have
//     one. A Backup kept by any rule is kept. Failed Backups, those whose artifact is missing and
//     those a verification found bad are kept by none.
//   - With no keep rule set, every Backup is kept unless maxAge prunes it.
//   - maxAge prunes anything older, even if a keep rule holds it, but only in a group that has a
//     good Backup: age never takes the last Backups a restore might still use.
//   - The newest good Backup of the group is never pruned, whatever the policy says, and neither
//     is the newest one a full-restore verification proved restorable, nor the newest one that
//     was good and that no confirmed fact shows bad since (one failed verification or one
//     observed absence never costs the last restore point).
//   - The administrator's floor (nil: none) bounds all of this from below: the newest
//     floor.minKeepLast usable Backups and every Backup younger than floor.minAge are kept,
//     whatever the policy says (maxAge included).
func Select(items []Item, p *backupsv1.RetentionPolicy, floor *backupsv1.RetentionFloor, loc *time.Location, now time.Time) []Decision {
	if p == nil {
		return nil
	}
	groups := map[string][]Item{}
	var apps []string
	for _, it := range items {
		if _, seen := groups[it.Application]; !seen {
			apps = append(apps, it.Application)
		}
		groups[it.Application] = append(groups[it.Application], it)
	}
	sort.Strings(apps)
	var prune []Decision
	for _, app := range apps {
		prune = append(prune, selectGroup(groups[app], p, floor, loc, now)...)
	}
	return prune
}

// selectGroup decides for the Backups of one application.
func selectGroup(items []Item, p *backupsv1.RetentionPolicy, floor *backupsv1.RetentionFloor, loc *time.Location, now time.Time) []Decision {
	sorted := append([]Item(nil), items...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if !sorted[i].TakenAt.Equal(sorted[j].TakenAt) {
			return sorted[i].TakenAt.After(sorted[j].TakenAt)
		}
		return sorted[i].Name > sorted[j].Name
	})

	keep := map[string]bool{}
	anyKeepRule := p.KeepLast != nil || p.KeepDaily != nil || p.KeepWeekly != nil || p.KeepMonthly != nil
	var usable []Item
	for _, it := range sorted {
		if it.Phase == backupsv1.BackupReady && !it.ArtifactMissing && !it.VerifyFailed {
			usable = append(usable, it)
		}
	}
	if n := val(p.KeepLast); n > 0 {
		for i := 0; i < len(usable) && i < n; i++ {
			keep[usable[i].Name] = true
		}
	}
	bucketKeep(usable, val(p.KeepDaily), keep, func(t time.Time) string { return t.In(loc).Format("2006-01-02") })
	bucketKeep(usable, val(p.KeepWeekly), keep, func(t time.Time) string {
		y, w := t.In(loc).ISOWeek()
		return fmt.Sprintf("%d-W%02d", y, w)
	})
	bucketKeep(usable, val(p.KeepMonthly), keep, func(t time.Time) string { return t.In(loc).Format("2006-01") })

	// The floor's keeps, which nothing overrides.
	held := map[string]bool{}
	if floor != nil {
		for i := 0; i < len(usable) && i < val(floor.MinKeepLast); i++ {
			held[usable[i].Name] = true
		}
		if floor.MinAge != nil {
			for _, it := range sorted {
				if now.Sub(it.TakenAt) < floor.MinAge.Duration {
					held[it.Name] = true
				}
			}
		}
	}

	var newestGood, newestRestorable, newestWasGood string
	for _, it := range sorted {
		if it.Good && newestGood == "" {
			newestGood = it.Name
		}
		if it.RestoreVerified && newestRestorable == "" {
			newestRestorable = it.Name
		}
		if it.WasGood && newestWasGood == "" {
			newestWasGood = it.Name
		}
	}
	held[newestGood], held[newestRestorable], held[newestWasGood] = true, true, true
	delete(held, "")
	anyGood := newestGood != "" || newestWasGood != ""

	var prune []Decision
	for _, it := range sorted {
		if it.Phase == backupsv1.BackupPending || it.Phase == "" || held[it.Name] {
			continue
		}
		switch {
		case anyGood && p.MaxAge != nil && now.Sub(it.TakenAt) > p.MaxAge.Duration:
			prune = append(prune, Decision{Name: it.Name, Reason: fmt.Sprintf("older than maxAge %s", p.MaxAge.Duration)})
		case anyKeepRule && !keep[it.Name]:
			reason := "kept by no keepLast, keepDaily, keepWeekly or keepMonthly rule"
			switch {
			case it.Phase == backupsv1.BackupFailed:
				reason = "failed"
			case it.ArtifactMissing:
				reason = "its artifact is missing"
			case it.VerifyFailed:
				reason = "a verification found it bad"
			}
			prune = append(prune, Decision{Name: it.Name, Reason: reason})
		}
	}
	return prune
}

// bucketKeep keeps the newest item of each of the first n distinct buckets, newest first.
func bucketKeep(newestFirst []Item, n int, keep map[string]bool, bucket func(time.Time) string) {
	seen := map[string]bool{}
	for _, it := range newestFirst {
		if len(seen) >= n {
			return
		}
		b := bucket(it.TakenAt)
		if !seen[b] {
			seen[b] = true
			keep[it.Name] = true
		}
	}
}

func val(p *int32) int {
	if p == nil {
		return 0
	}
	return int(*p)
}
