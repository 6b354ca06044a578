//go:build e2e

package jobdriver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/driverkit"
	"github.com/coffer-backup/coffer/e2e/harness/components"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

const (
	// chaosKills is how many times the subtest SIGKILLs a component; each kill costs about a lease
	// duration (15 s) before the restarted process leads again.
	chaosKills = 6
	// chaosClaimTimeout is core-controller's --driver-claim-timeout. It must be longer than any
	// outage of driver-job the kills cause, or runs fail unclaimed (NoDriverClaimed) because of the
	// suite: the schedule never kills one component more than twice in a row, so an outage lasts
	// about two lease durations, and checkOutages holds it below half this timeout.
	chaosClaimTimeout = 2 * time.Minute
	// chaosDeadlineSeconds is the chaos strategy's activeDeadlineSeconds. Every run must end within
	// it plus driverkit.MaxRetryDelay of its creation (GEN-11 counts from the claim and adds the
	// driver's grace; this bound is stricter).
	chaosDeadlineSeconds = 180
	chaosKeepLast        = 2
	chaosPlan            = "shop-minutely"
	leaderTimeout        = 90 * time.Second
	// afterKillsTimeout bounds each wait after the last kill: the Plan's third tick, the runs'
	// ends, retention and cleanups.
	afterKillsTimeout = 4 * time.Minute
)

// chaosVictims are the components the subtest kills, with their leader-election Leases (the IDs in
// their cmd/…/main.go).
var chaosVictims = []string{"driver-job", "core-controller"}

var chaosLease = map[string]string{
	"driver-job":      "driver-job.backups.cozystack.io",
	"core-controller": "core-controller.backups.cozystack.io",
}

// chaosState is what the chaos subtest created, and what it found.
type chaosState struct {
	*env
	t     *testing.T
	ns    string
	class string
	comps map[string]*components.Component
	// verifier runs the BackupVerifyPolicy named policy over the namespace's Plan.
	verifier *components.Component
	policy   string
	// source describes the application's files, which never change: every restore must equal it.
	source map[string]string
	// restores maps each RestoreJob to its target application; restoredFrom holds their Backups,
	// which the subtest never deletes.
	restores     map[string]string
	restoredFrom map[string]bool
	// deleted maps each Backup the subtest deleted to its artifact's key in the bucket.
	deleted map[string]string
	kills   map[string]int
	history []string // the victims, in the order they were killed
	// The current run of kills of one component in a row (lastVictim, from outageFrom), and the
	// longest outage of driver-job, from its first kill to it leading again after its last.
	lastVictim    string
	outageFrom    time.Time
	longestOutage time.Duration
}

// chaos runs core-controller as a process next to driver-job, creates a Plan firing every minute
// (keepLast 2) on a Shop, ad-hoc BackupJobs, RestoreJobs of earlier Backups into other Shops of the
// namespace and deletions of Backups (cleanup Jobs), while SIGKILLing driver-job or core-controller
// at random moments. Then it checks that every run ended Succeeded within its deadline with exactly
// one Job, one Backup per Succeeded BackupJob, every deleted or pruned Backup gone with its
// artifact, retention kept what keepLast says, every restore equals the source, and both components
// are alive. COFFER_CHAOS_SEED reproduces a schedule of kills (the subtest logs the seed it used).
func (e *env) chaos(t *testing.T) {
	began := time.Now()
	ctx := e.ctx
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("COFFER_CHAOS_SEED"); v != "" {
		var err error
		seed, err = strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "COFFER_CHAOS_SEED")
	}
	t.Logf("chaos seed %d, %d kills (reproduce with COFFER_CHAOS_SEED=%d)", seed, chaosKills, seed)
	rng := rand.New(rand.NewPCG(seed, 0x636f66666572)) // "coffer"

	ns, err := e.n.Cluster.Namespace(ctx, "chaos")
	require.NoError(t, err)
	ch := &chaosState{env: e, t: t, ns: ns, class: ns, restores: map[string]string{}, restoredFrom: map[string]bool{},
		deleted: map[string]string{}, kills: map[string]int{}}
	require.NoError(t, e.cl.Create(ctx, e.credentials(ns)))
	strat := e.strategy("")
	strat.Spec.ActiveDeadlineSeconds = ptr.To[int64](chaosDeadlineSeconds)
	require.NoError(t, e.cl.Create(ctx, strat))
	require.NoError(t, e.cl.Create(ctx, &backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: ch.class},
		Spec: backupsv1.BackupClassSpec{Strategies: []backupsv1.BackupClassStrategy{{
			Application: backupsv1.ApplicationSelector{Kind: "Shop"},
			StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr.To(jobapi.Group), Kind: jobapi.Kind, Name: strat.Name},
			Parameters:  e.params(),
		}}}}))
	e.application(t, ns, "shop")
	ch.source = tree(t, e.dir(ns, "shop"))

	core, err := components.Launch(e.root, e.work, e.n.Cluster.Kubeconfig, components.Spec{Module: "core-controller",
		Binary: "core-controller", Namespace: "coffer-system", Args: []string{"--driver-claim-timeout=" + chaosClaimTimeout.String()}})
	require.NoError(t, err)
	t.Cleanup(func() { components.StopAndCheck(t, core) })
	ch.comps = map[string]*components.Component{"driver-job": e.driver, "core-controller": core}
	ch.startVerifier()

	plan := &backupsv1.Plan{ObjectMeta: metav1.ObjectMeta{Name: chaosPlan, Namespace: ns}, Spec: backupsv1.PlanSpec{
		ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"}, BackupClassName: ch.class,
		Schedule:                   backupsv1.PlanSchedule{Cron: "* * * * *"},
		StartingDeadlineSeconds:    ptr.To[int64](120),
		ConcurrencyPolicy:          backupsv1.ConcurrencyAllow,
		SuccessfulJobsHistoryLimit: ptr.To[int32](1000),
		FailedJobsHistoryLimit:     ptr.To[int32](1000),
		Retention:                  &backupsv1.RetentionPolicy{KeepLast: ptr.To[int32](chaosKeepLast)},
	}}
	require.NoError(t, e.cl.Create(ctx, plan))
	t.Logf("Plan %s/%s fires every minute, keepLast %d; core-controller runs with --driver-claim-timeout=%s", ns, chaosPlan, chaosKeepLast, chaosClaimTimeout)

	// Two Backups before the first kill: one to restore, one to delete.
	for _, name := range []string{"seed-1", "seed-2"} {
		ch.backupJob(name)
	}
	for _, name := range []string{"seed-1", "seed-2"} {
		bj := &backupsv1.BackupJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		e.wait(t, "BackupJob "+name, bj, bj.IsTerminal)
		require.Equal(t, backupsv1.BackupJobSucceeded, bj.Status.Phase, "BackupJob %s before any kill: %s", name, bj.Status.Message)
	}

	for i := range chaosKills {
		// Every random number of the iteration is drawn first, in a fixed order, so the schedule
		// of kills depends on the seed alone and not on what the cluster happens to hold.
		killAfter := time.Duration(rng.Int64N(3001)) * time.Millisecond
		victim := chaosVictims[rng.IntN(len(chaosVictims))]
		restartAfter := time.Duration(rng.Int64N(2001)) * time.Millisecond
		pick := rng.Uint64()
		if n := len(ch.history); n >= 2 && ch.history[n-1] == victim && ch.history[n-2] == victim {
			victim = otherVictim(victim) // never a third kill in a row: see chaosClaimTimeout
		}

		work := ch.createWork(i, pick)
		time.Sleep(killAfter)
		comp := ch.comps[victim]
		holder := ch.leaseHolder(victim)
		killed := time.Now()
		comp.Kill()
		ch.kills[victim]++
		ch.history = append(ch.history, victim)
		time.Sleep(restartAfter)
		require.NoError(t, comp.Restart(), "restarting %s", victim)
		took := ch.waitLeader(victim, holder)
		ch.outage(victim, killed, time.Now())
		t.Logf("kill %d: %s; SIGKILL %s after %s, restarted after %s, leader again after %s",
			i+1, strings.Join(work, ", "), victim, killAfter, restartAfter, took.Round(100*time.Millisecond))
	}
	if ch.longestOutage > chaosClaimTimeout/2 {
		t.Errorf("driver-job was kept from leading for %s by kills in a row, more than half the claim timeout %s: runs may fail unclaimed because of the schedule",
			ch.longestOutage.Round(time.Second), chaosClaimTimeout)
	}

	// The Plan must have made more Backups than it keeps, so that retention had to prune.
	ch.poll(fmt.Sprintf("the Plan's BackupJob number %d", chaosKeepLast+1), func(ctx context.Context) (bool, error) {
		jobs, err := ch.planJobs(ctx)
		return len(jobs) > chaosKeepLast, err
	})
	t.Logf("Suspending Plan %s so that its set of BackupJobs stops growing", chaosPlan)
	require.NoError(t, e.cl.Get(ctx, client.ObjectKeyFromObject(plan), plan))
	orig := plan.DeepCopy()
	plan.Spec.Suspend = ptr.To(true)
	require.NoError(t, e.cl.Patch(ctx, plan, client.MergeFrom(orig)))

	ch.waitTerminal()
	ch.waitSettled()

	for name, c := range ch.comps {
		assert.False(t, c.Exited(), "%s is alive at the end:\n%s", name, c.Tail())
	}
	stats := ch.checkRuns()
	ch.checkJobs()
	ch.checkBackups()
	ch.checkArtifacts()
	ch.checkRestores()
	ch.checkTicks()
	ch.checkVerified()
	t.Logf("chaos summary: seed %d; SIGKILL driver-job %d, core-controller %d; longest driver-job outage %s (claim timeout %s); %s; wall time %s",
		seed, ch.kills["driver-job"], ch.kills["core-controller"], ch.longestOutage.Round(time.Second), chaosClaimTimeout,
		stats, time.Since(began).Round(time.Second))
}

func otherVictim(v string) string {
	if v == chaosVictims[0] {
		return chaosVictims[1]
	}
	return chaosVictims[0]
}

func (ch *chaosState) backupJob(name string) {
	bj := &backupsv1.BackupJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ch.ns},
		Spec: backupsv1.BackupJobSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"}, BackupClassName: ch.class}}
	require.NoError(ch.t, ch.cl.Create(ch.ctx, bj), "creating BackupJob %s", name)
}

// adHocBackups are the Ready Backups of ad-hoc BackupJobs (no Plan: retention never prunes them)
// that are not being deleted, by name.
func (ch *chaosState) adHocBackups() []backupsv1.Backup {
	list := &backupsv1.BackupList{}
	require.NoError(ch.t, ch.cl.List(ch.ctx, list, client.InNamespace(ch.ns)))
	var out []backupsv1.Backup
	for _, b := range list.Items {
		if b.Spec.PlanRef == nil && b.Status.Phase == backupsv1.BackupReady && b.DeletionTimestamp.IsZero() && ch.deleted[b.Name] == "" {
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Name < out[k].Name })
	return out
}

// createWork creates one iteration's runs: an ad-hoc BackupJob every time; on even iterations a
// RestoreJob of an ad-hoc Backup into a new Shop of the namespace, on odd ones the deletion of an
// ad-hoc Backup no RestoreJob reads (its cleanup Job deletes the artifact).
func (ch *chaosState) createWork(i int, pick uint64) []string {
	t := ch.t
	name := fmt.Sprintf("chaos-%02d", i+1)
	ch.backupJob(name)
	work := []string{"BackupJob " + name}
	ready := ch.adHocBackups()
	if i%2 == 0 {
		require.NotEmpty(t, ready, "no Ready Backup to restore")
		b := ready[pick%uint64(len(ready))]
		target := fmt.Sprintf("restored-%02d", i+1)
		shop := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Shop",
			"metadata": map[string]any{"name": target, "namespace": ch.ns}}}
		require.NoError(t, ch.cl.Create(ch.ctx, shop))
		ch.appDir(t, ch.ns, target)
		rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: name + "-restore", Namespace: ch.ns},
			Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: b.Name},
				TargetApplicationRef: &corev1.TypedLocalObjectReference{Kind: "Shop", Name: target}}}
		require.NoError(t, ch.cl.Create(ch.ctx, rj), "creating RestoreJob %s", rj.Name)
		ch.restores[rj.Name] = target
		ch.restoredFrom[b.Name] = true
		return append(work, fmt.Sprintf("RestoreJob %s of %s into %s", rj.Name, b.Name, target))
	}
	var candidates []backupsv1.Backup
	for _, b := range ready {
		if !ch.restoredFrom[b.Name] {
			candidates = append(candidates, b)
		}
	}
	if len(candidates) == 0 {
		return append(work, "no Backup to delete")
	}
	b := candidates[pick%uint64(len(candidates))]
	require.NotNil(t, b.Status.Artifact, "Backup %s is Ready without an artifact", b.Name)
	ch.deleted[b.Name] = strings.TrimPrefix(b.Status.Artifact.URI, "s3://"+bucket+"/")
	require.NoError(t, ch.cl.Delete(ch.ctx, &b, client.Preconditions{UID: &b.UID}), "deleting Backup %s", b.Name)
	return append(work, "deleting Backup "+b.Name)
}

func (ch *chaosState) leaseHolder(component string) string {
	l := &coordinationv1.Lease{}
	err := ch.cl.Get(ch.ctx, client.ObjectKey{Namespace: ch.comps[component].Namespace, Name: chaosLease[component]}, l)
	if err != nil {
		require.True(ch.t, apierrors.IsNotFound(err), "reading the Lease of %s: %v", component, err)
		return ""
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

// waitLeader waits until the restarted component holds its Lease under a new identity (the killed
// process never released it, so this takes about a lease duration): every kill hits a component at
// work. It fails the test if the component exits meanwhile.
func (ch *chaosState) waitLeader(component, old string) time.Duration {
	start := time.Now()
	comp := ch.comps[component]
	err := wait.PollUntilContextTimeout(ch.ctx, 250*time.Millisecond, leaderTimeout, true, func(context.Context) (bool, error) {
		if comp.Exited() {
			return false, fmt.Errorf("%s exited after its restart", component)
		}
		h := ch.leaseHolder(component)
		return h != "" && h != old, nil
	})
	require.NoError(ch.t, err, "waiting for %s to lead again\n%s", component, comp.Tail())
	return time.Since(start)
}

// outage records that victim, killed at killed, leads again at back. Kills of one component in a
// row count as one outage. Only driver-job's outages matter to the claim timeout: core's restart
// restarts the timeout.
func (ch *chaosState) outage(victim string, killed, back time.Time) {
	if victim != ch.lastVictim {
		ch.lastVictim, ch.outageFrom = victim, killed
	}
	if d := back.Sub(ch.outageFrom); victim == "driver-job" && d > ch.longestOutage {
		ch.longestOutage = d
	}
}

func (ch *chaosState) poll(what string, cond func(context.Context) (bool, error)) {
	ch.t.Helper()
	err := wait.PollUntilContextTimeout(ch.ctx, time.Second, afterKillsTimeout, true, cond)
	require.NoError(ch.t, err, "waiting for %s\ndriver-job log:\n%s\ncore-controller log:\n%s", what,
		ch.comps["driver-job"].Tail(), ch.comps["core-controller"].Tail())
}

// planJobs are the BackupJobs the Plan created.
func (ch *chaosState) planJobs(ctx context.Context) ([]backupsv1.BackupJob, error) {
	list := &backupsv1.BackupJobList{}
	err := ch.cl.List(ctx, list, client.InNamespace(ch.ns), client.MatchingLabels{backupsv1.LabelPlan: backupsv1.PlanLabelValue(chaosPlan)})
	return list.Items, err
}

// waitTerminal waits for every BackupJob and RestoreJob of the namespace to end.
func (ch *chaosState) waitTerminal() {
	var stuck []string
	var said string
	ch.poll("every BackupJob and RestoreJob to end", func(ctx context.Context) (bool, error) {
		stuck = stuck[:0]
		jobs := &backupsv1.BackupJobList{}
		if err := ch.cl.List(ctx, jobs, client.InNamespace(ch.ns)); err != nil {
			return false, err
		}
		for _, j := range jobs.Items {
			if !j.IsTerminal() {
				stuck = append(stuck, "BackupJob "+j.Name)
			}
		}
		rjs := &backupsv1.RestoreJobList{}
		if err := ch.cl.List(ctx, rjs, client.InNamespace(ch.ns)); err != nil {
			return false, err
		}
		for _, r := range rjs.Items {
			if !r.IsTerminal() {
				stuck = append(stuck, "RestoreJob "+r.Name)
			}
		}
		if now := strings.Join(stuck, ", "); now != said && now != "" {
			ch.t.Logf("not terminal yet: %s", now)
			said = now
		}
		return len(stuck) == 0, nil
	})
}

// waitSettled waits for retention and cleanups to be done: no Backup is being deleted, and the
// Plan holds at most keepLast Backups (all its Backups are good, so the newest good one is among
// the newest keepLast and keeps none more; checkBackups checks that they are good).
func (ch *chaosState) waitSettled() {
	ch.poll("retention and cleanups to settle", func(ctx context.Context) (bool, error) {
		list := &backupsv1.BackupList{}
		if err := ch.cl.List(ctx, list, client.InNamespace(ch.ns)); err != nil {
			return false, err
		}
		ofPlan := 0
		for _, b := range list.Items {
			if !b.DeletionTimestamp.IsZero() {
				return false, nil
			}
			if b.Spec.PlanRef != nil {
				ofPlan++
			}
		}
		return ofPlan <= chaosKeepLast, nil
	})
}

// checkRuns: every BackupJob and RestoreJob Succeeded, within the strategy's activeDeadlineSeconds
// plus driverkit.MaxRetryDelay of its creation (GEN-11).
func (ch *chaosState) checkRuns() string {
	t := ch.t
	bound := chaosDeadlineSeconds*time.Second + driverkit.MaxRetryDelay
	var longest time.Duration
	var longestRun string
	check := func(kind, name string, succeeded bool, phase, message string, created metav1.Time, completed *metav1.Time) {
		if !succeeded {
			t.Errorf("%s %s ended %s: %s", kind, name, phase, message)
		}
		if completed == nil {
			t.Errorf("%s %s (%s) has no completedAt", kind, name, phase)
			return
		}
		took := completed.Sub(created.Time)
		if took > bound {
			t.Errorf("GEN-11: %s %s ended %s after its creation, past its deadline %s", kind, name, took, bound)
		}
		if took > longest {
			longest, longestRun = took, kind+" "+name
		}
	}
	jobs := &backupsv1.BackupJobList{}
	require.NoError(t, ch.cl.List(ch.ctx, jobs, client.InNamespace(ch.ns)))
	for _, j := range jobs.Items {
		check("BackupJob", j.Name, j.Status.Phase == backupsv1.BackupJobSucceeded, string(j.Status.Phase), j.Status.Message, j.CreationTimestamp, j.Status.CompletedAt)
	}
	rjs := &backupsv1.RestoreJobList{}
	require.NoError(t, ch.cl.List(ch.ctx, rjs, client.InNamespace(ch.ns)))
	for _, r := range rjs.Items {
		check("RestoreJob", r.Name, r.Status.Phase == backupsv1.RestoreJobSucceeded, string(r.Status.Phase), r.Status.Message, r.CreationTimestamp, r.Status.CompletedAt)
	}
	return fmt.Sprintf("%d BackupJobs, %d RestoreJobs, %d Backups deleted; longest run %s (%s, bound %s)",
		len(jobs.Items), len(rjs.Items), len(ch.deleted), longest.Round(time.Second), longestRun, bound)
}

// checkJobs: exactly one batch/v1 Job per BackupJob and RestoreJob (label run-uid), no cleanup Job
// left once its Backup is gone, and no Job serving nothing of the namespace.
func (ch *chaosState) checkJobs() {
	t := ch.t
	list := &batchv1.JobList{}
	require.NoError(t, ch.cl.List(ch.ctx, list, client.InNamespace(ch.ns)))
	byUID := map[string][]string{}
	for _, j := range list.Items {
		uid := j.Labels["jobdriver.backups.cozystack.io/run-uid"]
		byUID[uid] = append(byUID[uid], j.Name)
	}
	runs := map[string]string{}
	jobs := &backupsv1.BackupJobList{}
	require.NoError(t, ch.cl.List(ch.ctx, jobs, client.InNamespace(ch.ns)))
	for _, j := range jobs.Items {
		runs[string(j.UID)] = "BackupJob " + j.Name
	}
	rjs := &backupsv1.RestoreJobList{}
	require.NoError(t, ch.cl.List(ch.ctx, rjs, client.InNamespace(ch.ns)))
	for _, r := range rjs.Items {
		runs[string(r.UID)] = "RestoreJob " + r.Name
	}
	for uid, run := range runs {
		if got := byUID[uid]; len(got) != 1 {
			t.Errorf("%s has %d Jobs (want 1): %v", run, len(got), got)
		}
	}
	for uid, names := range byUID {
		if _, ok := runs[uid]; !ok {
			t.Errorf("Jobs %v (run-uid %q) serve no BackupJob or RestoreJob: a cleanup Job left behind, or a leak", names, uid)
		}
	}
}

// checkBackups: at most one Backup per Succeeded BackupJob, named after it; one for every ad-hoc
// BackupJob whose Backup the subtest did not delete; every Backup Ready and good; and the Plan's
// Backups as retention leaves them (CORE-4): at most keepLast plus the newest good one, and, all
// being good, exactly keepLast of them (or all there were).
func (ch *chaosState) checkBackups() {
	t := ch.t
	jobs := &backupsv1.BackupJobList{}
	require.NoError(t, ch.cl.List(ch.ctx, jobs, client.InNamespace(ch.ns)))
	backups := &backupsv1.BackupList{}
	require.NoError(t, ch.cl.List(ch.ctx, backups, client.InNamespace(ch.ns)))
	byUID := map[string][]string{}
	for _, b := range backups.Items {
		byUID[b.Labels[backupsv1.LabelBackupJobUID]] = append(byUID[b.Labels[backupsv1.LabelBackupJobUID]], b.Name)
		if !b.IsGood() {
			t.Errorf("Backup %s is not good: phase %q, conditions %s", b.Name, b.Status.Phase, conditions(b.Status.Conditions))
		}
	}
	succeededOfPlan, keptOfPlan := 0, 0
	var pruned []string
	for _, j := range jobs.Items {
		got := byUID[string(j.UID)]
		delete(byUID, string(j.UID))
		if j.Status.Phase != backupsv1.BackupJobSucceeded {
			if len(got) > 0 {
				t.Errorf("BackupJob %s (%s) has Backups %v", j.Name, j.Status.Phase, got)
			}
			continue
		}
		ofPlan := j.Spec.PlanRef != nil
		if ofPlan {
			succeededOfPlan++
			keptOfPlan += len(got)
		}
		switch {
		case len(got) > 1:
			t.Errorf("BJ-8: BackupJob %s has %d Backups: %v", j.Name, len(got), got)
		case len(got) == 1 && got[0] != j.Name:
			t.Errorf("BK-1: the Backup of BackupJob %s is named %s", j.Name, got[0])
		case len(got) == 0 && ofPlan:
			pruned = append(pruned, j.Name)
		case len(got) == 0 && ch.deleted[j.Name] == "":
			t.Errorf("the Backup of ad-hoc BackupJob %s is gone, though nothing deleted it", j.Name)
		case len(got) == 1 && ch.deleted[j.Name] != "":
			t.Errorf("Backup %s was deleted but is still there", j.Name)
		}
	}
	for uid, names := range byUID {
		t.Errorf("Backups %v (backupjob-uid %q) have no BackupJob", names, uid)
	}
	sort.Strings(pruned)
	t.Logf("retention: the Plan's %d Succeeded BackupJobs keep %d Backups; pruned: %v", succeededOfPlan, keptOfPlan, pruned)
	if keptOfPlan > chaosKeepLast+1 {
		t.Errorf("CORE-4: the Plan keeps %d Backups, more than keepLast %d plus the newest good one", keptOfPlan, chaosKeepLast)
	}
	if want := min(chaosKeepLast, succeededOfPlan); keptOfPlan != want {
		t.Errorf("CORE-4: the Plan keeps %d good Backups of %d, keepLast %d keeps %d", keptOfPlan, succeededOfPlan, chaosKeepLast, want)
	}
}

// checkArtifacts: the bucket holds exactly the artifacts of the Backups that exist, each with its
// record (BK-11); every Backup the subtest deleted, or retention pruned, took its artifact and its
// record along (no ArtifactKept: the contract keeps an artifact only when its namespace is being
// deleted or the strategy cannot clean up).
func (ch *chaosState) checkArtifacts() {
	t := ch.t
	backups := &backupsv1.BackupList{}
	require.NoError(t, ch.cl.List(ch.ctx, backups, client.InNamespace(ch.ns)))
	want := map[string]string{}
	for _, b := range backups.Items {
		if b.Status.Artifact != nil {
			want[strings.TrimPrefix(b.Status.Artifact.URI, "s3://"+bucket+"/")] = b.Name
		}
	}
	stored := map[string]bool{}
	for o := range ch.s3.S3.ListObjects(ch.ctx, bucket, minio.ListObjectsOptions{Prefix: ch.ns + "/", Recursive: true}) {
		require.NoError(t, o.Err)
		stored[o.Key] = true
		artifact := strings.TrimSuffix(o.Key, jobapi.RecordSuffix)
		if _, ok := want[artifact]; !ok {
			t.Errorf("the bucket holds %s, of no Backup (deleted or pruned, but left in storage)", o.Key)
		}
	}
	for key, b := range want {
		if !stored[key] {
			t.Errorf("the artifact %s of Backup %s is not in the bucket", key, b)
		}
		if !stored[key+jobapi.RecordSuffix] {
			t.Errorf("the artifact %s of Backup %s has no record beside it", key, b)
		}
	}
	for name, key := range ch.deleted {
		err := ch.cl.Get(ch.ctx, client.ObjectKey{Namespace: ch.ns, Name: name}, &backupsv1.Backup{})
		assert.True(t, apierrors.IsNotFound(err), "the deleted Backup %s is gone: %v", name, err)
		assert.False(t, stored[key], "the artifact %s of the deleted Backup %s is gone", key, name)
		assert.False(t, stored[key+jobapi.RecordSuffix], "the record of the deleted Backup %s is gone", name)
	}
	events := &eventsv1.EventList{}
	require.NoError(t, ch.cl.List(ch.ctx, events, client.InNamespace(ch.ns)))
	for _, ev := range events.Items {
		if ev.Reason == "ArtifactKept" {
			t.Errorf("ArtifactKept in a namespace that is not being deleted: %s", ev.Note)
		}
	}
}

// checkRestores: every target holds the source's files, byte for byte.
func (ch *chaosState) checkRestores() {
	for rj, target := range ch.restores {
		assert.Equal(ch.t, ch.source, tree(ch.t, ch.dir(ch.ns, target)), "RestoreJob %s: %s holds the source's files", rj, target)
	}
}

// checkTicks: every tick from the Plan's creation to its newest BackupJob has one BackupJob (named
// after the tick, so never two) or is counted in status.skippedTicks (CORE-2, CORE-6).
func (ch *chaosState) checkTicks() {
	t := ch.t
	p := &backupsv1.Plan{}
	require.NoError(t, ch.cl.Get(ch.ctx, client.ObjectKey{Namespace: ch.ns, Name: chaosPlan}, p))
	jobs, err := ch.planJobs(ch.ctx)
	require.NoError(t, err)
	byTick := map[int64]bool{}
	var newest time.Time
	for _, j := range jobs {
		tick, err := time.Parse(time.RFC3339, j.Annotations[backupsv1.AnnotationScheduledTime])
		if err != nil {
			t.Errorf("BackupJob %s of the Plan has no valid %s annotation: %v", j.Name, backupsv1.AnnotationScheduledTime, err)
			continue
		}
		byTick[tick.Unix()] = true
		if tick.After(newest) {
			newest = tick
		}
	}
	var missing []string
	for tick := p.CreationTimestamp.Truncate(time.Minute).Add(time.Minute); !tick.After(newest); tick = tick.Add(time.Minute) {
		if !byTick[tick.Unix()] {
			missing = append(missing, tick.UTC().Format("15:04"))
		}
	}
	if int64(len(missing)) > p.Status.SkippedTicks {
		t.Errorf("CORE-6: ticks %v have no BackupJob, but only %d are counted as skipped", missing, p.Status.SkippedTicks)
	}
}

func conditions(cs []metav1.Condition) string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	return "[" + strings.Join(out, " ") + "]"
}

// startVerifier runs the verifier as its ServiceAccount, reading driver-job's artifacts from MinIO
// (--s3-endpoint), and a BackupVerifyPolicy that verifies every new Backup of the namespace's
// Plans checksum-only.
func (ch *chaosState) startVerifier() {
	t, e := ch.t, ch.env
	t.Setenv("AWS_ACCESS_KEY_ID", velerostack.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", velerostack.SecretKey)
	v, err := components.Launch(e.root, e.work, e.n.Cluster.Kubeconfig, components.Spec{Module: "verifier", Binary: "verifier",
		Namespace: "ugallu-system", Args: []string{"--cluster-id=node", "--cluster-name=coffer-node", "--s3-endpoint=http://" + e.s3.S3Endpoint,
			"--etcd-snapshot-dir=" + t.TempDir()}})
	require.NoError(t, err)
	t.Cleanup(func() { components.StopAndCheck(t, v) })
	ch.verifier = v
	pol := &securityv1.BackupVerifyPolicy{ObjectMeta: metav1.ObjectMeta{Name: "jobdriver-chaos"}, Spec: securityv1.BackupVerifyPolicySpec{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ch.ns}},
		ChecksumOnly:      ptr.To(true),
		MaxConcurrentRuns: ptr.To[int32](2),
	}}
	require.NoError(t, ch.cl.Create(ch.ctx, pol))
	ch.policy = pol.Name
	t.Logf("verifier running with --s3-endpoint; BackupVerifyPolicy %s verifies every new Backup of namespace %s checksum-only", pol.Name, ch.ns)
}

// checkVerified: every Ready Backup of the Plan is verified checksum-only by exactly one run of
// the policy, which read the artifact from MinIO and found it matching (Verified=True,
// ChecksumVerified), with one Result and one terminal SecurityEvent.
func (ch *chaosState) checkVerified() {
	t := ch.t
	var backups []backupsv1.Backup
	ch.poll("the policy's verdict on every Ready Backup of the Plan", func(ctx context.Context) (bool, error) {
		list := &backupsv1.BackupList{}
		if err := ch.cl.List(ctx, list, client.InNamespace(ch.ns), client.MatchingLabels{backupsv1.LabelPlan: chaosPlan}); err != nil {
			return false, err
		}
		backups = backups[:0]
		for _, b := range list.Items {
			if b.Status.Phase != backupsv1.BackupReady || !b.DeletionTimestamp.IsZero() {
				continue
			}
			backups = append(backups, b)
			if c := meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionVerified); c == nil || c.Status == metav1.ConditionUnknown {
				return false, nil
			}
		}
		return len(backups) > 0, nil
	})
	for _, b := range backups {
		c := meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionVerified)
		assert.Equal(t, metav1.ConditionTrue, c.Status, "Backup %s: %s %s", b.Name, c.Reason, c.Message)
		assert.Equal(t, backupsv1.ReasonChecksumVerified, c.Reason, "Backup %s", b.Name)
		runs := &securityv1.BackupVerifyRunList{}
		require.NoError(t, ch.cl.List(ch.ctx, runs, client.MatchingLabels{securityv1.LabelPolicy: ch.policy, securityv1.LabelBackupUID: string(b.UID)}))
		if !assert.Len(t, runs.Items, 1, "one policy run for Backup %s", b.Name) {
			continue
		}
		run := runs.Items[0]
		assert.Equal(t, securityv1.ModeChecksumOnly, run.Spec.Mode)
		assert.Equal(t, securityv1.RunSucceeded, run.Status.Phase, "run %s: %+v", run.Name, run.Status)
		results := &securityv1.BackupVerifyResultList{}
		require.NoError(t, ch.cl.List(ch.ctx, results, client.MatchingLabels{securityv1.LabelRunUID: string(run.UID)}))
		assert.Len(t, results.Items, 1, "one Result for run %s", run.Name)
		events := &securityv1.SecurityEventList{}
		require.NoError(t, ch.cl.List(ch.ctx, events, client.MatchingLabels{securityv1.LabelRunUID: string(run.UID)}))
		var terminal []string
		for _, ev := range events.Items {
			if ev.Spec.Type != securityv1.EventBackupVerifyStarted {
				terminal = append(terminal, ev.Spec.Type)
			}
		}
		assert.Equal(t, []string{securityv1.EventBackupVerifyCompleted}, terminal, "one terminal SecurityEvent for run %s", run.Name)
	}
	assert.False(t, ch.verifier.Exited(), "the verifier is alive at the end:\n%s", ch.verifier.Tail())
	t.Logf("policy %s: %d Ready Backups of Plan %s verified checksum-only, one run, Result and event each", ch.policy, len(backups), chaosPlan)
}
