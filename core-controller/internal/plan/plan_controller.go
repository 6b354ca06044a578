package plan

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/core-controller/internal/retention"
	"github.com/coffer-backup/coffer/core-controller/internal/schedule"
)

// BackupPlanIndex is the cache index of Backups by spec.planRef.name.
const BackupPlanIndex = "spec.planRef.name"

// Event reasons of the Plan controller.
const (
	EventBackupJobCreated = "BackupJobCreated"
	EventTickSkipped      = "TickSkipped"
	EventBackupPruned     = "BackupPruned"
)

// Reconciler schedules one Plan.
type Reconciler struct {
	// Client reads through the cache and writes to the API server.
	Client client.Client
	// APIReader reads the API server directly (to inspect an object whose name a create found taken).
	APIReader client.Reader
	Clock     clock.PassiveClock
	Recorder  events.EventRecorder
}

// scope carries one reconcile's state; status changes are written once, at the end.
type scope struct {
	plan *backupsv1.Plan
	orig *backupsv1.Plan
	now  time.Time
	jobs []backupsv1.BackupJob // this Plan's BackupJobs
	// sched is the parsed schedule, or nil with schedErr set when it does not parse.
	sched    *schedule.Schedule
	schedErr error
	// deferStatus skips this reconcile's status write: a tick just created its BackupJob, and the
	// reconcile its creation triggers records it. Under load this puts every due create ahead of
	// every status write in the work queue.
	deferStatus bool
	// recordedFromJobs is set when this reconcile learnt a fired tick from the BackupJobs.
	recordedFromJobs bool
}

// Reconcile runs the phases of a Plan and writes its status once.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, retErr error) {
	plan := &backupsv1.Plan{}
	if err := r.Client.Get(ctx, req.NamespacedName, plan); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !plan.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	s := &scope{plan: plan, orig: plan.DeepCopy(), now: r.Clock.Now()}
	s.sched, s.schedErr = schedule.Parse(plan.Spec.Schedule)
	defer func() {
		if err := r.patchStatus(ctx, s); err != nil && retErr == nil {
			res, retErr = reconcile.Result{}, err
		}
	}()

	for _, phase := range []func(context.Context, *scope) error{r.loadJobs, r.pruneHistory, r.applyRetention} {
		if err := phase(ctx, s); err != nil {
			return reconcile.Result{}, err
		}
	}
	return r.schedule(ctx, s)
}

func (r *Reconciler) patchStatus(ctx context.Context, s *scope) error {
	if s.deferStatus || apiequality.Semantic.DeepEqual(s.orig.Status, s.plan.Status) {
		return nil
	}
	patch := client.MergeFromWithOptions(s.orig, client.MergeFromWithOptimisticLock{})
	if err := r.Client.Status().Patch(ctx, s.plan, patch); err != nil {
		return fmt.Errorf("patching Plan status: %w", err)
	}
	return nil
}

// loadJobs lists the BackupJobs this Plan controls and derives active and lastSuccessfulTime.
func (r *Reconciler) loadJobs(ctx context.Context, s *scope) error {
	list := &backupsv1.BackupJobList{}
	if err := r.Client.List(ctx, list, client.InNamespace(s.plan.Namespace),
		client.MatchingLabels{backupsv1.LabelPlan: backupsv1.PlanLabelValue(s.plan.Name)}); err != nil {
		return fmt.Errorf("listing BackupJobs: %w", err)
	}
	s.jobs = s.jobs[:0]
	var active []corev1.LocalObjectReference
	for _, j := range list.Items {
		if !metav1.IsControlledBy(&j, s.plan) {
			continue
		}
		s.jobs = append(s.jobs, j)
		if !j.IsTerminal() && j.DeletionTimestamp.IsZero() {
			active = append(active, corev1.LocalObjectReference{Name: j.Name})
		}
		if j.Status.Phase == backupsv1.BackupJobSucceeded && j.Status.CompletedAt != nil {
			if last := s.plan.Status.LastSuccessfulTime; last == nil || last.Before(j.Status.CompletedAt) {
				s.plan.Status.LastSuccessfulTime = j.Status.CompletedAt.DeepCopy()
			}
		}
	}
	sort.Slice(active, func(i, k int) bool { return active[i].Name < active[k].Name })
	s.plan.Status.Active = active
	// The newest BackupJob records its tick even if the status write after its creation was
	// deferred or lost (a crash): that tick fired.
	if name, tick := newestJob(s.jobs); name != "" {
		if last := s.plan.Status.LastScheduleTime; last == nil || last.Time.Before(tick) {
			// Ticks between what the status knew and this one were missed (a crash lost the
			// status write that counted them): count them now.
			if s.sched != nil {
				from := since(s.plan)
				if due := s.sched.DueAt(from, tick); due.Tick != nil {
					missed := due.Missed - jobsBetween(s.jobs, from, tick)
					if missed > 0 {
						r.skip(s, tick.Add(-time.Nanosecond), missed, backupsv1.ReasonMissedDeadline,
							fmt.Sprintf("%d tick(s) before %s were missed (the controller was not running)", missed, tick.UTC().Format(time.RFC3339)))
					}
				}
			}
			s.plan.Status.LastScheduleTime = &metav1.Time{Time: tick}
			s.recordedFromJobs = true
			if skipped := s.plan.Status.LastSkippedTime; skipped == nil || skipped.Time.Before(tick) {
				r.setCondition(s, backupsv1.ConditionTickSkipped, metav1.ConditionFalse, backupsv1.ReasonTickFired,
					fmt.Sprintf("The tick at %s created BackupJob %s", tick.UTC().Format(time.RFC3339), name))
			}
		}
	}
	return nil
}

// pruneHistory deletes the oldest terminal BackupJobs beyond the Plan's history limits. Backups are
// never touched here: they carry no ownerReference to their BackupJob.
//
// The BackupJob of the Plan's newest tick is kept whatever the limits say: it is what makes a tick
// fire exactly once even when the cache lags behind the Plan's last status write (a re-fire of
// that tick then finds the name taken and adopts the job).
func (r *Reconciler) pruneHistory(ctx context.Context, s *scope) error {
	newest, _ := newestJob(s.jobs)
	limits := map[backupsv1.BackupJobPhase]int{
		backupsv1.BackupJobSucceeded: int(ptrOr(s.plan.Spec.SuccessfulJobsHistoryLimit, backupsv1.DefaultSuccessfulJobsHistoryLimit)),
		backupsv1.BackupJobFailed:    int(ptrOr(s.plan.Spec.FailedJobsHistoryLimit, backupsv1.DefaultFailedJobsHistoryLimit)),
	}
	for phase, limit := range limits {
		var done []backupsv1.BackupJob
		for _, j := range s.jobs {
			if j.Status.Phase == phase && j.DeletionTimestamp.IsZero() && j.Name != newest {
				done = append(done, j)
			}
		}
		sort.Slice(done, func(i, k int) bool { return finishedAt(done[i]).After(finishedAt(done[k])) })
		for i := limit; i < len(done); i++ {
			j := &done[i]
			err := r.Client.Delete(ctx, j, client.Preconditions{UID: &j.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground))
			if client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
				return fmt.Errorf("deleting BackupJob %s beyond the history limit: %w", j.Name, err)
			}
			ctrl.LoggerFrom(ctx).V(1).Info("Deleted BackupJob beyond the history limit", "backupJob", klog.KObj(j), "phase", phase, "limit", limit)
		}
	}
	return nil
}

// jobsBetween counts the BackupJobs whose ticks lie strictly between from and to.
func jobsBetween(jobs []backupsv1.BackupJob, from, to time.Time) int64 {
	var n int64
	for _, j := range jobs {
		t, err := time.Parse(time.RFC3339, j.Annotations[backupsv1.AnnotationScheduledTime])
		if err == nil && t.After(from) && t.Before(to) {
			n++
		}
	}
	return n
}

// newestJob names the BackupJob of the latest tick (by its scheduled-time annotation) and its tick.
func newestJob(jobs []backupsv1.BackupJob) (string, time.Time) {
	var name string
	var latest time.Time
	for _, j := range jobs {
		t, err := time.Parse(time.RFC3339, j.Annotations[backupsv1.AnnotationScheduledTime])
		if err == nil && (name == "" || t.After(latest)) {
			name, latest = j.Name, t
		}
	}
	return name, latest
}

func finishedAt(j backupsv1.BackupJob) time.Time {
	if j.Status.CompletedAt != nil {
		return j.Status.CompletedAt.Time
	}
	return j.CreationTimestamp.Time
}

// applyRetention prunes this Plan's Backups by its retention policy and records the newest Backup.
// Deleting a Backup runs its driver's finalizer, which deletes the artifact.
func (r *Reconciler) applyRetention(ctx context.Context, s *scope) error {
	list := &backupsv1.BackupList{}
	if err := r.Client.List(ctx, list, client.InNamespace(s.plan.Namespace), client.MatchingFields{BackupPlanIndex: s.plan.Name}); err != nil {
		return fmt.Errorf("listing Backups: %w", err)
	}
	byName := map[string]*backupsv1.Backup{}
	var items []retention.Item
	var newest *backupsv1.Backup
	for i := range list.Items {
		b := &list.Items[i]
		if !b.DeletionTimestamp.IsZero() {
			continue
		}
		byName[b.Name] = b
		items = append(items, retention.Item{Name: b.Name, TakenAt: b.Spec.TakenAt.Time, Phase: b.Status.Phase, Good: b.IsGood()})
		if newest == nil || b.Spec.TakenAt.After(newest.Spec.TakenAt.Time) {
			newest = b
		}
	}
	s.plan.Status.LastBackupRef = nil
	if newest != nil {
		s.plan.Status.LastBackupRef = &corev1.LocalObjectReference{Name: newest.Name}
	}
	loc := time.UTC
	if s.sched != nil {
		loc = s.sched.Location
	}
	for _, d := range retention.Select(items, s.plan.Spec.Retention, loc, s.now) {
		b := byName[d.Name]
		err := r.Client.Delete(ctx, b, client.Preconditions{UID: &b.UID})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("pruning Backup %s: %w", b.Name, err)
		}
		r.Recorder.Eventf(s.plan, b, corev1.EventTypeNormal, EventBackupPruned, "Prune", "Pruned Backup %s: %s", b.Name, d.Reason)
		if s.plan.Status.LastBackupRef != nil && s.plan.Status.LastBackupRef.Name == b.Name {
			s.plan.Status.LastBackupRef = nil
		}
	}
	return nil
}

// schedule fires the due tick, if any, exactly once, and requeues at the next tick.
func (r *Reconciler) schedule(ctx context.Context, s *scope) (reconcile.Result, error) {
	plan := s.plan
	sched, err := s.sched, s.schedErr
	if err != nil {
		reason := backupsv1.ReasonInvalidSchedule
		if serr, ok := err.(*schedule.Error); ok {
			reason = serr.Reason
		}
		if r.setCondition(s, backupsv1.ConditionReady, metav1.ConditionFalse, reason, err.Error()) {
			r.Recorder.Eventf(plan, nil, corev1.EventTypeWarning, reason, "Schedule", "%s", err.Error())
		}
		plan.Status.NextScheduleTime = nil
		// Invalid input: wait for the spec to change, do not requeue in a loop.
		return reconcile.Result{}, nil
	}
	if ptrOr(plan.Spec.Suspend, false) {
		r.setCondition(s, backupsv1.ConditionReady, metav1.ConditionFalse, backupsv1.ReasonSuspended,
			"The Plan is suspended; no BackupJobs are created, and ticks missed meanwhile never fire")
		plan.Status.NextScheduleTime = nil
		plan.Status.ObservedGeneration = plan.Generation
		return reconcile.Result{}, nil
	}
	// Ticks that passed while the Plan was suspended or invalid are discarded, not fired in a burst.
	anchor := since(plan)
	if prev := meta.FindStatusCondition(plan.Status.Conditions, backupsv1.ConditionReady); prev != nil && prev.Status != metav1.ConditionTrue {
		anchor = s.now
	}
	r.setCondition(s, backupsv1.ConditionReady, metav1.ConditionTrue, backupsv1.ReasonScheduling, "The Plan is scheduling")

	due := sched.DueAt(anchor, s.now)
	plan.Status.NextScheduleTime = &metav1.Time{Time: due.Next}
	requeue := reconcile.Result{RequeueAfter: due.Next.Sub(s.now)}
	if due.Tick == nil {
		plan.Status.ObservedGeneration = plan.Generation
		return requeue, nil
	}
	tick := *due.Tick

	// Ticks before the most recent one never fire.
	if due.Missed > 0 {
		bound := ""
		if due.MissedIsLowerBound {
			bound = "at least "
		}
		r.skip(s, tick, due.Missed, backupsv1.ReasonMissedDeadline,
			fmt.Sprintf("%s%d tick(s) before %s were missed (the controller was not running); at most the most recent missed tick fires",
				bound, due.Missed, tick.Format(time.RFC3339)))
	}
	if d := plan.Spec.StartingDeadlineSeconds; d != nil && s.now.Sub(tick) > time.Duration(*d)*time.Second {
		r.skip(s, tick, 1, backupsv1.ReasonMissedDeadline,
			fmt.Sprintf("The tick at %s was missed by %s, more than startingDeadlineSeconds (%ds)",
				tick.Format(time.RFC3339), s.now.Sub(tick).Round(time.Second), *d))
		plan.Status.ObservedGeneration = plan.Generation
		return requeue, nil
	}
	if plan.Spec.ConcurrencyPolicy != backupsv1.ConcurrencyAllow && len(plan.Status.Active) > 0 {
		r.skip(s, tick, 1, backupsv1.ReasonConcurrencyForbidden,
			fmt.Sprintf("The tick at %s was skipped: BackupJob %s is still running and concurrencyPolicy is Forbid",
				tick.Format(time.RFC3339), plan.Status.Active[0].Name))
		plan.Status.ObservedGeneration = plan.Generation
		return requeue, nil
	}

	job, err := r.createJob(ctx, plan, tick)
	if err != nil {
		return reconcile.Result{}, err
	}
	if job == nil { // the name is taken by a foreign object: no status advance
		return reconcile.Result{RequeueAfter: time.Minute}, nil
	}
	r.recordFired(s, tick, job, due.Missed)
	// Nothing else to say this time: leave the status to the reconcile the new BackupJob triggers.
	s.deferStatus = due.Missed == 0 && !s.recordedFromJobs &&
		apiequality.Semantic.DeepEqual(withoutFire(s.orig.Status), withoutFire(s.plan.Status))
	return requeue, nil
}

// withoutFire is a status without what recording a fire changes, to tell whether a reconcile that
// fired a tick has anything else to write.
func withoutFire(st backupsv1.PlanStatus) backupsv1.PlanStatus {
	st = *st.DeepCopy()
	st.LastScheduleTime, st.NextScheduleTime, st.Active, st.ObservedGeneration = nil, nil, nil, 0
	st.Conditions = nil
	return st
}

// recordFired records that tick created job.
func (r *Reconciler) recordFired(s *scope, tick time.Time, job *backupsv1.BackupJob, missed int64) {
	plan := s.plan
	plan.Status.LastScheduleTime = &metav1.Time{Time: tick}
	if !containsRef(plan.Status.Active, job.Name) && !job.IsTerminal() {
		plan.Status.Active = append(plan.Status.Active, corev1.LocalObjectReference{Name: job.Name})
		sort.Slice(plan.Status.Active, func(i, k int) bool { return plan.Status.Active[i].Name < plan.Status.Active[k].Name })
	}
	if missed == 0 {
		r.setCondition(s, backupsv1.ConditionTickSkipped, metav1.ConditionFalse, backupsv1.ReasonTickFired,
			fmt.Sprintf("The tick at %s created BackupJob %s", tick.Format(time.RFC3339), job.Name))
	}
	plan.Status.ObservedGeneration = plan.Generation
}

// since is the instant up to which every tick has been dealt with: fired, skipped, or discarded
// because the Plan was suspended or invalid until it turned Ready (the Ready=True transition).
func since(plan *backupsv1.Plan) time.Time {
	t := plan.CreationTimestamp.Time
	for _, c := range []*metav1.Time{plan.Status.LastScheduleTime, plan.Status.LastSkippedTime} {
		if c != nil && c.After(t) {
			t = c.Time
		}
	}
	if ready := meta.FindStatusCondition(plan.Status.Conditions, backupsv1.ConditionReady); ready != nil &&
		ready.Status == metav1.ConditionTrue && ready.LastTransitionTime.After(t) {
		t = ready.LastTransitionTime.Time
	}
	return t
}

// skip records ticks that will never fire: counted in status, a True TickSkipped condition, and an event.
func (r *Reconciler) skip(s *scope, tick time.Time, n int64, reason, msg string) {
	s.plan.Status.SkippedTicks += n
	if last := s.plan.Status.LastSkippedTime; last == nil || last.Time.Before(tick) {
		s.plan.Status.LastSkippedTime = &metav1.Time{Time: tick}
	}
	r.setCondition(s, backupsv1.ConditionTickSkipped, metav1.ConditionTrue, reason, msg)
	r.Recorder.Eventf(s.plan, nil, corev1.EventTypeWarning, EventTickSkipped, "Schedule", "%s", msg)
}

// createJob creates the BackupJob of tick, or adopts it when this Plan already created it. It
// returns nil, without error, when the name is held by an object this Plan does not control.
func (r *Reconciler) createJob(ctx context.Context, plan *backupsv1.Plan, tick time.Time) (*backupsv1.BackupJob, error) {
	job := &backupsv1.BackupJob{
		ObjectMeta: metav1.ObjectMeta{
			Name:        backupsv1.PlanBackupJobName(plan.Name, tick),
			Namespace:   plan.Namespace,
			Labels:      map[string]string{backupsv1.LabelPlan: backupsv1.PlanLabelValue(plan.Name)},
			Annotations: map[string]string{backupsv1.AnnotationScheduledTime: tick.UTC().Format(time.RFC3339)},
		},
		Spec: backupsv1.BackupJobSpec{
			PlanRef:         &corev1.LocalObjectReference{Name: plan.Name},
			ApplicationRef:  backupsv1.NormalizeApplicationRef(plan.Spec.ApplicationRef),
			BackupClassName: plan.Spec.BackupClassName,
		},
	}
	if err := controllerutil.SetControllerReference(plan, job, r.Client.Scheme()); err != nil {
		return nil, err
	}
	err := r.Client.Create(ctx, job)
	if err == nil {
		ctrl.LoggerFrom(ctx).Info("Created BackupJob", "backupJob", klog.KObj(job), "tick", tick)
		r.Recorder.Eventf(plan, job, corev1.EventTypeNormal, EventBackupJobCreated, "Schedule",
			"Created BackupJob %s for the tick at %s", job.Name, tick.Format(time.RFC3339))
		return job, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating BackupJob %s: %w", job.Name, err)
	}
	existing := &backupsv1.BackupJob{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(job), existing); err != nil {
		return nil, fmt.Errorf("reading the existing BackupJob %s: %w", job.Name, err)
	}
	if metav1.IsControlledBy(existing, plan) && existing.Labels[backupsv1.LabelPlan] == backupsv1.PlanLabelValue(plan.Name) {
		return existing, nil // created by an earlier attempt at this tick: adopt
	}
	msg := fmt.Sprintf("BackupJob %s, the name of the tick at %s, exists and does not belong to this Plan; delete or rename it and the tick fires",
		job.Name, tick.Format(time.RFC3339))
	ctrl.LoggerFrom(ctx).Info("BackupJob name taken by a foreign object", "backupJob", klog.KObj(existing), "tick", tick)
	r.Recorder.Eventf(plan, existing, corev1.EventTypeWarning, backupsv1.ReasonNameConflict, "Schedule", "%s", msg)
	return nil, nil
}

// setCondition sets a condition and reports whether its status or reason changed.
func (r *Reconciler) setCondition(s *scope, t string, status metav1.ConditionStatus, reason, msg string) bool {
	prev := meta.FindStatusCondition(s.plan.Status.Conditions, t)
	changed := prev == nil || prev.Status != status || prev.Reason != reason
	meta.SetStatusCondition(&s.plan.Status.Conditions, metav1.Condition{
		Type: t, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: s.plan.Generation, LastTransitionTime: metav1.NewTime(s.now),
	})
	return changed
}

func containsRef(refs []corev1.LocalObjectReference, name string) bool {
	for _, r := range refs {
		if r.Name == name {
			return true
		}
	}
	return false
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
