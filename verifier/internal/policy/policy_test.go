// Tests of the BackupVerifyPolicy reconciler on a real kube-apiserver. Reconcile is called
// directly with a client of the API server: Backups are listed by Plan with the field selector
// spec.planRef.name, which the Backup CRD declares selectable, so the reads are those of the
// manager's field index without a cache's delay. TestSetupWithManager runs the reconciler in a
// manager, through its cache, index and watches. Nothing here runs the BackupVerifyRun
// controller: the tests end runs by writing their status phase, as it does.
package policy_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/apis/cachetrim"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/verifier/internal/policy"
)

var (
	cl  client.WithWatch
	cfg *rest.Config
	// t0 is the tests' clock and the Backups' takenAt base; far from the real time, so that a
	// test cannot pass by accident.
	t0 = time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
)

// testLabel on a namespace selects it for the policies of one test (its value is the test's key),
// so that the tests' policies never see each other's Plans.
const testLabel = "policy-test.coffer.io/key"

func init() { utilruntime.Must(velerov1.AddToScheme(cluster.Scheme)) }

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	ctrl.SetLogger(logr.Discard())
	c, err := cluster.Start(context.Background(), cluster.Options{CRDDirectoryPaths: []string{
		"../../../deploy/core-controller/crd", "../../../deploy/verifier/crd", "../../../deploy/verifier/securityevents"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the API server:", err)
		return 1
	}
	defer func() { _ = c.Stop() }()
	cfg = c.Config
	if cl, err = client.NewWithWatch(c.Config, client.Options{Scheme: cluster.Scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

type fixture struct {
	t     *testing.T
	ctx   context.Context
	key   string
	clock *clocktesting.FakeClock
}

var nonLabel = regexp.MustCompile(`[^a-z0-9]+`)

// fixtures numbers the fixtures, so that a test run again (-count) has a key of its own.
var fixtures atomic.Int32

func newFixture(t *testing.T) *fixture {
	key := strings.Trim(nonLabel.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	key = backupsv1.BoundedName(63, key, strconv.Itoa(int(fixtures.Add(1))))
	return &fixture{t: t, ctx: context.Background(), key: key, clock: clocktesting.NewFakeClock(t0)}
}

// reconciler is a new instance, as after a restart of the verifier.
func (f *fixture) reconciler(c client.Client) *policy.Reconciler {
	return &policy.Reconciler{Client: c, Clock: f.clock, Recorder: &events.FakeRecorder{}, Coffer: true}
}

// namespace creates a namespace, selected by the test's policies or not.
func (f *fixture) namespace(selected bool) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bvp-"}}
	if selected {
		ns.Labels = map[string]string{testLabel: f.key}
	}
	require.NoError(f.t, cl.Create(f.ctx, ns))
	return ns.Name
}

func (f *fixture) selectNamespace(name string) {
	ns := &corev1.Namespace{}
	require.NoError(f.t, cl.Get(f.ctx, client.ObjectKey{Name: name}, ns))
	orig := ns.DeepCopy()
	ns.Labels = map[string]string{testLabel: f.key}
	require.NoError(f.t, cl.Patch(f.ctx, ns, client.MergeFrom(orig)))
}

func (f *fixture) plan(ns, name string, labels map[string]string) *backupsv1.Plan {
	p := &backupsv1.Plan{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: backupsv1.PlanSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: name},
			BackupClassName: "class", Schedule: backupsv1.PlanSchedule{Cron: "@daily"}}}
	require.NoError(f.t, cl.Create(f.ctx, p))
	return p
}

// backup creates a Backup of Plan plan, taken hours after t0; it is Pending (no status) until
// ready is called.
func (f *fixture) backup(ns, name, plan string, hours int) *backupsv1.Backup {
	b := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: backupsv1.BackupSpec{
			ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: plan},
			PlanRef:        &corev1.LocalObjectReference{Name: plan},
			StrategyRef:    corev1.TypedLocalObjectReference{APIGroup: ptr.To("jobdriver.coffer.io"), Kind: "JobBackupStrategy", Name: "tar"},
			TakenAt:        metav1.NewTime(t0.Add(time.Duration(hours) * time.Hour)),
		}}
	require.NoError(f.t, cl.Create(f.ctx, b))
	return b
}

// setStatus writes a Backup's status through the status subresource, as its driver does.
func (f *fixture) setStatus(b *backupsv1.Backup, phase backupsv1.BackupPhase, artifact bool) {
	orig := b.DeepCopy()
	b.Status.Phase = phase
	if artifact {
		b.Status.Artifact = &backupsv1.BackupArtifact{URI: "s3://coffer/backups/" + b.Name, SizeBytes: 42,
			Checksum: "sha256:" + strings.Repeat("ab", 32)}
	}
	require.NoError(f.t, cl.Status().Patch(f.ctx, b, client.MergeFrom(orig)))
}

func (f *fixture) ready(bs ...*backupsv1.Backup) {
	for _, b := range bs {
		f.setStatus(b, backupsv1.BackupReady, true)
	}
}

// afterSecondOf waits until the API server's clock (the machine's) is in a later second than
// obj's creation: creationTimestamps have a resolution of one second.
func (f *fixture) afterSecondOf(obj metav1.Object) {
	created := obj.GetCreationTimestamp().Time
	require.NoError(f.t, wait.PollUntilContextTimeout(f.ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return time.Now().Truncate(time.Second).After(created), nil
	}))
}

// policy creates a policy covering the test's selected namespaces.
func (f *fixture) policy(spec securityv1.BackupVerifyPolicySpec) *securityv1.BackupVerifyPolicy {
	if spec.NamespaceSelector == nil {
		spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{testLabel: f.key}}
	}
	pol := &securityv1.BackupVerifyPolicy{ObjectMeta: metav1.ObjectMeta{GenerateName: "bvp-"}, Spec: spec}
	require.NoError(f.t, cl.Create(f.ctx, pol))
	f.t.Cleanup(func() { _ = cl.Delete(context.Background(), pol) })
	return pol
}

func (f *fixture) reconcile(r *policy.Reconciler, pol *securityv1.BackupVerifyPolicy) {
	f.t.Helper()
	res, err := r.Reconcile(f.ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: pol.Name}})
	require.NoError(f.t, err)
	require.Equal(f.t, reconcile.Result{RequeueAfter: policy.Resync}, res)
}

func (f *fixture) get(pol *securityv1.BackupVerifyPolicy) *securityv1.BackupVerifyPolicy {
	out := &securityv1.BackupVerifyPolicy{}
	require.NoError(f.t, cl.Get(f.ctx, client.ObjectKeyFromObject(pol), out))
	return out
}

// runs are the policy's runs by name.
func (f *fixture) runs(pol *securityv1.BackupVerifyPolicy) map[string]securityv1.BackupVerifyRun {
	list := &securityv1.BackupVerifyRunList{}
	require.NoError(f.t, cl.List(f.ctx, list, client.MatchingLabels{securityv1.LabelPolicy: pol.Name}))
	out := map[string]securityv1.BackupVerifyRun{}
	for _, r := range list.Items {
		out[r.Name] = r
	}
	return out
}

// runsIn are all runs of namespace ns, whoever made them.
func (f *fixture) runsIn(ns string) []string {
	list := &securityv1.BackupVerifyRunList{}
	require.NoError(f.t, cl.List(f.ctx, list, client.InNamespace(ns)))
	var out []string
	for _, r := range list.Items {
		out = append(out, r.Name)
	}
	sort.Strings(out)
	return out
}

func names(runs map[string]securityv1.BackupVerifyRun) []string {
	out := make([]string, 0, len(runs))
	for n := range runs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func runNames(mode securityv1.Mode, bs ...*backupsv1.Backup) []string {
	out := make([]string, 0, len(bs))
	for _, b := range bs {
		out = append(out, securityv1.PolicyRunName(b, mode))
	}
	return out
}

func sorted(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	sort.Strings(out)
	return out
}

// end makes a run terminal, as the run controller does.
func (f *fixture) end(ns, name string, phase securityv1.RunPhase) {
	run := &securityv1.BackupVerifyRun{}
	require.NoError(f.t, cl.Get(f.ctx, client.ObjectKey{Namespace: ns, Name: name}, run))
	orig := run.DeepCopy()
	run.Status.Phase = phase
	require.NoError(f.t, cl.Status().Patch(f.ctx, run, client.MergeFrom(orig)))
}

func (f *fixture) assertCounts(pol *securityv1.BackupVerifyPolicy, plans, active, pending int32) {
	f.t.Helper()
	st := f.get(pol).Status
	assert.Equal(f.t, plans, st.Plans, "status.plans")
	assert.Equal(f.t, active, st.ActiveRuns, "status.activeRuns")
	assert.Equal(f.t, pending, st.PendingBackups, "status.pendingBackups")
}

var upperCamel = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)

func TestRunsForFreshReadyBackupsOfSelectedPlans(t *testing.T) {
	f := newFixture(t)
	nsA, nsB := f.namespace(true), f.namespace(false)
	gold, bronze := map[string]string{"tier": "gold"}, map[string]string{"tier": "bronze"}
	f.plan(nsA, "db", gold)
	f.plan(nsA, "cache", bronze)
	f.plan(nsB, "db", gold)
	old := f.backup(nsA, "old", "db", 0)
	f.ready(old)
	f.afterSecondOf(old)

	pol := f.policy(securityv1.BackupVerifyPolicySpec{
		PlanSelector:      &metav1.LabelSelector{MatchLabels: gold},
		MaxConcurrentRuns: ptr.To[int32](10),
		RunTimeout:        &metav1.Duration{Duration: 5 * time.Minute},
	})
	require.True(t, old.CreationTimestamp.Before(&pol.CreationTimestamp), "the old Backup must predate the policy")
	b1 := f.backup(nsA, "b1", "db", 1)
	b2 := f.backup(nsA, "b2", "db", 2) // Pending
	failed := f.backup(nsA, "failed", "db", 3)
	noArtifact := f.backup(nsA, "no-artifact", "db", 4)
	c1 := f.backup(nsA, "c1", "cache", 5) // a Plan the planSelector leaves out
	x1 := f.backup(nsB, "x1", "db", 6)    // a namespace the namespaceSelector leaves out
	f.ready(b1, c1, x1)
	f.setStatus(failed, backupsv1.BackupFailed, true)
	f.setStatus(noArtifact, backupsv1.BackupReady, false)

	r := f.reconciler(cl)
	f.reconcile(r, pol)
	runs := f.runs(pol)
	require.Equal(t, runNames(securityv1.ModeChecksumOnly, b1), names(runs))
	require.Equal(t, runNames(securityv1.ModeChecksumOnly, b1), f.runsIn(nsA), "no run but b1's")
	require.Empty(t, f.runsIn(nsB))
	run := runs[securityv1.PolicyRunName(b1, securityv1.ModeChecksumOnly)]
	assert.Equal(t, nsA, run.Namespace)
	assert.Equal(t, "b1-checksum-"+string(b1.UID)[:8], run.Name)
	assert.Equal(t, map[string]string{
		securityv1.LabelPolicy:    pol.Name,
		securityv1.LabelBackupUID: string(b1.UID),
		securityv1.LabelPlan:      "db",
	}, run.Labels)
	assert.Equal(t, securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendCoffer,
		BackupRef: securityv1.BackupRef{Name: "b1", Namespace: nsA}, Mode: securityv1.ModeChecksumOnly,
		Timeout: &metav1.Duration{Duration: 5 * time.Minute}}, run.Spec)

	got := f.get(pol)
	assert.Equal(t, got.Generation, got.Status.ObservedGeneration)
	c := meta.FindStatusCondition(got.Status.Conditions, securityv1.ConditionReady)
	require.NotNil(t, c)
	assert.Equal(t, metav1.ConditionTrue, c.Status)
	assert.Equal(t, securityv1.ReasonActive, c.Reason)
	assert.Equal(t, "verifying the Backups of 1 Plan(s)", c.Message)
	assert.True(t, c.LastTransitionTime.Time.Equal(t0), "the condition's time comes from the reconciler's clock")
	f.assertCounts(pol, 1, 1, 0)

	// A Backup made after the policy that becomes Ready later is verified then.
	f.ready(b2)
	f.reconcile(r, pol)
	require.Equal(t, sorted(runNames(securityv1.ModeChecksumOnly, b1, b2)), names(f.runs(pol)))
	f.assertCounts(pol, 1, 2, 0)

	// Once its namespace is selected, the other namespace's Plan is covered.
	f.selectNamespace(nsB)
	f.reconcile(r, pol)
	runs = f.runs(pol)
	require.Equal(t, sorted(runNames(securityv1.ModeChecksumOnly, b1, b2, x1)), names(runs))
	assert.Equal(t, nsB, runs[securityv1.PolicyRunName(x1, securityv1.ModeChecksumOnly)].Namespace)
	assert.Equal(t, string(x1.UID), runs[securityv1.PolicyRunName(x1, securityv1.ModeChecksumOnly)].Labels[securityv1.LabelBackupUID])
	f.assertCounts(pol, 2, 3, 0)
	require.Equal(t, sorted(runNames(securityv1.ModeChecksumOnly, b1, b2)), f.runsIn(nsA),
		"still none for the Backup made before the policy, the Failed one, the one without an artifact, nor the unselected Plan's")
}

func TestFullRestoreEveryNth(t *testing.T) {
	t.Run("every 3 with checksum-only", func(t *testing.T) {
		f := newFixture(t)
		ns := f.namespace(true)
		f.plan(ns, "db", nil)
		pol := f.policy(securityv1.BackupVerifyPolicySpec{FullRestore: &securityv1.FullRestorePolicy{Every: 3},
			MaxConcurrentRuns: ptr.To[int32](100)})
		r := f.reconciler(cl)
		var all, restored []*backupsv1.Backup
		for i := 1; i <= 7; i++ {
			b := f.backup(ns, fmt.Sprintf("b%d", i), "db", i)
			f.ready(b)
			all = append(all, b)
			if i%3 == 1 { // the first new Backup, then every third
				restored = append(restored, b)
			}
			f.reconcile(r, pol)
			require.Equal(t, sorted(runNames(securityv1.ModeChecksumOnly, all...), runNames(securityv1.ModeFullRestore, restored...)),
				names(f.runs(pol)), "after Backup %d", i)
		}
		runs := f.runs(pol)
		for _, b := range restored {
			run := runs[securityv1.PolicyRunName(b, securityv1.ModeFullRestore)]
			assert.Equal(t, b.Name+"-restore-"+string(b.UID)[:8], run.Name)
			assert.Equal(t, securityv1.ModeFullRestore, run.Spec.Mode)
			assert.Equal(t, securityv1.PolicySandboxName(b), run.Spec.SandboxNamespace)
			assert.True(t, strings.HasSuffix(run.Spec.SandboxNamespace, securityv1.SandboxSuffix))
			assert.Equal(t, string(b.UID), run.Labels[securityv1.LabelBackupUID])
			require.NotNil(t, run.Spec.Timeout, "no runTimeout: the CRD defaults it, as ugallu's does")
			assert.Equal(t, 15*time.Minute, run.Spec.Timeout.Duration)
		}
		for _, b := range all {
			run := runs[securityv1.PolicyRunName(b, securityv1.ModeChecksumOnly)]
			assert.Equal(t, securityv1.ModeChecksumOnly, run.Spec.Mode)
			assert.Empty(t, run.Spec.SandboxNamespace)
		}
		f.assertCounts(pol, 1, 10, 0)
	})

	t.Run("every 1 without checksum-only", func(t *testing.T) {
		f := newFixture(t)
		ns := f.namespace(true)
		f.plan(ns, "db", nil)
		pol := f.policy(securityv1.BackupVerifyPolicySpec{ChecksumOnly: ptr.To(false),
			FullRestore: &securityv1.FullRestorePolicy{Every: 1}})
		r := f.reconciler(cl)
		b1, b2 := f.backup(ns, "b1", "db", 1), f.backup(ns, "b2", "db", 2)
		f.ready(b1, b2)
		f.reconcile(r, pol)
		// Of Backups that arrive together, the newest is restored.
		require.Equal(t, runNames(securityv1.ModeFullRestore, b2), names(f.runs(pol)))
		b3 := f.backup(ns, "b3", "db", 3)
		f.ready(b3)
		f.reconcile(r, pol)
		f.reconcile(r, pol)
		require.Equal(t, sorted(runNames(securityv1.ModeFullRestore, b2, b3)), names(f.runs(pol)))
		f.assertCounts(pol, 1, 2, 0)
	})
}

func TestMaxConcurrentRuns(t *testing.T) {
	f := newFixture(t)
	ns := f.namespace(true)
	f.plan(ns, "db", nil)
	// maxConcurrentRuns unset: 2.
	pol := f.policy(securityv1.BackupVerifyPolicySpec{FullRestore: &securityv1.FullRestorePolicy{Every: 100}})
	b1, b2, b3, b4 := f.backup(ns, "b1", "db", 1), f.backup(ns, "b2", "db", 2), f.backup(ns, "b3", "db", 3), f.backup(ns, "b4", "db", 4)
	f.ready(b1, b2, b3, b4)
	r := f.reconciler(cl)
	cs := func(b *backupsv1.Backup) string { return securityv1.PolicyRunName(b, securityv1.ModeChecksumOnly) }
	restore4 := securityv1.PolicyRunName(b4, securityv1.ModeFullRestore)

	// The full-restore first, then the checksums, newest Backup first.
	f.reconcile(r, pol)
	require.Equal(t, sorted([]string{restore4, cs(b4)}), names(f.runs(pol)))
	f.assertCounts(pol, 1, 2, 3)
	f.reconcile(r, pol)
	require.Equal(t, sorted([]string{restore4, cs(b4)}), names(f.runs(pol)), "no run while two are not terminal")
	f.assertCounts(pol, 1, 2, 3)

	f.end(ns, restore4, securityv1.RunSucceeded)
	f.reconcile(r, pol)
	require.Equal(t, sorted([]string{restore4, cs(b4), cs(b3)}), names(f.runs(pol)))
	f.assertCounts(pol, 1, 2, 2)

	f.end(ns, cs(b4), securityv1.RunFailed)
	f.end(ns, cs(b3), securityv1.RunSucceeded)
	f.reconcile(r, pol)
	require.Equal(t, sorted([]string{restore4, cs(b4), cs(b3), cs(b2), cs(b1)}), names(f.runs(pol)))
	f.assertCounts(pol, 1, 2, 0)

	f.end(ns, cs(b2), securityv1.RunSucceeded)
	f.end(ns, cs(b1), securityv1.RunSucceeded)
	f.reconcile(r, pol)
	require.Len(t, f.runs(pol), 5)
	f.assertCounts(pol, 1, 0, 0)
}

type runID struct{ uid, rv string }

func (f *fixture) snapshot(pol *securityv1.BackupVerifyPolicy) map[string]runID {
	out := map[string]runID{}
	for n, r := range f.runs(pol) {
		out[n] = runID{string(r.UID), r.ResourceVersion}
	}
	return out
}

func TestNoDuplicateRuns(t *testing.T) {
	f := newFixture(t)
	ns := f.namespace(true)
	f.plan(ns, "db", nil)
	pol := f.policy(securityv1.BackupVerifyPolicySpec{MaxConcurrentRuns: ptr.To[int32](2)})
	b1, b2, b3 := f.backup(ns, "b1", "db", 1), f.backup(ns, "b2", "db", 2), f.backup(ns, "b3", "db", 3)
	f.ready(b1, b2, b3)

	f.reconcile(f.reconciler(cl), pol)
	first := f.snapshot(pol)
	require.Equal(t, sorted(runNames(securityv1.ModeChecksumOnly, b2, b3)), names(f.runs(pol)))

	// Again, and on a new instance (a restart): the same runs, untouched, and the limit holds
	// because the runs are counted from the API, not from memory.
	r := f.reconciler(cl)
	f.reconcile(r, pol)
	f.reconcile(f.reconciler(cl), pol)
	require.Equal(t, first, f.snapshot(pol))
	f.assertCounts(pol, 1, 2, 1)

	// A reader that has not seen the runs yet (a cache behind the API): every create meets
	// AlreadyExists, which is no error and makes no second run.
	stale := interceptor.NewClient(cl, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*securityv1.BackupVerifyRun); ok {
				return apierrors.NewNotFound(schema.GroupResource{Group: securityv1.GroupVersion.Group, Resource: "backupverifyruns"}, key.Name)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	f.end(ns, securityv1.PolicyRunName(b3, securityv1.ModeChecksumOnly), securityv1.RunSucceeded)
	f.end(ns, securityv1.PolicyRunName(b2, securityv1.ModeChecksumOnly), securityv1.RunSucceeded)
	f.reconcile(f.reconciler(cl), pol)
	require.Equal(t, sorted(runNames(securityv1.ModeChecksumOnly, b1, b2, b3)), names(f.runs(pol)))
	before := f.snapshot(pol)
	f.reconcile(f.reconciler(stale), pol)
	require.Equal(t, before, f.snapshot(pol))
	require.Equal(t, sorted(runNames(securityv1.ModeChecksumOnly, b1, b2, b3)), f.runsIn(ns))

	// A run under the name, made by another policy (or by hand), is the Backup's run: none is
	// added, and it is left as it is.
	b4 := f.backup(ns, "b4", "db", 4)
	f.ready(b4)
	theirs := &securityv1.BackupVerifyRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: securityv1.PolicyRunName(b4, securityv1.ModeChecksumOnly),
		Labels: map[string]string{securityv1.LabelPolicy: "someone-else"}},
		Spec: securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendCoffer, BackupRef: securityv1.BackupRef{Name: b4.Name}}}
	require.NoError(t, cl.Create(f.ctx, theirs))
	f.reconcile(f.reconciler(cl), pol)
	got := &securityv1.BackupVerifyRun{}
	require.NoError(t, cl.Get(f.ctx, client.ObjectKeyFromObject(theirs), got))
	assert.Equal(t, theirs.UID, got.UID)
	assert.Equal(t, theirs.ResourceVersion, got.ResourceVersion)
	assert.Equal(t, "someone-else", got.Labels[securityv1.LabelPolicy])
	require.Equal(t, before, f.snapshot(pol))
	require.Equal(t, sorted(runNames(securityv1.ModeChecksumOnly, b1, b2, b3, b4)), f.runsIn(ns))
}

// event creates a SecurityEvent labelled with a run's UID, as the run controller emits them.
func (f *fixture) event(runUID string) *securityv1.SecurityEvent {
	se := &securityv1.SecurityEvent{ObjectMeta: metav1.ObjectMeta{GenerateName: "bvp-test-",
		Labels: map[string]string{securityv1.LabelRunUID: runUID}},
		Spec: securityv1.SecurityEventSpec{Type: securityv1.EventBackupVerifyStarted,
			Class:    securityv1.EventClassOf(securityv1.EventBackupVerifyStarted),
			Severity: securityv1.SeverityInfo, Source: securityv1.SourceRef{Kind: "policy-test", Name: "policy-test"},
			Subject:    securityv1.EventSubject{Kind: securityv1.SubjectKindCluster, Name: "cluster", Unresolved: true},
			DetectedAt: metav1.NewTime(t0)}}
	require.NoError(f.t, cl.Create(f.ctx, se))
	f.t.Cleanup(func() { _ = cl.Delete(context.Background(), se) })
	return se
}

func (f *fixture) eventsOf(runUID types.UID) int {
	list := &securityv1.SecurityEventList{}
	require.NoError(f.t, cl.List(f.ctx, list, client.MatchingLabels{securityv1.LabelRunUID: string(runUID)}))
	return len(list.Items)
}

func (f *fixture) exists(obj client.Object) bool {
	err := cl.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)
	if apierrors.IsNotFound(err) {
		return false
	}
	require.NoError(f.t, err)
	return true
}

func TestPruneRunsOfDeletedBackups(t *testing.T) {
	f := newFixture(t)
	ns := f.namespace(true)
	f.plan(ns, "db", nil)
	pol := f.policy(securityv1.BackupVerifyPolicySpec{MaxConcurrentRuns: ptr.To[int32](10)})
	b1, b2, b3, b4 := f.backup(ns, "b1", "db", 1), f.backup(ns, "b2", "db", 2), f.backup(ns, "b3", "db", 3), f.backup(ns, "b4", "db", 4)
	f.ready(b1, b2, b3, b4)
	r := f.reconciler(cl)
	f.reconcile(r, pol)
	runs := f.runs(pol)
	require.Len(t, runs, 4)
	run := func(b *backupsv1.Backup) securityv1.BackupVerifyRun {
		return runs[securityv1.PolicyRunName(b, securityv1.ModeChecksumOnly)]
	}
	r1, r2, r3, r4 := run(b1), run(b2), run(b3), run(b4)
	f.event(string(r1.UID))
	f.event(string(r1.UID))
	f.event(string(r2.UID))
	f.event(string(r3.UID))
	f.event(string(r4.UID))
	other := f.event("another-run")

	f.end(ns, r1.Name, securityv1.RunSucceeded)
	f.end(ns, r3.Name, securityv1.RunFailed)
	f.end(ns, r4.Name, securityv1.RunSucceeded)
	require.NoError(t, cl.Delete(f.ctx, b1)) // terminal run: pruned
	require.NoError(t, cl.Delete(f.ctx, b2)) // run still going: left to end
	// b3 is kept: its terminal run stays. b4 is replaced by a Backup of the same name.
	require.NoError(t, cl.Delete(f.ctx, b4))
	require.NoError(t, wait.PollUntilContextTimeout(f.ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return !f.exists(b4.DeepCopy()), nil
	}))
	b4new := f.backup(ns, "b4", "db", 5)
	f.ready(b4new)
	require.NotEqual(t, b4.UID, b4new.UID)

	f.reconcile(r, pol)
	assert.False(t, f.exists(r1.DeepCopy()), "the terminal run of a deleted Backup is deleted")
	assert.Zero(t, f.eventsOf(r1.UID), "with its SecurityEvents")
	assert.True(t, f.exists(r2.DeepCopy()), "a run still going is left to end")
	assert.Equal(t, 1, f.eventsOf(r2.UID))
	assert.True(t, f.exists(r3.DeepCopy()), "the run of a Backup that is still there stays")
	assert.Equal(t, 1, f.eventsOf(r3.UID))
	assert.False(t, f.exists(r4.DeepCopy()), "the run of a replaced Backup is deleted")
	assert.Zero(t, f.eventsOf(r4.UID))
	assert.True(t, f.exists(other), "another run's SecurityEvent stays")
	runs = f.runs(pol)
	require.Equal(t, sorted([]string{r2.Name, r3.Name, securityv1.PolicyRunName(b4new, securityv1.ModeChecksumOnly)}), names(runs),
		"the new Backup of the same name gets its own run")
	assert.Equal(t, string(b4new.UID), runs[securityv1.PolicyRunName(b4new, securityv1.ModeChecksumOnly)].Labels[securityv1.LabelBackupUID])

	f.end(ns, r2.Name, securityv1.RunFailed)
	f.reconcile(r, pol)
	assert.False(t, f.exists(r2.DeepCopy()))
	assert.Zero(t, f.eventsOf(r2.UID))
	assert.True(t, f.exists(r3.DeepCopy()))
	assert.True(t, f.exists(other))
	f.assertCounts(pol, 1, 1, 0)
}

func TestInvalidSelector(t *testing.T) {
	for name, spec := range map[string]securityv1.BackupVerifyPolicySpec{
		"planSelector operator": {PlanSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "tier", Operator: "Bogus", Values: []string{"gold"}}}}},
		"namespaceSelector value": {NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "not a label value!"}}},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			ns := f.namespace(true)
			f.plan(ns, "db", map[string]string{"tier": "gold"})
			pol := f.policy(spec)
			b := f.backup(ns, "b1", "db", 1)
			f.ready(b)
			r := f.reconciler(cl)
			f.reconcile(r, pol)
			got := f.get(pol)
			c := meta.FindStatusCondition(got.Status.Conditions, securityv1.ConditionReady)
			require.NotNil(t, c)
			assert.Equal(t, metav1.ConditionFalse, c.Status)
			assert.Equal(t, securityv1.ReasonInvalidSelector, c.Reason)
			assert.Regexp(t, upperCamel, c.Reason)
			assert.NotEmpty(t, c.Message)
			assert.Equal(t, got.Generation, got.Status.ObservedGeneration)
			assert.Equal(t, got.Generation, c.ObservedGeneration)
			assert.Empty(t, f.runsIn(ns), "an invalid policy creates no run")

			// Corrected, the policy is Ready and works.
			orig := got.DeepCopy()
			got.Spec.PlanSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}
			got.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{testLabel: f.key}}
			require.NoError(t, cl.Patch(f.ctx, got, client.MergeFrom(orig)))
			f.reconcile(r, pol)
			got = f.get(pol)
			c = meta.FindStatusCondition(got.Status.Conditions, securityv1.ConditionReady)
			require.NotNil(t, c)
			assert.Equal(t, metav1.ConditionTrue, c.Status)
			assert.Equal(t, securityv1.ReasonActive, c.Reason)
			assert.Equal(t, got.Generation, got.Status.ObservedGeneration)
			assert.Equal(t, runNames(securityv1.ModeChecksumOnly, b), f.runsIn(ns))
		})
	}
	t.Run("quotes the parser", func(t *testing.T) {
		f := newFixture(t)
		pol := f.policy(securityv1.BackupVerifyPolicySpec{PlanSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "tier", Operator: "Bogus", Values: []string{"gold"}}}}})
		f.reconcile(f.reconciler(cl), pol)
		c := meta.FindStatusCondition(f.get(pol).Status.Conditions, securityv1.ConditionReady)
		require.NotNil(t, c)
		_, want := metav1.LabelSelectorAsSelector(pol.Spec.PlanSelector)
		require.Error(t, want)
		assert.Equal(t, want.Error(), c.Message)
	})
}

func TestPolicyGone(t *testing.T) {
	f := newFixture(t)
	res, err := f.reconciler(cl).Reconcile(f.ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: "no-such-policy"}})
	require.NoError(t, err)
	assert.Equal(t, reconcile.Result{}, res)
}

// TestSetupWithManager runs the reconciler in a manager whose cache cuts Backups as the
// verifier's does (TrimCachedBackup): the Plan index on the cache and the watches make a Backup
// that turns Ready, and a run that ends, lead to the next runs.
func TestSetupWithManager(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(f.ctx)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: cluster.Scheme,
		Cache:   cache.Options{DefaultTransform: cachetrim.Transform(nil, policy.TrimCachedBackup)},
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	require.NoError(t, err)
	r := f.reconciler(mgr.GetClient())
	require.NoError(t, r.SetupWithManager(ctx, mgr))
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	ns := f.namespace(true)
	f.plan(ns, "db", nil)
	pol := f.policy(securityv1.BackupVerifyPolicySpec{MaxConcurrentRuns: ptr.To[int32](1)})
	b1, b2 := f.backup(ns, "b1", "db", 1), f.backup(ns, "b2", "db", 2)
	eventually := func(what string, cond func() bool) {
		t.Helper()
		require.NoError(t, wait.PollUntilContextTimeout(f.ctx, 50*time.Millisecond, 2*time.Minute, true,
			func(context.Context) (bool, error) { return cond(), nil }), what)
	}
	eventually("the policy is Ready", func() bool {
		return meta.IsStatusConditionTrue(f.get(pol).Status.Conditions, securityv1.ConditionReady)
	})
	require.Empty(t, f.runsIn(ns), "no run for Pending Backups")

	f.ready(b1)
	eventually("b1's run", func() bool { return len(f.runsIn(ns)) == 1 })
	cached := &backupsv1.Backup{}
	require.NoError(t, mgr.GetCache().Get(ctx, client.ObjectKeyFromObject(b1), cached))
	assert.Equal(t, b1.Spec.PlanRef, cached.Spec.PlanRef)
	assert.Equal(t, backupsv1.BackupReady, cached.Status.Phase)
	assert.Equal(t, &backupsv1.BackupArtifact{}, cached.Status.Artifact, "the cache says an artifact is recorded, not where")
	assert.Empty(t, cached.Spec.ApplicationRef.Name, "what policies do not read is not cached")
	assert.Empty(t, cached.Spec.StrategyRef.Name)
	require.Equal(t, runNames(securityv1.ModeChecksumOnly, b1), f.runsIn(ns))
	f.ready(b2)
	eventually("b2 pending", func() bool { st := f.get(pol).Status; return st.PendingBackups == 1 && st.ActiveRuns == 1 })
	require.Equal(t, runNames(securityv1.ModeChecksumOnly, b1), f.runsIn(ns), "the limit holds")

	f.end(ns, securityv1.PolicyRunName(b1, securityv1.ModeChecksumOnly), securityv1.RunSucceeded)
	eventually("b2's run", func() bool { return len(f.runsIn(ns)) == 2 })
	require.Equal(t, sorted(runNames(securityv1.ModeChecksumOnly, b1, b2)), f.runsIn(ns))
	eventually("the counts", func() bool { st := f.get(pol).Status; return st.PendingBackups == 0 && st.ActiveRuns == 1 })
}

// A policy's backend fields are checked at admission: each backend takes its own fields only.
func TestPolicyBackendFieldsAtAdmission(t *testing.T) {
	f := newFixture(t)
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
	for name, c := range map[string]struct {
		spec securityv1.BackupVerifyPolicySpec
		msg  string
	}{
		"velero without runNamespace": {securityv1.BackupVerifyPolicySpec{Backend: securityv1.BackendVelero}, "runNamespace is required"},
		"velero with a planSelector": {securityv1.BackupVerifyPolicySpec{Backend: securityv1.BackendVelero, RunNamespace: "ops", PlanSelector: sel},
			"only for backend coffer"},
		"coffer with velero's source": {securityv1.BackupVerifyPolicySpec{Velero: &securityv1.VeleroBackupSource{}}, "only for backend velero"},
		"velero with etcd's source": {securityv1.BackupVerifyPolicySpec{Backend: securityv1.BackendVelero, RunNamespace: "ops",
			EtcdSnapshots: &securityv1.EtcdSnapshotSource{}}, "only for backend etcd-snapshot"},
		"etcd full-restore": {securityv1.BackupVerifyPolicySpec{Backend: securityv1.BackendEtcdSnapshot, RunNamespace: "ops",
			FullRestore: &securityv1.FullRestorePolicy{Every: 1}}, "fullRestore is not supported"},
		"an unknown backend": {securityv1.BackupVerifyPolicySpec{Backend: "tape", RunNamespace: "ops"}, "Unsupported value"},
	} {
		t.Run(name, func(t *testing.T) {
			pol := &securityv1.BackupVerifyPolicy{ObjectMeta: metav1.ObjectMeta{GenerateName: "bvp-"}, Spec: c.spec}
			err := cl.Create(f.ctx, pol)
			require.Error(t, err)
			assert.True(t, apierrors.IsInvalid(err), "%v", err)
			assert.Contains(t, err.Error(), c.msg)
		})
	}
	ok := &securityv1.BackupVerifyPolicy{ObjectMeta: metav1.ObjectMeta{GenerateName: "bvp-"}, Spec: securityv1.BackupVerifyPolicySpec{
		Backend: securityv1.BackendVelero, RunNamespace: "ops", Velero: &securityv1.VeleroBackupSource{BackupSelector: sel}}}
	require.NoError(t, cl.Create(f.ctx, ok))
	t.Cleanup(func() { _ = cl.Delete(context.Background(), ok) })
	assert.Equal(t, "velero", ok.Spec.Velero.Namespace, "Velero's namespace by default")
	unset := &securityv1.BackupVerifyPolicy{ObjectMeta: metav1.ObjectMeta{GenerateName: "bvp-"}}
	require.NoError(t, cl.Create(f.ctx, unset))
	t.Cleanup(func() { _ = cl.Delete(context.Background(), unset) })
	assert.Equal(t, securityv1.BackendCoffer, unset.Spec.Backend, "coffer by default, as before backends")
}

// What this cluster or verifier lacks is a False Ready condition that says so, not an error loop:
// Coffer's CRDs (looked at when the verifier starts), Velero's, a snapshot directory.
func TestPolicyBackendNotAvailable(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		spec   securityv1.BackupVerifyPolicySpec
		reason string
	}{
		{securityv1.BackupVerifyPolicySpec{}, securityv1.ReasonCofferNotInstalled},
		{securityv1.BackupVerifyPolicySpec{Backend: securityv1.BackendVelero, RunNamespace: "ops"}, securityv1.ReasonVeleroNotInstalled},
		{securityv1.BackupVerifyPolicySpec{Backend: securityv1.BackendEtcdSnapshot, RunNamespace: "ops"}, securityv1.ReasonSnapshotDirNotConfigured},
	} {
		pol := &securityv1.BackupVerifyPolicy{ObjectMeta: metav1.ObjectMeta{GenerateName: "bvp-"}, Spec: c.spec}
		require.NoError(t, cl.Create(f.ctx, pol))
		t.Cleanup(func() { _ = cl.Delete(context.Background(), pol) })
		r := f.reconciler(cl)
		r.Coffer = false // this API server serves Coffer's CRDs; the verifier found none at its start
		_, err := r.Reconcile(f.ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: pol.Name}})
		require.NoError(t, err)
		cond := meta.FindStatusCondition(f.get(pol).Status.Conditions, securityv1.ConditionReady)
		require.NotNil(t, cond, c.reason)
		assert.Equal(t, metav1.ConditionFalse, cond.Status, c.reason)
		assert.Equal(t, c.reason, cond.Reason)
		assert.NotEmpty(t, cond.Message)
	}
	// A snapshot directory the verifier cannot list (here a file, which no uid can list).
	dir := filepath.Join(t.TempDir(), "not-a-directory")
	require.NoError(t, os.WriteFile(dir, nil, 0o600))
	pol := &securityv1.BackupVerifyPolicy{ObjectMeta: metav1.ObjectMeta{GenerateName: "bvp-"}, Spec: securityv1.BackupVerifyPolicySpec{
		Backend: securityv1.BackendEtcdSnapshot, RunNamespace: "ops"}}
	require.NoError(t, cl.Create(f.ctx, pol))
	t.Cleanup(func() { _ = cl.Delete(context.Background(), pol) })
	r := f.reconciler(cl)
	r.SnapshotDir = dir
	_, err := r.Reconcile(f.ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: pol.Name}})
	require.NoError(t, err)
	cond := meta.FindStatusCondition(f.get(pol).Status.Conditions, securityv1.ConditionReady)
	require.NotNil(t, cond)
	assert.Equal(t, securityv1.ReasonSnapshotDirUnreadable, cond.Reason)
}

// verdict records a checksum-only verdict on b, as the verifier's verdict controller does.
func (f *fixture) verdict(b *backupsv1.Backup) {
	cur := &backupsv1.Backup{}
	require.NoError(f.t, cl.Get(f.ctx, client.ObjectKeyFromObject(b), cur))
	orig := cur.DeepCopy()
	cur.Status.Verification = &backupsv1.BackupVerification{Checksum: &backupsv1.VerificationVerdict{
		Result: backupsv1.VerificationPassed, Time: metav1.NewTime(t0)}}
	require.NoError(f.t, cl.Status().Patch(f.ctx, cur, client.MergeFrom(orig)))
}

// A pass over verified Backups reads none of their runs: a Backup with a verdict of the mode gets
// no run and no lookup of one, and of the policy's runs only those in flight are listed from the
// API server (status.phase is a selectable field), however many have ended.
func TestPassReadsOnlyRunsInFlight(t *testing.T) {
	f := newFixture(t)
	ns := f.namespace(true)
	f.plan(ns, "db", nil)
	pol := f.policy(securityv1.BackupVerifyPolicySpec{MaxConcurrentRuns: ptr.To[int32](10)})
	var bs []*backupsv1.Backup
	for i := range 6 {
		b := f.backup(ns, fmt.Sprintf("b%d", i), "db", i)
		f.ready(b)
		bs = append(bs, b)
	}
	f.reconcile(f.reconciler(cl), pol)
	require.Equal(t, runNames(securityv1.ModeChecksumOnly, bs...), names(f.runs(pol)))
	// Five end with their verdict recorded; the sixth is in flight.
	for _, b := range bs[:5] {
		f.end(ns, securityv1.PolicyRunName(b, securityv1.ModeChecksumOnly), securityv1.RunSucceeded)
		f.verdict(b)
	}
	// A Backup verified by a run the policy did not make.
	byHand := f.backup(ns, "by-hand", "db", 7)
	f.ready(byHand)
	f.verdict(byHand)

	var runGets, listed atomic.Int32
	counting := interceptor.NewClient(cl, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*securityv1.BackupVerifyRun); ok {
				runGets.Add(1)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	reader := interceptor.NewClient(cl, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			err := c.List(ctx, list, opts...)
			if l, ok := list.(*securityv1.BackupVerifyRunList); ok {
				listed.Add(int32(len(l.Items)))
			}
			return err
		},
	})
	r := f.reconciler(counting)
	r.Reader = reader
	f.reconcile(r, pol)
	assert.Equal(t, runNames(securityv1.ModeChecksumOnly, bs...), names(f.runs(pol)), "no run for the Backup verified by hand")
	assert.EqualValues(t, 1, runGets.Load(), "only the run of the Backup without a verdict is looked up")
	assert.EqualValues(t, 1, listed.Load(), "only the run in flight is listed uncached")
	f.assertCounts(pol, 1, 1, 0)

	// An older install: its BackupVerifyRun CRD has no selectable status.phase, and the API server
	// refuses the field selector (400). The pass reads every run of the policy instead, and counts
	// the same run in flight.
	var refused atomic.Int32
	listed.Store(0)
	r.Reader = interceptor.NewClient(cl, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			l, ok := list.(*securityv1.BackupVerifyRunList)
			if o := (&client.ListOptions{}).ApplyOptions(opts); ok && o.FieldSelector != nil && !o.FieldSelector.Empty() {
				refused.Add(1)
				return apierrors.NewBadRequest(`field label not supported: ` + securityv1.FieldRunPhase)
			}
			err := c.List(ctx, list, opts...)
			if ok {
				listed.Add(int32(len(l.Items)))
			}
			return err
		},
	})
	f.reconcile(r, pol)
	assert.EqualValues(t, 1, refused.Load())
	assert.EqualValues(t, len(bs), listed.Load(), "every run of the policy is listed uncached")
	f.assertCounts(pol, 1, 1, 0)
}
