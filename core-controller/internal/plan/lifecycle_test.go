package plan

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/core-controller/internal/testenv"
)

// nextSpringForward finds the first day after t on which loc springs forward.
func nextSpringForward(t time.Time, loc *time.Location) time.Time {
	day := time.Date(t.Year(), t.Month(), t.Day(), 12, 0, 0, 0, loc)
	for {
		next := day.AddDate(0, 0, 1)
		_, off1 := day.Zone()
		_, off2 := next.Zone()
		if off2 > off1 {
			return time.Date(next.Year(), next.Month(), next.Day(), 0, 0, 0, 0, loc)
		}
		day = next
	}
}

// TestDaylightSavingInPlanZone runs a daily 02:30 Plan in Europe/Berlin across the next spring
// change: 02:30 does not exist that night; the tick fires once (at 03:30 local), and one BackupJob
// exists per day.
func TestDaylightSavingInPlanZone(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	h := newHarness(t, func(p *backupsv1.Plan) {
		p.Spec.Schedule = backupsv1.PlanSchedule{Cron: "30 2 * * *", TimeZone: ptr("Europe/Berlin")}
	})
	change := nextSpringForward(h.plan.CreationTimestamp.Time, berlin)
	dayBefore := change.AddDate(0, 0, -1)

	h.clock.SetTime(time.Date(dayBefore.Year(), dayBefore.Month(), dayBefore.Day(), 2, 31, 0, 0, berlin))
	h.reconcile()
	require.Len(t, h.jobs(), 1)
	missedSinceCreation := h.plan.Status.SkippedTicks // the nights between creation and the day before
	assert.Equal(t, "02:30:00 +0100", h.plan.Status.LastScheduleTime.In(berlin).Format("15:04:05 -0700"))
	assert.Equal(t, "03:30:00 +0200", h.plan.Status.NextScheduleTime.In(berlin).Format("15:04:05 -0700"),
		"the missing 02:30 is announced at 03:30 summer time")

	h.setJobPhase(h.jobs()[0].Name, backupsv1.BackupJobSucceeded, h.clock.Now())
	h.clock.SetTime(time.Date(change.Year(), change.Month(), change.Day(), 3, 31, 0, 0, berlin))
	h.reconcile()
	require.Len(t, h.jobs(), 2, "the tick of the short night fires")
	assert.Equal(t, missedSinceCreation, h.plan.Status.SkippedTicks, "no tick lost")

	h.setJobPhase(backupsv1.PlanBackupJobName("nightly", h.plan.Status.LastScheduleTime.Time), backupsv1.BackupJobSucceeded, h.clock.Now())
	after := change.AddDate(0, 0, 1)
	h.clock.SetTime(time.Date(after.Year(), after.Month(), after.Day(), 2, 31, 0, 0, berlin))
	h.reconcile()
	require.Len(t, h.jobs(), 3)
	assert.Equal(t, "02:30:00 +0200", h.plan.Status.LastScheduleTime.In(berlin).Format("15:04:05 -0700"))
	assert.Equal(t, missedSinceCreation, h.plan.Status.SkippedTicks)
}

// TestTwoManagersFireOnce runs two full managers (each with its own cache and reconciler, no
// leader election) against one API server past a tick: exactly one BackupJob results.
func TestTwoManagersFireOnce(t *testing.T) {
	h := newHarness(t, func(p *backupsv1.Plan) { p.Spec.Schedule.Cron = "* * * * *" })
	tick := h.plan.CreationTimestamp.Time.Truncate(time.Minute).Add(time.Minute).UTC()
	h.clock.SetTime(tick.Add(2 * time.Second))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls [2]atomic.Int32
	for i := range 2 {
		mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: testenv.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
		require.NoError(t, err)
		r := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Clock: h.clock, Recorder: events.NewFakeRecorder(100)}
		require.NoError(t, IndexBackupsByPlan(ctx, mgr))
		counted := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			if req.Namespace == h.ns {
				calls[i].Add(1)
			}
			return r.Reconcile(ctx, req)
		})
		require.NoError(t, ctrl.NewControllerManagedBy(mgr).Named("plan-"+string(rune('a'+i))).
			For(&backupsv1.Plan{}).Owns(&backupsv1.BackupJob{}).Complete(counted))
		go func() { _ = mgr.Start(ctx) }()
	}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		h.refresh()
		return h.plan.Status.LastScheduleTime != nil && calls[0].Load() > 1 && calls[1].Load() > 1, nil
	})
	require.NoError(t, err, "both managers reconciled the Plan after the tick")
	jobs := h.jobs()
	require.Len(t, jobs, 1, "one BackupJob for the tick, whoever came first")
	assert.Equal(t, backupsv1.PlanBackupJobName("nightly", tick), jobs[0].Name)
	assert.Equal(t, tick, h.plan.Status.LastScheduleTime.Time.UTC())
}

func TestHistoryLimits(t *testing.T) {
	h := newHarness(t, func(p *backupsv1.Plan) {
		p.Spec.SuccessfulJobsHistoryLimit = ptr(int32(2))
		p.Spec.StartingDeadlineSeconds = ptr(int64(1)) // keep the schedule out of the way
	})
	base := h.plan.CreationTimestamp.Time
	mk := func(name string, phase backupsv1.BackupJobPhase, doneAfter time.Duration) {
		j := &backupsv1.BackupJob{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns, Labels: map[string]string{backupsv1.LabelPlan: "nightly"}},
			Spec:       backupsv1.BackupJobSpec{ApplicationRef: h.plan.Spec.ApplicationRef, BackupClassName: "default"},
		}
		require.NoError(t, controllerutil.SetControllerReference(h.plan, j, testenv.Scheme))
		require.NoError(t, env.Client.Create(h.ctx, j))
		h.setJobPhase(name, phase, base.Add(doneAfter))
	}
	for i, name := range []string{"ok-1", "ok-2", "ok-3", "ok-4"} {
		mk(name, backupsv1.BackupJobSucceeded, time.Duration(i)*time.Minute)
	}
	for i, name := range []string{"bad-1", "bad-2", "bad-3"} {
		mk(name, backupsv1.BackupJobFailed, time.Duration(i)*time.Minute)
	}
	mk("running", backupsv1.BackupJobRunning, 0)
	// A Backup of an old run must survive its BackupJob's deletion.
	backup := newBackup(h, "ok-1", base, backupsv1.BackupReady)

	h.reconcile()
	var left []string
	for _, j := range h.jobs() {
		if j.DeletionTimestamp.IsZero() {
			left = append(left, j.Name)
		}
	}
	assert.ElementsMatch(t, []string{"ok-3", "ok-4", "bad-3", "running"}, left, "the newest 2 succeeded, the newest failed, and the active run stay")
	require.NoError(t, env.Client.Get(h.ctx, client.ObjectKeyFromObject(backup), backup), "Backups are never history")
	require.NotNil(t, h.plan.Status.LastSuccessfulTime)
	assert.Equal(t, base.Add(3*time.Minute).Unix(), h.plan.Status.LastSuccessfulTime.Unix())
	assert.Equal(t, []corev1.LocalObjectReference{{Name: "running"}}, h.plan.Status.Active)
}

func newBackup(h *harness, name string, takenAt time.Time, phase backupsv1.BackupPhase, conds ...metav1.Condition) *backupsv1.Backup {
	h.t.Helper()
	b := &backupsv1.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns},
		Spec: backupsv1.BackupSpec{
			ApplicationRef: h.plan.Spec.ApplicationRef,
			PlanRef:        &corev1.LocalObjectReference{Name: h.plan.Name},
			StrategyRef:    corev1.TypedLocalObjectReference{APIGroup: ptr("velerodriver.backups.cozystack.io"), Kind: "VeleroBackupStrategy", Name: "s"},
			TakenAt:        metav1.NewTime(takenAt),
		},
	}
	require.NoError(h.t, env.Client.Create(h.ctx, b))
	b.Status.Phase = phase
	b.Status.Conditions = conds
	require.NoError(h.t, env.Client.Status().Update(h.ctx, b))
	return b
}

func TestRetentionPrunesBackupsButNeverTheLastGood(t *testing.T) {
	h := newHarness(t, func(p *backupsv1.Plan) {
		p.Spec.Retention = &backupsv1.RetentionPolicy{KeepLast: ptr(int32(1))}
		p.Spec.StartingDeadlineSeconds = ptr(int64(1))
	})
	base := h.plan.CreationTimestamp.Time
	partial := metav1.Condition{Type: backupsv1.ConditionPartiallyFailed, Status: metav1.ConditionTrue, Reason: backupsv1.ReasonCompletedWithErrors, LastTransitionTime: metav1.NewTime(base)}
	newBackup(h, "b-old", base.Add(-3*time.Hour), backupsv1.BackupReady)
	newBackup(h, "b-good", base.Add(-2*time.Hour), backupsv1.BackupReady)
	newBackup(h, "b-partial", base.Add(-time.Hour), backupsv1.BackupReady, partial)
	newBackup(h, "b-pending", base.Add(-4*time.Hour), backupsv1.BackupPending)
	// Another Plan's Backup in the same namespace is none of this Plan's business.
	other := newBackup(h, "other", base.Add(-5*time.Hour), backupsv1.BackupReady)
	require.NoError(t, env.Client.Delete(h.ctx, other))
	other = &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: h.ns}, Spec: *other.Spec.DeepCopy()}
	other.Spec.PlanRef.Name = "weekly"
	require.NoError(t, env.Client.Create(h.ctx, other))
	h.reconcile()

	left := h.backupNames()
	assert.ElementsMatch(t, []string{"b-partial", "b-good", "b-pending", "other"}, left,
		"keepLast 1 keeps the partial backup; the newest good one and the pending one are never pruned")
	require.NotNil(t, h.plan.Status.LastBackupRef)
	assert.Equal(t, "b-partial", h.plan.Status.LastBackupRef.Name)
	assert.Equal(t, []string{"Normal BackupPruned Pruned Backup b-old: kept by no keepLast, keepDaily, keepWeekly or keepMonthly rule"}, h.drainEvents())
}

func TestReadyConditionIsObservable(t *testing.T) {
	h := newHarness(t, nil)
	h.reconcile()
	ready := meta.FindStatusCondition(h.plan.Status.Conditions, backupsv1.ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, h.plan.Generation, ready.ObservedGeneration)
}

// TestRetentionKeepsTheNewestGoodOfEachApplication: the Plan backed up vm-old, then was pointed at
// vm1. keepLast counts each application's Backups, so vm-old keeps its newest good Backup although
// vm1's are newer; a Backup whose artifact is gone is neither good nor kept.
func TestRetentionKeepsTheNewestGoodOfEachApplication(t *testing.T) {
	h := newHarness(t, func(p *backupsv1.Plan) {
		p.Spec.Retention = &backupsv1.RetentionPolicy{KeepLast: ptr(int32(1))}
	})
	base := h.plan.CreationTimestamp.Time
	gone := metav1.Condition{Type: backupsv1.ConditionArtifactAvailable, Status: metav1.ConditionFalse, Reason: backupsv1.ReasonArtifactMissing, LastTransitionTime: metav1.NewTime(base)}
	old := func(name string, takenAt time.Time, conds ...metav1.Condition) {
		b := &backupsv1.Backup{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns},
			Spec: backupsv1.BackupSpec{
				ApplicationRef: corev1.TypedLocalObjectReference{APIGroup: ptr(backupsv1.DefaultApplicationAPIGroup), Kind: "VirtualMachine", Name: "vm-old"},
				PlanRef:        &corev1.LocalObjectReference{Name: h.plan.Name},
				StrategyRef:    corev1.TypedLocalObjectReference{APIGroup: ptr("velerodriver.backups.cozystack.io"), Kind: "VeleroBackupStrategy", Name: "s"},
				TakenAt:        metav1.NewTime(takenAt),
			},
		}
		require.NoError(t, env.Client.Create(h.ctx, b))
		b.Status.Phase, b.Status.Conditions = backupsv1.BackupReady, conds
		require.NoError(t, env.Client.Status().Update(h.ctx, b))
	}
	old("old-1", base.Add(-50*time.Hour))
	old("old-2", base.Add(-49*time.Hour))
	old("old-gone", base.Add(-48*time.Hour), gone)
	newBackup(h, "vm1-1", base.Add(-2*time.Hour), backupsv1.BackupReady)
	newBackup(h, "vm1-2", base.Add(-time.Hour), backupsv1.BackupReady)
	h.reconcile()

	left := h.backupNames()
	assert.ElementsMatch(t, []string{"old-2", "vm1-2"}, left, "the newest good Backup of each application stays")
	require.NotNil(t, h.plan.Status.LastBackupRef)
	assert.Equal(t, "vm1-2", h.plan.Status.LastBackupRef.Name)
	assert.ElementsMatch(t, []string{
		"Normal BackupPruned Pruned Backup old-1: kept by no keepLast, keepDaily, keepWeekly or keepMonthly rule",
		"Normal BackupPruned Pruned Backup old-gone: its artifact is missing",
		"Normal BackupPruned Pruned Backup vm1-1: kept by no keepLast, keepDaily, keepWeekly or keepMonthly rule",
	}, h.drainEvents())
}

// TestRetentionTrustsVerification: a Backup a verification found bad is pruned (kept by no rule,
// not good), the newest Backup a full-restore proved restorable is kept though keepLast would let
// it go, and the Plan shows it as its restorable point, with its measured restore time.
func TestRetentionTrustsVerification(t *testing.T) {
	h := newHarness(t, func(p *backupsv1.Plan) {
		p.Spec.Retention = &backupsv1.RetentionPolicy{KeepLast: ptr(int32(1))}
		p.Spec.StartingDeadlineSeconds = ptr(int64(1))
	})
	base := h.plan.CreationTimestamp.Time
	verified := func(status metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: backupsv1.ConditionVerified, Status: status, Reason: reason, LastTransitionTime: metav1.NewTime(base)}
	}
	newBackup(h, "b-proven-old", base.Add(-5*time.Hour), backupsv1.BackupReady, verified(metav1.ConditionTrue, backupsv1.ReasonRestoreVerified))
	proven := newBackup(h, "b-proven", base.Add(-4*time.Hour), backupsv1.BackupReady, verified(metav1.ConditionTrue, backupsv1.ReasonRestoreVerified))
	// The verification that proved it measured its restore (the verifier's verdict).
	proven.Status.Verification = &backupsv1.BackupVerification{FullRestore: &backupsv1.VerificationVerdict{Result: backupsv1.VerificationPassed,
		Time: metav1.NewTime(base), RestoreDuration: &metav1.Duration{Duration: 83 * time.Second}}}
	require.NoError(t, env.Client.Status().Update(h.ctx, proven))
	newBackup(h, "b-mid", base.Add(-3*time.Hour), backupsv1.BackupReady, verified(metav1.ConditionTrue, backupsv1.ReasonChecksumVerified))
	newBackup(h, "b-good", base.Add(-2*time.Hour), backupsv1.BackupReady)
	bad := newBackup(h, "b-bad", base.Add(-time.Hour), backupsv1.BackupReady, verified(metav1.ConditionFalse, backupsv1.ReasonChecksumMismatch))
	// Two checksum verifications in a row found it bad: confirmed.
	bad.Status.Verification = &backupsv1.BackupVerification{Checksum: &backupsv1.VerificationVerdict{Result: backupsv1.VerificationFailed, Time: metav1.NewTime(base), Failures: 2}}
	require.NoError(t, env.Client.Status().Update(h.ctx, bad))
	h.reconcile()

	left := h.backupNames()
	assert.ElementsMatch(t, []string{"b-good", "b-proven"}, left,
		"keepLast 1 keeps the newest usable Backup (b-bad is confirmed bad); the newest restore-verified one is never pruned")
	require.NotNil(t, h.plan.Status.LastRestorableBackup, "the Plan shows its restorable point")
	assert.Equal(t, "b-proven", h.plan.Status.LastRestorableBackup.Name)
	assert.Equal(t, proven.Spec.TakenAt.Unix(), h.plan.Status.LastRestorableBackup.TakenAt.Unix())
	assert.Equal(t, &metav1.Duration{Duration: 83 * time.Second}, h.plan.Status.LastRestorableBackup.RestoreDuration, "and its measured recovery time")
	assert.Contains(t, h.drainEvents(), "Normal BackupPruned Pruned Backup b-bad: a verification found it bad")
}

// TestRetentionNeverPrunesImportedBackups: a Backup imported from another cluster's record
// (contract BK-12) is read-only here: retention neither prunes it nor counts it, however old;
// once an admin adopts it, it is this cluster's and retention treats it like any other.
func TestRetentionNeverPrunesImportedBackups(t *testing.T) {
	h := newHarness(t, func(p *backupsv1.Plan) {
		p.Spec.Retention = &backupsv1.RetentionPolicy{KeepLast: ptr(int32(1))}
	})
	base := h.plan.CreationTimestamp.Time
	imported := func(name string, takenAt time.Time, adopted bool) {
		b := newBackup(h, name, takenAt, backupsv1.BackupReady)
		b.Labels = map[string]string{backupsv1.LabelImported: "true"}
		if adopted {
			b.Annotations = map[string]string{backupsv1.AnnotationAdopted: "true"}
		}
		require.NoError(t, env.Client.Update(h.ctx, b))
	}
	imported("from-a-1", base.Add(-72*time.Hour), false)
	imported("from-a-2", base.Add(-71*time.Hour), true)
	newBackup(h, "here-1", base.Add(-2*time.Hour), backupsv1.BackupReady)
	newBackup(h, "here-2", base.Add(-time.Hour), backupsv1.BackupReady)
	h.reconcile()

	left := h.backupNames()
	assert.ElementsMatch(t, []string{"from-a-1", "here-2"}, left, "the imported Backup stays; the adopted one is pruned like here-1")
}

// backupNames lists the names of the Backups in the harness's namespace.
func (h *harness) backupNames() []string {
	h.t.Helper()
	list := &backupsv1.BackupList{}
	require.NoError(h.t, env.Client.List(h.ctx, list, client.InNamespace(h.ns)))
	var names []string
	for _, b := range list.Items {
		names = append(names, b.Name)
	}
	return names
}

// TestRetentionActsOnConfirmedSignalsOnly: the newest Backup of a Plan, found bad by one
// verification, is kept (a transport fault taken for corruption once must not cost the last
// restore point), and so is one whose artifact a driver saw gone once (ArtifactAvailable Unknown).
func TestRetentionActsOnConfirmedSignalsOnly(t *testing.T) {
	h := newHarness(t, func(p *backupsv1.Plan) {
		p.Spec.Retention = &backupsv1.RetentionPolicy{KeepLast: ptr(int32(7)), MaxAge: &metav1.Duration{Duration: time.Nanosecond}}
		p.Spec.StartingDeadlineSeconds = ptr(int64(1))
	})
	base := h.plan.CreationTimestamp.Time
	newBackup(h, "b-old", base.Add(-2*time.Hour), backupsv1.BackupReady,
		metav1.Condition{Type: backupsv1.ConditionArtifactAvailable, Status: metav1.ConditionUnknown, Reason: backupsv1.ReasonArtifactAbsenceUnconfirmed, LastTransitionTime: metav1.NewTime(base)})
	suspect := newBackup(h, "b-only", base.Add(-time.Hour), backupsv1.BackupReady,
		metav1.Condition{Type: backupsv1.ConditionVerified, Status: metav1.ConditionFalse, Reason: backupsv1.ReasonChecksumMismatch, LastTransitionTime: metav1.NewTime(base)})
	suspect.Status.Verification = &backupsv1.BackupVerification{Checksum: &backupsv1.VerificationVerdict{Result: backupsv1.VerificationFailed, Time: metav1.NewTime(base), Failures: 1}}
	require.NoError(t, env.Client.Status().Update(h.ctx, suspect))
	h.reconcile()
	assert.ElementsMatch(t, []string{"b-old", "b-only"}, h.backupNames(),
		"b-only was good and one verification is no confirmed fact; b-old is the newest good one (its absence is unconfirmed)")
}

// TestRetentionFloorAndDeletionDelay: a tenant may own her Plan's retention but not go below the
// class's floor. With keepLast 1 and maxAge 1ns (what a tenant who may not delete Backups would set
// to destroy her history), the floor keeps the newest three and every Backup younger than two
// days; what it lets go waits out the deletion delay in status.pendingPrunes, and is not deleted
// if the floor rises meanwhile.
func TestRetentionFloorAndDeletionDelay(t *testing.T) {
	class := vmClass("floored-" + strings.ToLower(t.Name()[len(t.Name())-8:]))
	class.Spec.RetentionFloor = &backupsv1.RetentionFloor{MinKeepLast: ptr(int32(3)), MinAge: &metav1.Duration{Duration: 48 * time.Hour},
		DeletionDelay: &metav1.Duration{Duration: time.Hour}}
	require.NoError(t, env.Client.Create(context.Background(), class))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), class) })
	h := newHarness(t, func(p *backupsv1.Plan) {
		p.Spec.BackupClassName = class.Name
		p.Spec.Retention = &backupsv1.RetentionPolicy{KeepLast: ptr(int32(1)), MaxAge: &metav1.Duration{Duration: time.Nanosecond}}
		p.Spec.StartingDeadlineSeconds = ptr(int64(1))
	})
	base := h.plan.CreationTimestamp.Time
	for i, age := range []time.Duration{1, 2, 3, 50, 60, 70} {
		newBackup(h, fmt.Sprintf("b-%d", i), base.Add(-age*time.Hour), backupsv1.BackupReady)
	}
	all := []string{"b-0", "b-1", "b-2", "b-3", "b-4", "b-5"}
	res := h.reconcile()
	assert.ElementsMatch(t, all, h.backupNames(), "nothing is deleted before the delay")
	var pending []string
	for _, p := range h.plan.Status.PendingPrunes {
		pending = append(pending, p.Name)
		assert.Equal(t, time.Hour, p.DeleteAfter.Sub(p.Since.Time))
	}
	assert.ElementsMatch(t, []string{"b-3", "b-4", "b-5"}, pending, "the floor keeps the newest three, all younger than two days")
	assert.LessOrEqual(t, res.RequeueAfter, time.Hour, "the Plan is requeued when the first held Backup is due")

	// The floor rises: b-3 is no longer selected, and is not deleted when the delay ends.
	class.Spec.RetentionFloor.MinKeepLast = ptr(int32(4))
	require.NoError(t, env.Client.Update(h.ctx, class))
	require.Eventually(t, func() bool { // the cached client sees the class change
		c := &backupsv1.BackupClass{}
		return env.Client.Get(h.ctx, client.ObjectKeyFromObject(class), c) == nil && *c.Spec.RetentionFloor.MinKeepLast == 4
	}, 10*time.Second, 50*time.Millisecond)
	h.clock.Step(time.Hour + time.Second)
	h.reconcile()
	assert.ElementsMatch(t, []string{"b-0", "b-1", "b-2", "b-3"}, h.backupNames(), "b-4 and b-5 waited out the delay; b-3 is kept by the raised floor")
	assert.Empty(t, h.plan.Status.PendingPrunes)
}
