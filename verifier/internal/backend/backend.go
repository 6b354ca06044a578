// Package backend is what the verifier asks of a backend: the checks only it knows how to make.
// The run reconciler (package verifyrun) owns the lifecycle every backend shares, once: the start
// and its SecurityEvent, the deadline, retries with backoff, one status patch per pass, the
// Result, the terminal SecurityEvent, metrics and events. A backend only reads a backup and says
// what it found; backends import nothing of each other.
//
// Findings are facts about the backup. Trouble carrying the verification out (the API server, the
// object store, a process) is an error: the reconciler retries it until the run's deadline, and
// an error wrapped in reconcile.TerminalError is one no retry can fix (the run fails
// BackupVerifyFailed, with no verdict on the backup). A transport fault is never a finding.
package backend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
)

// Backend verifies the backups of one spec.backend by checksum: it reads the stored backup once
// and compares it with what was recorded when it was taken. Each call is one pass within the
// run's deadline (ctx) and must be idempotent: a crash anywhere resumes in the same call.
type Backend interface {
	Checksum(ctx context.Context, run *securityv1.BackupVerifyRun) (Outcome, error)
}

// Restorer is a Backend that also verifies by full restore: it restores the backup into the
// run's sandbox, waits for the restore, and compares what was restored with the backup.
// A backend that is no Restorer refuses full-restore runs (ModeNotSupported).
type Restorer interface {
	Backend
	// FullRestore starts or observes the run's restore. An Outcome with Done false is a restore
	// in progress: the reconciler polls again (within PollInterval) and says Waiting(run).
	FullRestore(ctx context.Context, run *securityv1.BackupVerifyRun) (Outcome, error)
	// Waiting names what a full-restore in progress waits for, for the run's conditions.
	Waiting(run *securityv1.BackupVerifyRun) string
	// Cleanup removes what FullRestore made (its restore, its sandboxes), best-effort: each
	// failure is a finding. It runs once the restore is over or the run's deadline passed, under
	// a deadline of its own, and deletes only objects carrying the run's UID.
	Cleanup(ctx context.Context, run *securityv1.BackupVerifyRun) []securityv1.Finding
}

// Waiter is a backend whose passes may end before the verification does (an Outcome with Done
// false): Waiting names what the run waits for, for its conditions. Every Restorer is one; a
// Backend whose check runs elsewhere (a pod) may be one.
type Waiter interface {
	Waiting(run *securityv1.BackupVerifyRun) string
}

// Outcome is what one pass of a verification established about the backup.
type Outcome struct {
	Findings []securityv1.Finding
	// Done is false while a full-restore's restore is still running.
	Done             bool
	RecordedChecksum string
	ComputedChecksum string
	// ChecksumBasis says what ComputedChecksum was compared with (unset: no checksum compared).
	ChecksumBasis   securityv1.ChecksumBasis
	SizeBytes       int64
	ObjectsExpected int32
	ObjectsRestored int32
	Details         map[string]string

	restores []span // of RestoreTook
}

// Add records a finding.
func (o *Outcome) Add(code string, sev securityv1.Severity, object, msg string) {
	o.Findings = append(o.Findings, securityv1.Finding{Code: code, Severity: sev, Object: object, Message: msg})
}

// Detail records a detail, making the map when needed.
func (o *Outcome) Detail(key, value string) {
	if o.Details == nil {
		o.Details = map[string]string{}
	}
	o.Details[key] = value
}

// RestoreTook records how long a restore took, from its creation to its completion (its own
// timestamps, so a verifier restart in between changes nothing): the measured recovery time of
// the Backup (securityv1.DetailRestoreSeconds). Nothing is recorded without a completion time. A
// run that restores in steps (objects, volume data) calls it for each: the time recorded is that
// of their union, so restores that ran one after the other add up, and time they ran at once
// counts once.
func (o *Outcome) RestoreTook(created metav1.Time, completed *metav1.Time) {
	if completed == nil || created.IsZero() || completed.Before(&created) {
		return
	}
	o.restoreTook(span{created.Time, completed.Time})
}

// span is a restore's time, from its creation to its completion.
type span struct{ from, to time.Time }

func (o *Outcome) restoreTook(spans ...span) {
	o.restores = append(o.restores, spans...)
	slices.SortFunc(o.restores, func(a, b span) int { return a.from.Compare(b.from) })
	var took time.Duration
	var end time.Time
	for _, s := range o.restores {
		switch {
		case s.from.After(end):
			took += s.to.Sub(s.from)
		case s.to.After(end):
			took += s.to.Sub(end)
		}
		if s.to.After(end) {
			end = s.to
		}
	}
	o.Detail(securityv1.DetailRestoreSeconds, strconv.FormatInt(int64(took.Seconds()), 10))
}

// Merge adds another outcome's details to o's, but for the restore time, which covers the
// restores of both (RestoreTook).
func (o *Outcome) Merge(other *Outcome) {
	for k, v := range other.Details {
		if k != securityv1.DetailRestoreSeconds {
			o.Detail(k, v)
		}
	}
	if len(other.restores) > 0 {
		o.restoreTook(other.restores...)
	}
}

// RestoreSeconds reads the detail RestoreTook records.
func RestoreSeconds(details map[string]string) (time.Duration, bool) {
	n, err := strconv.ParseInt(details[securityv1.DetailRestoreSeconds], 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return time.Duration(n) * time.Second, true
}

// Count records a positive count in the details.
func (o *Outcome) Count(key string, n int) {
	if n <= 0 {
		return
	}
	if o.Details == nil {
		o.Details = map[string]string{}
	}
	o.Details[key] = strconv.Itoa(n)
}

// APIError describes trouble with the API server while doing what, and says what to check.
func APIError(what string, err error) error {
	hint := "check the API server and the verifier's log"
	switch {
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		hint = "check the verifier's RBAC (deploy/verifier/rbac): its ServiceAccount must be allowed to do this"
	case apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || errors.Is(err, context.DeadlineExceeded):
		hint = "check the API server's health and load"
	}
	return fmt.Errorf("%s: %w; %s", what, err, hint)
}

// Truncate bounds s to n bytes, ending a shortened s with "…" (within the n).
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-len("…")] + "…"
}

// LiveRuns are the UIDs of the runs that have not ended, from r (the manager's cache): what the
// sweepers of a run's leftovers (sandboxes, check pods) keep.
func LiveRuns(ctx context.Context, r client.Reader) (map[types.UID]bool, error) {
	runs := &securityv1.BackupVerifyRunList{}
	if err := r.List(ctx, runs, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing BackupVerifyRuns: %w", err)
	}
	live := map[types.UID]bool{}
	for _, run := range runs.Items {
		if !run.Status.Phase.IsTerminal() {
			live[run.UID] = true
		}
	}
	return live, nil
}
