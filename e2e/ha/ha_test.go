//go:build e2e

// Package ha proves core-controller's high availability on the golden stack: two replicas elect a
// leader through the Lease core-controller.backups.cozystack.io, and when the leader is SIGKILLed
// just before a tick, the other replica takes the Lease over and fires that tick exactly once,
// within the Plan's startingDeadlineSeconds, without skipping a tick.
package ha

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/golden"
	"github.com/coffer-backup/coffer/e2e/harness/components"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

const (
	ns        = "ha"
	planName  = "ha-minutely"
	leaseName = "core-controller.backups.cozystack.io"
	leaseNS   = "coffer-system"
	// killLead is how long before the tick the leader is killed: too late for it to fire the tick.
	killLead = 3 * time.Second
	// deadline is the Plan's startingDeadlineSeconds: the takeover must fire the tick within it.
	deadline = 120
)

// leaderGauge is the line controller-runtime's leader-election metric has on the leader.
var leaderGauge = `leader_election_master_status{name="` + leaseName + `"}`

func TestLeaderKilledBeforeATickFiresItOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	core := components.Spec{Module: "core-controller", Binary: "core-controller", Namespace: "coffer-system", Args: []string{"--driver-claim-timeout=2m"}}
	s, err := golden.Start(ctx, golden.Options{Say: t.Logf, Components: []components.Spec{
		core, core,
		{Module: "driver-velero", Binary: "driver-velero", Namespace: "coffer-system"},
	}})
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	for _, c := range s.Components {
		t.Cleanup(func() { components.StopAndCheck(t, c) })
	}
	replicas := []string{"core-controller", "core-controller-2"}
	c := s.Client

	// Every BackupJob of the namespace as the API server announces it: one ADDED per creation.
	rec := watchBackupJobs(t, ctx, c)
	createApplication(t, ctx, c)
	plan := &backupsv1.Plan{ObjectMeta: metav1.ObjectMeta{Name: planName, Namespace: ns}, Spec: backupsv1.PlanSpec{
		ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"}, BackupClassName: "ha",
		Schedule:                backupsv1.PlanSchedule{Cron: "* * * * *"},
		StartingDeadlineSeconds: ptr.To[int64](deadline),
		// Allow: a slow backup never makes the next tick skip, so any skip is the takeover's.
		ConcurrencyPolicy:          backupsv1.ConcurrencyAllow,
		SuccessfulJobsHistoryLimit: ptr.To[int32](20),
		FailedJobsHistoryLimit:     ptr.To[int32](20),
	}}
	require.NoError(t, c.Create(ctx, plan))
	first := nextTick(plan.CreationTimestamp.Time)

	t.Logf("Waiting for the first tick (%s) to fire normally", first.Format(time.RFC3339))
	waitSucceeded(t, ctx, c, backupsv1.PlanBackupJobName(planName, first), first.Add(3*time.Minute))
	leader, standby := findLeader(t, ctx, s.Components, replicas)
	lease0 := getLease(t, ctx, c)
	t.Logf("Leader: %s (pid %d), Lease holder %q, %d transitions; standby: %s (pid %d)",
		leader, s.Components[leader].Pid(), ptr.Deref(lease0.Spec.HolderIdentity, ""), ptr.Deref(lease0.Spec.LeaseTransitions, 0),
		standby, s.Components[standby].Pid())
	assert.Contains(t, s.Components[leader].Log.String(), "Successfully acquired lease", "the leader's log shows the acquisition")
	assert.NotContains(t, s.Components[standby].Log.String(), "Successfully acquired lease", "the standby never held the Lease")
	assert.True(t, createdBy(s.Components[leader], backupsv1.PlanBackupJobName(planName, first)), "the leader created the first tick's BackupJob")

	// The kill: killLead before a tick, far enough ahead that the leader has settled.
	tick := nextTick(time.Now().Add(10 * time.Second))
	time.Sleep(time.Until(tick.Add(-killLead)))
	still, _ := findLeader(t, ctx, s.Components, replicas)
	require.Equal(t, leader, still, "the leader changed before the kill")
	s.Components[leader].Kill()
	killedAt := time.Now()
	t.Logf("SIGKILLed %s at %s, %s before the tick at %s", leader, killedAt.Format("15:04:05.000"), tick.Sub(killedAt).Round(time.Millisecond), tick.Format(time.RFC3339))

	name := backupsv1.PlanBackupJobName(planName, tick)
	seen := rec.waitAdded(t, ctx, name, tick.Add(deadline*time.Second))
	delay := seen.Sub(tick)
	t.Logf("Takeover: BackupJob %s seen %s after its tick (lease duration 15 s, retry period 2 s: the harness's components.FastElection)",
		name, delay.Round(time.Millisecond))
	// The standby sees the Lease expire at most 15 s after it last saw it renewed (at most 2 s
	// before the kill, plus its own 2 s polling), then acquires it at its next poll and starts
	// the controllers from a warm cache: about 17 s after the tick at worst, plus load.
	assert.Less(t, delay, 30*time.Second, "the takeover is bounded by the lease duration (15 s) plus retry periods and a controller start")
	job := waitSucceeded(t, ctx, c, name, tick.Add(4*time.Minute))
	t.Logf("BackupJob %s: creationTimestamp %s after the tick (whole seconds), Succeeded", name, job.CreationTimestamp.Sub(tick))
	assert.Equal(t, tick.UTC().Format(time.RFC3339), job.Annotations[backupsv1.AnnotationScheduledTime])
	assert.True(t, createdBy(s.Components[standby], name), "the former standby created the tick's BackupJob")
	now, _ := findLeader(t, ctx, s.Components, replicas)
	assert.Equal(t, standby, now, "the former standby reports itself leader")
	lease1 := getLease(t, ctx, c)
	assert.NotEqual(t, ptr.Deref(lease0.Spec.HolderIdentity, ""), ptr.Deref(lease1.Spec.HolderIdentity, ""), "the Lease changed hands")
	assert.Equal(t, ptr.Deref(lease0.Spec.LeaseTransitions, 0)+1, ptr.Deref(lease1.Spec.LeaseTransitions, 0), "exactly one Lease transition")
	waitPlanRecorded(t, ctx, c, tick)

	// Both replicas again: the next tick fires once, the restarted replica stands by.
	require.NoError(t, s.Components[leader].Restart())
	restarted := time.Now()
	t.Logf("Restarted %s (pid %d)", leader, s.Components[leader].Pid())
	last := nextTick(restarted.Add(5 * time.Second))
	waitSucceeded(t, ctx, c, backupsv1.PlanBackupJobName(planName, last), last.Add(3*time.Minute))
	waitPlanRecorded(t, ctx, c, last)
	final, _ := findLeader(t, ctx, s.Components, replicas)
	assert.Equal(t, standby, final, "the restarted replica stands by")
	for _, r := range replicas {
		assert.False(t, s.Components[r].Exited(), "%s is running", r)
	}

	// Every tick from the first to the last fired exactly once, and nothing else was created.
	var ticks []time.Time
	for t := first; !t.After(last); t = t.Add(time.Minute) {
		ticks = append(ticks, t)
	}
	rec.check(t, ticks)
	p := &backupsv1.Plan{}
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(plan), p))
	assert.Zero(t, p.Status.SkippedTicks, "no tick was skipped")
	assert.Nil(t, p.Status.LastSkippedTime, "no tick was skipped")
	if cond := meta.FindStatusCondition(p.Status.Conditions, backupsv1.ConditionTickSkipped); assert.NotNil(t, cond) {
		assert.Equal(t, metav1.ConditionFalse, cond.Status, "TickSkipped: %s %s", cond.Reason, cond.Message)
	}
	backups := &backupsv1.BackupList{}
	require.NoError(t, c.List(ctx, backups, client.InNamespace(ns)))
	assert.Len(t, backups.Items, len(ticks), "one Backup per tick")
	t.Logf("Ticks %s..%s: %d BackupJobs, %d Backups, takeover delay %s", first.Format("15:04"), last.Format("15:04"),
		len(ticks), len(backups.Items), delay.Round(time.Millisecond))
}

// nextTick is the first minute boundary after t.
func nextTick(t time.Time) time.Time { return t.Truncate(time.Minute).Add(time.Minute) }

func createApplication(t *testing.T, ctx context.Context, c client.Client) {
	shop := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Shop",
		"metadata": map[string]any{"name": "shop", "namespace": ns}, "spec": map[string]any{"size": "small"}}}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		shop,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "catalog", Namespace: ns}, Data: map[string]string{"items": "tea,coffee"}},
		&veleroapi.VeleroBackupStrategy{ObjectMeta: metav1.ObjectMeta{Name: "ha-namespace"}, Spec: veleroapi.VeleroBackupStrategySpec{
			BackupTemplate: veleroapi.VeleroTemplate{Spec: runtime.RawExtension{Raw: []byte(`{"includedNamespaces": ["{{ .Application.metadata.namespace }}"], "snapshotVolumes": false}`)}},
		}},
		&backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: "ha"}, Spec: backupsv1.BackupClassSpec{Strategies: []backupsv1.BackupClassStrategy{{
			Application: backupsv1.ApplicationSelector{Kind: "Shop"},
			StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr.To(veleroapi.Group), Kind: veleroapi.Kind, Name: "ha-namespace"},
			Parameters:  map[string]string{"backupStorageLocationName": velerostack.BSLName},
		}}}},
	} {
		require.NoError(t, c.Create(ctx, o), "creating %T %s", o, o.GetName())
	}
}

// findLeader scrapes the running replicas' leader-election gauge (1 on the leader, 0 on a
// standby): exactly one must report 1. It returns the leader and (with two replicas) the other one.
func findLeader(t *testing.T, ctx context.Context, comps map[string]*components.Component, names []string) (leader, other string) {
	t.Helper()
	var leaders []string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		leaders = leaders[:0]
		for _, n := range names {
			if comps[n].Exited() {
				continue
			}
			v, ok := gauge(comps[n], leaderGauge)
			if !ok { // not scrapeable yet (starting) or no gauge yet
				return false, nil
			}
			if v == 1 {
				leaders = append(leaders, n)
			}
		}
		return len(leaders) == 1, nil
	})
	require.NoError(t, err, "waiting for exactly one replica to report itself leader (leaders: %v)", leaders)
	for _, n := range names {
		if n != leaders[0] {
			other = n
		}
	}
	return leaders[0], other
}

// gauge reads one sample from a component's metrics.
func gauge(c *components.Component, series string) (float64, bool) {
	if c.Exited() {
		return 0, false
	}
	body, err := c.Metrics()
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// createdBy reports whether a replica's log records creating the named BackupJob.
func createdBy(c *components.Component, job string) bool {
	for _, line := range strings.Split(c.Log.String(), "\n") {
		if strings.Contains(line, "Created BackupJob") && strings.Contains(line, job) {
			return true
		}
	}
	return false
}

func getLease(t *testing.T, ctx context.Context, c client.Client) *coordinationv1.Lease {
	t.Helper()
	l := &coordinationv1.Lease{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: leaseNS, Name: leaseName}, l))
	return l
}

func waitSucceeded(t *testing.T, ctx context.Context, c client.Client, name string, until time.Time) *backupsv1.BackupJob {
	t.Helper()
	job := &backupsv1.BackupJob{}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Until(until), true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, job)
		return err == nil && job.IsTerminal(), client.IgnoreNotFound(err)
	})
	require.NoError(t, err, "waiting for BackupJob %s to finish (phase %q)", name, job.Status.Phase)
	require.Equal(t, backupsv1.BackupJobSucceeded, job.Status.Phase, "BackupJob %s: %s", name, job.Status.Message)
	return job
}

func waitPlanRecorded(t *testing.T, ctx context.Context, c client.Client, tick time.Time) {
	t.Helper()
	p := &backupsv1.Plan{}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: planName}, p)
		return err == nil && p.Status.LastScheduleTime != nil && p.Status.LastScheduleTime.Time.Equal(tick), err
	})
	require.NoError(t, err, "waiting for the Plan's lastScheduleTime to reach %s (it is %v)", tick.Format(time.RFC3339), p.Status.LastScheduleTime)
}

// recorder keeps what a watch of the namespace's BackupJobs saw.
type recorder struct {
	mu     sync.Mutex
	added  map[string][]added // by name
	others []string           // DELETED events and watch errors
}

type added struct {
	uid types.UID
	at  time.Time
}

func watchBackupJobs(t *testing.T, ctx context.Context, c client.WithWatch) *recorder {
	r := &recorder{added: map[string][]added{}}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		rv := ""
		for ctx.Err() == nil {
			w, err := c.Watch(ctx, &backupsv1.BackupJobList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
			if err != nil {
				time.Sleep(time.Second)
				continue
			}
			for ev := range w.ResultChan() {
				job, ok := ev.Object.(*backupsv1.BackupJob)
				if !ok { // a watch error (e.g. the version expired): list again
					rv = ""
					continue
				}
				rv = job.ResourceVersion
				r.mu.Lock()
				switch ev.Type {
				case watch.Added, watch.Modified:
					// A watch started again without a version replays what exists: count UIDs.
					if !r.seen(job.Name, job.UID) {
						r.added[job.Name] = append(r.added[job.Name], added{uid: job.UID, at: time.Now()})
					}
				case watch.Deleted:
					r.others = append(r.others, "deleted "+job.Name)
				}
				r.mu.Unlock()
			}
			w.Stop()
		}
	}()
	return r
}

func (r *recorder) seen(name string, uid types.UID) bool {
	for _, a := range r.added[name] {
		if a.uid == uid {
			return true
		}
	}
	return false
}

// waitAdded returns when the named BackupJob was first seen.
func (r *recorder) waitAdded(t *testing.T, ctx context.Context, name string, until time.Time) time.Time {
	t.Helper()
	var at time.Time
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Until(until), true, func(context.Context) (bool, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if a := r.added[name]; len(a) > 0 {
			at = a[0].at
			return true, nil
		}
		return false, nil
	})
	require.NoError(t, err, "waiting for BackupJob %s to be created", name)
	return at
}

// check asserts that each tick has exactly one BackupJob, created once, and that nothing else
// was created or deleted.
func (r *recorder) check(t *testing.T, ticks []time.Time) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	want := map[string]bool{}
	for _, tick := range ticks {
		name := backupsv1.PlanBackupJobName(planName, tick)
		want[name] = true
		assert.Len(t, r.added[name], 1, "BackupJob %s (tick %s) was created exactly once (one UID)", name, tick.Format(time.RFC3339))
	}
	for name, a := range r.added {
		assert.True(t, want[name], "BackupJob %s (%d creations) belongs to no tick from %s to %s", name, len(a),
			ticks[0].Format(time.RFC3339), ticks[len(ticks)-1].Format(time.RFC3339))
	}
	assert.Empty(t, r.others, "no BackupJob was deleted")
	if t.Failed() {
		t.Logf("creations seen: %s", fmt.Sprint(r.added))
	}
}
