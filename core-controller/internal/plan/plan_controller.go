package plan

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/go-logr/logr"
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

// PlanClassIndex is the cache index of Plans by spec.backupClassName.
const PlanClassIndex = "spec.backupClassName"

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
	log  logr.Logger
	// result is what the reconcile returns when every phase succeeded.
	result reconcile.Result
	jobs   []backupsv1.BackupJob // this Plan's BackupJobs
	// sched is the parsed schedule, or nil with schedErr set when it does not parse.
	sched    *schedule.Schedule
	schedErr error
	// classReason and classMsg say why the Plan's BackupClass does not resolve to a strategy for
	// its application (BackupClassNotFound, BackupClassNotAllowed, NoMatchingStrategy); empty when
	// it does. classErr is set instead when the class (or, for a class with a namespaceSelector,
	// the Plan's namespace) could not be read: Ready is then left as it was.
	classReason, classMsg string
	classErr              error
	// deferStatus skips this reconcile's status write: a tick's BackupJob could not be created (the
	// retry starts from the same status), or a tick just created its BackupJob, and the
	// reconcile its creation triggers records it. Under load this puts every due create ahead of
	// every status write in the work queue.
	deferStatus bool
	// recordedFromJobs is set when this reconcile learnt a fired tick from the BackupJobs.
	recordedFromJobs bool
	// pruneDue is when the earliest Backup held by a deletion delay is due (zero: none held).
	pruneDue time.Time
	// announcements report the status transitions of this reconcile (a log line, an event); they
	// run once the status write landed, so that a refused write and its retry say it once.
	announcements []func()
}

// phase is one step of a reconcile; a phase ends the reconcile by returning an error.
type phase struct {
	name string
	run  func(context.Context, *scope) error
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
	s := &scope{plan: plan, orig: plan.DeepCopy(), now: r.Clock.Now(), log: ctrl.LoggerFrom(ctx)}
	s.sched, s.schedErr = schedule.Parse(plan.Spec.Schedule)
	defer func() {
		if err := r.patchStatus(ctx, s, retErr == nil); err != nil && retErr == nil {
			res, retErr = reconcile.Result{}, err
		}
	}()

	defer func() {
		// A Backup held by its class's deletion delay is due before the next tick.
		if retErr == nil && !s.pruneDue.IsZero() {
			if d := s.pruneDue.Sub(s.now); res.RequeueAfter == 0 || d < res.RequeueAfter {
				res.RequeueAfter = max(d, time.Second)
			}
		}
	}()
	for _, p := range []phase{
		{"loadJobs", r.loadJobs},
		{"pruneHistory", r.pruneHistory},
		{"applyRetention", r.applyRetention},
		{"resolveClass", r.resolveClass},
		{"schedule", r.schedule},
		{"retryClassRead", r.retryClassRead},
	} {
		s.log.V(1).Info("Plan phase", "plan", klog.KObj(plan), "phase", p.name)
		if err := p.run(ctx, s); err != nil {
			s.log.V(1).Info("Plan phase failed", "plan", klog.KObj(plan), "phase", p.name, "error", err.Error())
			return reconcile.Result{}, err
		}
	}
	return s.result, nil
}

// patchStatus writes the status changes of one reconcile, if any, with an optimistic lock (a
// write from a stale view is refused). A reconcile whose phases all succeeded stamps
// observedGeneration: the status then describes that generation of the spec.
func (r *Reconciler) patchStatus(ctx context.Context, s *scope, complete bool) error {
	if !s.deferStatus {
		if complete {
			s.plan.Status.ObservedGeneration = s.plan.Generation
		}
		if !apiequality.Semantic.DeepEqual(s.orig.Status, s.plan.Status) {
			patch := client.MergeFromWithOptions(s.orig, client.MergeFromWithOptimisticLock{})
			if err := r.Client.Status().Patch(ctx, s.plan, patch); err != nil {
				s.log.V(1).Info("Plan status write refused; the retry says what changed", "plan", klog.KObj(s.plan), "error", err.Error())
				return fmt.Errorf("patching Plan status: %w", err)
			}
		}
	}
	for _, announce := range s.announcements {
		announce()
	}
	return nil
}

// announce queues a report of a status transition until the status write landed.
func (s *scope) announce(f func()) { s.announcements = append(s.announcements, f) }

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
	if name, tick := newestJob(s.plan.Name, s.jobs, s.now); name != "" {
		if last := s.plan.Status.LastScheduleTime; last == nil || last.Time.Before(tick) {
			// Ticks between what the status knew and this one were missed (a crash lost the
			// status write that counted them): count them now.
			if s.sched != nil {
				from := since(s.plan)
				if due := s.sched.DueAt(from, tick); due.Tick != nil {
					fired := jobsBetween(s.plan.Name, s.jobs, from, tick, s.now)
					if missed := due.Missed - fired; missed > 0 {
						last := tick.Add(-time.Nanosecond)
						if due.LastMissed != nil && fired == 0 {
							last = *due.LastMissed
						}
						r.skip(s, last, missed, backupsv1.ReasonMissedDeadline,
							fmt.Sprintf("%d tick(s) before %s were missed (the controller was not running)", missed, tick.UTC().Format(time.RFC3339)))
					}
				}
			}
			s.plan.Status.LastScheduleTime = &metav1.Time{Time: tick}
			s.recordedFromJobs = true
			s.log.V(1).Info("Recorded the tick of the newest BackupJob", "plan", klog.KObj(s.plan), "backupJob", klog.KRef(s.plan.Namespace, name), "tick", tick.UTC().Format(time.RFC3339))
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
	newest, _ := newestJob(s.plan.Name, s.jobs, s.now)
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
			s.log.V(1).Info("Deleted BackupJob beyond the history limit", "plan", klog.KObj(s.plan), "backupJob", klog.KObj(j), "phase", phase, "limit", limit)
		}
	}
	return nil
}

// tickOf is the tick a BackupJob of the Plan fired for: its scheduled-time annotation, when the
// job carries the name the Plan gives that tick's job and the tick is not in the future. Anyone
// who may create BackupJobs may label and own one to the Plan; such a job is a run like any other,
// but it never tells the Plan that a tick fired (a future scheduled time would otherwise stop the
// Plan's ticks until then).
func tickOf(plan string, j *backupsv1.BackupJob, now time.Time) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339, j.Annotations[backupsv1.AnnotationScheduledTime])
	if err != nil || t.After(now.Add(maxClockSkew)) || j.Name != backupsv1.PlanBackupJobName(plan, t) {
		return time.Time{}, false
	}
	return t, true
}

// maxClockSkew is how far ahead of this controller's clock another replica's may be.
const maxClockSkew = time.Minute

// jobsBetween counts the BackupJobs whose ticks lie strictly between from and to.
func jobsBetween(plan string, jobs []backupsv1.BackupJob, from, to, now time.Time) int64 {
	var n int64
	for i := range jobs {
		t, ok := tickOf(plan, &jobs[i], now)
		if ok && t.After(from) && t.Before(to) {
			n++
		}
	}
	return n
}

// newestJob names the BackupJob of the latest tick (tickOf) and its tick.
func newestJob(plan string, jobs []backupsv1.BackupJob, now time.Time) (string, time.Time) {
	var name string
	var latest time.Time
	for i := range jobs {
		t, ok := tickOf(plan, &jobs[i], now)
		if ok && (name == "" || t.After(latest)) {
			name, latest = jobs[i].Name, t
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
// The policy applies to the Backups of each application apart (a Plan re-pointed at another
// application still holds Backups of the first), so that the newest good Backup of every
// application survives. Deleting a Backup runs its driver's finalizer, which deletes the artifact.
func (r *Reconciler) applyRetention(ctx context.Context, s *scope) error {
	list := &backupsv1.BackupList{}
	if err := r.Client.List(ctx, list, client.InNamespace(s.plan.Namespace), client.MatchingFields{BackupPlanIndex: s.plan.Name}); err != nil {
		return fmt.Errorf("listing Backups: %w", err)
	}
	byName := map[string]*backupsv1.Backup{}
	var items []retention.Item
	var newest, restorable *backupsv1.Backup
	for i := range list.Items {
		b := &list.Items[i]
		if !b.DeletionTimestamp.IsZero() {
			continue
		}
		if b.ReadOnly() {
			continue // another cluster's Backup, imported from its record: never pruned here (BK-12)
		}
		byName[b.Name] = b
		items = append(items, RetentionItem(b))
		if newest == nil || b.Spec.TakenAt.After(newest.Spec.TakenAt.Time) {
			newest = b
		}
		if b.RestoreVerified() && applicationKey(b.Spec.ApplicationRef) == applicationKey(s.plan.Spec.ApplicationRef) &&
			(restorable == nil || b.Spec.TakenAt.After(restorable.Spec.TakenAt.Time)) {
			restorable = b
		}
	}
	s.plan.Status.LastBackupRef = nil
	if newest != nil {
		s.plan.Status.LastBackupRef = &corev1.LocalObjectReference{Name: newest.Name}
	}
	// The recovery point this Plan has proof for (of its current application). Retention never
	// prunes it (retention.Select), so it changes only when a newer one is proven or it goes bad.
	s.plan.Status.LastRestorableBackup = nil
	if restorable != nil {
		s.plan.Status.LastRestorableBackup = &backupsv1.RestorablePoint{Name: restorable.Name, TakenAt: restorable.Spec.TakenAt}
		if v := restorable.Status.Verification; v != nil && v.FullRestore != nil {
			// The measured recovery time of that recovery point.
			s.plan.Status.LastRestorableBackup.RestoreDuration = v.FullRestore.RestoreDuration
		}
	}
	loc := time.UTC
	if s.sched != nil {
		loc = s.sched.Location
	}
	floor, err := r.retentionFloor(ctx, s.plan)
	if err != nil {
		return err
	}
	for _, d := range r.holdPrunes(s, floor, retention.Select(items, s.plan.Spec.Retention, floor, loc, s.now)) {
		b := byName[d.Name]
		err := r.Client.Delete(ctx, b, client.Preconditions{UID: &b.UID})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("pruning Backup %s: %w", b.Name, err)
		}
		s.log.Info("Pruned Backup", "plan", klog.KObj(s.plan), "backup", klog.KObj(b), "application", applicationKey(b.Spec.ApplicationRef),
			"takenAt", b.Spec.TakenAt.UTC().Format(time.RFC3339), "rule", d.Reason)
		r.Recorder.Eventf(s.plan, b, corev1.EventTypeNormal, EventBackupPruned, "Prune", "Pruned Backup %s: %s", b.Name, d.Reason)
		if s.plan.Status.LastBackupRef != nil && s.plan.Status.LastBackupRef.Name == b.Name {
			s.plan.Status.LastBackupRef = nil
		}
	}
	return nil
}

// retentionFloor is the administrator's floor on the Plan's retention: its BackupClass's. A class
// that does not exist sets none; a class that cannot be read stops retention for this reconcile
// (pruning without knowing the floor could go below it).
func (r *Reconciler) retentionFloor(ctx context.Context, plan *backupsv1.Plan) (*backupsv1.RetentionFloor, error) {
	if plan.Spec.Retention == nil {
		return nil, nil
	}
	class := &backupsv1.BackupClass{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: plan.Spec.BackupClassName}, class); apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("reading BackupClass %q for its retention floor: %w", plan.Spec.BackupClassName, err)
	}
	return class.Spec.RetentionFloor, nil
}

// holdPrunes applies the floor's deletionDelay: it returns the decisions whose Backup has waited
// out the delay in status.pendingPrunes, and lists the others there. Entries that retention no
// longer selects are dropped, so a Backup saved by a raised floor or a changed Plan is not deleted.
// The Plan is requeued when the earliest held Backup is due.
func (r *Reconciler) holdPrunes(s *scope, floor *backupsv1.RetentionFloor, due []retention.Decision) []retention.Decision {
	var delay time.Duration
	if floor != nil && floor.DeletionDelay != nil {
		delay = floor.DeletionDelay.Duration
	}
	pending := map[string]backupsv1.PendingPrune{}
	for _, p := range s.plan.Status.PendingPrunes {
		pending[p.Name] = p
	}
	var now, held []retention.Decision
	var list []backupsv1.PendingPrune
	for _, d := range due {
		p, ok := pending[d.Name]
		if !ok {
			p = backupsv1.PendingPrune{Name: d.Name, Since: metav1.NewTime(s.now)}
		}
		p.DeleteAfter, p.Reason = metav1.NewTime(p.Since.Add(delay)), truncate(d.Reason, 256)
		if !s.now.Before(p.DeleteAfter.Time) {
			now = append(now, d)
			continue
		}
		if len(list) == maxPendingPrunes {
			continue // listed once the first ones are deleted
		}
		held = append(held, d)
		list = append(list, p)
		if s.pruneDue.IsZero() || p.DeleteAfter.Time.Before(s.pruneDue) {
			s.pruneDue = p.DeleteAfter.Time
		}
	}
	sort.SliceStable(list, func(i, j int) bool { return list[i].Since.Before(&list[j].Since) })
	s.plan.Status.PendingPrunes = list
	for _, d := range held {
		if _, ok := pending[d.Name]; !ok {
			s.log.Info("Holding a Backup retention selected until its class's deletion delay ends", "plan", klog.KObj(s.plan), "backup", d.Name, "rule", d.Reason, "delay", delay)
		}
	}
	return now
}

// maxPendingPrunes bounds status.pendingPrunes (its schema's maxItems).
const maxPendingPrunes = 1000

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// RetentionItem is what retention decides a Backup by.
func RetentionItem(b *backupsv1.Backup) retention.Item {
	return retention.Item{Name: b.Name, Application: applicationKey(b.Spec.ApplicationRef),
		TakenAt: b.Spec.TakenAt.Time, Phase: b.Status.Phase, Good: b.IsGood(), ArtifactMissing: b.ArtifactMissing(),
		VerifyFailed: meta.IsStatusConditionFalse(b.Status.Conditions, backupsv1.ConditionVerified), RestoreVerified: b.RestoreVerified(),
		WasGood: b.WasGood()}
}

// applicationKey identifies an application by its API group (defaulted), kind and name.
func applicationKey(ref corev1.TypedLocalObjectReference) string {
	return backupsv1.ApplicationAPIGroup(ref) + "/" + ref.Kind + "/" + ref.Name
}

// resolveClass resolves the Plan's BackupClass for its application, as the drivers will for each
// of its BackupJobs, so that the Plan says before any tick that no driver can run them. The class
// is read from the cache; its watch reconciles the Plans naming it whenever it changes. A class
// that cannot be read never keeps a tick from firing: the error is returned (and the reconcile
// retried) only after the schedule phase.
func (r *Reconciler) resolveClass(ctx context.Context, s *scope) error {
	name := s.plan.Spec.BackupClassName
	class := &backupsv1.BackupClass{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, class); apierrors.IsNotFound(err) {
		class = nil
	} else if err != nil {
		s.classErr = fmt.Errorf("reading BackupClass %q: %w", name, err)
		return nil
	}
	var err error
	if class != nil && class.Spec.NamespaceSelector != nil {
		labels, rerr := r.namespaceLabels(ctx, s.plan.Namespace)
		if rerr != nil {
			s.classErr = rerr
			return nil
		}
		err = class.AllowsNamespace(s.plan.Namespace, labels)
	}
	if err == nil {
		_, err = backupsv1.ResolveStrategy(name, class, s.plan.Spec.ApplicationRef)
	}
	const until = "until then each tick's BackupJob waits for a driver in vain and fails unclaimed"
	switch s.classReason = backupsv1.ResolutionReason(err); s.classReason {
	case "":
		if err != nil {
			return fmt.Errorf("resolving BackupClass %q: %w", name, err)
		}
		s.classMsg = ""
	case backupsv1.ReasonBackupClassNotFound:
		s.classMsg = fmt.Sprintf("%v: create it, or set spec.backupClassName to an existing class; %s", err, until)
	case backupsv1.ReasonBackupClassNotAllowed:
		s.classMsg = fmt.Sprintf("%v: set spec.backupClassName to a class allowed here, or ask an administrator to select this namespace; no tick fires until then",
			err)
	default:
		s.classMsg = fmt.Sprintf("%v: add a strategy for %s to the class, or set spec.backupClassName to a class that has one; %s",
			err, s.plan.Spec.ApplicationRef.Kind, until)
	}
	return nil
}

// namespaceLabels reads the labels of namespace ns uncached (once per reconcile of a Plan whose
// class has a namespaceSelector; core watches no namespaces). A namespace that is gone has none.
func (r *Reconciler) namespaceLabels(ctx context.Context, ns string) (map[string]string, error) {
	n := &corev1.Namespace{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: ns}, n); apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("reading namespace %q for the namespaceSelector of its BackupClass: %w", ns, err)
	}
	return n.Labels, nil
}

// retryClassRead fails the reconcile, once the schedule phase is done, when the class could not be
// read, so that it is retried.
func (r *Reconciler) retryClassRead(_ context.Context, s *scope) error { return s.classErr }

// schedule fires the due tick, if any, exactly once, and requeues at the next tick (s.result).
//
// Nothing that would keep a tick from firing is recorded before its BackupJob exists: the ticks
// missed before it are recorded only once the create succeeded (or found the BackupJob an earlier
// attempt made), so a failed create leaves the tick due and the next reconcile retries it. The
// BackupJob's name is deterministic per tick, so a create retried after a crash or a lost answer
// finds it and adopts it instead of making a second one.
func (r *Reconciler) schedule(ctx context.Context, s *scope) error {
	plan := s.plan
	sched, err := s.sched, s.schedErr
	if err != nil {
		reason := backupsv1.ReasonInvalidSchedule
		if serr, ok := err.(*schedule.Error); ok {
			reason = serr.Reason
		}
		msg := err.Error()
		if r.setReady(s, metav1.ConditionFalse, reason, msg) {
			s.announce(func() {
				s.log.Info("Plan is invalid", "plan", klog.KObj(plan), "reason", reason, "message", msg)
				r.Recorder.Eventf(plan, nil, corev1.EventTypeWarning, reason, "Schedule", "%s", msg)
			})
		}
		plan.Status.NextScheduleTime = nil
		// Invalid input: wait for the spec to change, do not requeue in a loop.
		return nil
	}
	if ptrOr(plan.Spec.Suspend, false) {
		if r.setReady(s, metav1.ConditionFalse, backupsv1.ReasonSuspended,
			"The Plan is suspended; no BackupJobs are created, and ticks missed meanwhile never fire") {
			s.announce(func() { s.log.Info("Plan suspended", "plan", klog.KObj(plan)) })
		}
		plan.Status.NextScheduleTime = nil
		return nil
	}
	// Ticks that passed while the Plan was suspended or invalid are discarded, not fired in a burst.
	// A Plan whose class does not resolve still schedules: its BackupJobs say so in their turn, and
	// a class created or fixed late (or only missing from a lagging cache) costs no backup.
	anchor := since(plan)
	if prev := meta.FindStatusCondition(plan.Status.Conditions, backupsv1.ConditionReady); prev != nil && !scheduling(prev) {
		anchor = s.now
	}
	switch reason, msg := s.classReason, s.classMsg; {
	case s.classErr != nil:
		// Unknown until the class can be read: Ready stays as it was.
	case reason != "":
		if r.setReady(s, metav1.ConditionFalse, reason, msg) {
			s.announce(func() {
				s.log.Info("Plan's BackupClass does not resolve", "plan", klog.KObj(plan), "reason", reason, "message", msg)
				r.Recorder.Eventf(plan, nil, corev1.EventTypeWarning, reason, "Resolve", "%s", msg)
			})
		}
		if reason == backupsv1.ReasonBackupClassNotAllowed {
			// The class refuses this namespace: a tick's BackupJob would be refused at admission
			// (coffer-backupclass-namespaces) or fail at run time, so none fires. Nothing watches
			// namespaces: look again at the next tick (or when the Plan or the class changes).
			plan.Status.NextScheduleTime = nil
			s.result = reconcile.Result{RequeueAfter: sched.DueAt(anchor, s.now).Next.Sub(s.now)}
			return nil
		}
	default:
		msg = fmt.Sprintf("The Plan is scheduling; BackupClass %q resolves to a strategy for its application", plan.Spec.BackupClassName)
		if r.setReady(s, metav1.ConditionTrue, backupsv1.ReasonScheduling, msg) {
			s.log.V(1).Info("Plan scheduling", "plan", klog.KObj(plan))
		}
	}

	due := sched.DueAt(anchor, s.now)
	plan.Status.NextScheduleTime = &metav1.Time{Time: due.Next}
	s.result = reconcile.Result{RequeueAfter: due.Next.Sub(s.now)}
	if due.Tick == nil {
		return nil
	}
	tick := *due.Tick

	if d := plan.Spec.StartingDeadlineSeconds; d != nil && s.now.Sub(tick) > time.Duration(*d)*time.Second {
		r.recordMissed(s, due)
		r.skip(s, tick, 1, backupsv1.ReasonMissedDeadline,
			fmt.Sprintf("The tick at %s was missed by %s, more than startingDeadlineSeconds (%ds)",
				tick.Format(time.RFC3339), s.now.Sub(tick).Round(time.Second), *d))
		return nil
	}
	if plan.Spec.ConcurrencyPolicy != backupsv1.ConcurrencyAllow && len(plan.Status.Active) > 0 {
		r.recordMissed(s, due)
		r.skip(s, tick, 1, backupsv1.ReasonConcurrencyForbidden,
			fmt.Sprintf("The tick at %s was skipped: BackupJob %s is still running and concurrencyPolicy is Forbid",
				tick.Format(time.RFC3339), plan.Status.Active[0].Name))
		return nil
	}

	job, created, err := r.createJob(ctx, s, tick)
	if err != nil {
		// Nothing is written: the tick stays due and the retry, starting from the same status,
		// fires it (a Ready=True transition written now would discard it as a tick of the time
		// the Plan was not ready).
		s.result = reconcile.Result{}
		s.deferStatus, s.announcements = true, nil
		return err
	}
	if job == nil {
		// The name is taken by a foreign object: as after a failed create, nothing is written and
		// the tick waits until the name is free.
		s.result = reconcile.Result{RequeueAfter: time.Minute}
		s.deferStatus, s.announcements = true, nil
		return nil
	}
	// Ticks before the most recent one never fire; now that it has, count them.
	r.recordMissed(s, due)
	s.announce(func() {
		s.log.Info("Tick fired", "plan", klog.KObj(plan), "tick", tick.UTC().Format(time.RFC3339), "backupJob", klog.KObj(job), "adopted", !created, "missedBefore", due.Missed)
	})
	r.recordFired(s, tick, job, due.Missed)
	// Nothing else to say this time: leave the status to the reconcile the new BackupJob triggers.
	s.deferStatus = due.Missed == 0 && !s.recordedFromJobs &&
		apiequality.Semantic.DeepEqual(withoutFire(s.orig.Status), withoutFire(s.plan.Status))
	return nil
}

// recordMissed records the ticks before due.Tick that will never fire.
func (r *Reconciler) recordMissed(s *scope, due schedule.Due) {
	if due.Missed == 0 {
		return
	}
	bound := ""
	if due.MissedIsLowerBound {
		bound = "at least "
	}
	last := due.Tick.Add(-time.Nanosecond)
	if due.LastMissed != nil {
		last = *due.LastMissed
	}
	r.skip(s, last, due.Missed, backupsv1.ReasonMissedDeadline,
		fmt.Sprintf("%s%d tick(s) before %s were missed (the controller was not running); at most the most recent missed tick fires",
			bound, due.Missed, due.Tick.Format(time.RFC3339)))
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
}

// since is the instant up to which every tick has been dealt with: fired, skipped, or discarded
// because the Plan was suspended or invalid until it started scheduling again (the last transition
// of a scheduling Ready condition, see setReady).
func since(plan *backupsv1.Plan) time.Time {
	t := plan.CreationTimestamp.Time
	for _, c := range []*metav1.Time{plan.Status.LastScheduleTime, plan.Status.LastSkippedTime} {
		if c != nil && c.After(t) {
			t = c.Time
		}
	}
	if ready := meta.FindStatusCondition(plan.Status.Conditions, backupsv1.ConditionReady); ready != nil &&
		scheduling(ready) && ready.LastTransitionTime.After(t) {
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
	s.announce(func() {
		s.log.Info("Tick skipped", "plan", klog.KObj(s.plan), "tick", tick.UTC().Format(time.RFC3339), "count", n, "reason", reason, "message", msg)
		r.Recorder.Eventf(s.plan, nil, corev1.EventTypeWarning, EventTickSkipped, "Schedule", "%s", msg)
	})
}

// createJob creates the BackupJob of tick (created), or adopts it when this Plan already created
// it. It returns nil, without error, when the name is held by an object this Plan does not control.
func (r *Reconciler) createJob(ctx context.Context, s *scope, tick time.Time) (job *backupsv1.BackupJob, created bool, err error) {
	plan := s.plan
	job = &backupsv1.BackupJob{
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
		return nil, false, err
	}
	err = r.Client.Create(ctx, job)
	if err == nil {
		s.log.Info("Created BackupJob", "plan", klog.KObj(plan), "backupJob", klog.KObj(job), "tick", tick.UTC().Format(time.RFC3339))
		r.Recorder.Eventf(plan, job, corev1.EventTypeNormal, EventBackupJobCreated, "Schedule",
			"Created BackupJob %s for the tick at %s", job.Name, tick.Format(time.RFC3339))
		return job, true, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, false, fmt.Errorf("creating BackupJob %s: %w", job.Name, err)
	}
	existing := &backupsv1.BackupJob{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(job), existing); err != nil {
		return nil, false, fmt.Errorf("reading the existing BackupJob %s: %w", job.Name, err)
	}
	if metav1.IsControlledBy(existing, plan) && existing.Labels[backupsv1.LabelPlan] == backupsv1.PlanLabelValue(plan.Name) {
		s.log.V(1).Info("Adopted the BackupJob an earlier attempt at the tick created", "plan", klog.KObj(plan), "backupJob", klog.KObj(existing), "tick", tick.UTC().Format(time.RFC3339))
		return existing, false, nil
	}
	msg := fmt.Sprintf("BackupJob %s, the name of the tick at %s, exists and does not belong to this Plan; delete or rename it and the tick fires",
		job.Name, tick.Format(time.RFC3339))
	s.log.Info("BackupJob name taken by a foreign object", "plan", klog.KObj(plan), "backupJob", klog.KObj(existing), "tick", tick.UTC().Format(time.RFC3339))
	r.Recorder.Eventf(plan, existing, corev1.EventTypeWarning, backupsv1.ReasonNameConflict, "Schedule", "%s", msg)
	return nil, false, nil
}

// scheduling reports whether a Plan with this Ready condition schedules its ticks: Ready, or not
// Ready only because its class does not resolve.
func scheduling(ready *metav1.Condition) bool {
	return ready.Status == metav1.ConditionTrue ||
		ready.Reason == backupsv1.ReasonBackupClassNotFound || ready.Reason == backupsv1.ReasonNoMatchingStrategy
}

// setReady sets the Ready condition and reports whether its status or reason changed. Its
// lastTransitionTime moves whenever the Plan starts or stops scheduling, even without a change of
// status (Suspended to BackupClassNotFound): since reads it as the instant ticks count from.
func (r *Reconciler) setReady(s *scope, status metav1.ConditionStatus, reason, msg string) bool {
	prev := meta.FindStatusCondition(s.plan.Status.Conditions, backupsv1.ConditionReady)
	var flipped bool
	if prev != nil {
		next := metav1.Condition{Status: status, Reason: reason}
		flipped = prev.Status == status && scheduling(prev) != scheduling(&next)
	}
	changed := r.setCondition(s, backupsv1.ConditionReady, status, reason, msg)
	if flipped {
		meta.FindStatusCondition(s.plan.Status.Conditions, backupsv1.ConditionReady).LastTransitionTime = metav1.NewTime(s.now)
	}
	return changed
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
