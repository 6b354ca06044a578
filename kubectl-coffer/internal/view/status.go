package view

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// PlanRow is one Plan in `kubectl coffer status`.
type PlanRow struct {
	Namespace, Name string
	// Schedule is the cron expression, its time zone, and "(suspended)" when suspended.
	Schedule string
	// LastSuccess and Next are relative times: "5m ago", "in 42s".
	LastSuccess, Next string
	// Active names the BackupJobs of the Plan that have not ended.
	Active string
	// LastBackup is the Plan's newest Backup and Phase its phase, qualified when it is not good
	// and by its verification.
	LastBackup, Phase string
	// Restorable is the age of the newest Backup a full-restore verification proved restorable
	// (status.lastRestorableBackup): the Plan's restorable RPO; "-" when none was. The time that
	// verification measured for the restore follows it ("34h ago, RTO 1m23s").
	Restorable string
	// Note says why the Plan is not Ready, if it is not.
	Note string
}

// StatusRows are the rows of plans, sorted by namespace and name. backups holds the Plans' newest
// Backups (status.lastBackupRef) by namespace and name; one missing from it was deleted.
func StatusRows(plans []backupsv1.Plan, backups map[types.NamespacedName]*backupsv1.Backup, now time.Time) []PlanRow {
	rows := make([]PlanRow, 0, len(plans))
	for i := range plans {
		p := &plans[i]
		r := PlanRow{Namespace: p.Namespace, Name: p.Name, Schedule: schedule(p),
			LastSuccess: Ago(now, p.Status.LastSuccessfulTime), Next: Until(now, p.Status.NextScheduleTime),
			Active: active(p.Status.Active), LastBackup: "-", Phase: "-", Restorable: "-"}
		if rp := p.Status.LastRestorableBackup; rp != nil {
			r.Restorable = Ago(now, &rp.TakenAt)
			if rp.RestoreDuration != nil {
				r.Restorable += ", RTO " + rp.RestoreDuration.Duration.String()
			}
		}
		if p.Spec.Suspend != nil && *p.Spec.Suspend {
			r.Next = "-"
		}
		if ref := p.Status.LastBackupRef; ref != nil {
			r.LastBackup = ref.Name
			r.Phase = backupPhase(backups[types.NamespacedName{Namespace: p.Namespace, Name: ref.Name}])
		}
		if c := meta.FindStatusCondition(p.Status.Conditions, backupsv1.ConditionReady); c != nil && c.Status != metav1.ConditionTrue {
			r.Note = fmt.Sprintf("Ready=%s %s: %s", c.Status, c.Reason, oneLine(c.Message))
		}
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, k int) bool {
		if rows[i].Namespace != rows[k].Namespace {
			return rows[i].Namespace < rows[k].Namespace
		}
		return rows[i].Name < rows[k].Name
	})
	return rows
}

func schedule(p *backupsv1.Plan) string {
	s := p.Spec.Schedule.Cron
	if tz := p.Spec.Schedule.TimeZone; tz != nil && *tz != "" {
		s += " " + *tz
	}
	if p.Spec.Suspend != nil && *p.Spec.Suspend {
		s += " (suspended)"
	}
	return s
}

// active names up to two runs and counts the rest.
func active(refs []corev1.LocalObjectReference) string {
	switch len(refs) {
	case 0:
		return "-"
	case 1, 2:
		names := make([]string, len(refs))
		for i, r := range refs {
			names[i] = r.Name
		}
		return strings.Join(names, ",")
	default:
		return fmt.Sprintf("%s,%s +%d", refs[0].Name, refs[1].Name, len(refs)-2)
	}
}

// backupPhase is the Backup's phase, qualified when the Backup is not good to restore from.
func backupPhase(b *backupsv1.Backup) string {
	switch {
	case b == nil:
		return "(deleted)"
	case !b.DeletionTimestamp.IsZero():
		return "Deleting"
	case b.ArtifactMissing():
		return string(b.Status.Phase) + " (artifact missing)"
	case meta.IsStatusConditionTrue(b.Status.Conditions, backupsv1.ConditionPartiallyFailed):
		return string(b.Status.Phase) + " (partially failed)"
	case meta.IsStatusConditionFalse(b.Status.Conditions, backupsv1.ConditionVerified):
		return string(b.Status.Phase) + " (verification failed)"
	case b.RestoreVerified():
		return string(b.Status.Phase) + " (restore verified)"
	case meta.IsStatusConditionTrue(b.Status.Conditions, backupsv1.ConditionVerified):
		return string(b.Status.Phase) + " (checksum verified)"
	case b.Status.Phase == "":
		return string(backupsv1.BackupPending)
	}
	return string(b.Status.Phase)
}

// WriteStatus prints the rows as a table (with a NAMESPACE column across namespaces), then a line
// for each Plan that is not Ready.
func WriteStatus(w io.Writer, rows []PlanRow, allNamespaces bool) error {
	tw := tabwriter.NewWriter(w, 6, 4, 3, ' ', 0)
	header := []string{"PLAN", "SCHEDULE", "LAST SUCCESS", "NEXT", "ACTIVE", "LAST BACKUP", "PHASE", "RESTORABLE"}
	if allNamespaces {
		header = append([]string{"NAMESPACE"}, header...)
	}
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		cols := []string{r.Name, r.Schedule, r.LastSuccess, r.Next, r.Active, r.LastBackup, r.Phase, r.Restorable}
		if allNamespaces {
			cols = append([]string{r.Namespace}, cols...)
		}
		fmt.Fprintln(tw, strings.Join(cols, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		if r.Note != "" {
			if _, err := fmt.Fprintf(w, "%s/%s: %s\n", r.Namespace, r.Name, r.Note); err != nil {
				return err
			}
		}
	}
	return nil
}
