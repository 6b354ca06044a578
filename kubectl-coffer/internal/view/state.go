// Package view formats what the plugin prints: the status table of Plans, a run's description,
// and the progress lines of --wait. It is pure (the time is passed in), so tests pin every line.
package view

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
)

// The conditions of a BackupVerifyRun (docs/verifier.md).
const (
	verifyReady       = "Ready"
	verifyProgressing = "Progressing"
)

// State is where a run stands, whatever its kind: its phase and the condition that explains it.
type State struct {
	// Phase is the run's phase; empty reads as Pending.
	Phase string
	// Terminal and Succeeded tell how the run ended, if it did.
	Terminal, Succeeded bool
	// Reason and Message explain the phase: the condition that says most about it.
	Reason, Message string
}

// BackupJobState is where a BackupJob stands: Ready explains a terminal run, Accepted a running one.
func BackupJobState(j *backupsv1.BackupJob) State {
	return runState(string(j.Status.Phase), j.IsTerminal(), j.Status.Phase == backupsv1.BackupJobSucceeded, j.Status.Message, j.Status.Conditions)
}

// RestoreJobState is where a RestoreJob stands, as BackupJobState.
func RestoreJobState(r *backupsv1.RestoreJob) State {
	return runState(string(r.Status.Phase), r.IsTerminal(), r.Status.Phase == backupsv1.RestoreJobSucceeded, r.Status.Message, r.Status.Conditions)
}

// VerifyRunState is where a BackupVerifyRun stands: Ready explains a terminal run, Progressing a
// running one.
func VerifyRunState(v *securityv1.BackupVerifyRun) State {
	// A run that Succeeded with a Mismatch was carried out, and its verdict is no success: Ready
	// is True only for a backup verified clean.
	s := State{Phase: string(v.Status.Phase), Terminal: v.Status.Phase.IsTerminal(),
		Succeeded: v.Status.Phase == securityv1.RunSucceeded && !meta.IsStatusConditionFalse(v.Status.Conditions, verifyReady)}
	for _, t := range []string{verifyReady, verifyProgressing} {
		if c := meta.FindStatusCondition(v.Status.Conditions, t); c != nil && (s.Terminal || t != verifyReady) {
			s.Reason, s.Message = c.Reason, c.Message
			break
		}
	}
	if s.Message == "" {
		s.Message = v.Status.Message
	}
	return s
}

func runState(phase string, terminal, succeeded bool, message string, conds []metav1.Condition) State {
	s := State{Phase: phase, Terminal: terminal, Succeeded: succeeded}
	order := []string{backupsv1.ConditionAccepted}
	if terminal {
		order = []string{backupsv1.ConditionReady, backupsv1.ConditionAccepted}
	}
	for _, t := range order {
		if c := meta.FindStatusCondition(conds, t); c != nil {
			s.Reason, s.Message = c.Reason, c.Message
			break
		}
	}
	if message != "" && (s.Message == "" || terminal && !succeeded) {
		s.Message = message
	}
	return s
}

// String is the state on one line: "Running (Claimed: Claimed by coffer-driver-velero)".
func (s State) String() string {
	phase := s.Phase
	if phase == "" {
		phase = "Pending"
	}
	var why []string
	if s.Reason != "" {
		why = append(why, s.Reason)
	}
	if s.Message != "" {
		why = append(why, oneLine(s.Message))
	}
	if len(why) == 0 {
		return phase
	}
	return phase + " (" + strings.Join(why, ": ") + ")"
}

// ProgressLine is a --wait line: the time waited, the run and its state.
func ProgressLine(run string, s State, waited time.Duration) string {
	return Waited(waited) + " " + run + " " + s.String()
}

// Waited is the time waited as a --wait line starts: "[   12s]".
func Waited(d time.Duration) string {
	return fmt.Sprintf("[%6s]", d.Round(time.Second))
}

// Ago is a time in the past as "5m ago", or "never" when unset.
func Ago(now time.Time, t *metav1.Time) string {
	if t == nil || t.IsZero() {
		return "never"
	}
	d := now.Sub(t.Time)
	if d < 0 {
		return "in " + duration.HumanDuration(-d)
	}
	return duration.HumanDuration(d) + " ago"
}

// Until is a time in the future as "in 42s", or "-" when unset.
func Until(now time.Time, t *metav1.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	d := t.Sub(now)
	if d < 0 {
		return duration.HumanDuration(-d) + " overdue"
	}
	return "in " + duration.HumanDuration(d)
}

// Bytes is a size in binary units: "512 B", "12.0 KiB", "3.4 GiB".
func Bytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, unit := float64(n), 0
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	for v /= 1024; v >= 1024 && unit < len(units)-1; v /= 1024 {
		unit++
	}
	return fmt.Sprintf("%.1f %s", v, units[unit])
}

// oneLine folds a message onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
