package driverkit_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/driverkit"
)

// The kit's tests drive its reconcilers directly against a real kube-apiserver and etcd, with a
// scripted Driver and a fake clock.

// S is the strategy type of the tests: objects of the CRD in testdata.
type S = *unstructured.Unstructured

const (
	driverName = "kit-test-driver"
	group      = "test.driverkit.example.com"
	kind       = "Strategy"
	finalizer  = group + "/artifact"
)

var (
	scheme = runtime.NewScheme()
	// restConfig is the API server's admin config; cl an uncached client for it.
	restConfig *rest.Config
	cl         client.WithWatch
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(backupsv1.AddToScheme(scheme))
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run the tests through `make test`, or export KUBEBUILDER_ASSETS=$(hack/testbin.sh)")
		return 1
	}
	env := &envtest.Environment{ErrorIfCRDPathMissing: true,
		CRDDirectoryPaths: []string{"../deploy/core-controller/crd", "testdata"}}
	var err error
	if restConfig, err = env.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "starting kube-apiserver and etcd:", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	if cl, err = client.NewWithWatch(restConfig, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// script is the Driver of the tests: each test says what its calls return.
type script struct {
	mu       sync.Mutex
	deadline time.Duration
	backup   func(ctx context.Context, run *driverkit.BackupRun[S]) (driverkit.BackupOutcome, error)
	restore  func(ctx context.Context, run *driverkit.RestoreRun[S]) (driverkit.RestoreOutcome, error)
	delete   func(ctx context.Context, b *backupsv1.Backup) (driverkit.DeleteOutcome, error)
	// backups and restores record the runs the kit handed over.
	backups  []*driverkit.BackupRun[S]
	restores []*driverkit.RestoreRun[S]
}

func (d *script) Deadline(S) time.Duration { return d.deadline }

func (d *script) Backup(ctx context.Context, run *driverkit.BackupRun[S]) (driverkit.BackupOutcome, error) {
	d.mu.Lock()
	d.backups = append(d.backups, run)
	d.mu.Unlock()
	return d.backup(ctx, run)
}

func (d *script) Restore(ctx context.Context, run *driverkit.RestoreRun[S]) (driverkit.RestoreOutcome, error) {
	d.mu.Lock()
	d.restores = append(d.restores, run)
	d.mu.Unlock()
	return d.restore(ctx, run)
}

// scriptOptions are the restore options the script driver takes (driverkit.RestoreOptioner).
type scriptOptions struct {
	FailIfTargetExists bool  `json:"failIfTargetExists"`
	TimeoutSeconds     int64 `json:"restoreTimeoutSeconds"`
}

func (d *script) NewRestoreOptions() any { return &scriptOptions{} }

func (d *script) DeleteArtifact(ctx context.Context, b *backupsv1.Backup) (driverkit.DeleteOutcome, error) {
	return d.delete(ctx, b)
}

// inProgress, stored and restored are the usual script outcomes.
func inProgress(waiting string) func(context.Context, *driverkit.BackupRun[S]) (driverkit.BackupOutcome, error) {
	return func(context.Context, *driverkit.BackupRun[S]) (driverkit.BackupOutcome, error) {
		return driverkit.BackupOutcome{Waiting: waiting}, nil
	}
}

func stored(context.Context, *driverkit.BackupRun[S]) (driverkit.BackupOutcome, error) {
	return driverkit.BackupOutcome{Result: &driverkit.BackupResult{Artifact: artifact,
		DriverMetadata: map[string]string{"object": "x"}, Finalize: true}}, nil
}

var artifact = backupsv1.BackupArtifact{URI: "test://bucket/x", SizeBytes: 42, Checksum: "sha256:" + strings.Repeat("ab", 32)}

// fixture is one test's namespace, strategy, class and kit.
type fixture struct {
	t        *testing.T
	ctx      context.Context
	ns       string
	strategy string
	class    string
	params   map[string]string
	clock    *clocktesting.FakeClock
	driver   *script
	events   *events.FakeRecorder
	kit      *driverkit.Kit[S]
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{t: t, ctx: context.Background(), params: map[string]string{"location": "primary"},
		clock:  clocktesting.NewFakeClock(time.Now().Truncate(time.Second)),
		driver: &script{deadline: 10 * time.Minute},
		events: events.NewFakeRecorder(100)}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kit-"}}
	f.create(ns)
	f.ns = ns.Name
	f.strategy = f.newStrategy()
	f.class = f.newClass(group, kind, f.strategy, f.params)
	f.kit = &driverkit.Kit[S]{
		Name:        driverName,
		Strategy:    driverkit.StrategyKind{Group: group, Kind: kind},
		NewStrategy: newStrategyObject,
		Finalizer:   finalizer,
		Driver:      f.driver,
		Client:      cl,
		Clock:       f.clock,
		Recorder:    f.events,
	}
	return f
}

func newStrategyObject() S {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: group, Version: "v1", Kind: kind})
	return u
}

func (f *fixture) create(obj client.Object) {
	f.t.Helper()
	require.NoError(f.t, cl.Create(f.ctx, obj))
}

func (f *fixture) get(obj client.Object) {
	f.t.Helper()
	require.NoError(f.t, cl.Get(f.ctx, client.ObjectKeyFromObject(obj), obj))
}

func (f *fixture) newStrategy() string {
	s := newStrategyObject()
	s.SetGenerateName("kit-")
	f.create(s)
	f.t.Cleanup(func() { _ = cl.Delete(context.Background(), s) })
	return s.GetName()
}

// newClass creates a BackupClass resolving the Shop kind to the strategy group/kind/name.
func (f *fixture) newClass(group, kind, name string, params map[string]string) string {
	c := &backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{GenerateName: f.ns + "-"}, Spec: backupsv1.BackupClassSpec{
		Strategies: []backupsv1.BackupClassStrategy{{
			Application: backupsv1.ApplicationSelector{Kind: "Shop"},
			StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr.To(group), Kind: kind, Name: name},
			Parameters:  params,
		}}}}
	f.create(c)
	f.t.Cleanup(func() { _ = cl.Delete(context.Background(), c) })
	return c.Name
}

func (f *fixture) strategyRef() corev1.TypedLocalObjectReference {
	return corev1.TypedLocalObjectReference{APIGroup: ptr.To(group), Kind: kind, Name: f.strategy}
}

// backupJob creates a BackupJob of the Shop "shop" with the given class.
func (f *fixture) backupJob(class string) *backupsv1.BackupJob {
	j := &backupsv1.BackupJob{ObjectMeta: metav1.ObjectMeta{GenerateName: "job-", Namespace: f.ns},
		Spec: backupsv1.BackupJobSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"}, BackupClassName: class}}
	f.create(j)
	return j
}

// readyBackup creates a Ready Backup of this driver, as a finished run leaves it.
func (f *fixture) readyBackup(finalizers ...string) *backupsv1.Backup {
	b := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{GenerateName: "backup-", Namespace: f.ns, Finalizers: finalizers},
		Spec: backupsv1.BackupSpec{ApplicationRef: corev1.TypedLocalObjectReference{APIGroup: ptr.To(backupsv1.DefaultApplicationAPIGroup), Kind: "Shop", Name: "shop"},
			StrategyRef: f.strategyRef(), TakenAt: metav1.NewTime(f.clock.Now())}}
	f.create(b)
	b.Status = backupsv1.BackupStatus{Phase: backupsv1.BackupReady, Artifact: artifact.DeepCopy()}
	require.NoError(f.t, cl.Status().Update(f.ctx, b))
	return b
}

func (f *fixture) restoreJob(backup string) *backupsv1.RestoreJob {
	rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{GenerateName: "restore-", Namespace: f.ns},
		Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: backup}}}
	f.create(rj)
	return rj
}

func request(obj client.Object) reconcile.Request {
	return reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)}
}

// reconcileJob runs the BackupJob reconciler once and re-reads the job.
func (f *fixture) reconcileJob(job *backupsv1.BackupJob) (reconcile.Result, error) {
	f.t.Helper()
	res, err := f.kit.BackupJobReconciler().Reconcile(f.ctx, request(job))
	f.get(job)
	return res, err
}

func (f *fixture) reconcileRestore(rj *backupsv1.RestoreJob) (reconcile.Result, error) {
	f.t.Helper()
	res, err := f.kit.RestoreJobReconciler().Reconcile(f.ctx, request(rj))
	f.get(rj)
	return res, err
}

func (f *fixture) reconcileBackup(b *backupsv1.Backup) (reconcile.Result, error) {
	f.t.Helper()
	return f.kit.BackupReconciler().Reconcile(f.ctx, request(b))
}

// emitted drains the events the kit emitted so far.
func (f *fixture) emitted() []string {
	var out []string
	for {
		select {
		case e := <-f.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}
