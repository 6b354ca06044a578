// Package retention decides which Backups of a Plan to prune. It is a pure function of the
// Backups, the policy, the Plan's time zone and now.
package retention

import (
	"fmt"
	"sort"
	"time"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// Item is what retention needs to know about one Backup.
type Item struct {
	Name    string
	TakenAt time.Time
	Phase   backupsv1.BackupPhase
	// Good is Backup.IsGood(): Ready, artifact available, not partially failed.
	Good bool
}

// Decision is the outcome for one Backup that is pruned; Reason says which rule let it go.
type Decision struct {
	Name   string
	Reason string
}

// Select returns the Backups to prune under policy p, evaluated in loc at now.
//
//   - A nil policy prunes nothing. Pending Backups (still being written) are never pruned.
//   - keepLast, keepDaily, keepWeekly (ISO weeks) and keepMonthly keep Ready Backups (partially
//     failed ones count): the newest N, and the newest of each of the last N days, weeks and
//     months that have one. A Backup kept by any rule is kept. Failed Backups are kept by none.
//   - With no keep rule set, every Backup is kept unless maxAge prunes it.
//   - maxAge prunes anything older, even if a keep rule holds it.
//   - The newest good Backup is never pruned, whatever the policy says.
func Select(items []Item, p *backupsv1.RetentionPolicy, loc *time.Location, now time.Time) []Decision {
	if p == nil {
		return nil
	}
	sorted := append([]Item(nil), items...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if !sorted[i].TakenAt.Equal(sorted[j].TakenAt) {
			return sorted[i].TakenAt.After(sorted[j].TakenAt)
		}
		return sorted[i].Name > sorted[j].Name
	})

	keep := map[string]bool{}
	anyKeepRule := p.KeepLast != nil || p.KeepDaily != nil || p.KeepWeekly != nil || p.KeepMonthly != nil
	var ready []Item
	for _, it := range sorted {
		if it.Phase == backupsv1.BackupReady {
			ready = append(ready, it)
		}
	}
	if n := val(p.KeepLast); n > 0 {
		for i := 0; i < len(ready) && i < n; i++ {
			keep[ready[i].Name] = true
		}
	}
	bucketKeep(ready, val(p.KeepDaily), keep, func(t time.Time) string { return t.In(loc).Format("2006-01-02") })
	bucketKeep(ready, val(p.KeepWeekly), keep, func(t time.Time) string {
		y, w := t.In(loc).ISOWeek()
		return fmt.Sprintf("%d-W%02d", y, w)
	})
	bucketKeep(ready, val(p.KeepMonthly), keep, func(t time.Time) string { return t.In(loc).Format("2006-01") })

	var newestGood string
	for _, it := range sorted {
		if it.Good {
			newestGood = it.Name
			break
		}
	}

	var prune []Decision
	for _, it := range sorted {
		if it.Phase == backupsv1.BackupPending || it.Phase == "" || it.Name == newestGood {
			continue
		}
		switch {
		case p.MaxAge != nil && now.Sub(it.TakenAt) > p.MaxAge.Duration:
			prune = append(prune, Decision{Name: it.Name, Reason: fmt.Sprintf("older than maxAge %s", p.MaxAge.Duration)})
		case anyKeepRule && !keep[it.Name]:
			reason := "kept by no keepLast, keepDaily, keepWeekly or keepMonthly rule"
			if it.Phase == backupsv1.BackupFailed {
				reason = "failed"
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
