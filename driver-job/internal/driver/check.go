package driver

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-job/internal/jobs"
	"github.com/coffer-backup/coffer/driver-job/internal/names"
	"github.com/coffer-backup/coffer/driverkit"
)

// The artifact checks. The driver cannot read the object store itself (its credentials are the
// tenant's, in the Secret the strategy's pod templates mount, and the driver reads no Secret), so
// it runs the strategy's cleanupTemplate in check mode: a short Job whose agent looks the artifact
// up and reports {"exists": ..., "sizeBytes": ...} (jobapi.CheckReport).
//
// Two parts share the work. StartDueChecks, run every CheckInterval by the elected leader
// (ArtifactChecks), starts the check Jobs of the Ready Backups whose check is due, at most
// MaxCheckJobs at a time. CheckArtifact (driverkit.ArtifactChecker), called by the kit whenever it
// looks at a Ready Backup (the Backup changed, or its check Job did), reads a finished check Job:
// it returns the ArtifactAvailable condition the check found, and once the Backup shows it, records
// when the next check is due (names.AnnotationNextCheck) and deletes the Job. A check that could
// not tell (the Job failed, or its report is unusable) changes no condition and is retried after
// CheckRetryDelay: a Backup is never marked missing on an inconclusive check.

// Defaults and bounds of the artifact checks.
const (
	// DefaultCheckPeriod is how often a Backup's artifact is checked, from its creation.
	DefaultCheckPeriod = 24 * time.Hour
	// DefaultMaxCheckJobs bounds the check Jobs running at once, in the whole cluster.
	DefaultMaxCheckJobs = 2
	// CheckRetryDelay is when an inconclusive check is tried again (at most the period).
	CheckRetryDelay = time.Hour
	// CheckActiveDeadlineSeconds bounds a check Job (the strategy's activeDeadlineSeconds when
	// shorter): a HEAD request, plus pulling the image. A check Job no Job controller finished
	// within it and DeadlineGrace is deleted, and the check retried.
	CheckActiveDeadlineSeconds int64 = 300
	// CheckInterval is how often the driver looks for Backups whose check is due.
	CheckInterval = time.Minute
)

// Event reasons of the checks.
const (
	// ReasonArtifactCheckInconclusive: a check Job could not tell whether the artifact exists;
	// nothing changed, and the check is retried after CheckRetryDelay.
	ReasonArtifactCheckInconclusive = "ArtifactCheckInconclusive"
	// ReasonArtifactsUncheckable: a strategy has no cleanupTemplate, so its Backups' artifacts
	// cannot be checked (said once per strategy generation and process).
	ReasonArtifactsUncheckable = "ArtifactsUncheckable"
)

var _ driverkit.ArtifactChecker = (*Driver)(nil)

func (d *Driver) checkPeriod() time.Duration { return d.CheckPeriod }

func (d *Driver) retryDelay() time.Duration { return min(CheckRetryDelay, d.CheckPeriod) }

func (d *Driver) maxCheckJobs() int {
	if d.MaxCheckJobs > 0 {
		return d.MaxCheckJobs
	}
	return DefaultMaxCheckJobs
}

func (d *Driver) now() time.Time {
	if d.Clock == nil {
		return time.Now()
	}
	return d.Clock.Now()
}

// checkRun is the check Job of a Backup: owned by it (without blocking its deletion), so the
// garbage collector deletes a Job whose Backup is gone.
func checkRun(b *backupsv1.Backup) jobs.Run {
	return jobs.Run{Object: b, Kind: names.KindBackupCheck, Dependent: true}
}

// CheckArtifact reads the Backup's finished check Job, if there is one, and returns the
// ArtifactAvailable condition it found: True when the object exists with the size the backup
// stored, False (ArtifactMissing) when it is gone or holds another size. Without a finished check
// Job, or when the check was inconclusive, it has no opinion (nil). It is called on every look at
// the Backup, so it only reads the cache until a check Job has finished.
func (d *Driver) CheckArtifact(ctx context.Context, b *backupsv1.Backup) (*metav1.Condition, error) {
	if b.Status.Artifact == nil {
		return nil, nil
	}
	if cond, err := d.outsideScope(ctx, b); cond != nil || err != nil {
		return cond, err
	}
	log := ctrl.LoggerFrom(ctx)
	j, err := jobs.Get(ctx, d.Client, checkRun(b))
	if err != nil {
		if f, ok := driverkit.AsFailure(err); ok { // a foreign Job under the check's name
			log.Info("Artifact check skipped", "reason", f.Reason, "error", f.Error())
			return nil, nil
		}
		return nil, err
	}
	if j == nil || !j.DeletionTimestamp.IsZero() {
		return nil, nil
	}
	out, err := jobs.Observe(ctx, d.Live, j)
	if err != nil || !out.Finished {
		return nil, err
	}
	cond, inconclusive := checkResult(b, j, out)
	// A check that found the artifact gone is one sighting: the kit records it as
	// ArtifactAbsenceUnconfirmed, and a second check Job, a retry delay later, confirms it. This
	// Job's own sighting names the Job's UID.
	unconfirmed := cond != nil && cond.Status == metav1.ConditionFalse && absenceUnconfirmedBy(b, j)
	if cond != nil && !shows(b, cond) && !unconfirmed {
		// The kit records the condition first; that write brings the Backup back here, and the
		// next look finishes the check. A crash in between loses nothing: the Job is still there.
		return cond, nil
	}
	next := finishedAt(j, d.now()).Add(d.checkPeriod())
	if inconclusive != "" || unconfirmed {
		next = finishedAt(j, d.now()).Add(d.retryDelay())
	}
	if err := d.recordNextCheck(ctx, b, next); err != nil {
		return nil, err
	}
	if err := client.IgnoreNotFound(d.Client.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &j.UID})); err != nil {
		return nil, fmt.Errorf("deleting check Job %s: %w", j.Name, err)
	}
	if inconclusive != "" {
		msg := fmt.Sprintf("The check of the artifact %s was inconclusive: %s. ArtifactAvailable is unchanged; the check is retried at %s",
			artifactURI(b), inconclusive, next.UTC().Format(time.RFC3339))
		log.Info("Artifact check inconclusive", "job", klog.KObj(j), "message", msg)
		d.Recorder.Eventf(b, nil, corev1.EventTypeWarning, ReasonArtifactCheckInconclusive, "Check", "%s", msg)
		return nil, nil
	}
	log.V(1).Info("Artifact checked", "job", klog.KObj(j), "available", cond.Status, "next", next)
	return cond, nil
}

// outsideScope returns ArtifactAvailable=False (ArtifactOutsideRun) for a Backup whose artifact
// lies outside its bucket and namespace (recorded before the driver checked reports, or by hand):
// no check Job looks at it, and restores and cleanups refuse it. The strategy is read (cached)
// for an imported Backup only, whose scope is its catalog's.
func (d *Driver) outsideScope(ctx context.Context, b *backupsv1.Backup) (*metav1.Condition, error) {
	var strat *jobapi.JobBackupStrategy
	if b.Imported() {
		s, err := driverkit.GetStrategy(ctx, d.Client, b.Spec.StrategyRef, &jobapi.JobBackupStrategy{})
		if err != nil {
			if _, ok := driverkit.AsFailure(err); !ok {
				return nil, err
			}
		} else {
			strat = s
		}
	}
	err := backupScope(b, strat).check(b.Status.Artifact.URI)
	if err == nil {
		return nil, nil
	}
	return &metav1.Condition{Type: backupsv1.ConditionArtifactAvailable, Status: metav1.ConditionFalse, Reason: ReasonArtifactOutsideRun,
		Message: fmt.Sprintf("This Backup names an artifact outside its bucket and namespace: %v. The driver does not check, restore or delete it", err)}, nil
}

// unremarkable reports whether a look at Backup b would leave it as it is (Kit.Unremarkable): a
// Ready Backup of this cluster whose artifact lies in its run's bucket and namespace. Its check
// answers only from a finished check Job (CheckArtifact), and a check Job's own events queue its
// Backup, at start too; the checks that fall due are started by StartDueChecks, which walks the
// cache. At 100,000 Backups, not queueing a first look at each when the cache starts saves about
// 40 MB of queue.
func (d *Driver) unremarkable(b *backupsv1.Backup) bool {
	return b.Status.Phase == backupsv1.BackupReady && b.Status.Artifact != nil && !b.Imported() &&
		backupScope(b, nil).check(b.Status.Artifact.URI) == nil
}

// checkResult reads a finished check Job: the condition it found, or why it is inconclusive.
func checkResult(b *backupsv1.Backup, j *batchv1.Job, out jobs.Outcome) (*metav1.Condition, string) {
	if !out.Succeeded {
		return nil, out.Message
	}
	report, err := jobapi.ParseCheckReport(out.Report)
	if err != nil {
		where := "no pod of Job " + j.Name + " is left to read"
		if out.Pod != "" {
			where = "pod " + out.Pod + " of Job " + j.Name
		}
		return nil, fmt.Sprintf("%s reported no usable check result: %v", where, err)
	}
	a := b.Status.Artifact
	cond := &metav1.Condition{Type: backupsv1.ConditionArtifactAvailable, Status: metav1.ConditionFalse, Reason: backupsv1.ReasonArtifactMissing}
	switch {
	case !report.Exists:
		cond.Message = fmt.Sprintf("Check Job %s (uid %s) found no object at %s: the artifact was deleted or expired outside Coffer; this Backup cannot be restored", j.Name, j.UID, a.URI)
	case report.SizeBytes != a.SizeBytes:
		cond.Message = fmt.Sprintf("Check Job %s (uid %s) found %s with %d bytes, not the %d bytes the backup stored: the object there is not this Backup's artifact (overwritten or truncated); this Backup cannot be restored",
			j.Name, j.UID, a.URI, report.SizeBytes, a.SizeBytes)
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, backupsv1.ReasonArtifactPresent
		cond.Message = fmt.Sprintf("Check Job %s found the artifact %s (%d bytes)", j.Name, a.URI, a.SizeBytes)
	}
	return cond, ""
}

// absenceUnconfirmedBy reports whether the kit recorded the absence check Job j found, and has not
// confirmed it yet.
func absenceUnconfirmedBy(b *backupsv1.Backup, j *batchv1.Job) bool {
	c := meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionArtifactAvailable)
	return c != nil && c.Status == metav1.ConditionUnknown && c.Reason == backupsv1.ReasonArtifactAbsenceUnconfirmed && strings.Contains(c.Message, string(j.UID))
}

// shows reports whether the Backup already has the condition (status, reason and message).
func shows(b *backupsv1.Backup, cond *metav1.Condition) bool {
	c := meta.FindStatusCondition(b.Status.Conditions, cond.Type)
	return c != nil && c.Status == cond.Status && c.Reason == cond.Reason && c.Message == cond.Message
}

// finishedAt is when a finished Job finished: its completion time, or when it was marked failed.
func finishedAt(j *batchv1.Job, now time.Time) time.Time {
	if j.Status.CompletionTime != nil {
		return j.Status.CompletionTime.Time
	}
	if c := jobs.Terminal(j); c != nil {
		return c.LastTransitionTime.Time
	}
	return now
}

// nextCheck is when the Backup's artifact is next due for a check: its annotation, or a period
// after its creation.
func (d *Driver) nextCheck(b *backupsv1.Backup) time.Time {
	if v := b.Annotations[names.AnnotationNextCheck]; v != "" {
		if t, err := time.Parse(time.RFC3339, v); err == nil {
			return t
		}
	}
	return b.CreationTimestamp.Add(d.checkPeriod())
}

// recordNextCheck writes when the Backup's next check is due (a merge patch of one annotation;
// b is updated with the result, so the kit's status write that may follow sees its version).
func (d *Driver) recordNextCheck(ctx context.Context, b *backupsv1.Backup, next time.Time) error {
	value := next.UTC().Format(time.RFC3339)
	if b.Annotations[names.AnnotationNextCheck] == value {
		return nil
	}
	orig := b.DeepCopy()
	if b.Annotations == nil {
		b.Annotations = map[string]string{}
	}
	b.Annotations[names.AnnotationNextCheck] = value
	if err := d.Client.Patch(ctx, b, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("recording the next artifact check of Backup %s: %w", b.Name, err)
	}
	return nil
}

// checkStrategy is the strategy as a check Job runs it: no retry (the next check is the retry),
// a short deadline, and no TTL (the driver deletes the Job once it has read it).
func checkStrategy(s *jobapi.JobBackupStrategy) *jobapi.JobBackupStrategy {
	c := s.DeepCopy()
	c.Spec.BackoffLimit = ptr.To[int32](0)
	c.Spec.ActiveDeadlineSeconds = ptr.To(min(ptr.Deref(s.Spec.ActiveDeadlineSeconds, jobs.DefaultActiveDeadlineSeconds), CheckActiveDeadlineSeconds))
	c.Spec.TTLSecondsAfterFinished = nil
	return c
}

// StartDueChecks starts the check Jobs of the Ready Backups of this driver whose check is due,
// the longest overdue first, while fewer than MaxCheckJobs check Jobs run. A Backup with a check
// Job (running, or finished and not yet read) gets no second one. A check Job still running past
// its deadline (no Job controller finished it) is deleted and its check retried later. A strategy
// without cleanupTemplate cannot be checked: that is said once, and its Backups are left as they
// are.
func (d *Driver) StartDueChecks(ctx context.Context) error {
	if d.checkPeriod() <= 0 {
		return nil
	}
	log := ctrl.LoggerFrom(ctx)
	now := d.now()
	list := &batchv1.JobList{}
	if err := d.Client.List(ctx, list, client.MatchingLabels{names.LabelRunKind: names.KindBackupCheck, backupsv1.LabelManagedBy: names.DriverName}); err != nil {
		return fmt.Errorf("listing the check Jobs: %w", err)
	}
	busy := map[types.NamespacedName]bool{}
	running := 0
	for i := range list.Items {
		j := &list.Items[i]
		ns, name, _ := strings.Cut(j.Annotations[jobs.AnnotationRun], "/")
		busy[types.NamespacedName{Namespace: ns, Name: name}] = true
		if !j.DeletionTimestamp.IsZero() || jobs.Terminal(j) != nil {
			continue
		}
		deadline := time.Duration(ptr.Deref(j.Spec.ActiveDeadlineSeconds, CheckActiveDeadlineSeconds))*time.Second + jobs.DeadlineGrace
		if now.Sub(j.CreationTimestamp.Time) <= deadline {
			running++
			continue
		}
		// No Job controller finished it: delete it, and retry the check later.
		if err := client.IgnoreNotFound(d.Client.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &j.UID})); err != nil {
			return fmt.Errorf("deleting stale check Job %s: %w", klog.KObj(j), err)
		}
		log.Info("Deleted a check Job that did not finish within its deadline; the check is retried later", "job", klog.KObj(j))
		b := &backupsv1.Backup{}
		if err := d.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, b); err == nil {
			if err := d.recordNextCheck(ctx, b, now.Add(d.retryDelay())); err != nil {
				return err
			}
		}
	}

	// Every minute over every Backup of the driver's kind: the cache's own objects are read in
	// place (not copied, never written) and only the due ones copied.
	var due []*backupsv1.Backup
	err := driverkit.EachBackup(ctx, d.Cache, d.Client, func(b *backupsv1.Backup) {
		if backupsv1.StrategyIs(b.Spec.StrategyRef, jobapi.Group, jobapi.Kind) && b.Status.Phase == backupsv1.BackupReady && b.Status.Artifact != nil &&
			b.DeletionTimestamp.IsZero() && !busy[client.ObjectKeyFromObject(b)] && !d.nextCheck(b).After(now) {
			due = append(due, b.DeepCopy())
		}
	})
	if err != nil {
		return fmt.Errorf("reading the Backups: %w", err)
	}
	sort.SliceStable(due, func(i, k int) bool {
		ti, tk := d.nextCheck(due[i]), d.nextCheck(due[k])
		if !ti.Equal(tk) {
			return ti.Before(tk)
		}
		return due[i].Namespace+"/"+due[i].Name < due[k].Namespace+"/"+due[k].Name
	})
	for i, b := range due {
		if running >= d.maxCheckJobs() {
			log.V(1).Info("Artifact checks wait for a free slot", "waiting", len(due)-i, "maxCheckJobs", d.maxCheckJobs())
			return nil
		}
		strat, err := driverkit.GetStrategy(ctx, d.Client, b.Spec.StrategyRef, &jobapi.JobBackupStrategy{})
		if err != nil {
			log.V(1).Info("Artifact check skipped: the strategy cannot be read", "backup", klog.KObj(b), "error", err.Error())
			continue
		}
		if strat.Spec.CleanupTemplate == nil {
			d.uncheckable(ctx, strat)
			continue
		}
		if backupScope(b, strat).check(b.Status.Artifact.URI) != nil {
			continue // CheckArtifact says so on the Backup; no Job looks at another's object
		}
		// The check Job is rendered from the Backup as the API server holds it (the template sees
		// it whole, the agent its checksum): the cached copy is trimmed (driverkit.TrimBackup).
		live := &backupsv1.Backup{}
		if err := d.Live.Get(ctx, client.ObjectKeyFromObject(b), live); err != nil {
			if client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("reading Backup %s: %w", klog.KObj(b), err)
			}
			continue
		}
		if live.UID != b.UID || !live.DeletionTimestamp.IsZero() || live.Status.Artifact == nil || live.Status.Artifact.URI != b.Status.Artifact.URI {
			continue // changed since the cache saw it: the next scan decides anew
		}
		b = live
		j, err := d.createArtifactJob(ctx, b, checkStrategy(strat), checkRun(b), jobapi.ModeCheck, jobs.ArtifactEnv(b)...)
		if err != nil {
			if _, ok := driverkit.AsFailure(err); !ok {
				return err
			}
			// The template does not render or the Job is refused: the check cannot run as it is.
			msg := fmt.Sprintf("The artifact %s cannot be checked: %v. ArtifactAvailable is unchanged; the check is retried at %s",
				artifactURI(b), err, now.Add(d.retryDelay()).UTC().Format(time.RFC3339))
			d.Recorder.Eventf(b, nil, corev1.EventTypeWarning, ReasonArtifactCheckInconclusive, "Check", "%s", msg)
			if err := d.recordNextCheck(ctx, b, now.Add(d.retryDelay())); err != nil {
				return err
			}
			continue
		}
		running++
		log.Info("Started an artifact check", "backup", klog.KObj(b), "job", klog.KObj(j))
	}
	return nil
}

// uncheckable says once per strategy generation (and process) that a strategy's Backups cannot be
// checked: in the log and as a Warning event regarding the strategy.
func (d *Driver) uncheckable(ctx context.Context, strat *jobapi.JobBackupStrategy) {
	key := fmt.Sprintf("%s/%d", strat.UID, strat.Generation)
	if _, said := d.warned.LoadOrStore(key, true); said {
		return
	}
	msg := fmt.Sprintf("JobBackupStrategy %s has no cleanupTemplate: the driver checks artifacts with a Job from that template, so the artifacts of its Backups are not checked and their ArtifactAvailable stays as recorded. Give it a cleanupTemplate that reaches the object store", strat.Name)
	ctrl.LoggerFrom(ctx).Info("Artifacts cannot be checked", "strategy", strat.Name, "message", msg)
	d.Recorder.Eventf(strat, nil, corev1.EventTypeWarning, ReasonArtifactsUncheckable, "Check", "%s", msg)
}

// ArtifactChecks runs StartDueChecks every CheckInterval, on the elected leader only.
type ArtifactChecks struct{ Driver *Driver }

var _ manager.LeaderElectionRunnable = ArtifactChecks{}

// NeedLeaderElection: only the leader starts check Jobs.
func (ArtifactChecks) NeedLeaderElection() bool { return true }

// Start runs until ctx ends.
func (c ArtifactChecks) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("artifact-checks")
	ctx = ctrl.LoggerInto(ctx, log)
	t := time.NewTicker(CheckInterval)
	defer t.Stop()
	for {
		if err := c.Driver.StartDueChecks(ctx); err != nil {
			log.Error(err, "Starting artifact checks")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
