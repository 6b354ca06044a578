package controllers

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/core-controller/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

func ptr[T any](v T) *T { return &v }

// lockedBuffer collects the manager's log lines from its goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) add(s string) { l.mu.Lock(); defer l.mu.Unlock(); l.b.WriteString(s + "\n") }
func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestUnclaimedRunUnblocksItsPlan runs core as the binary wires it (Setup, one manager, watches and
// caches) against the real API server, on a fake clock. A Plan names a BackupClass that does not
// exist: its BackupJob is never claimed and, under concurrencyPolicy Forbid, blocks every later
// tick, which fixing the Plan does not change (the job's spec is immutable). Once the claim timeout
// has passed, core fails the job (BackupClassNotFound), and the Plan's next tick creates a new
// BackupJob with the fixed class.
func TestUnclaimedRunUnblocksItsPlan(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := env.Namespace(t)
	c := env.Client
	p := &backupsv1.Plan{
		ObjectMeta: metav1.ObjectMeta{Name: "minutely", Namespace: ns},
		Spec: backupsv1.PlanSpec{
			ApplicationRef:  corev1.TypedLocalObjectReference{Kind: "VirtualMachine", Name: "vm1"},
			BackupClassName: "no-such-class",
			Schedule:        backupsv1.PlanSchedule{Cron: "* * * * *"},
		},
	}
	require.NoError(t, c.Create(ctx, p))
	minute := func(n int) time.Time {
		return p.CreationTimestamp.Time.Truncate(time.Minute).Add(time.Duration(n) * time.Minute).UTC()
	}
	clk := clocktesting.NewFakeClock(minute(1).Add(time.Second))
	const claimTimeout = 5*time.Minute + 30*time.Second // from the start, minute(1)+1s

	logs := &lockedBuffer{}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  testenv.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		Logger:  funcr.New(func(_, args string) { logs.add(args) }, funcr.Options{}),
	})
	require.NoError(t, err)
	require.NoError(t, Setup(ctx, mgr, Options{ClaimTimeout: claimTimeout, PlanWorkers: 1, Clock: clk}))
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
		if t.Failed() {
			t.Logf("core's log:\n%s", logs.String())
		}
	}()

	poll := func(what string, cond func() bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return cond(), nil
		})
		require.NoError(t, err, "waiting for %s", what)
	}
	get := func(o client.Object) client.Object {
		t.Helper()
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(o), o))
		return o
	}
	nudges := 0
	nudge := func(o client.Object) { // an update, so that the watches deliver an event at the new time
		t.Helper()
		nudges++
		orig := get(o).DeepCopyObject().(client.Object)
		o.SetAnnotations(map[string]string{"test.coffer.io/nudge": fmt.Sprint(nudges)})
		require.NoError(t, c.Patch(ctx, o, client.MergeFrom(orig)))
	}
	jobs := func() []backupsv1.BackupJob {
		list := &backupsv1.BackupJobList{}
		require.NoError(t, c.List(ctx, list, client.InNamespace(ns)))
		return list.Items
	}
	lastSkipped := func() time.Time {
		if s := get(p).(*backupsv1.Plan).Status.LastSkippedTime; s != nil {
			return s.Time.UTC()
		}
		return time.Time{}
	}

	// The first tick creates a BackupJob nobody claims.
	first := &backupsv1.BackupJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: backupsv1.PlanBackupJobName(p.Name, minute(1))}}
	poll("the first tick's BackupJob", func() bool {
		return c.Get(ctx, client.ObjectKeyFromObject(first), first) == nil &&
			get(p).(*backupsv1.Plan).Status.LastScheduleTime != nil
	})
	assert.Equal(t, "no-such-class", first.Spec.BackupClassName)

	// Fixing the Plan does not help the BackupJob already made: every tick is skipped while it waits.
	fixed := &backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: "fixed-" + ns}, Spec: backupsv1.BackupClassSpec{
		Strategies: []backupsv1.BackupClassStrategy{{Application: backupsv1.ApplicationSelector{Kind: "VirtualMachine"},
			StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr("velerodriver.backups.cozystack.io"), Kind: "VeleroBackupStrategy", Name: "vm"}}},
	}}
	require.NoError(t, c.Create(ctx, fixed))
	t.Cleanup(func() { _ = c.Delete(context.Background(), fixed) })
	get(p)
	p.Spec.BackupClassName = fixed.Name
	require.NoError(t, c.Update(ctx, p))
	for n := 2; n <= 6; n++ {
		clk.SetTime(minute(n).Add(time.Second))
		nudge(p)
		poll(fmt.Sprintf("tick %d to be skipped", n), func() bool { return lastSkipped().Equal(minute(n)) })
	}
	plan := get(p).(*backupsv1.Plan)
	assert.Equal(t, int64(5), plan.Status.SkippedTicks)
	skipped := meta.FindStatusCondition(plan.Status.Conditions, backupsv1.ConditionTickSkipped)
	require.NotNil(t, skipped)
	assert.Equal(t, backupsv1.ReasonConcurrencyForbidden, skipped.Reason)
	assert.Contains(t, skipped.Message, "BackupJob "+first.Name+" is still running")
	require.Len(t, jobs(), 1, "blocked")
	assert.Empty(t, get(first).(*backupsv1.BackupJob).Status.Phase, "still waiting for a driver")

	// The claim timeout passes: core fails the job, which frees the Plan.
	from := minute(1).Add(time.Second) // the controllers' start
	if first.CreationTimestamp.After(from) {
		from = first.CreationTimestamp.Time
	}
	clk.SetTime(from.Add(claimTimeout))
	require.True(t, clk.Now().Before(minute(7)))
	nudge(first)
	poll("the unclaimed BackupJob to fail", func() bool { return get(first).(*backupsv1.BackupJob).IsTerminal() })
	assert.Equal(t, backupsv1.BackupJobFailed, first.Status.Phase)
	ready := meta.FindStatusCondition(first.Status.Conditions, backupsv1.ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, metav1.ConditionFalse, ready.Status)
	assert.Equal(t, backupsv1.ReasonBackupClassNotFound, ready.Reason)
	assert.Contains(t, ready.Message, `BackupClass "no-such-class" not found; create it or set spec.backupClassName of Plan minutely to an existing class`)
	poll("the Plan to see the run ended", func() bool { return len(get(p).(*backupsv1.Plan).Status.Active) == 0 })
	require.Len(t, jobs(), 1, "nothing fires before the next tick")

	// The next tick fires, with the fixed class.
	clk.SetTime(minute(7).Add(time.Second))
	nudge(p)
	next := &backupsv1.BackupJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: backupsv1.PlanBackupJobName(p.Name, minute(7))}}
	poll("the next tick's BackupJob", func() bool { return c.Get(ctx, client.ObjectKeyFromObject(next), next) == nil })
	assert.Equal(t, fixed.Name, next.Spec.BackupClassName)
	assert.Len(t, jobs(), 2)
	poll("the Plan to record the tick", func() bool {
		st := get(p).(*backupsv1.Plan).Status
		return st.LastScheduleTime != nil && st.LastScheduleTime.Time.UTC().Equal(minute(7))
	})

	// An operator can follow it in the log, through the manager's logger.
	for msg, controller := range map[string]string{
		"Created BackupJob":          "core-plan",
		"Tick skipped":               "core-plan",
		"Failed unclaimed BackupJob": "core-backupjob",
		"Tick fired":                 "core-plan",
	} {
		var found []string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, `"msg"="`+msg+`"`) {
				found = append(found, l)
			}
		}
		if assert.NotEmpty(t, found, msg) {
			assert.Contains(t, found[0], `"controller"="`+controller+`"`, "the manager's logger, through ctrl.LoggerFrom")
		}
		if msg == "Failed unclaimed BackupJob" {
			// (The fake clock runs ahead of the API server's creation timestamps, so the
			// next job may fail at once too; it has a line of its own.)
			var firstJob []string
			for _, l := range found {
				if strings.Contains(l, `"backupJob"={"name"="`+first.Name+`" "namespace"="`+ns+`"}`) {
					firstJob = append(firstJob, l)
				}
			}
			assert.Len(t, firstJob, 1, "said once")
		}
	}
}
