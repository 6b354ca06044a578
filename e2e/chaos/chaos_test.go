//go:build e2e

// Package chaos is the kill -9 suite: on the golden stack (package golden) it keeps creating
// BackupJobs, RestoreJobs and BackupVerifyRuns while a Plan fires every minute and a
// BackupVerifyPolicy verifies the Plan's Backups on its own (checksum-only each one, full-restore
// one in three, at most two runs at once), and SIGKILLs a random component after a random delay,
// again and again. A kill of the verifier is aimed at the policy: the suite first backs the Plan up
// by hand (as `kubectl coffer backup PLAN` does) and kills the verifier 0-300 ms after that Backup
// turns Ready, while the policy creates and carries out its runs. Then the suite waits for every
// run to end and for the policy to catch up, and checks that no crash produced a duplicate, lost a
// run or left anything behind: one BackupJob per tick (CORE-2, CORE-6), one Backup and one Velero
// backup per BackupJob (BJ-8), one BackupVerifyResult and one terminal SecurityEvent per
// BackupVerifyRun (the suite's and the policy's), every run terminal and none Failed, no sandbox
// and no verification RestoreJob left, every component alive and never denied by RBAC. Of the
// policy it checks, for every Backup it covers (the Plan's Ready Backups created after it), exactly
// one run per Backup and mode it calls for, under the deterministic name and labels, Succeeded
// with nothing high or worse found (checksum-only for each Backup; full-restores never closer than
// one in three, and one among the newest three), no run for a Backup it does not cover, and the
// verdict on each Backup (status.verification, Verified=True with RestoreVerified or
// ChecksumVerified) naming exactly those runs' Results (BK-10). Core's claim timeout is longer
// than any driver outage the kills cause (checked), so no run fails unclaimed.
//
// The schedule of kills is a function of the seed: COFFER_CHAOS_SEED reproduces it (the test logs
// the seed it used; a kill of the verifier counts its delay from its manual Backup turning Ready),
// COFFER_CHAOS_ITERATIONS sets the number of kills (default 20; `make e2e` runs 10, `make chaos`
// the default). It is part of `make e2e`, not `make test`.
package chaos

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/golden"
	"github.com/coffer-backup/coffer/e2e/harness/components"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

const (
	appNamespace = "shop"
	appName      = "shop"
	planName     = "shop-minutely"
	className    = "chaos"
	strategyName = "chaos-shop-namespace"
	// verifyNamespace is where the suite's own runs and results, and the verifier's Lease, live.
	// The policy's runs and results live in the Backups' namespace (appNamespace).
	verifyNamespace = "ugallu-system"
	// policyName is the BackupVerifyPolicy that verifies the Plan's Backups. It selects the Plan by
	// verifyLabel and its namespace by name.
	policyName  = "chaos-shop"
	verifyLabel = "chaos.coffer.io/verify"
	// fullRestoreEvery is the policy's fullRestore.every: a default run has 5 to 8 scheduled
	// Backups (one a minute) and some 5 manual ones (one per kill of the verifier), so 3 to 5
	// full-restores (some 10 s each here).
	fullRestoreEvery = 3
	// policyMaxRuns is the policy's maxConcurrentRuns.
	policyMaxRuns = 2

	defaultIterations = 20
	// runsTimeout bounds the wait for every run to end after the last kill.
	runsTimeout = 8 * time.Minute
	// leaderTimeout bounds the wait for a restarted component to take its Lease over.
	leaderTimeout = 90 * time.Second
	// claimTimeout is core-controller's --driver-claim-timeout. Core fails a run no driver claims
	// within it (CORE-5, CORE-7), so it must be comfortably longer than any driver outage the
	// suite causes: a kill keeps a driver from leading for about a lease duration (15 s) plus the
	// restart delay, and kills of one driver in a row add up (the suite checks the longest such
	// outage against it). It stays below runsTimeout, so a run no driver ever claims ends Failed
	// (NoDriverClaimed, reported by the checks) instead of leaving waitTerminal to time out.
	claimTimeout = 5 * time.Minute
)

// victims are the components the suite kills, in a fixed order (the seed picks among them). Each
// maps to its leader-election Lease (the ID in its cmd/…/main.go).
var victims = []string{"core-controller", "driver-job", "driver-velero", "verifier"}

var leaseName = map[string]string{
	"core-controller": "core-controller.backups.cozystack.io",
	"driver-job":      "driver-job.backups.cozystack.io",
	"driver-velero":   "driver-velero.backups.cozystack.io",
	"verifier":        "backup-verify.security.ugallu.io",
}

// terminalEventTypes are the SecurityEvent types a run emits at its end (exactly one per run).
var terminalEventTypes = map[string]bool{
	securityv1.EventBackupVerifyCompleted: true,
	securityv1.EventBackupVerifyFailed:    true,
	securityv1.EventBackupVerifyMismatch:  true,
}

func TestChaos(t *testing.T) {
	began := time.Now()
	ctrllog.SetLogger(ctrllog.Log.WithSink(ctrllog.NullLogSink{})) // envtest's progress lines
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("COFFER_CHAOS_SEED"); v != "" {
		var err error
		seed, err = strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "COFFER_CHAOS_SEED")
	}
	iterations := defaultIterations
	if v := os.Getenv("COFFER_CHAOS_ITERATIONS"); v != "" {
		var err error
		iterations, err = strconv.Atoi(v)
		require.NoError(t, err, "COFFER_CHAOS_ITERATIONS")
	}
	t.Logf("chaos seed %d, %d iterations (reproduce with COFFER_CHAOS_SEED=%d)", seed, iterations, seed)
	rng := rand.New(rand.NewPCG(seed, 0x636f66666572)) // "coffer"

	ctx, cancel := context.WithTimeout(context.Background(), 36*time.Minute)
	defer cancel()
	dir := t.TempDir()
	snapshots := filepath.Join(dir, "etcd-snapshots")
	require.NoError(t, os.MkdirAll(snapshots, 0o700))
	specs := golden.Default(snapshots)
	for i := range specs {
		if specs[i].Binary == "core-controller" {
			specs[i].Args = []string{"--driver-claim-timeout=" + claimTimeout.String()}
		}
	}
	s, err := golden.Start(ctx, golden.Options{Dir: dir, Components: specs, Say: t.Logf})
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	for _, c := range s.Components {
		t.Cleanup(func() { components.StopAndCheck(t, c) })
	}
	// Runs before StopAndCheck, which fails on a denial but shows only the log's tail.
	t.Cleanup(func() { logDenials(t, s) })
	ch := &chaos{t: t, ctx: ctx, s: s, c: s.Client, kills: map[string]int{}, verifierKills: map[string]int{}, up: time.Since(began)}

	ch.createApplication()
	t.Log("Backing up once before the first kill, so there is a Backup to verify and restore")
	ch.backupJob("chaos-seed")
	ch.waitFor("the first BackupJob", 4*time.Minute, func() (bool, error) {
		j := &backupsv1.BackupJob{}
		if err := ch.c.Get(ctx, client.ObjectKey{Namespace: appNamespace, Name: "chaos-seed"}, j); err != nil {
			return false, err
		}
		if j.Status.Phase == backupsv1.BackupJobFailed {
			return false, fmt.Errorf("BackupJob chaos-seed failed before any kill: %s", j.Status.Message)
		}
		return j.Status.Phase == backupsv1.BackupJobSucceeded, nil
	})

	for i := range iterations {
		// Every random number of the iteration is drawn first, in a fixed order, so the schedule
		// of kills depends on the seed alone and not on what the cluster happens to hold.
		killAfter := time.Duration(rng.Int64N(3001)) * time.Millisecond
		victim := victims[rng.IntN(len(victims))]
		restartAfter := time.Duration(rng.Int64N(2001)) * time.Millisecond
		pickVerify, pickFull, pickRestore := rng.Uint64(), rng.Uint64(), rng.Uint64()

		work := ch.createWork(i, pickVerify, pickFull, pickRestore)
		delay, manual, stage := killAfter, "", ""
		if victim == "verifier" {
			// Aim at the policy: back the Plan up now, as `kubectl coffer backup PLAN` does, and
			// once its Backup is Ready (the policy creates its runs at once; they last from a few
			// hundred milliseconds, checksum-only, to some 10 s, full-restore) kill within a tenth
			// of the drawn delay.
			manual = ch.manualBackup(i)
			work = append(work, "manual BackupJob "+manual)
			delay = killAfter / 10
		}
		time.Sleep(delay)
		holder := ch.leaseHolder(victim)
		comp := s.Components[victim]
		if victim == "verifier" {
			stage = ch.policyStage(manual)
		}
		killed := time.Now()
		comp.Kill()
		ch.kills[victim]++
		time.Sleep(restartAfter)
		require.NoError(t, comp.Restart(), "restarting %s", victim)
		took := ch.waitLeader(victim, holder)
		ch.outage(victim, killed, time.Now())
		t.Logf("iteration %2d: %s; SIGKILL %s after %s%s, restarted after %s, leader again after %s",
			i+1, strings.Join(work, ", "), victim, delay, stage, restartAfter, took.Round(100*time.Millisecond))
	}
	ch.iterations = iterations
	ch.killing = time.Since(began) - ch.up

	t.Logf("Suspending Plan %s so that its set of BackupJobs stops growing", planName)
	p := &backupsv1.Plan{}
	require.NoError(t, ch.c.Get(ctx, client.ObjectKey{Namespace: appNamespace, Name: planName}, p))
	orig := p.DeepCopy()
	p.Spec.Suspend = ptr.To(true)
	require.NoError(t, ch.c.Patch(ctx, p, client.MergeFrom(orig)))

	ch.checkOutages()
	ch.waitTerminal()
	ch.waitSandboxesGone()
	ch.checkComponentsAlive()

	ch.checkTicks()
	ch.checkBackups()
	ch.checkVeleroBackups()
	ch.checkRestores()
	ch.checkVerifyRuns()
	ch.checkPolicyRuns()
	ch.summary(time.Since(began))
}

// chaos is the suite's state: the stack, what it created and what it found.
type chaos struct {
	t   *testing.T
	ctx context.Context
	s   *golden.Stack
	c   client.Client

	iterations int
	kills      map[string]int
	// How long the stack took to come up (components built and started), and the first backup
	// and the kills took.
	up, killing time.Duration
	// The current run of kills of one component in a row (lastVictim, from outageFrom), and the
	// longest such outage of a driver, from its first kill to it leading again after its last.
	lastVictim      string
	outageFrom      time.Time
	longestOutage   time.Duration
	longestOutageOf string
	// Filled by the checks, for the summary.
	scheduled, adHoc, backups, veleroBackups, restores int
	checksumRuns, fullRuns, results, terminalEvents    int
	skippedTicks                                       int64
	missingTicks, duplicates, failedRuns               int
	// The policy's: the Backups it covers, its runs by mode, the Backups with Verified=True, the
	// Plan's manual BackupJobs (one per kill of the verifier), and those kills by what the policy
	// was doing (policyStage).
	coveredBackups, policyChecksumRuns, policyFullRuns int
	verifiedBackups, manual                            int
	verifierKills                                      map[string]int
}

func (ch *chaos) waitFor(what string, timeout time.Duration, cond func() (bool, error)) {
	ch.t.Helper()
	err := wait.PollUntilContextTimeout(ch.ctx, 500*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return cond() })
	if err != nil {
		ch.t.Fatalf("waiting for %s: %v\n%s", what, err, ch.s.Logs())
	}
}

// createApplication creates the Shop with a ConfigMap, the strategy and class the golden lifecycle
// uses, and a Plan that fires every minute for the whole suite: a generous starting deadline,
// concurrency allowed (slow runs never forbid a tick), no retention and history limits high enough
// that nothing the suite counts is ever deleted. The strategy backs up the whole namespace, as
// deploy/samples does, so each backup also holds the Plan, BackupJobs, Backups and RestoreJobs that
// live there, and full-restore verifications restore those into their sandboxes. The
// BackupVerifyPolicy comes first, so that it covers every Backup of the Plan: it selects the Plan
// by a label and its namespace by name, verifies each new Backup checksum-only, restores one in
// fullRestoreEvery into a sandbox, and keeps at most policyMaxRuns runs in flight.
func (ch *chaos) createApplication() {
	t := ch.t
	shop := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Shop",
		"metadata": map[string]any{"name": appName, "namespace": appNamespace}, "spec": map[string]any{"size": "small"}}}
	labels := map[string]string{"app.kubernetes.io/instance": appName, "apps.cozystack.io/application.kind": "Shop"}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: appNamespace}},
		shop,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "catalog", Namespace: appNamespace, Labels: labels},
			Data: map[string]string{"items": "tea,coffee,cocoa", "currency": "EUR"}},
		&veleroapi.VeleroBackupStrategy{ObjectMeta: metav1.ObjectMeta{Name: strategyName}, Spec: veleroapi.VeleroBackupStrategySpec{
			BackupTemplate: veleroapi.VeleroTemplate{Spec: runtime.RawExtension{Raw: []byte(`{"includedNamespaces": ["{{ .Application.metadata.namespace }}"], "snapshotVolumes": false}`)}},
		}},
		&backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: className}, Spec: backupsv1.BackupClassSpec{Strategies: []backupsv1.BackupClassStrategy{{
			Application: backupsv1.ApplicationSelector{Kind: "Shop"},
			StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr.To(veleroapi.Group), Kind: veleroapi.Kind, Name: strategyName},
			Parameters:  map[string]string{"backupStorageLocationName": velerostack.BSLName},
		}}}},
		&securityv1.BackupVerifyPolicy{ObjectMeta: metav1.ObjectMeta{Name: policyName}, Spec: securityv1.BackupVerifyPolicySpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: appNamespace}},
			PlanSelector:      &metav1.LabelSelector{MatchLabels: map[string]string{verifyLabel: "true"}},
			ChecksumOnly:      ptr.To(true),
			FullRestore:       &securityv1.FullRestorePolicy{Every: fullRestoreEvery},
			MaxConcurrentRuns: ptr.To[int32](policyMaxRuns),
		}},
		&backupsv1.Plan{ObjectMeta: metav1.ObjectMeta{Name: planName, Namespace: appNamespace, Labels: map[string]string{verifyLabel: "true"}}, Spec: backupsv1.PlanSpec{
			ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: appName}, BackupClassName: className,
			Schedule:                   backupsv1.PlanSchedule{Cron: "* * * * *"},
			StartingDeadlineSeconds:    ptr.To[int64](300),
			ConcurrencyPolicy:          backupsv1.ConcurrencyAllow,
			SuccessfulJobsHistoryLimit: ptr.To[int32](1000),
			FailedJobsHistoryLimit:     ptr.To[int32](1000),
		}},
	}
	t.Logf("Creating Shop %s/%s with ConfigMap catalog, VeleroBackupStrategy %s, BackupClass %s, BackupVerifyPolicy %s (checksum-only each Backup, full-restore every %d, at most %d runs) and Plan %s (cron \"* * * * *\", Allow, no retention)",
		appNamespace, appName, strategyName, className, policyName, fullRestoreEvery, policyMaxRuns, planName)
	for _, o := range objs {
		require.NoError(t, ch.c.Create(ch.ctx, o), "creating %T %s", o, o.GetName())
	}
}

func (ch *chaos) backupJob(name string) {
	j := &backupsv1.BackupJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: appNamespace},
		Spec: backupsv1.BackupJobSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: appName}, BackupClassName: className}}
	require.NoError(ch.t, ch.c.Create(ch.ctx, j), "creating BackupJob %s", name)
}

// readyBackups are the application's Ready Backups, oldest first.
func (ch *chaos) readyBackups() []backupsv1.Backup {
	list := &backupsv1.BackupList{}
	require.NoError(ch.t, ch.c.List(ch.ctx, list, client.InNamespace(appNamespace)))
	var out []backupsv1.Backup
	for _, b := range list.Items {
		if b.Status.Phase == backupsv1.BackupReady && b.Spec.DriverMetadata["veleroBackupName"] != "" {
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, k int) bool {
		if !out[i].Spec.TakenAt.Equal(&out[k].Spec.TakenAt) {
			return out[i].Spec.TakenAt.Before(&out[k].Spec.TakenAt)
		}
		return out[i].Name < out[k].Name
	})
	return out
}

// createWork creates one iteration's runs: an ad-hoc BackupJob and a checksum-only verification
// every time, a full-restore verification into a fresh sandbox every third iteration (from the
// second), and a RestoreJob of an earlier Backup every third iteration (from the third).
func (ch *chaos) createWork(i int, pickVerify, pickFull, pickRestore uint64) []string {
	t := ch.t
	name := fmt.Sprintf("chaos-%02d", i+1)
	ch.backupJob(name)
	work := []string{"BackupJob " + name}
	ready := ch.readyBackups()
	require.NotEmpty(t, ready, "no Ready Backup to verify")
	verify := func(mode securityv1.Mode, pick uint64, suffix string) {
		b := ready[pick%uint64(len(ready))]
		run := &securityv1.BackupVerifyRun{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + suffix, Namespace: verifyNamespace},
			Spec: securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendVelero, Mode: mode,
				BackupRef: securityv1.BackupRef{Name: b.Spec.DriverMetadata["veleroBackupName"], Namespace: velerostack.Namespace}}}
		if mode == securityv1.ModeFullRestore {
			run.Spec.SandboxNamespace = name + securityv1.SandboxSuffix
		}
		require.NoError(t, ch.c.Create(ch.ctx, run), "creating BackupVerifyRun %s", run.Name)
		work = append(work, fmt.Sprintf("%s %s of %s", mode, run.Name, b.Name))
	}
	verify(securityv1.ModeChecksumOnly, pickVerify, "checksum")
	if i%3 == 1 {
		verify(securityv1.ModeFullRestore, pickFull, "full")
	}
	if i%3 == 2 {
		b := ready[pickRestore%uint64(len(ready))]
		rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: name + "-restore", Namespace: appNamespace},
			Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: b.Name}}}
		require.NoError(t, ch.c.Create(ch.ctx, rj), "creating RestoreJob %s", rj.Name)
		work = append(work, fmt.Sprintf("RestoreJob %s of %s", rj.Name, b.Name))
	}
	return work
}

func (ch *chaos) leaseHolder(component string) string {
	l := &coordinationv1.Lease{}
	err := ch.c.Get(ch.ctx, client.ObjectKey{Namespace: ch.s.Components[component].Namespace, Name: leaseName[component]}, l)
	if err != nil {
		require.True(ch.t, apierrors.IsNotFound(err), "reading the Lease of %s: %v", component, err)
		return ""
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

// waitLeader waits until the restarted component holds its Lease (under a new identity: the killed
// process never released it, so this takes about a lease duration), so that every kill hits a
// component that is at work. It fails the test if the component exits meanwhile.
func (ch *chaos) waitLeader(component, old string) time.Duration {
	start := time.Now()
	comp := ch.s.Components[component]
	err := wait.PollUntilContextTimeout(ch.ctx, 250*time.Millisecond, leaderTimeout, true, func(context.Context) (bool, error) {
		if comp.Exited() {
			return false, fmt.Errorf("%s exited after its restart", component)
		}
		h := ch.leaseHolder(component)
		return h != "" && h != old, nil
	})
	if err != nil {
		ch.t.Fatalf("waiting for %s to lead again: %v\n%s", component, err, comp.Tail())
	}
	return time.Since(start)
}

// outage records that victim, killed at killed, leads again at back. Kills of one component in
// consecutive iterations count as one outage: it led for a few seconds in between, maybe too few
// to claim anything. Only the drivers' outages matter to the claim timeout (core's own restart
// restarts the timeout), and the longest must stay well below it, or runs may fail unclaimed
// because of the suite rather than of a bug.
func (ch *chaos) outage(victim string, killed, back time.Time) {
	if victim != ch.lastVictim {
		ch.lastVictim, ch.outageFrom = victim, killed
	}
	if victim != "driver-velero" && victim != "driver-job" {
		return
	}
	if d := back.Sub(ch.outageFrom); d > ch.longestOutage {
		ch.longestOutage, ch.longestOutageOf = d, victim
	}
}

// checkOutages fails the suite when a driver was down for more than half the claim timeout: the
// timeout would then no longer be comfortably longer than the outages this seed causes.
func (ch *chaos) checkOutages() {
	if ch.longestOutage > claimTimeout/2 {
		ch.t.Errorf("%s was kept from leading for %s by kills in a row, more than half the claim timeout %s: runs may fail unclaimed (NoDriverClaimed) because of this seed; raise claimTimeout",
			ch.longestOutageOf, ch.longestOutage.Round(time.Second), claimTimeout)
	}
}

// waitTerminal waits for every BackupJob, RestoreJob and BackupVerifyRun (the suite's and the
// policy's, in any namespace) to end and for the policy to catch up with the Plan's last Backups
// (policyLag); on timeout it lists what is still going and the components' logs.
func (ch *chaos) waitTerminal() {
	t := ch.t
	t.Logf("Waiting up to %s for every BackupJob, RestoreJob and BackupVerifyRun to end and for BackupVerifyPolicy %s to catch up", runsTimeout, policyName)
	var stuck []string // as of the last complete look
	err := wait.PollUntilContextTimeout(ch.ctx, 2*time.Second, runsTimeout, true, func(ctx context.Context) (bool, error) {
		var now []string
		jobs := &backupsv1.BackupJobList{}
		if err := ch.c.List(ctx, jobs, client.InNamespace(appNamespace)); err != nil {
			return false, err
		}
		for _, j := range jobs.Items {
			if !j.IsTerminal() {
				now = append(now, fmt.Sprintf("BackupJob %s: phase %q, conditions %s, message %q", j.Name, j.Status.Phase, conds(j.Status.Conditions), j.Status.Message))
			}
		}
		rjs := &backupsv1.RestoreJobList{}
		if err := ch.c.List(ctx, rjs, client.InNamespace(appNamespace)); err != nil {
			return false, err
		}
		for _, r := range rjs.Items {
			if !r.IsTerminal() {
				now = append(now, fmt.Sprintf("RestoreJob %s: phase %q, conditions %s, message %q", r.Name, r.Status.Phase, conds(r.Status.Conditions), r.Status.Message))
			}
		}
		runs := &securityv1.BackupVerifyRunList{}
		if err := ch.c.List(ctx, runs); err != nil {
			return false, err
		}
		for _, r := range runs.Items {
			if !r.Status.Phase.IsTerminal() {
				now = append(now, fmt.Sprintf("BackupVerifyRun %s/%s (%s): phase %q, conditions %s, message %q", r.Namespace, r.Name, r.Spec.Mode, r.Status.Phase, conds(r.Status.Conditions), r.Status.Message))
			}
		}
		lag, err := ch.policyLag(ctx)
		if err != nil {
			return false, err
		}
		now = append(now, lag...)
		stuck = now
		return len(stuck) == 0, nil
	})
	if err != nil {
		t.Fatalf("runs still not terminal after %s (%v):\n  %s\n%s--- velero (tail) ---\n%s", runsTimeout, err,
			strings.Join(stuck, "\n  "), ch.s.Logs(), tail(ch.s.Velero.VeleroLog()))
	}
}

// waitSandboxesGone waits for the verifier's sandbox namespaces, and the RestoreJobs its coffer
// full-restores create in the Backup's namespace (labelled with the run's UID), to be deleted.
func (ch *chaos) waitSandboxesGone() {
	var left []string // as of the last complete look
	err := wait.PollUntilContextTimeout(ch.ctx, 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		var now []string
		nss := &corev1.NamespaceList{}
		if err := ch.c.List(ctx, nss); err != nil {
			return false, err
		}
		for _, ns := range nss.Items {
			if strings.HasSuffix(ns.Name, securityv1.SandboxSuffix) {
				now = append(now, fmt.Sprintf("namespace %s (%s, run-uid %s, conditions %v)", ns.Name, ns.Status.Phase, ns.Labels[securityv1.LabelRunUID], ns.Status.Conditions))
			}
		}
		rjs := &backupsv1.RestoreJobList{}
		if err := ch.c.List(ctx, rjs, client.InNamespace(appNamespace), client.HasLabels{securityv1.LabelRunUID}); err != nil {
			return false, err
		}
		for _, r := range rjs.Items {
			now = append(now, fmt.Sprintf("RestoreJob %s (%s, run %s, run-uid %s, deletionTimestamp %v)", r.Name, r.Status.Phase, r.Labels[securityv1.LabelRun], r.Labels[securityv1.LabelRunUID], r.DeletionTimestamp))
		}
		left = now
		return len(left) == 0, nil
	})
	if err != nil {
		ch.t.Errorf("sandboxes or verification RestoreJobs still exist (%v):\n  %s", err, strings.Join(left, "\n  "))
	}
}

func (ch *chaos) checkComponentsAlive() {
	for _, name := range victims {
		if c := ch.s.Components[name]; c.Exited() {
			ch.t.Errorf("%s is not running at the end:\n%s", name, c.Tail())
		}
	}
}

// checkTicks: the Plan's BackupJobs, grouped by tick, number at most one per tick, each named
// PlanBackupJobName(plan, tick) and controlled by the Plan; every tick from the Plan's creation to
// its newest BackupJob either has its BackupJob or is counted in status.skippedTicks. The suite's
// manual BackupJobs of the Plan (manualBackup) are no tick's and counted apart.
func (ch *chaos) checkTicks() {
	t := ch.t
	p := &backupsv1.Plan{}
	require.NoError(t, ch.c.Get(ch.ctx, client.ObjectKey{Namespace: appNamespace, Name: planName}, p))
	jobs := &backupsv1.BackupJobList{}
	require.NoError(t, ch.c.List(ch.ctx, jobs, client.InNamespace(appNamespace), client.MatchingLabels{backupsv1.LabelPlan: backupsv1.PlanLabelValue(planName)}))
	byTick := map[int64][]string{} // unix seconds of the tick → BackupJobs
	var newest time.Time
	for _, j := range jobs.Items {
		if _, tick := j.Annotations[backupsv1.AnnotationScheduledTime]; !tick && strings.HasPrefix(j.Name, planName+"-manual-") {
			ch.manual++
			continue
		}
		tick, err := time.Parse(time.RFC3339, j.Annotations[backupsv1.AnnotationScheduledTime])
		if err != nil {
			t.Errorf("BackupJob %s of the Plan has no valid %s annotation: %v", j.Name, backupsv1.AnnotationScheduledTime, err)
			continue
		}
		byTick[tick.Unix()] = append(byTick[tick.Unix()], j.Name)
		if tick.After(newest) {
			newest = tick
		}
		if want := backupsv1.PlanBackupJobName(planName, tick); j.Name != want {
			t.Errorf("BackupJob %s has the tick %s, whose name is %s", j.Name, tick.Format(time.RFC3339), want)
		}
		if !metav1.IsControlledBy(&j, p) {
			t.Errorf("BackupJob %s carries the Plan's label but is not controlled by the Plan", j.Name)
		}
		if tick.Second() != 0 || tick.Nanosecond() != 0 {
			t.Errorf("BackupJob %s has the tick %s, which is not a minute of \"* * * * *\"", j.Name, tick.Format(time.RFC3339))
		}
	}
	for tick, names := range byTick {
		if len(names) > 1 {
			ch.duplicates += len(names) - 1
			t.Errorf("CORE-2: the tick %s has %d BackupJobs: %v", time.Unix(tick, 0).UTC().Format(time.RFC3339), len(names), names)
		}
	}
	ch.scheduled = len(jobs.Items) - ch.manual
	ch.skippedTicks = p.Status.SkippedTicks
	var missing []string
	for tick := p.CreationTimestamp.Truncate(time.Minute).Add(time.Minute); !tick.After(newest); tick = tick.Add(time.Minute) {
		if len(byTick[tick.Unix()]) == 0 {
			missing = append(missing, tick.UTC().Format("15:04"))
		}
	}
	ch.missingTicks = len(missing)
	if len(missing) > 0 {
		t.Logf("Ticks without a BackupJob: %v; Plan status: skippedTicks %d, lastSkippedTime %v, TickSkipped %s",
			missing, p.Status.SkippedTicks, p.Status.LastSkippedTime, conds(p.Status.Conditions))
	}
	if int64(len(missing)) > p.Status.SkippedTicks {
		t.Errorf("CORE-6: %d tick(s) between the Plan's creation and its newest BackupJob have no BackupJob (%v), but only %d are counted as skipped",
			len(missing), missing, p.Status.SkippedTicks)
	}
	if newest.IsZero() {
		t.Errorf("the Plan never fired")
	}
}

// checkBackups: exactly one Backup per Succeeded BackupJob (same name, its UID label), none for a
// Failed one, none without a Succeeded BackupJob; every Backup Ready with its artifact available.
func (ch *chaos) checkBackups() {
	t := ch.t
	jobs := &backupsv1.BackupJobList{}
	require.NoError(t, ch.c.List(ch.ctx, jobs, client.InNamespace(appNamespace)))
	backups := &backupsv1.BackupList{}
	require.NoError(t, ch.c.List(ch.ctx, backups, client.InNamespace(appNamespace)))
	ch.backups = len(backups.Items)
	ch.adHoc = len(jobs.Items) - ch.scheduled - ch.manual
	byUID := map[string][]backupsv1.Backup{}
	for _, b := range backups.Items {
		byUID[b.Labels[backupsv1.LabelBackupJobUID]] = append(byUID[b.Labels[backupsv1.LabelBackupJobUID]], b)
	}
	jobUIDs := map[string]backupsv1.BackupJob{}
	for _, j := range jobs.Items {
		jobUIDs[string(j.UID)] = j
		got := byUID[string(j.UID)]
		switch j.Status.Phase {
		case backupsv1.BackupJobSucceeded:
			if len(got) != 1 {
				if len(got) > 1 {
					ch.duplicates += len(got) - 1
				}
				t.Errorf("BJ-8: Succeeded BackupJob %s has %d Backups (want 1): %v", j.Name, len(got), backupNames(got))
				continue
			}
			b := got[0]
			if b.Name != j.Name {
				t.Errorf("BK-1: the Backup of BackupJob %s is named %s", j.Name, b.Name)
			}
			if j.Status.BackupRef == nil || j.Status.BackupRef.Name != b.Name {
				t.Errorf("BJ-4: BackupJob %s has backupRef %v, its Backup is %s", j.Name, j.Status.BackupRef, b.Name)
			}
		case backupsv1.BackupJobFailed:
			ch.failedRuns++
			t.Errorf("BackupJob %s Failed: %s (conditions %s)", j.Name, j.Status.Message, conds(j.Status.Conditions))
			if len(got) > 0 {
				t.Errorf("Failed BackupJob %s has Backups %v", j.Name, backupNames(got))
			}
		}
	}
	for _, b := range backups.Items {
		j, ok := jobUIDs[b.Labels[backupsv1.LabelBackupJobUID]]
		if !ok || j.Status.Phase != backupsv1.BackupJobSucceeded {
			t.Errorf("Backup %s (backupjob-uid %q) has no Succeeded BackupJob", b.Name, b.Labels[backupsv1.LabelBackupJobUID])
		}
		if b.Status.Phase != backupsv1.BackupReady || b.Status.Artifact == nil || !strings.HasPrefix(b.Status.Artifact.Checksum, "sha256:") {
			t.Errorf("BK-3: Backup %s is %q with artifact %+v", b.Name, b.Status.Phase, b.Status.Artifact)
		}
		if c := meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionArtifactAvailable); c != nil && c.Status != metav1.ConditionTrue {
			t.Errorf("the artifact of Backup %s is gone: %s: %s", b.Name, c.Reason, c.Message)
		}
		if !b.DeletionTimestamp.IsZero() {
			t.Errorf("Backup %s is being deleted, though nothing in this suite deletes a Backup", b.Name)
		}
	}
}

func veleroList(kind string) *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetAPIVersion("velero.io/v1")
	l.SetKind(kind + "List")
	return l
}

// checkVeleroBackups: exactly one velero.io Backup per BackupJob, named from the job's namespace,
// name and UID, labelled back to it and Completed; none left behind for a BackupJob that no longer
// exists; no DeleteBackupRequest for the Velero backup of a live Backup.
func (ch *chaos) checkVeleroBackups() {
	t := ch.t
	jobs := &backupsv1.BackupJobList{}
	require.NoError(t, ch.c.List(ch.ctx, jobs))
	live := map[string]backupsv1.BackupJob{}
	for _, j := range jobs.Items {
		live[string(j.UID)] = j
	}
	vbs := veleroList("Backup")
	require.NoError(t, ch.c.List(ch.ctx, vbs, client.InNamespace(velerostack.Namespace)))
	byUID := map[string][]unstructured.Unstructured{}
	var orphans []string
	for _, vb := range vbs.Items {
		uid := vb.GetLabels()[backupsv1.LabelBackupJobUID]
		byUID[uid] = append(byUID[uid], vb)
		if _, ok := live[uid]; !ok {
			phase, _, _ := unstructured.NestedString(vb.Object, "status", "phase")
			orphans = append(orphans, fmt.Sprintf("%s (%s, for BackupJob %s/%s uid %q)", vb.GetName(), phase,
				vb.GetLabels()[backupsv1.LabelBackupJobNamespace], vb.GetLabels()[backupsv1.LabelBackupJob], uid))
		}
	}
	for _, j := range jobs.Items {
		if j.Namespace != appNamespace {
			continue
		}
		got := byUID[string(j.UID)]
		ch.veleroBackups += len(got)
		if len(got) != 1 {
			if len(got) > 1 {
				ch.duplicates += len(got) - 1
			}
			if j.Status.Phase == backupsv1.BackupJobSucceeded || len(got) > 1 {
				t.Errorf("BJ-8: BackupJob %s (%s) has %d Velero backups (want 1): %v", j.Name, j.Status.Phase, len(got), unstructuredNames(got))
			}
			continue
		}
		vb := got[0]
		want := backupsv1.BoundedName(backupsv1.MaxGeneratedNameLength, j.Namespace, j.Name, string(j.UID)[:8])
		if vb.GetName() != want {
			t.Errorf("GEN-5: the Velero backup of BackupJob %s is %s, want %s", j.Name, vb.GetName(), want)
		}
		phase, _, _ := unstructured.NestedString(vb.Object, "status", "phase")
		if j.Status.Phase == backupsv1.BackupJobSucceeded && phase != "Completed" && phase != "PartiallyFailed" {
			t.Errorf("the Velero backup %s of Succeeded BackupJob %s is %q", vb.GetName(), j.Name, phase)
		}
	}
	if len(orphans) > 0 {
		t.Errorf("%d Velero backup(s) belong to no existing BackupJob (leaked artifacts):\n  %s", len(orphans), strings.Join(orphans, "\n  "))
	}
	// A DeleteBackupRequest for the Velero backup of one of the application's Backups means an
	// artifact the user still lists was deleted: nothing in this suite deletes a Backup.
	ours := map[string]string{}
	backups := &backupsv1.BackupList{}
	require.NoError(t, ch.c.List(ch.ctx, backups, client.InNamespace(appNamespace)))
	for _, b := range backups.Items {
		ours[b.Spec.DriverMetadata["veleroBackupName"]] = b.Name
	}
	dbrs := veleroList("DeleteBackupRequest")
	require.NoError(t, ch.c.List(ch.ctx, dbrs, client.InNamespace(velerostack.Namespace)))
	for _, d := range dbrs.Items {
		name, _, _ := unstructured.NestedString(d.Object, "spec", "backupName")
		if b, ok := ours[name]; ok {
			t.Errorf("DeleteBackupRequest %s (annotations %v) deleted Velero backup %s of the live Backup %s/%s",
				d.GetName(), d.GetAnnotations(), name, appNamespace, b)
		} else {
			t.Logf("DeleteBackupRequest %s for Velero backup %s (annotations %v)", d.GetName(), name, d.GetAnnotations())
		}
	}
}

// checkRestores: none of the suite's RestoreJobs Failed. (The verifier's, labelled with a run's
// UID, are gone: waitSandboxesGone; their outcome is their run's.)
func (ch *chaos) checkRestores() {
	rjs := &backupsv1.RestoreJobList{}
	require.NoError(ch.t, ch.c.List(ch.ctx, rjs, client.InNamespace(appNamespace)))
	for _, r := range rjs.Items {
		if r.Labels[securityv1.LabelRunUID] != "" {
			continue
		}
		ch.restores++
		if r.Status.Phase == backupsv1.RestoreJobFailed {
			ch.failedRuns++
			ch.t.Errorf("RestoreJob %s of Backup %s Failed: %s (conditions %s)", r.Name, r.Spec.BackupRef.Name, r.Status.Message, conds(r.Status.Conditions))
		}
	}
}

// checkVerifyRuns: every run is the suite's (in verifyNamespace) or the policy's (labelled with it,
// in appNamespace); exactly one BackupVerifyResult (named after the run, in its namespace,
// labelled with it, pointing at its UID) and exactly one terminal SecurityEvent, of the type the
// result calls for, per run, the suite's and the policy's alike; no Result or SecurityEvent of
// no run. Runs, Results and events are listed in every namespace.
func (ch *chaos) checkVerifyRuns() {
	t := ch.t
	runs := &securityv1.BackupVerifyRunList{}
	require.NoError(t, ch.c.List(ch.ctx, runs))
	results := &securityv1.BackupVerifyResultList{}
	require.NoError(t, ch.c.List(ch.ctx, results))
	events := &securityv1.SecurityEventList{}
	require.NoError(t, ch.c.List(ch.ctx, events))
	resByUID := map[string][]securityv1.BackupVerifyResult{}
	for _, r := range results.Items {
		resByUID[string(r.Spec.RunRef.UID)] = append(resByUID[string(r.Spec.RunRef.UID)], r)
	}
	evByUID := map[string][]securityv1.SecurityEvent{}
	for _, e := range events.Items {
		evByUID[e.Labels[securityv1.LabelRunUID]] = append(evByUID[e.Labels[securityv1.LabelRunUID]], e)
	}
	runUIDs := map[string]bool{}
	ch.results = len(results.Items)
	for _, run := range runs.Items {
		runUIDs[string(run.UID)] = true
		switch pol, full := run.Labels[securityv1.LabelPolicy], run.Spec.Mode == securityv1.ModeFullRestore; {
		case pol == "" && run.Namespace == verifyNamespace && full:
			ch.fullRuns++
		case pol == "" && run.Namespace == verifyNamespace:
			ch.checksumRuns++
		case pol == policyName && run.Namespace == appNamespace && full:
			ch.policyFullRuns++
		case pol == policyName && run.Namespace == appNamespace:
			ch.policyChecksumRuns++
		default:
			t.Errorf("BackupVerifyRun %s/%s (%s %s of %s/%s, policy label %q) was made by neither the suite nor the policy", run.Namespace, run.Name,
				run.Spec.Backend, run.Spec.Mode, run.Spec.BackupRef.Namespace, run.Spec.BackupRef.Name, pol)
		}
		res := resByUID[string(run.UID)]
		var terminal, started []string
		for _, e := range evByUID[string(run.UID)] {
			switch {
			case terminalEventTypes[e.Spec.Type]:
				terminal = append(terminal, e.Spec.Type)
			case e.Spec.Type == securityv1.EventBackupVerifyStarted:
				started = append(started, e.Name)
			}
		}
		ch.terminalEvents += len(terminal)
		if len(res) > 1 {
			ch.duplicates += len(res) - 1
		}
		if len(terminal) > 1 {
			ch.duplicates += len(terminal) - 1
		}
		if len(res) != 1 {
			t.Errorf("BackupVerifyRun %s/%s has %d BackupVerifyResults (want 1)", run.Namespace, run.Name, len(res))
		} else {
			r := res[0]
			if r.Namespace != run.Namespace || r.Name != securityv1.ResultName(run.Name) || run.Status.ResultName() != r.Name || r.Labels[securityv1.LabelRun] != backupsv1.BoundedName(63, run.Name) {
				t.Errorf("the BackupVerifyResult of run %s/%s is %s/%s (label %q), the run's resultRef %q", run.Namespace, run.Name, r.Namespace, r.Name, r.Labels[securityv1.LabelRun], run.Status.ResultName())
			}
			if len(terminal) == 1 {
				if want := securityv1.TerminalEventType(run.Status.Phase, r.Spec.Findings); terminal[0] != want {
					t.Errorf("BackupVerifyRun %s/%s (%s) emitted %s, its result calls for %s", run.Namespace, run.Name, run.Status.Phase, terminal[0], want)
				}
			}
		}
		if len(terminal) != 1 {
			t.Errorf("BackupVerifyRun %s/%s has %d terminal SecurityEvents (want 1): %v", run.Namespace, run.Name, len(terminal), terminal)
		}
		if len(started) != 1 {
			t.Errorf("BackupVerifyRun %s/%s has %d BackupVerifyStarted SecurityEvents (want 1): %v", run.Namespace, run.Name, len(started), started)
		}
		if run.Status.Phase == securityv1.RunFailed {
			ch.failedRuns++
			var fs []string
			if len(res) == 1 {
				for _, f := range res[0].Spec.Findings {
					fs = append(fs, fmt.Sprintf("%s/%s %s: %s", f.Severity, f.Code, f.Object, f.Message))
				}
			}
			t.Errorf("BackupVerifyRun %s/%s (%s of %s) Failed: %s\n    findings:\n    %s", run.Namespace, run.Name, run.Spec.Mode, run.Spec.BackupRef.Name,
				run.Status.Message, strings.Join(fs, "\n    "))
		}
	}
	for uid, rs := range resByUID {
		if !runUIDs[uid] {
			t.Errorf("BackupVerifyResults %v belong to no run (run uid %q)", resultNames(rs), uid)
		}
	}
	for uid, es := range evByUID {
		if !runUIDs[uid] {
			var what []string
			for _, e := range es {
				what = append(what, fmt.Sprintf("%s %s of %s/%s", e.Name, e.Spec.Type, e.Spec.Signals["run.namespace"], e.Spec.Signals["run.name"]))
			}
			t.Errorf("%d SecurityEvents belong to no run (run-uid %q): %v", len(es), uid, what)
		}
	}
}

// manualBackup creates a BackupJob of the Plan now, as `kubectl coffer backup PLAN` does
// (kubectl-coffer/internal/runs.PlanBackupJob: spec.planRef, the Plan's label, the Plan as its
// controller, named "<plan>-manual-<suffix>", no scheduled-time annotation), so its Backup is the
// Plan's and the policy verifies it, and waits (up to a few minutes) for that Backup to be Ready or
// the job to fail; a failure is the checks' to report. It returns the job's (and Backup's) name.
func (ch *chaos) manualBackup(i int) string {
	t := ch.t
	p := &backupsv1.Plan{}
	require.NoError(t, ch.c.Get(ch.ctx, client.ObjectKey{Namespace: appNamespace, Name: planName}, p))
	j := &backupsv1.BackupJob{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-manual-c%02d", planName, i+1), Namespace: appNamespace,
			Labels: map[string]string{backupsv1.LabelPlan: backupsv1.PlanLabelValue(planName)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: backupsv1.GroupVersion.String(), Kind: "Plan", Name: p.Name, UID: p.UID,
				Controller: ptr.To(true)}}},
		Spec: backupsv1.BackupJobSpec{PlanRef: &corev1.LocalObjectReference{Name: planName},
			ApplicationRef: backupsv1.NormalizeApplicationRef(p.Spec.ApplicationRef), BackupClassName: p.Spec.BackupClassName},
	}
	require.NoError(t, ch.c.Create(ch.ctx, j), "creating BackupJob %s", j.Name)
	err := wait.PollUntilContextTimeout(ch.ctx, 100*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		b := &backupsv1.Backup{}
		if err := ch.c.Get(ctx, client.ObjectKeyFromObject(j), b); err == nil && b.Status.Phase == backupsv1.BackupReady {
			return true, nil
		} else if client.IgnoreNotFound(err) != nil {
			return false, err
		}
		if err := ch.c.Get(ctx, client.ObjectKeyFromObject(j), j); err != nil {
			return false, err
		}
		return j.Status.Phase == backupsv1.BackupJobFailed, nil
	})
	if err != nil {
		t.Logf("the Backup of the manual BackupJob %s is not Ready: %v", j.Name, err)
	}
	return j.Name
}

// policyStage says, and counts, what the policy was doing as the verifier was killed: running
// some of its runs ("amid"), not yet having created those of the fresh Backup ("before"), or done
// with them ("after").
func (ch *chaos) policyStage(backup string) string {
	runs := &securityv1.BackupVerifyRunList{}
	require.NoError(ch.t, ch.c.List(ch.ctx, runs, client.InNamespace(appNamespace), client.MatchingLabels{securityv1.LabelPolicy: policyName}))
	b := &backupsv1.Backup{}
	if err := ch.c.Get(ch.ctx, client.ObjectKey{Namespace: appNamespace, Name: backup}, b); client.IgnoreNotFound(err) != nil {
		require.NoError(ch.t, err)
	}
	var inFlight []string
	ofBackup := 0
	for _, r := range runs.Items {
		if !r.Status.Phase.IsTerminal() {
			inFlight = append(inFlight, fmt.Sprintf("%s (%s)", r.Name, orDash(string(r.Status.Phase))))
		}
		if b.UID != "" && r.Labels[securityv1.LabelBackupUID] == string(b.UID) {
			ofBackup++
		}
	}
	sort.Strings(inFlight)
	stage := "after"
	switch {
	case len(inFlight) > 0:
		stage = "amid"
	case ofBackup == 0:
		stage = "before"
	}
	ch.verifierKills[stage]++
	if stage == "amid" {
		return fmt.Sprintf(" amid the policy's runs %v", inFlight)
	}
	return fmt.Sprintf(" %s the policy's runs of %s", stage, backup)
}

// covers reports whether the policy covers Backup b, by the policy's own rule: a Backup of the
// Plan (spec.planRef), Ready with an artifact, not being deleted, created no earlier than the
// policy. Every Backup of the Plan is created after the policy (createApplication), and nothing in
// this suite deletes a Backup, so at the end that is every Ready Backup of the Plan.
func covers(pol *securityv1.BackupVerifyPolicy, b *backupsv1.Backup) bool {
	return b.Namespace == appNamespace && b.Spec.PlanRef != nil && b.Spec.PlanRef.Name == planName &&
		b.Status.Phase == backupsv1.BackupReady && b.Status.Artifact != nil && b.DeletionTimestamp.IsZero() &&
		!b.CreationTimestamp.Before(&pol.CreationTimestamp)
}

// policyState is what the policy did, read in one go: the policy, the application's Backups
// (oldest first), those it covers, and its runs by name.
type policyState struct {
	pol     *securityv1.BackupVerifyPolicy
	backups []backupsv1.Backup
	covered []*backupsv1.Backup
	runs    map[string]*securityv1.BackupVerifyRun
	all     []securityv1.BackupVerifyRun // every run labelled with a policy, in any namespace
}

func (ch *chaos) readPolicy(ctx context.Context) (*policyState, error) {
	st := &policyState{pol: &securityv1.BackupVerifyPolicy{}, runs: map[string]*securityv1.BackupVerifyRun{}}
	if err := ch.c.Get(ctx, client.ObjectKey{Name: policyName}, st.pol); err != nil {
		return nil, err
	}
	backups := &backupsv1.BackupList{}
	if err := ch.c.List(ctx, backups, client.InNamespace(appNamespace)); err != nil {
		return nil, err
	}
	st.backups = backups.Items
	sort.Slice(st.backups, func(i, k int) bool {
		if !st.backups[i].Spec.TakenAt.Equal(&st.backups[k].Spec.TakenAt) {
			return st.backups[i].Spec.TakenAt.Before(&st.backups[k].Spec.TakenAt)
		}
		return st.backups[i].Name < st.backups[k].Name
	})
	for i := range st.backups {
		if covers(st.pol, &st.backups[i]) {
			st.covered = append(st.covered, &st.backups[i])
		}
	}
	runs := &securityv1.BackupVerifyRunList{}
	if err := ch.c.List(ctx, runs, client.HasLabels{securityv1.LabelPolicy}); err != nil {
		return nil, err
	}
	st.all = runs.Items
	for i := range st.all {
		if st.all[i].Namespace == appNamespace {
			st.runs[st.all[i].Name] = &st.all[i]
		}
	}
	return st, nil
}

// run is the run of Backup b in mode m under its deterministic name, if any.
func (st *policyState) run(b *backupsv1.Backup, m securityv1.Mode) *securityv1.BackupVerifyRun {
	return st.runs[securityv1.PolicyRunName(b, m)]
}

// restoreSpacing checks the policy's rule for full-restores over the covered Backups, oldest first:
// it restores the newest Backup when none of the newest fullRestoreEvery was (or none at all was),
// so two restored Backups have at least fullRestoreEvery-1 unrestored ones between them, and once
// it has caught up, one of the newest fullRestoreEvery is restored (caughtUp; true when none is
// covered). A Backup that became Ready late only widens the gaps. The policy orders Backups by
// spec.takenAt alone (to the second), so Backups taken in the same second count in whichever
// order suits the rule.
func (st *policyState) restoreSpacing() (tooClose []string, caughtUp bool) {
	// between counts the covered Backups other than a and c taken from a's second to c's.
	between := func(a, c *backupsv1.Backup) int {
		n := 0
		for _, b := range st.covered {
			if b != a && b != c && !b.Spec.TakenAt.Before(&a.Spec.TakenAt) && !c.Spec.TakenAt.Before(&b.Spec.TakenAt) {
				n++
			}
		}
		return n
	}
	var last *backupsv1.Backup
	for _, b := range st.covered {
		if st.run(b, securityv1.ModeFullRestore) == nil {
			continue
		}
		if last != nil && between(last, b) < fullRestoreEvery-1 {
			tooClose = append(tooClose, fmt.Sprintf("%s and %s (%d between)", last.Name, b.Name, between(last, b)))
		}
		last = b
	}
	if len(st.covered) == 0 {
		return tooClose, true
	}
	newer := 0 // covered Backups taken after the newest restored one (to the second)
	for _, b := range st.covered {
		if last == nil || last.Spec.TakenAt.Before(&b.Spec.TakenAt) {
			newer++
		}
	}
	return tooClose, last != nil && newer < fullRestoreEvery
}

// policyLag says what the policy still owes once no Backup comes any more: a covered Backup without
// its checksum-only run, no full-restore among the newest fullRestoreEvery covered Backups, or a
// status not of the latest generation or still counting runs in flight or waiting.
func (ch *chaos) policyLag(ctx context.Context) ([]string, error) {
	st, err := ch.readPolicy(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	if s := st.pol.Status; s.ObservedGeneration != st.pol.Generation || s.ActiveRuns != 0 || s.PendingBackups != 0 {
		out = append(out, fmt.Sprintf("BackupVerifyPolicy %s: observedGeneration %d of %d, activeRuns %d, pendingBackups %d, conditions %s",
			policyName, s.ObservedGeneration, st.pol.Generation, s.ActiveRuns, s.PendingBackups, conds(s.Conditions)))
	}
	for _, b := range st.covered {
		if st.run(b, securityv1.ModeChecksumOnly) == nil {
			out = append(out, fmt.Sprintf("Backup %s has no checksum-only run %s of the policy", b.Name, securityv1.PolicyRunName(b, securityv1.ModeChecksumOnly)))
		}
	}
	if _, caughtUp := st.restoreSpacing(); !caughtUp {
		out = append(out, fmt.Sprintf("none of the newest %d of the %d Backups the policy covers has a full-restore run", fullRestoreEvery, len(st.covered)))
	}
	return out, nil
}

// checkPolicyRuns: the policy is Ready, covers the one Plan and has nothing in flight or waiting;
// every run labelled with a policy is ours, in the Backup's namespace, under the deterministic
// name, labelled with the Backup's UID and the Plan, of backend coffer, for a Backup the policy
// covers (none for the ad-hoc Backups, which no Plan made), with the sandbox named from the
// Backup; every covered Backup has exactly one checksum-only run and at most one full-restore run,
// and the full-restores follow the policy's spacing; each run Succeeded with BackupVerifyCompleted
// (nothing high or worse found); and each covered Backup carries the verdicts of exactly those
// runs (status.verification.checksum and .fullRestore Passed, naming their Results) and
// Verified=True, RestoreVerified when it was restored, else ChecksumVerified, while a Backup the
// policy does not cover carries no verdict at all. (Each run's one Result and one terminal event
// are checkVerifyRuns'.)
func (ch *chaos) checkPolicyRuns() {
	t := ch.t
	st, err := ch.readPolicy(ch.ctx)
	require.NoError(t, err)
	ch.coveredBackups = len(st.covered)
	if c := meta.FindStatusCondition(st.pol.Status.Conditions, "Ready"); c == nil || c.Status != metav1.ConditionTrue || st.pol.Status.Plans != 1 ||
		st.pol.Status.ActiveRuns != 0 || st.pol.Status.PendingBackups != 0 {
		t.Errorf("BackupVerifyPolicy %s: plans %d (want 1), activeRuns %d, pendingBackups %d (want 0), conditions %s (want Ready=True)",
			policyName, st.pol.Status.Plans, st.pol.Status.ActiveRuns, st.pol.Status.PendingBackups, conds(st.pol.Status.Conditions))
	}
	if len(st.covered) == 0 {
		t.Errorf("BackupVerifyPolicy %s covers no Backup: the Plan made none", policyName)
	}
	byUID := map[string]*backupsv1.Backup{}
	for i := range st.backups {
		byUID[string(st.backups[i].UID)] = &st.backups[i]
	}
	type key struct {
		uid  string
		mode securityv1.Mode
	}
	byBackup := map[key][]*securityv1.BackupVerifyRun{}
	passed := map[string]bool{} // run name → Succeeded with BackupVerifyCompleted
	for i := range st.all {
		run := &st.all[i]
		m := run.Spec.Mode
		if m == "" {
			m = securityv1.ModeChecksumOnly
		}
		uid := run.Labels[securityv1.LabelBackupUID]
		byBackup[key{uid, m}] = append(byBackup[key{uid, m}], run)
		b := byUID[uid]
		switch {
		case run.Labels[securityv1.LabelPolicy] != policyName || run.Namespace != appNamespace:
			continue // reported by checkVerifyRuns
		case b == nil:
			t.Errorf("policy run %s/%s verifies Backup %s (uid %q), which does not exist", run.Namespace, run.Name, run.Spec.BackupRef.Name, uid)
			continue
		case !covers(st.pol, b):
			t.Errorf("policy run %s/%s verifies Backup %s, which the policy does not cover (planRef %v, phase %s, created %s, policy created %s)",
				run.Namespace, run.Name, b.Name, b.Spec.PlanRef, b.Status.Phase, b.CreationTimestamp.UTC().Format(time.RFC3339), st.pol.CreationTimestamp.UTC().Format(time.RFC3339))
		}
		wantSandbox := ""
		if m == securityv1.ModeFullRestore {
			wantSandbox = securityv1.PolicySandboxName(b)
		}
		if run.Name != securityv1.PolicyRunName(b, m) || run.Labels[securityv1.LabelPlan] != backupsv1.LabelValue(planName) ||
			run.Spec.Backend != securityv1.BackendCoffer || run.Spec.BackupRef.Name != b.Name || run.Spec.BackupRef.Namespace != b.Namespace ||
			run.Spec.SandboxNamespace != wantSandbox {
			t.Errorf("policy run %s/%s of Backup %s (%s): want name %s, plan label %q, backend coffer, backupRef %s/%s, sandbox %q; has plan label %q, backend %s, backupRef %s/%s, sandbox %q",
				run.Namespace, run.Name, b.Name, m, securityv1.PolicyRunName(b, m), backupsv1.LabelValue(planName), b.Namespace, b.Name, wantSandbox,
				run.Labels[securityv1.LabelPlan], run.Spec.Backend, run.Spec.BackupRef.Namespace, run.Spec.BackupRef.Name, run.Spec.SandboxNamespace)
		}
		res := &securityv1.BackupVerifyResult{}
		if err := ch.c.Get(ch.ctx, client.ObjectKey{Namespace: run.Namespace, Name: securityv1.ResultName(run.Name)}, res); err != nil {
			t.Errorf("policy run %s/%s: reading its BackupVerifyResult: %v", run.Namespace, run.Name, err) // and checkVerifyRuns says more
			continue
		}
		if ev := securityv1.TerminalEventType(run.Status.Phase, res.Spec.Findings); run.Status.Phase != securityv1.RunSucceeded || ev != securityv1.EventBackupVerifyCompleted {
			var fs []string
			for _, f := range res.Spec.Findings {
				fs = append(fs, fmt.Sprintf("%s/%s %s: %s", f.Severity, f.Code, f.Object, f.Message))
			}
			t.Errorf("policy run %s/%s (%s of Backup %s) is %s with %s, want Succeeded with %s: %s\n    findings:\n    %s", run.Namespace, run.Name, m, b.Name,
				run.Status.Phase, ev, securityv1.EventBackupVerifyCompleted, run.Status.Message, strings.Join(fs, "\n    "))
			continue
		}
		passed[run.Name] = true
	}
	for _, b := range st.covered {
		for _, m := range []securityv1.Mode{securityv1.ModeChecksumOnly, securityv1.ModeFullRestore} {
			got := byBackup[key{string(b.UID), m}]
			if len(got) > 1 {
				ch.duplicates += len(got) - 1
			}
			want := "at most 1"
			if m == securityv1.ModeChecksumOnly {
				want = "1"
			}
			if len(got) > 1 || len(got) == 0 && m == securityv1.ModeChecksumOnly {
				var names []string
				for _, r := range got {
					names = append(names, r.Namespace+"/"+r.Name)
				}
				t.Errorf("Backup %s has %d policy runs of mode %s (want %s): %v", b.Name, len(got), m, want, names)
			}
		}
	}
	if tooClose, caughtUp := st.restoreSpacing(); len(tooClose) > 0 || !caughtUp {
		var restored []string
		for _, b := range st.covered {
			if st.run(b, securityv1.ModeFullRestore) != nil {
				restored = append(restored, b.Name)
			}
		}
		t.Errorf("the policy's full-restores (every %d) of the %d Backups it covers are %v: too close %v, one among the newest %d %v",
			fullRestoreEvery, len(st.covered), restored, tooClose, fullRestoreEvery, caughtUp)
	}
	ch.checkVerdicts(st, passed)
}

// checkVerdicts: each covered Backup carries the verdict of each of its policy runs that passed
// (and no other verdict: only coffer runs write one, and the suite's own runs are velero's) and,
// when all of its runs passed, Verified=True with RestoreVerified or ChecksumVerified; a Backup
// the policy does not cover carries no verdict and no Verified condition.
func (ch *chaos) checkVerdicts(st *policyState, passed map[string]bool) {
	t := ch.t
	covered := map[string]bool{}
	for _, b := range st.covered {
		covered[b.Name] = true
	}
	for i := range st.backups {
		b := &st.backups[i]
		v := b.Status.Verification
		if v == nil {
			v = &backupsv1.BackupVerification{}
		}
		cond := meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionVerified)
		if !covered[b.Name] {
			if v.Checksum != nil || v.FullRestore != nil || cond != nil {
				t.Errorf("Backup %s, which the policy does not cover, has a verdict: verification %s, Verified %v", b.Name, verdicts(v), cond)
			}
			continue
		}
		allPassed := true
		for _, m := range []securityv1.Mode{securityv1.ModeChecksumOnly, securityv1.ModeFullRestore} {
			got := v.Checksum
			if m == securityv1.ModeFullRestore {
				got = v.FullRestore
			}
			run := st.run(b, m)
			switch {
			case run == nil:
				if got != nil {
					t.Errorf("Backup %s has a %s verdict (%s) but no %s run of the policy", b.Name, m, verdicts(v), m)
				}
			case !passed[run.Name]:
				allPassed = false // reported by checkPolicyRuns
			case got == nil || got.Result != backupsv1.VerificationPassed || got.ResultRef == nil ||
				got.ResultRef.Namespace != run.Namespace || got.ResultRef.Name != securityv1.ResultName(run.Name):
				allPassed = false
				t.Errorf("Backup %s: its %s run %s/%s passed, but its verification is %s (want %s Passed with resultRef %s/%s)",
					b.Name, m, run.Namespace, run.Name, verdicts(v), m, run.Namespace, securityv1.ResultName(run.Name))
			}
		}
		if !allPassed {
			continue
		}
		want := backupsv1.ReasonChecksumVerified
		if st.run(b, securityv1.ModeFullRestore) != nil {
			want = backupsv1.ReasonRestoreVerified
		}
		if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != want {
			t.Errorf("Backup %s: its policy runs passed, but its conditions are %s (want Verified=True/%s)", b.Name, conds(b.Status.Conditions), want)
			continue
		}
		ch.verifiedBackups++
	}
}

func verdicts(v *backupsv1.BackupVerification) string {
	one := func(x *backupsv1.VerificationVerdict) string {
		if x == nil {
			return "-"
		}
		ref := "-"
		if x.ResultRef != nil {
			ref = x.ResultRef.Namespace + "/" + x.ResultRef.Name
		}
		return fmt.Sprintf("%s at %s (%s)", x.Result, x.Time.UTC().Format(time.RFC3339), ref)
	}
	return fmt.Sprintf("{checksum: %s, fullRestore: %s}", one(v.Checksum), one(v.FullRestore))
}

func (ch *chaos) summary(took time.Duration) {
	var buf bytes.Buffer
	w := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(w, "%s\t%v\n", k, v) }
	row("iterations (kills)", ch.iterations)
	for _, v := range victims {
		row("  SIGKILL "+v, ch.kills[v])
	}
	row("BackupJobs scheduled / manual (the Plan's) / ad-hoc", fmt.Sprintf("%d / %d / %d", ch.scheduled, ch.manual, ch.adHoc))
	row("ticks missing / counted skipped", fmt.Sprintf("%d / %d", ch.missingTicks, ch.skippedTicks))
	row("Backups", ch.backups)
	row("Velero backups (of these BackupJobs)", ch.veleroBackups)
	row("RestoreJobs", ch.restores)
	row("BackupVerifyRuns checksum-only / full-restore (the suite's)", fmt.Sprintf("%d / %d", ch.checksumRuns, ch.fullRuns))
	row("Backups covered by the policy / Verified", fmt.Sprintf("%d / %d", ch.coveredBackups, ch.verifiedBackups))
	row(fmt.Sprintf("policy runs checksum-only / full-restore (every %d)", fullRestoreEvery), fmt.Sprintf("%d / %d", ch.policyChecksumRuns, ch.policyFullRuns))
	row("SIGKILL verifier before / amid / after the policy's runs", fmt.Sprintf("%d / %d / %d", ch.verifierKills["before"], ch.verifierKills["amid"], ch.verifierKills["after"]))
	row("BackupVerifyResults (all runs)", ch.results)
	row("terminal SecurityEvents (all runs)", ch.terminalEvents)
	row("longest driver outage (claim timeout "+claimTimeout.String()+")", fmt.Sprintf("%s (%s)", ch.longestOutage.Round(time.Second), orDash(ch.longestOutageOf)))
	row("Failed runs", ch.failedRuns)
	row("duplicates (must be 0)", ch.duplicates)
	row("wall time (stack up / seed and kills / waits and checks)", fmt.Sprintf("%s (%s / %s / %s)", took.Round(time.Second), ch.up.Round(time.Second),
		ch.killing.Round(time.Second), (took-ch.up-ch.killing).Round(time.Second)))
	_ = w.Flush()
	ch.t.Logf("chaos summary:\n%s", buf.String())
}

// logDenials logs every line of a component's log that reports an RBAC denial.
func logDenials(t *testing.T, s *golden.Stack) {
	for name, c := range s.Components {
		var lines []string
		for _, l := range strings.Split(c.Log.String(), "\n") {
			if strings.Contains(l, "is forbidden") {
				lines = append(lines, l)
			}
		}
		if len(lines) > 0 {
			t.Logf("%s logged %d RBAC denial(s):\n%s", name, len(lines), strings.Join(lines, "\n"))
		}
	}
}

func conds(cs []metav1.Condition) string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	return "[" + strings.Join(out, " ") + "]"
}

func backupNames(bs []backupsv1.Backup) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.Name)
	}
	return out
}

func unstructuredNames(us []unstructured.Unstructured) []string {
	var out []string
	for _, u := range us {
		out = append(out, u.GetName())
	}
	return out
}

func resultNames(rs []securityv1.BackupVerifyResult) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Namespace+"/"+r.Name)
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func tail(s string) string {
	if len(s) > 4096 {
		return s[len(s)-4096:]
	}
	return s
}
