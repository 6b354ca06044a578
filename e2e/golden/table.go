package golden

import (
	"fmt"
	"io"
	"text/tabwriter"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// Table prints the lifecycle's objects, one line each.
func (s *Summary) Table(out io.Writer) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KIND\tNAMESPACE/NAME\tSTATE\tDETAIL")
	if p := s.Plan; p != nil {
		last := "<never>"
		if p.Status.LastScheduleTime != nil {
			last = p.Status.LastScheduleTime.UTC().Format("15:04:05")
		}
		restorable := "none proven restorable"
		if r := p.Status.LastRestorableBackup; r != nil {
			restorable = "restorable from " + r.Name
		}
		fmt.Fprintf(w, "Plan\t%s/%s\t%s\tcron %q, last tick %s, %s\n", p.Namespace, p.Name, condition(p.Status.Conditions), p.Spec.Schedule.Cron, last, restorable)
	}
	if j := s.BackupJob; j != nil {
		took := "-"
		if j.Status.StartedAt != nil && j.Status.CompletedAt != nil {
			took = j.Status.CompletedAt.Sub(j.Status.StartedAt.Time).Round(100e6).String()
		}
		fmt.Fprintf(w, "BackupJob\t%s/%s\t%s\t%s\n", j.Namespace, j.Name, j.Status.Phase, took)
	}
	if b := s.Backup; b != nil && b.Status.Artifact != nil {
		fmt.Fprintf(w, "Backup\t%s/%s\t%s\t%d bytes, %s\n", b.Namespace, b.Name, b.Status.Phase, b.Status.Artifact.SizeBytes, b.Status.Artifact.Checksum)
		if v := meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionVerified); v != nil {
			fmt.Fprintf(w, "Backup\t%s/%s\tVerified=%s\t%s\n", b.Namespace, b.Name, v.Status, v.Reason)
		}
	}
	if r := s.RestoreJob; r != nil {
		fmt.Fprintf(w, "RestoreJob\t%s/%s\t%s\t%d objects back with identical data\n", r.Namespace, r.Name, r.Status.Phase, len(s.Restored))
	}
	for _, r := range s.Results {
		fmt.Fprintf(w, "BackupVerifyResult\t%s/%s\t%s\t%s\n", r.Namespace, r.Name, r.Status.WorstSeverity, resultLine(r))
	}
	for _, e := range s.Events {
		fmt.Fprintf(w, "SecurityEvent\t%s\t%s\t%s\n", e.Name, e.Spec.Type, e.Spec.Severity)
	}
	_ = w.Flush()
}

func condition(conds []metav1.Condition) string {
	if c := meta.FindStatusCondition(conds, backupsv1.ConditionReady); c != nil {
		return c.Reason
	}
	return "-"
}
