// Package conformance is the driver conformance suite: a strategy driver calls Run from its own
// test, against a cluster where the driver runs, with a small Config saying how to make its
// strategy and an application. Each check names the rules of docs/contract.md it proves.
//
// The suite creates BackupClasses (cluster-scoped, named after the test namespace) and objects in
// the namespaces Config.Namespace hands out; of the driver's own objects it deletes only one Backup
// (RJ-8), as a user would. Checks that need a hook the Config leaves unset are not run, and Run
// logs which.
//
// The package imports testify, controller-runtime and the apis module only, so a driver's module
// runs it without Coffer's test harness.
package conformance

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// Config describes the driver under test.
type Config struct {
	// Client reads and writes the cluster; its scheme knows the backups.cozystack.io kinds.
	Client client.Client
	// StrategyAPIGroup and StrategyKind are the driver's strategy kind.
	StrategyAPIGroup, StrategyKind string
	// Namespace returns a namespace the driver serves, fresh for each call.
	Namespace func(t *testing.T) string
	// NewStrategy creates a working strategy and returns its name and the BackupClass parameters it
	// needs.
	NewStrategy func(t *testing.T) (name string, params map[string]string)
	// NewApplication creates, in ns, an application the strategy can back up, with data the
	// restore check can recognise, and returns its reference.
	NewApplication func(t *testing.T, ns string) corev1.TypedLocalObjectReference
	// Restart kills the driver (SIGKILL) and starts it again. Optional: without it the restart
	// check is not run.
	Restart func(t *testing.T)
	// Restore says the driver implements RestoreJobs. VerifyRestore, when set, checks that target
	// in ns holds the data of source after a restore.
	Restore       bool
	VerifyRestore func(t *testing.T, ns string, source, target corev1.TypedLocalObjectReference)
	// RestoreSameApplicationOnly says the driver restores a Backup only into the application it
	// was taken of, and refuses a targetApplicationRef naming another (contract RJ-11). The
	// restore checks then restore into the Backup's application, and one more checks the refusal.
	RestoreSameApplicationOnly bool
	// HoldBackups holds the driver's backups in progress until release is called: while held, a
	// run the driver claims stays Running and gets no Backup, and the driver keeps observing it
	// (driverkit: an outcome without a result and a RequeueAfter of a second or less). Optional:
	// without it the check that needs a run in flight (BJ-10) is not run.
	HoldBackups func(t *testing.T) (release func())
	// HoldRestores holds the driver's restores in progress likewise. Optional: without it the
	// check that needs a restore in flight (RJ-8) is not run.
	HoldRestores func(t *testing.T) (release func())
	// Timeout bounds each wait for a run (default 3 minutes).
	Timeout time.Duration
}

// Run runs every check that applies to the driver.
func Run(t *testing.T, cfg Config) {
	if cfg.Timeout == 0 {
		cfg.Timeout = 3 * time.Minute
	}
	s := &suite{Config: cfg}
	t.Run("BJ-2,BJ-4,BK-1,BK-2,BK-3: a run goes Running then Succeeded with exactly one Backup", s.backupLifecycle)
	t.Run("GEN-2,BJ-1,RJ-1: runs of other strategy kinds are left untouched", s.foreignRunsUntouched)
	t.Run("BJ-9: a run another driver claimed stays theirs when its class changes", s.claimedElsewhere)
	t.Run("GEN-8,BJ-5: a missing strategy fails the run with StrategyNotFound", s.missingStrategy)
	var notRun []string
	if cfg.Restart != nil {
		t.Run("BJ-8: a SIGKILL during a run still yields exactly one Backup", s.restartDuringRun)
	} else {
		notRun = append(notRun, "BJ-8 (Config.Restart is nil)")
	}
	if cfg.HoldBackups != nil {
		t.Run("BJ-10,GEN-11: a claimed run finishes with the strategy it was claimed with when its class is edited or deleted", s.classChangedMidRun)
	} else {
		notRun = append(notRun, "BJ-10 (Config.HoldBackups is nil)")
	}
	if cfg.Restore {
		t.Run("RJ-2,RJ-4,RJ-6: a RestoreJob restores into its targetApplicationRef", s.restoreIntoTarget)
		if cfg.RestoreSameApplicationOnly {
			t.Run("RJ-11: a RestoreJob into another application fails with TargetApplicationUnsupported", s.otherApplicationRefused)
		}
		if cfg.HoldRestores != nil {
			t.Run("RJ-8,GEN-11: a RestoreJob whose Backup is deleted mid-restore fails with BackupNotFound", s.backupDeletedMidRestore)
		} else {
			notRun = append(notRun, "RJ-8 (Config.HoldRestores is nil)")
		}
	}
	if len(notRun) > 0 {
		t.Logf("conformance checks not run for lack of a Config hook: %s", strings.Join(notRun, ", "))
	}
}

type suite struct{ Config }

func (s *suite) ctx() context.Context { return context.Background() }

// class creates a BackupClass that resolves the application's kind to the given strategy.
func (s *suite) class(t *testing.T, ns string, app corev1.TypedLocalObjectReference, group, kind, name string, params map[string]string) string {
	c := &backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{GenerateName: ns + "-"}, Spec: backupsv1.BackupClassSpec{
		Strategies: []backupsv1.BackupClassStrategy{{
			Application: backupsv1.ApplicationSelector{APIGroup: app.APIGroup, Kind: app.Kind},
			StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr.To(group), Kind: kind, Name: name},
			Parameters:  params,
		}}}}
	require.NoError(t, s.Client.Create(s.ctx(), c))
	t.Cleanup(func() { _ = s.Client.Delete(context.Background(), c) })
	return c.Name
}

func (s *suite) ownClass(t *testing.T, ns string, app corev1.TypedLocalObjectReference) string {
	name, params := s.NewStrategy(t)
	return s.class(t, ns, app, s.StrategyAPIGroup, s.StrategyKind, name, params)
}

func (s *suite) backupJob(t *testing.T, ns, class string, app corev1.TypedLocalObjectReference) *backupsv1.BackupJob {
	j := &backupsv1.BackupJob{ObjectMeta: metav1.ObjectMeta{GenerateName: "conformance-", Namespace: ns},
		Spec: backupsv1.BackupJobSpec{ApplicationRef: app, BackupClassName: class}}
	require.NoError(t, s.Client.Create(s.ctx(), j))
	return j
}

// waitFor polls obj until cond holds, recording every phase it saw.
func (s *suite) waitFor(t *testing.T, what string, obj client.Object, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(s.ctx(), 100*time.Millisecond, s.Timeout, true, func(ctx context.Context) (bool, error) {
		if err := s.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err
		}
		return cond(), nil
	})
	require.NoError(t, err, "waiting for %s", what)
}

var checksum = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// checkSucceeded asserts the contract's fields of a succeeded run and its Backup.
func (s *suite) checkSucceeded(t *testing.T, job *backupsv1.BackupJob, app corev1.TypedLocalObjectReference, class string) *backupsv1.Backup {
	t.Helper()
	st := job.Status
	require.NotNil(t, st.StartedAt, "BJ-2: startedAt")
	require.NotNil(t, st.CompletedAt, "BJ-4: completedAt")
	assert.False(t, st.CompletedAt.Before(st.StartedAt), "completedAt is not before startedAt")
	require.NotNil(t, st.BackupRef, "BJ-4: backupRef")
	assert.Equal(t, metav1.ConditionTrue, meta.FindStatusCondition(st.Conditions, backupsv1.ConditionAccepted).Status, "BJ-2: Accepted=True")
	assert.Equal(t, int64(1), job.Generation, "BJ-6: the spec was never written")

	b := &backupsv1.Backup{}
	require.NoError(t, s.Client.Get(s.ctx(), client.ObjectKey{Namespace: job.Namespace, Name: st.BackupRef.Name}, b))
	assert.Equal(t, job.Name, b.Name, "BK-1: named after the BackupJob")
	assert.Equal(t, backupsv1.NormalizeApplicationRef(app), b.Spec.ApplicationRef, "BK-1: applicationRef, normalized")
	assert.Equal(t, s.StrategyKind, b.Spec.StrategyRef.Kind, "BK-1: strategyRef")
	assert.Equal(t, s.StrategyAPIGroup, ptr.Deref(b.Spec.StrategyRef.APIGroup, ""), "BK-1: strategyRef.apiGroup")
	assert.False(t, b.Spec.TakenAt.IsZero(), "BK-1: takenAt")
	assert.Empty(t, b.OwnerReferences, "BK-2: no ownerReference")
	assert.Equal(t, backupsv1.BackupReady, b.Status.Phase, "BK-3: Ready")
	require.NotNil(t, b.Status.Artifact, "BK-3: artifact")
	assert.NotEmpty(t, b.Status.Artifact.URI, "BK-3: artifact.uri")
	assert.Regexp(t, checksum, b.Status.Artifact.Checksum, "BK-3: artifact.checksum")
	for k, v := range backupsv1.ApplicationLabels(app) {
		assert.Equal(t, v, b.Labels[k], "BK-8: label %s", k)
	}

	list := &backupsv1.BackupList{}
	require.NoError(t, s.Client.List(s.ctx(), list, client.InNamespace(job.Namespace)))
	n := 0
	for _, other := range list.Items {
		if other.Labels[backupsv1.LabelBackupJobUID] == string(job.UID) || other.Name == job.Name {
			n++
		}
	}
	assert.Equal(t, 1, n, "BJ-8: exactly one Backup for the run")
	return b
}

func (s *suite) backupLifecycle(t *testing.T) {
	ns := s.Namespace(t)
	app := s.NewApplication(t, ns)
	class := s.ownClass(t, ns, app)
	job := s.backupJob(t, ns, class, app)
	var phases []backupsv1.BackupJobPhase
	s.waitFor(t, "the BackupJob to finish", job, func() bool {
		if n := len(phases); n == 0 || phases[n-1] != job.Status.Phase {
			phases = append(phases, job.Status.Phase)
		}
		return job.IsTerminal()
	})
	require.Equal(t, backupsv1.BackupJobSucceeded, job.Status.Phase, "message: %s", job.Status.Message)
	assert.NotContains(t, phases, backupsv1.BackupJobFailed, "BJ-6: never Failed before Succeeded")
	s.checkSucceeded(t, job, app, class)

	// BJ-6: a terminal run is never written again; take the time of one more run as the barrier.
	rv := job.ResourceVersion
	next := s.backupJob(t, ns, class, app)
	s.waitFor(t, "a second BackupJob", next, next.IsTerminal)
	require.NoError(t, s.Client.Get(s.ctx(), client.ObjectKeyFromObject(job), job))
	assert.Equal(t, rv, job.ResourceVersion, "BJ-6: the terminal BackupJob was written again")
}

func (s *suite) foreignRunsUntouched(t *testing.T) {
	ns := s.Namespace(t)
	app := s.NewApplication(t, ns)
	foreignClass := s.class(t, ns, app, "conformance.example.com", "ForeignStrategy", "foreign", nil)
	foreign := s.backupJob(t, ns, foreignClass, app)
	unresolved := s.backupJob(t, ns, "conformance-no-such-class", app)

	// A Backup of a foreign strategy, and a RestoreJob of it.
	foreignBackup := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "foreign", Namespace: ns}, Spec: backupsv1.BackupSpec{
		ApplicationRef: app, TakenAt: metav1.Now(),
		StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr.To("conformance.example.com"), Kind: "ForeignStrategy", Name: "foreign"}}}
	require.NoError(t, s.Client.Create(s.ctx(), foreignBackup))
	foreignRestore := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: "foreign", Namespace: ns},
		Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: foreignBackup.Name}}}
	require.NoError(t, s.Client.Create(s.ctx(), foreignRestore))

	// The driver's own run, created after the foreign ones, is the barrier: once it is done, the
	// driver has seen the foreign runs too.
	own := s.backupJob(t, ns, s.ownClass(t, ns, app), app)
	s.waitFor(t, "the driver's own BackupJob", own, own.IsTerminal)

	for _, o := range []client.Object{foreign, unresolved, foreignBackup, foreignRestore} {
		before := o.GetResourceVersion()
		require.NoError(t, s.Client.Get(s.ctx(), client.ObjectKeyFromObject(o), o))
		assert.Equal(t, before, o.GetResourceVersion(), "GEN-2: %T %s was written", o, o.GetName())
		assert.Empty(t, o.GetFinalizers(), "GEN-2: %T %s got a finalizer", o, o.GetName())
	}
}

func (s *suite) claimedElsewhere(t *testing.T) {
	ns := s.Namespace(t)
	app := s.NewApplication(t, ns)
	// The run is created for a class that does not exist yet, claimed by another driver, and only
	// then does the class appear, resolving to this driver's kind: as if it had been edited.
	name, params := s.NewStrategy(t)
	className := ns + "-edited"
	job := s.backupJob(t, ns, className, app)
	job.MarkRunning(metav1.Now(), "conformance-other-driver")
	require.NoError(t, s.Client.Status().Update(s.ctx(), job))
	c := &backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: className}, Spec: backupsv1.BackupClassSpec{
		Strategies: []backupsv1.BackupClassStrategy{{
			Application: backupsv1.ApplicationSelector{APIGroup: app.APIGroup, Kind: app.Kind},
			StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr.To(s.StrategyAPIGroup), Kind: s.StrategyKind, Name: name},
			Parameters:  params,
		}}}}
	require.NoError(t, s.Client.Create(s.ctx(), c))
	t.Cleanup(func() { _ = s.Client.Delete(context.Background(), c) })

	barrier := s.backupJob(t, ns, className, app)
	s.waitFor(t, "a run of the same class", barrier, barrier.IsTerminal)
	before := job.ResourceVersion
	require.NoError(t, s.Client.Get(s.ctx(), client.ObjectKeyFromObject(job), job))
	assert.Equal(t, before, job.ResourceVersion, "BJ-9: the run claimed by another driver was written")
	assert.Equal(t, "conformance-other-driver", job.ClaimedBy())
	err := s.Client.Get(s.ctx(), client.ObjectKey{Namespace: ns, Name: job.Name}, &backupsv1.Backup{})
	assert.True(t, apierrors.IsNotFound(err), "BJ-9: no Backup for a run another driver claimed")
}

func (s *suite) missingStrategy(t *testing.T) {
	ns := s.Namespace(t)
	app := s.NewApplication(t, ns)
	class := s.class(t, ns, app, s.StrategyAPIGroup, s.StrategyKind, "conformance-no-such-strategy", nil)
	job := s.backupJob(t, ns, class, app)
	s.waitFor(t, "the BackupJob to fail", job, job.IsTerminal)
	require.Equal(t, backupsv1.BackupJobFailed, job.Status.Phase)
	ready := meta.FindStatusCondition(job.Status.Conditions, backupsv1.ConditionReady)
	require.NotNil(t, ready, "BJ-5: Ready condition")
	assert.Equal(t, metav1.ConditionFalse, ready.Status)
	assert.Equal(t, backupsv1.ReasonStrategyNotFound, ready.Reason, "GEN-8")
	assert.NotEmpty(t, job.Status.Message, "BJ-5: message")
	assert.NotNil(t, job.Status.CompletedAt, "BJ-5: completedAt")
}

func (s *suite) restartDuringRun(t *testing.T) {
	ns := s.Namespace(t)
	app := s.NewApplication(t, ns)
	class := s.ownClass(t, ns, app)
	job := s.backupJob(t, ns, class, app)
	s.waitFor(t, "the driver to claim the run", job, func() bool { return job.Status.StartedAt != nil })
	s.Restart(t)
	s.waitFor(t, "the BackupJob to finish after the restart", job, job.IsTerminal)
	require.Equal(t, backupsv1.BackupJobSucceeded, job.Status.Phase, "message: %s", job.Status.Message)
	s.checkSucceeded(t, job, app, class)
}

// restoreTarget is the application a restore check restores into: another one, unless the driver
// restores only into the Backup's own.
func (s *suite) restoreTarget(app corev1.TypedLocalObjectReference) corev1.TypedLocalObjectReference {
	target := app
	if !s.RestoreSameApplicationOnly {
		target.Name = app.Name + "-restored"
	}
	return target
}

func (s *suite) restoreIntoTarget(t *testing.T) {
	ns := s.Namespace(t)
	app := s.NewApplication(t, ns)
	class := s.ownClass(t, ns, app)
	job := s.backupJob(t, ns, class, app)
	s.waitFor(t, "the BackupJob to finish", job, job.IsTerminal)
	require.Equal(t, backupsv1.BackupJobSucceeded, job.Status.Phase, "message: %s", job.Status.Message)
	target := s.restoreTarget(app)
	rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{GenerateName: "conformance-", Namespace: ns},
		Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: job.Status.BackupRef.Name}, TargetApplicationRef: &target}}
	require.NoError(t, s.Client.Create(s.ctx(), rj))
	s.waitFor(t, "the RestoreJob to finish", rj, rj.IsTerminal)
	require.Equal(t, backupsv1.RestoreJobSucceeded, rj.Status.Phase, "message: %s", rj.Status.Message)
	assert.NotNil(t, rj.Status.StartedAt, "RJ-4: startedAt")
	assert.NotNil(t, rj.Status.CompletedAt, "RJ-4: completedAt")
	assert.Equal(t, int64(1), rj.Generation, "RJ-6: the spec was never written")
	if s.VerifyRestore != nil {
		s.VerifyRestore(t, ns, app, target)
	}
}

// otherApplicationRefused asks a driver that restores only into the Backup's application for a
// restore into another: the restore fails with TargetApplicationUnsupported.
func (s *suite) otherApplicationRefused(t *testing.T) {
	ns := s.Namespace(t)
	app := s.NewApplication(t, ns)
	job := s.backupJob(t, ns, s.ownClass(t, ns, app), app)
	s.waitFor(t, "the BackupJob to finish", job, job.IsTerminal)
	require.Equal(t, backupsv1.BackupJobSucceeded, job.Status.Phase, "message: %s", job.Status.Message)
	target := app
	target.Name = app.Name + "-other"
	rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{GenerateName: "conformance-", Namespace: ns},
		Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: job.Status.BackupRef.Name}, TargetApplicationRef: &target}}
	require.NoError(t, s.Client.Create(s.ctx(), rj))
	s.waitFor(t, "the RestoreJob to fail", rj, rj.IsTerminal)
	require.Equal(t, backupsv1.RestoreJobFailed, rj.Status.Phase, "RJ-11: message: %s", rj.Status.Message)
	ready := meta.FindStatusCondition(rj.Status.Conditions, backupsv1.ConditionReady)
	require.NotNil(t, ready, "RJ-4: Ready condition")
	assert.Equal(t, backupsv1.ReasonTargetApplicationUnsupported, ready.Reason, "RJ-11: reason")
	assert.NotEmpty(t, rj.Status.Message, "RJ-4: message")
	assert.Equal(t, int64(1), rj.Generation, "RJ-6: the spec was never written")
}

// hold holds runs through one of the Config's hold hooks; release is idempotent and also runs at
// the end of the test.
func (s *suite) hold(t *testing.T, hold func(*testing.T) func()) (release func()) {
	release = sync.OnceFunc(hold(t))
	t.Cleanup(release)
	return release
}

// classChangedMidRun claims two runs while the driver holds them, edits the class of one (to
// another strategy of the driver, with other parameters) and deletes the class of the other: both
// finish with the strategy recorded at claim time.
func (s *suite) classChangedMidRun(t *testing.T) {
	ns := s.Namespace(t)
	app := s.NewApplication(t, ns)
	name, params := s.NewStrategy(t)
	edited := s.class(t, ns, app, s.StrategyAPIGroup, s.StrategyKind, name, params)
	deleted := s.class(t, ns, app, s.StrategyAPIGroup, s.StrategyKind, name, params)
	release := s.hold(t, s.HoldBackups)
	jobs := map[string]*backupsv1.BackupJob{edited: s.backupJob(t, ns, edited, app), deleted: s.backupJob(t, ns, deleted, app)}
	recorded := map[string]*backupsv1.RunStrategy{}
	for class, job := range jobs {
		s.waitFor(t, "the driver to claim the run", job, func() bool { return job.ClaimedBy() != "" })
		require.Equal(t, backupsv1.BackupJobRunning, job.Status.Phase, "held runs stay Running; message: %s", job.Status.Message)
		rec := job.Status.Strategy
		require.NotNil(t, rec, "BJ-10: the claim records status.strategy")
		assert.Equal(t, class, rec.BackupClassName, "BJ-10: status.strategy.backupClassName")
		assert.Equal(t, corev1.TypedLocalObjectReference{APIGroup: ptr.To(s.StrategyAPIGroup), Kind: s.StrategyKind, Name: name}, rec.StrategyRef, "BJ-10: status.strategy.strategyRef")
		assert.Len(t, rec.Parameters, len(params), "BJ-10: status.strategy.parameters")
		for k, v := range params {
			assert.Equal(t, v, rec.Parameters[k], "BJ-10: status.strategy.parameters[%s]", k)
		}
		recorded[class] = rec
	}

	// Delete one class, then edit the other to name another strategy of the driver, with other
	// parameters.
	c := &backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: deleted}}
	require.NoError(t, s.Client.Delete(s.ctx(), c))
	err := wait.PollUntilContextTimeout(s.ctx(), 100*time.Millisecond, s.Timeout, true, func(ctx context.Context) (bool, error) {
		err := s.Client.Get(ctx, client.ObjectKeyFromObject(c), c)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	require.NoError(t, err, "waiting for BackupClass %s to be gone", deleted)
	other, otherParams := s.NewStrategy(t)
	c = &backupsv1.BackupClass{}
	require.NoError(t, s.Client.Get(s.ctx(), client.ObjectKey{Name: edited}, c))
	c.Spec.Strategies[0].StrategyRef.Name = other
	c.Spec.Strategies[0].Parameters = map[string]string{"conformance-edited": "true"}
	for k, v := range otherParams {
		c.Spec.Strategies[0].Parameters[k] = v
	}
	require.NoError(t, s.Client.Update(s.ctx(), c))
	// Barrier: a new run of the edited class is claimed with the other strategy, so the driver has
	// seen the edit, and the deletion before it, when the held runs go on.
	barrier := s.backupJob(t, ns, edited, app)
	s.waitFor(t, "the driver to claim a run of the edited class", barrier, func() bool {
		return barrier.Status.Strategy != nil && barrier.Status.Strategy.StrategyRef.Name == other
	})

	release()
	for class, job := range jobs {
		s.waitFor(t, "the BackupJob to finish", job, job.IsTerminal)
		require.Equal(t, backupsv1.BackupJobSucceeded, job.Status.Phase, "BJ-10, GEN-11: class %s changed mid-run; message: %s", class, job.Status.Message)
		b := s.checkSucceeded(t, job, app, class)
		assert.Equal(t, name, b.Spec.StrategyRef.Name, "BJ-10: the Backup names the strategy the run was claimed with")
		assert.Equal(t, recorded[class], job.Status.Strategy, "BJ-10: status.strategy is never rewritten")
	}
	s.waitFor(t, "the barrier run to finish", barrier, barrier.IsTerminal)
}

// backupDeletedMidRestore deletes the Backup of a restore the driver holds in progress: the
// restore must end Failed with BackupNotFound although the driver never finishes it.
func (s *suite) backupDeletedMidRestore(t *testing.T) {
	ns := s.Namespace(t)
	app := s.NewApplication(t, ns)
	job := s.backupJob(t, ns, s.ownClass(t, ns, app), app)
	s.waitFor(t, "the BackupJob to finish", job, job.IsTerminal)
	require.Equal(t, backupsv1.BackupJobSucceeded, job.Status.Phase, "message: %s", job.Status.Message)

	s.hold(t, s.HoldRestores)
	target := s.restoreTarget(app)
	rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{GenerateName: "conformance-", Namespace: ns},
		Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: job.Status.BackupRef.Name}, TargetApplicationRef: &target}}
	require.NoError(t, s.Client.Create(s.ctx(), rj))
	s.waitFor(t, "the driver to claim the restore", rj, func() bool { return rj.ClaimedBy() != "" })
	require.Equal(t, backupsv1.RestoreJobRunning, rj.Status.Phase, "held restores stay Running; message: %s", rj.Status.Message)

	backup := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: job.Status.BackupRef.Name}}
	require.NoError(t, s.Client.Delete(s.ctx(), backup))
	// The restore stays held: it must end because its Backup is gone, not because it finished.
	s.waitFor(t, "the RestoreJob to fail", rj, rj.IsTerminal)
	require.Equal(t, backupsv1.RestoreJobFailed, rj.Status.Phase, "RJ-8: message: %s", rj.Status.Message)
	ready := meta.FindStatusCondition(rj.Status.Conditions, backupsv1.ConditionReady)
	require.NotNil(t, ready, "RJ-4: Ready condition")
	assert.Equal(t, metav1.ConditionFalse, ready.Status, "RJ-4: Ready=False")
	assert.Equal(t, backupsv1.ReasonBackupNotFound, ready.Reason, "RJ-8: reason BackupNotFound")
	assert.NotEmpty(t, rj.Status.Message, "RJ-4: message")
	assert.NotNil(t, rj.Status.CompletedAt, "RJ-4: completedAt")
	assert.Equal(t, int64(1), rj.Generation, "RJ-6: the spec was never written")
}
