package metrics

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/core-controller/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

func TestCollectorReportsStateAtScrapeTime(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	p := &backupsv1.Plan{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: ns},
		Spec: backupsv1.PlanSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "VM", Name: "vm"},
			BackupClassName: "c", Schedule: backupsv1.PlanSchedule{Cron: "@daily"}},
	}
	require.NoError(t, env.Client.Create(ctx, p))
	p.Status.LastSuccessfulTime = &metav1.Time{Time: time.Unix(1000, 0)}
	p.Status.NextScheduleTime = &metav1.Time{Time: time.Unix(2000, 0)}
	p.Status.SkippedTicks = 3
	p.Status.LastRestorableBackup = &backupsv1.RestorablePoint{Name: "nightly-1", TakenAt: metav1.Unix(900, 0), RestoreDuration: &metav1.Duration{Duration: 83 * time.Second}}
	p.Status.Conditions = []metav1.Condition{{Type: backupsv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Scheduling", LastTransitionTime: metav1.Now()}}
	require.NoError(t, env.Client.Status().Update(ctx, p))
	for _, phase := range []backupsv1.BackupJobPhase{"", backupsv1.BackupJobRunning, backupsv1.BackupJobFailed} {
		j := &backupsv1.BackupJob{ObjectMeta: metav1.ObjectMeta{GenerateName: "j-", Namespace: ns},
			Spec: backupsv1.BackupJobSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "VM", Name: "vm"}, BackupClassName: "c"}}
		require.NoError(t, env.Client.Create(ctx, j))
		j.Status.Phase = phase
		if phase == backupsv1.BackupJobRunning {
			j.Status.StartedAt = &metav1.Time{Time: time.Unix(1500, 0)}
		}
		require.NoError(t, env.Client.Status().Update(ctx, j))
	}
	c := &Collector{Reader: nsReader{env.Client, ns}}
	want := `
# HELP coffer_plan_last_successful_time_seconds Unix time at which the newest successful BackupJob of the Plan completed.
# TYPE coffer_plan_last_successful_time_seconds gauge
coffer_plan_last_successful_time_seconds{namespace="NS",plan="nightly"} 1000
# HELP coffer_plan_next_schedule_time_seconds Unix time of the Plan's next tick.
# TYPE coffer_plan_next_schedule_time_seconds gauge
coffer_plan_next_schedule_time_seconds{namespace="NS",plan="nightly"} 2000
# HELP coffer_plan_last_restorable_backup_timestamp_seconds Unix time at which the newest Backup of the Plan that a full-restore verification proved restorable was taken (absent when none was): time() minus it is the Plan's restorable RPO.
# TYPE coffer_plan_last_restorable_backup_timestamp_seconds gauge
coffer_plan_last_restorable_backup_timestamp_seconds{namespace="NS",plan="nightly"} 900
# HELP coffer_plan_last_restorable_backup_restore_duration_seconds How long the full-restore verification that proved the Plan's newest restorable Backup took to restore it (absent when none was, or it was not measured): the Plan's measured recovery time.
# TYPE coffer_plan_last_restorable_backup_restore_duration_seconds gauge
coffer_plan_last_restorable_backup_restore_duration_seconds{namespace="NS",plan="nightly"} 83
# HELP coffer_plan_skipped_ticks_total Ticks of the Plan that did not fire (missed past the deadline, while the controller was down, or forbidden by the concurrency policy).
# TYPE coffer_plan_skipped_ticks_total counter
coffer_plan_skipped_ticks_total{namespace="NS",plan="nightly"} 3
# HELP coffer_plan_ready 1 when the Plan is valid, scheduling and its BackupClass resolves, 0 when it is suspended or invalid or its class does not resolve.
# TYPE coffer_plan_ready gauge
coffer_plan_ready{namespace="NS",plan="nightly"} 1
# HELP coffer_backupjobs BackupJobs by namespace and phase (Unclaimed: no driver has taken it yet).
# TYPE coffer_backupjobs gauge
coffer_backupjobs{namespace="NS",phase="Failed"} 1
coffer_backupjobs{namespace="NS",phase="Running"} 1
coffer_backupjobs{namespace="NS",phase="Unclaimed"} 1
# HELP coffer_backupjob_oldest_running_start_time_seconds Unix time at which the oldest Running BackupJob of the namespace started (absent when none runs).
# TYPE coffer_backupjob_oldest_running_start_time_seconds gauge
coffer_backupjob_oldest_running_start_time_seconds{namespace="NS"} 1500
# HELP coffer_plan_created_timestamp_seconds Unix time at which the Plan was created (a Plan that never succeeded is judged by its age).
# TYPE coffer_plan_created_timestamp_seconds gauge
coffer_plan_created_timestamp_seconds{namespace="NS",plan="nightly"} CREATED
`
	want = strings.ReplaceAll(want, "NS", ns)
	want = strings.ReplaceAll(want, "CREATED", strconv.FormatInt(p.CreationTimestamp.Unix(), 10))
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want)))

	// A deleted Plan leaves no stale series.
	require.NoError(t, env.Client.Delete(ctx, p))
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(""), "coffer_plan_ready", "coffer_plan_skipped_ticks_total"))
}

// TestCollectorReportsOnlyOnceElected: a replica that does not lead exports no state, so the
// per-Plan series come from one replica however many run.
func TestCollectorReportsOnlyOnceElected(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	p := &backupsv1.Plan{
		ObjectMeta: metav1.ObjectMeta{Name: "hourly", Namespace: ns},
		Spec: backupsv1.PlanSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "VM", Name: "vm"},
			BackupClassName: "c", Schedule: backupsv1.PlanSchedule{Cron: "@hourly"}},
	}
	require.NoError(t, env.Client.Create(ctx, p))
	elected := make(chan struct{})
	c := &Collector{Reader: nsReader{env.Client, ns}, Elected: elected}

	assert.Zero(t, testutil.CollectAndCount(c), "a replica that does not lead reports nothing")
	close(elected)
	assert.Equal(t, 1, testutil.CollectAndCount(c, "coffer_plan_ready"), "the leader reports the Plan")
	assert.Equal(t, 1, testutil.CollectAndCount(c, "coffer_plan_created_timestamp_seconds"),
		"a Plan that never succeeded still has its creation time")
	assert.Zero(t, testutil.CollectAndCount(c, "coffer_plan_last_successful_time_seconds"))
}

// nsReader confines the collector to one test namespace (other tests share the API server).
type nsReader struct {
	client.Reader
	ns string
}

func (r nsReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return r.Reader.List(ctx, list, append(opts, client.InNamespace(r.ns))...)
}
