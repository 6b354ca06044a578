package plan

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// TestFailedCreateKeepsTheTickDue brings the controller back after it missed ticks; the create
// of the due tick's BackupJob fails (refused, or landed with its answer lost). Nothing is recorded
// that keeps the tick from firing: the retry fires it exactly once, and the missed ticks before
// it are counted once, with lastSkippedTime at the newest of them. Whether the Plan was scheduling
// before the downtime or was created during it makes no difference.
func TestFailedCreateKeepsTheTickDue(t *testing.T) {
	for _, tt := range []struct {
		name       string
		readyFirst bool // the Plan was reconciled (Ready) before the controller went down
		landed     bool // the BackupJob was created, but the controller got an error back
	}{
		{"scheduling Plan, the create is refused", true, false},
		{"scheduling Plan, the create lands but its answer is lost", true, true},
		{"new Plan, the create is refused", false, false},
		{"new Plan, the create lands but its answer is lost", false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, func(p *backupsv1.Plan) { p.Spec.StartingDeadlineSeconds = ptr(int64(900)) })
			if tt.readyFirst {
				h.reconcile()
				require.NotNil(t, meta.FindStatusCondition(h.plan.Status.Conditions, backupsv1.ConditionReady))
			}
			before := h.plan.Status.DeepCopy()
			h.clock.SetTime(h.hour(3).Add(time.Minute))
			fault := errors.New("injected: the API server did not answer")
			r := h.newReconciler()
			r.Client = interceptor.NewClient(env.Client, interceptor.Funcs{
				Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					if _, ok := obj.(*backupsv1.BackupJob); !ok {
						return c.Create(ctx, obj, opts...)
					}
					if tt.landed {
						if err := c.Create(ctx, obj, opts...); err != nil {
							return err
						}
					}
					return fault
				},
			})
			_, err := r.Reconcile(h.ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(h.plan)})
			require.ErrorIs(t, err, fault, "the error requeues the Plan")
			h.refresh()
			assert.Nil(t, h.plan.Status.LastSkippedTime, "the due tick is not recorded as skipped")
			assert.Nil(t, h.plan.Status.LastScheduleTime)
			assert.Zero(t, h.plan.Status.SkippedTicks, "the missed ticks are counted once the due one fired")
			assert.Equal(t, before, &h.plan.Status, "a failed create writes nothing")

			h.reconcile() // the retry
			jobs := h.jobs()
			require.Len(t, jobs, 1, "the tick fired, once")
			assert.Equal(t, backupsv1.PlanBackupJobName("nightly", h.hour(3)), jobs[0].Name)
			require.NotNil(t, h.plan.Status.LastScheduleTime)
			assert.Equal(t, h.hour(3), h.plan.Status.LastScheduleTime.Time.UTC())
			assert.Equal(t, int64(2), h.plan.Status.SkippedTicks, "hours 1 and 2, counted once")
			require.NotNil(t, h.plan.Status.LastSkippedTime)
			assert.Equal(t, h.hour(2), h.plan.Status.LastSkippedTime.Time.UTC(), "the newest tick that did not fire")
			assert.Equal(t, h.plan.Generation, h.plan.Status.ObservedGeneration)

			// Nothing fires twice, and the next tick fires normally.
			h.setJobPhase(jobs[0].Name, backupsv1.BackupJobSucceeded, h.clock.Now())
			h.reconcile()
			assert.Len(t, h.jobs(), 1)
			h.clock.SetTime(h.hour(4).Add(time.Second))
			h.reconcile()
			assert.Len(t, h.jobs(), 2)
			assert.Equal(t, int64(2), h.plan.Status.SkippedTicks)
		})
	}
}

// TestShippedRBACFiresTicks reconciles a Plan as core's ServiceAccount, holding the role deploy/
// ships, on an API server that enforces OwnerReferencesPermissionEnforcement: the BackupJob, owned
// by its Plan with blockOwnerDeletion, needs update on plans/finalizers.
func TestShippedRBACFiresTicks(t *testing.T) {
	h := newHarness(t, nil)
	as := env.AsCoreController(t)
	r := h.newReconciler()
	r.Client, r.APIReader = as, as
	h.clock.SetTime(h.hour(1).Add(time.Second))
	for range 2 { // the create, then the status write it triggers
		_, err := r.Reconcile(h.ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(h.plan)})
		require.NoError(t, err)
	}
	jobs := h.jobs()
	require.Len(t, jobs, 1)
	owner := metav1.GetControllerOf(&jobs[0])
	require.NotNil(t, owner)
	assert.Equal(t, h.plan.UID, owner.UID)
	require.NotNil(t, owner.BlockOwnerDeletion)
	assert.True(t, *owner.BlockOwnerDeletion)
	h.refresh()
	require.NotNil(t, h.plan.Status.LastScheduleTime)
	assert.Equal(t, h.hour(1), h.plan.Status.LastScheduleTime.Time.UTC())
}

// TestLogsOneLinePerTransition: an operator follows a Plan through its Info lines (a tick skipped,
// a BackupJob created, a tick fired, a Backup pruned), each once and keyed by the objects
// (klog.KObj); the phases show at V(1).
func TestLogsOneLinePerTransition(t *testing.T) {
	h := newHarness(t, func(p *backupsv1.Plan) {
		p.Spec.StartingDeadlineSeconds = ptr(int64(900))
		p.Spec.Retention = &backupsv1.RetentionPolicy{KeepLast: ptr(int32(1))}
	})
	base := h.plan.CreationTimestamp.Time
	newBackup(h, "b-old", base.Add(-2*time.Hour), backupsv1.BackupReady)
	newBackup(h, "b-new", base.Add(-time.Hour), backupsv1.BackupReady)
	h.clock.SetTime(h.hour(2).Add(time.Minute))
	h.reconcile()
	job := backupsv1.PlanBackupJobName("nightly", h.hour(2))
	planKey := `"plan"={"name"="nightly" "namespace"="` + h.ns + `"}`
	info := infoLines(h.logs.String())
	want := []string{
		`"msg"="Pruned Backup" ` + planKey + ` "backup"={"name"="b-old" "namespace"="` + h.ns + `"}`,
		`"msg"="Created BackupJob" ` + planKey + ` "backupJob"={"name"="` + job + `" "namespace"="` + h.ns + `"} "tick"="` + h.hour(2).Format(time.RFC3339) + `"`,
		`"msg"="Tick skipped" ` + planKey + ` "tick"="` + h.hour(1).Format(time.RFC3339) + `" "count"=1 "reason"="MissedDeadline"`,
		`"msg"="Tick fired" ` + planKey + ` "tick"="` + h.hour(2).Format(time.RFC3339) + `" "backupJob"={"name"="` + job + `" "namespace"="` + h.ns + `"} "adopted"=false "missedBefore"=1`,
	}
	require.Len(t, info, len(want), "one Info line per transition:\n%s", strings.Join(info, "\n"))
	for i, w := range want {
		assert.Contains(t, info[i], w)
	}
	for _, p := range []string{"loadJobs", "pruneHistory", "applyRetention", "schedule"} {
		assert.Contains(t, h.logs.String(), `"level"=1 "msg"="Plan phase" `+planKey+` "phase"="`+p+`"`)
	}

	// Nothing happens on the next pass: nothing is said at Info.
	h.logs.Reset()
	h.reconcileOnce()
	assert.Empty(t, infoLines(h.logs.String()))
}

func infoLines(logs string) []string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.HasPrefix(l, `"level"=0 `) {
			out = append(out, l)
		}
	}
	return out
}

// TestStatusRecordsObservedGeneration: every status write says which generation of the spec it
// describes, on the status and on each condition, whatever the branch (an invalid schedule too).
func TestStatusRecordsObservedGeneration(t *testing.T) {
	h := newHarness(t, func(p *backupsv1.Plan) { p.Spec.Schedule.Cron = "not a cron" })
	h.reconcile()
	assert.Equal(t, h.plan.Generation, h.plan.Status.ObservedGeneration, "invalid schedule")
	h.plan.Spec.Schedule.Cron = "0 * * * *"
	require.NoError(t, env.Client.Update(h.ctx, h.plan))
	require.Equal(t, int64(2), h.plan.Generation)
	h.reconcile()
	assert.Equal(t, int64(2), h.plan.Status.ObservedGeneration, "valid again")
	for _, c := range h.plan.Status.Conditions {
		assert.Equal(t, int64(2), c.ObservedGeneration, c.Type)
	}
	ready := meta.FindStatusCondition(h.plan.Status.Conditions, backupsv1.ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, metav1.ConditionTrue, ready.Status)
}
