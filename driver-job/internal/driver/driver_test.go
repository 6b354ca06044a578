// Tests of the Job driver's reconcilers on a real kube-apiserver. No kubelet or Job controller runs
// here: where a Job must finish, the test plays them by writing the pod and Job status the way
// they do. That proves the reconcilers only; the real-node suite proves the Jobs really run.
package driver_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-job/internal/agent"
	"github.com/coffer-backup/coffer/driver-job/internal/driver"
	"github.com/coffer-backup/coffer/driver-job/internal/jobs"
	"github.com/coffer-backup/coffer/driver-job/internal/names"
	"github.com/coffer-backup/coffer/driverkit"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
)

var (
	cl client.WithWatch
	// restConfig is the API server's admin config, from which tenants are impersonated.
	restConfig *rest.Config
	sch        = driver.Scheme()
	// t0 is the tests' clock; it is far from the real time, so a test cannot pass by accident.
	t0 = time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	c, err := cluster.Start(context.Background(), cluster.Options{CRDDirectoryPaths: crdDirs()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the API server:", err)
		return 1
	}
	defer func() { _ = c.Stop() }()
	restConfig = c.Config
	if cl, err = client.NewWithWatch(c.Config, client.Options{Scheme: sch}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stopMinIO()
	// The restore-target admission policy: the kit runs restores aimed at another namespace (the
	// verifications below) only once it is bound.
	root, err := manifests.RepoRoot()
	if err == nil {
		var policies []*unstructured.Unstructured
		if policies, err = manifests.Render(filepath.Join(root, "deploy", "core-controller", "policies")); err == nil {
			err = manifests.Apply(context.Background(), cl, policies)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "installing the restore-target policy:", err)
		return 1
	}
	return m.Run()
}

func crdDirs() []string {
	return []string{"../../../deploy/core-controller/crd", "../../../deploy/driver-job/crd", "../../../e2e/harness/testdata", "../../../tools/testbin/csi/crds"}
}

// fixture is one namespace with a Shop, a strategy and a class resolving Shops to it.
type fixture struct {
	t        *testing.T
	ctx      context.Context
	ns       string
	strategy *jobapi.JobBackupStrategy
	class    *backupsv1.BackupClass
	clock    *clocktesting.FakeClock
	rec      *events.FakeRecorder
}

func agentTemplate(args ...string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "agent", Image: "coffer/coffer-agent:dev", Args: args,
		Env: []corev1.EnvVar{{Name: jobapi.EnvMode, Value: "spoofed"}, {Name: "KEEP", Value: "me"}},
	}}}}
}

func newFixture(t *testing.T, mutate func(*jobapi.JobBackupStrategySpec)) *fixture {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "jobdriver-"}}
	require.NoError(t, cl.Create(ctx, ns))
	f := &fixture{t: t, ctx: ctx, ns: ns.Name, clock: clocktesting.NewFakeClock(t0), rec: events.NewFakeRecorder(100)}
	f.strategy = &jobapi.JobBackupStrategy{ObjectMeta: metav1.ObjectMeta{Name: ns.Name + "-tar"},
		Spec: jobapi.JobBackupStrategySpec{Template: agentTemplate("--dir=/data", "--app={{ .Application.metadata.name }}", "--bucket={{ .Parameters.bucket }}", "--mode={{ .Mode }}")}}
	if mutate != nil {
		mutate(&f.strategy.Spec)
	}
	require.NoError(t, cl.Create(ctx, f.strategy))
	f.class = &backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: ns.Name + "-class"},
		Spec: backupsv1.BackupClassSpec{Strategies: []backupsv1.BackupClassStrategy{{
			StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr.To(jobapi.Group), Kind: jobapi.Kind, Name: f.strategy.Name},
			Application: backupsv1.ApplicationSelector{Kind: "Shop"},
			Parameters:  map[string]string{"bucket": "coffer", "endpoint": "http://10.0.0.1:9000"},
		}}}}
	require.NoError(t, cl.Create(ctx, f.class))
	shop := &unstructured.Unstructured{}
	shop.SetAPIVersion("apps.cozystack.io/v1alpha1")
	shop.SetKind("Shop")
	shop.SetNamespace(ns.Name)
	shop.SetName("web")
	require.NoError(t, cl.Create(ctx, shop))
	return f
}

func (f *fixture) backupJob() *backupsv1.BackupJob {
	bj := &backupsv1.BackupJob{ObjectMeta: metav1.ObjectMeta{GenerateName: "nightly-", Namespace: f.ns},
		Spec: backupsv1.BackupJobSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: "web"}, BackupClassName: f.class.Name}}
	require.NoError(f.t, cl.Create(f.ctx, bj))
	return bj
}

// kit is the driver on client c, as a restarted process would run it.
func (f *fixture) kit(c client.Client) *driver.Kit {
	return driver.New(&driver.Driver{Client: c, Live: cl, Scheme: sch, Recorder: f.rec}, f.clock)
}

func (f *fixture) backupReconciler(c client.Client) reconcile.Reconciler {
	return f.kit(c).BackupJobReconciler()
}

func (f *fixture) restoreReconciler() reconcile.Reconciler { return f.kit(cl).RestoreJobReconciler() }

func (f *fixture) cleanupReconciler() reconcile.Reconciler { return f.kit(cl).BackupReconciler() }

func reconcileOnce(t *testing.T, r reconcile.Reconciler, o client.Object) reconcile.Result {
	t.Helper()
	res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)})
	require.NoError(t, err)
	return res
}

func get[T client.Object](t *testing.T, o T) T {
	t.Helper()
	require.NoError(t, cl.Get(context.Background(), client.ObjectKeyFromObject(o), o))
	return o
}

func (f *fixture) jobsInNamespace() []batchv1.Job {
	list := &batchv1.JobList{}
	require.NoError(f.t, cl.List(f.ctx, list, client.InNamespace(f.ns)))
	return list.Items
}

func (f *fixture) onlyJob() *batchv1.Job {
	f.t.Helper()
	items := f.jobsInNamespace()
	require.Len(f.t, items, 1, "exactly one Job")
	return &items[0]
}

func env(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		if _, dup := out[e.Name]; dup {
			out[e.Name] = "DUPLICATE"
			continue
		}
		out[e.Name] = e.Value
	}
	return out
}

// finish plays the kubelet and the Job controller: a pod of the Job ends with the given exit code
// and termination message, and the Job gets the conditions its controller would write.
func (f *fixture) finish(j *batchv1.Job, exitCode int32, message, jobReason string) {
	f.t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: j.Name + "-x", Namespace: j.Namespace,
		Labels: map[string]string{batchv1.ControllerUidLabel: string(j.UID), batchv1.JobNameLabel: j.Name},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: j.Name, UID: j.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: *j.Spec.Template.Spec.DeepCopy()}
	f.podEnds(cl, pod, exitCode, message)
	f.jobEnds(j, exitCode, jobReason)
}

// podEnds creates the pod with client c and plays the kubelet: the pod ends with the exit code and
// termination message (status written by the admin client, as the kubelet would).
func (f *fixture) podEnds(c client.Client, pod *corev1.Pod, exitCode int32, message string) {
	f.t.Helper()
	require.NoError(f.t, c.Create(f.ctx, pod))
	pod.Status.Phase = corev1.PodSucceeded
	if exitCode != 0 {
		pod.Status.Phase = corev1.PodFailed
	}
	term := &corev1.ContainerStateTerminated{ExitCode: exitCode, Message: message, Reason: "Completed"}
	if exitCode != 0 {
		term.Reason = "Error"
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "agent", Image: "coffer/coffer-agent:dev", State: corev1.ContainerState{Terminated: term}}}
	require.NoError(f.t, cl.Status().Update(f.ctx, pod))
}

// jobEnds plays the Job controller: the Job gets the conditions it would write.
func (f *fixture) jobEnds(j *batchv1.Job, exitCode int32, jobReason string) {
	f.t.Helper()
	j = get(f.t, j)
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	j.Status.StartTime = &now
	if exitCode == 0 {
		j.Status.Succeeded = 1
		j.Status.CompletionTime = &now
		j.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: "CompletionsReached", LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Reason: "CompletionsReached", LastTransitionTime: now}}
	} else {
		j.Status.Failed = 1
		j.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: jobReason, LastTransitionTime: now},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: jobReason, Message: "Job has reached the specified backoff limit", LastTransitionTime: now}}
	}
	require.NoError(f.t, cl.Status().Update(f.ctx, j))
}

const goodSum = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func goodReport(key string) string {
	return `{"uri":"s3://coffer/` + key + `","sizeBytes":4096,"checksum":"` + goodSum + `"}`
}

func readyCondition(conds []metav1.Condition) *metav1.Condition {
	return meta.FindStatusCondition(conds, backupsv1.ConditionReady)
}

// The whole backup branch: claim, render, one Job with the contract's env, report → Backup.
func TestBackupJobSucceedsFromTheAgentReport(t *testing.T) {
	f := newFixture(t, func(s *jobapi.JobBackupStrategySpec) {
		s.BackoffLimit, s.ActiveDeadlineSeconds, s.TTLSecondsAfterFinished = ptr.To[int32](2), ptr.To[int64](600), ptr.To[int32](30)
	})
	bj := f.backupJob()
	r := f.backupReconciler(cl)

	res := reconcileOnce(t, r, bj)
	bj = get(t, bj)
	require.Equal(t, backupsv1.BackupJobRunning, bj.Status.Phase)
	require.Equal(t, t0, bj.Status.StartedAt.Time.UTC())
	require.Equal(t, metav1.ConditionTrue, meta.FindStatusCondition(bj.Status.Conditions, backupsv1.ConditionAccepted).Status)
	require.Equal(t, 600*time.Second+jobs.DeadlineGrace, res.RequeueAfter, "requeues only for the driver's own deadline")

	j := f.onlyJob()
	require.Equal(t, names.Job(names.KindBackupJob, bj.Name, bj.UID), j.Name)
	require.Equal(t, string(bj.UID), j.Labels[names.LabelRunUID])
	require.True(t, metav1.IsControlledBy(j, bj), "the BackupJob owns its Job")
	require.Equal(t, int32(2), *j.Spec.BackoffLimit)
	require.Equal(t, int64(600), *j.Spec.ActiveDeadlineSeconds)
	require.Nil(t, j.Spec.TTLSecondsAfterFinished, "no TTL before the outcome is recorded")
	require.Equal(t, corev1.RestartPolicyNever, j.Spec.Template.Spec.RestartPolicy)
	c := j.Spec.Template.Spec.Containers[0]
	require.Equal(t, []string{"--dir=/data", "--app=web", "--bucket=coffer", "--mode=backup"}, c.Args)
	e := env(c)
	require.Equal(t, jobapi.ModeBackup, e[jobapi.EnvMode], "the template cannot spoof the contract variables")
	require.Equal(t, "me", e["KEEP"])
	require.Equal(t, "BackupJob", e[jobapi.EnvRunKind])
	require.Equal(t, bj.Name, e[jobapi.EnvRunName])
	require.Equal(t, f.ns, e[jobapi.EnvRunNamespace])
	require.Equal(t, string(bj.UID), e[jobapi.EnvRunUID])
	require.Equal(t, "apps.cozystack.io", e[jobapi.EnvApplicationAPIGroup])
	require.Equal(t, "Shop", e[jobapi.EnvApplicationKind])
	require.Equal(t, "web", e[jobapi.EnvApplicationName])
	require.Equal(t, "coffer", e["COFFER_PARAM_BUCKET"])
	require.Equal(t, "http://10.0.0.1:9000", e["COFFER_PARAM_ENDPOINT"])

	// A second pass while the Job runs changes nothing.
	rv := bj.ResourceVersion
	reconcileOnce(t, r, bj)
	require.Equal(t, rv, get(t, bj).ResourceVersion)
	require.Len(t, f.jobsInNamespace(), 1)

	f.clock.Step(42 * time.Second)
	f.finish(j, 0, goodReport(f.ns+"/y.tar"), "")
	reconcileOnce(t, r, bj)
	bj = get(t, bj)
	require.Equal(t, backupsv1.BackupJobSucceeded, bj.Status.Phase)
	require.Equal(t, bj.Name, bj.Status.BackupRef.Name)
	require.Equal(t, t0.Add(42*time.Second), bj.Status.CompletedAt.Time.UTC())

	b := get(t, &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: bj.Name, Namespace: f.ns}})
	require.Empty(t, b.OwnerReferences, "a Backup outlives its BackupJob")
	require.Empty(t, b.Finalizers, "no cleanup template: no finalizer, the artifact stays")
	require.Equal(t, backupsv1.BackupReady, b.Status.Phase)
	require.Equal(t, &backupsv1.BackupArtifact{URI: "s3://coffer/" + f.ns + "/y.tar", SizeBytes: 4096, Checksum: goodSum}, b.Status.Artifact)
	require.Equal(t, "Shop", b.Spec.ApplicationRef.Kind)
	require.Equal(t, "apps.cozystack.io", *b.Spec.ApplicationRef.APIGroup)
	require.Equal(t, f.strategy.Name, b.Spec.StrategyRef.Name)
	require.Equal(t, j.Name, b.Spec.DriverMetadata[names.MetaJobName])
	require.Equal(t, "coffer", b.Spec.DriverMetadata["param.bucket"])
	require.Equal(t, string(bj.UID), b.Labels[backupsv1.LabelBackupJobUID])
	require.False(t, b.Spec.TakenAt.IsZero())

	// The record template the agent completes and stores next to the artifact (BK-11) describes
	// this very Backup, taken in this cluster (the UID of kube-system).
	record, err := agent.ParseRecordTemplate(e[jobapi.EnvRecord])
	require.NoError(t, err)
	ks := &corev1.Namespace{}
	require.NoError(t, cl.Get(context.Background(), client.ObjectKey{Name: "kube-system"}, ks))
	require.Equal(t, string(ks.UID), record.SourceCluster.ID)
	require.Equal(t, b.Namespace, record.Namespace)
	require.Equal(t, b.Name, record.Name)
	require.Equal(t, b.Spec.ApplicationRef, record.Spec.ApplicationRef)
	require.Equal(t, b.Spec.StrategyRef, record.Spec.StrategyRef)
	require.Equal(t, b.Labels[backupsv1.LabelApplicationName], record.Labels[backupsv1.LabelApplicationName])
	for k, v := range record.Spec.DriverMetadata {
		require.Equal(t, v, b.Spec.DriverMetadata[k], "driverMetadata %s", k)
	}
	require.Empty(t, record.Artifact, "the artifact is the agent's to fill in")

	// The next reconcile, of the now terminal run, hands the Job to its TTL.
	reconcileOnce(t, r, bj)
	require.Equal(t, int32(30), *get(t, j).Spec.TTLSecondsAfterFinished)
}

// A crash right after the Job was created: a new reconciler adopts the Job. A crash after the
// Backup was created but before the BackupJob's status write: a new reconciler finishes with the
// recorded artifact even when the pods are gone. Exactly one Job and one Backup either way.
func TestBackupJobCrashWindows(t *testing.T) {
	f := newFixture(t, nil)
	bj := f.backupJob()
	crash := errors.New("killed right after the write")
	crashAfterJobCreate := interceptor.NewClient(cl, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := c.Create(ctx, obj, opts...); err != nil {
				return err
			}
			if _, isJob := obj.(*batchv1.Job); isJob {
				return crash
			}
			return nil
		},
	})
	_, err := f.backupReconciler(crashAfterJobCreate).Reconcile(f.ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(bj)})
	require.ErrorIs(t, err, crash)
	require.Equal(t, backupsv1.BackupJobRunning, get(t, bj).Status.Phase, "claimed before the Job was created")
	first := f.onlyJob()

	reconcileOnce(t, f.backupReconciler(cl), bj)
	require.Equal(t, first.UID, f.onlyJob().UID, "the same Job, adopted")
	require.Equal(t, backupsv1.BackupJobRunning, get(t, bj).Status.Phase)

	crashingStatus := interceptor.NewClient(cl, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if _, isRun := obj.(*backupsv1.BackupJob); isRun {
				return crash
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	f.finish(first, 0, goodReport(f.ns+"/a.tar"), "")
	_, err = f.backupReconciler(crashingStatus).Reconcile(f.ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(bj)})
	require.ErrorIs(t, err, crash)
	require.Equal(t, backupsv1.BackupJobRunning, get(t, bj).Status.Phase, "the terminal status write was lost")
	b := get(t, &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: bj.Name, Namespace: f.ns}})
	require.Equal(t, goodSum, b.Status.Artifact.Checksum)

	// The pods are collected meanwhile: the recorded artifact is enough.
	require.NoError(t, cl.DeleteAllOf(f.ctx, &corev1.Pod{}, client.InNamespace(f.ns)))
	reconcileOnce(t, f.backupReconciler(cl), bj)
	require.Equal(t, backupsv1.BackupJobSucceeded, get(t, bj).Status.Phase)
	list := &backupsv1.BackupList{}
	require.NoError(t, cl.List(f.ctx, list, client.InNamespace(f.ns)))
	require.Len(t, list.Items, 1)
	require.Len(t, f.jobsInNamespace(), 1)
}

// A run another driver claimed stays theirs even when its class now resolves to this driver (the
// class was edited while the run was in flight), and so does a restore.
func TestRunsClaimedByAnotherDriverAreUntouched(t *testing.T) {
	f := newFixture(t, nil)
	bj := f.backupJob()
	bj.MarkRunning(metav1.Now(), "coffer-driver-velero")
	require.NoError(t, cl.Status().Update(f.ctx, bj))
	reconcileOnce(t, f.backupReconciler(cl), bj)
	require.Equal(t, bj.ResourceVersion, get(t, bj).ResourceVersion)
	require.Equal(t, "coffer-driver-velero", bj.ClaimedBy())

	b := f.succeededBackup()
	rj := f.restoreJob(b, nil)
	rj.MarkRunning(metav1.Now(), "coffer-driver-velero")
	require.NoError(t, cl.Status().Update(f.ctx, rj))
	reconcileOnce(t, f.restoreReconciler(), rj)
	require.Equal(t, rj.ResourceVersion, get(t, rj).ResourceVersion)
	require.Empty(t, f.jobsOf(names.KindRestoreJob))
	require.Len(t, f.jobsOf(names.KindBackupJob), 1, "only the job driver's own run got a Job")
}

// A Job of the run's name that the driver did not create for this run is never adopted. The
// driver's cache holds only Jobs labelled as its own, so it cannot see such a Job: the refusal must
// come from the failed create and an uncached read.
func TestBackupJobRefusesAForeignJob(t *testing.T) {
	f := newFixture(t, nil)
	bj := f.backupJob()
	foreign := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: names.Job(names.KindBackupJob, bj.Name, bj.UID), Namespace: f.ns,
		Labels: map[string]string{names.LabelRunUID: "someone-else", names.LabelRunKind: names.KindBackupJob}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "x", Image: "x"}}}}}}
	require.NoError(t, cl.Create(f.ctx, foreign))
	cacheView := interceptor.NewClient(cl, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			if _, isJob := obj.(*batchv1.Job); isJob && obj.GetLabels()[backupsv1.LabelManagedBy] != names.DriverName {
				return apierrors.NewNotFound(batchv1.Resource("jobs"), key.Name)
			}
			return nil
		},
	})
	reconcileOnce(t, f.backupReconciler(cacheView), bj)
	bj = get(t, bj)
	require.Equal(t, backupsv1.BackupJobFailed, bj.Status.Phase)
	require.Equal(t, backupsv1.ReasonNameConflict, readyCondition(bj.Status.Conditions).Reason)
	require.Contains(t, bj.Status.Message, "was not adopted")
	j := f.onlyJob()
	require.Equal(t, foreign.UID, j.UID)
	require.Equal(t, foreign.ResourceVersion, j.ResourceVersion, "the foreign Job is untouched")
	reconcileOnce(t, f.backupReconciler(cl), bj) // terminal: Release must leave the foreign Job alone
	require.Equal(t, j.ResourceVersion, f.onlyJob().ResourceVersion)
}

// Bad inputs fail the run with a reason a user can act on, and create no Job.
func TestBackupJobInputFailures(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*jobapi.JobBackupStrategySpec)
		before func(f *fixture)
		reason string
		msg    string
	}{
		{name: "template refers to a missing parameter", reason: backupsv1.ReasonTemplateRenderFailed, msg: "missing",
			mutate: func(s *jobapi.JobBackupStrategySpec) { s.Template = agentTemplate("--x={{ .Parameters.missing }}") }},
		{name: "template renders to no containers", reason: backupsv1.ReasonTemplateRenderFailed, msg: "no containers",
			mutate: func(s *jobapi.JobBackupStrategySpec) { s.Template = corev1.PodTemplateSpec{} }},
		{name: "the API server rejects the rendered Job", reason: backupsv1.ReasonTemplateRenderFailed, msg: "rejected",
			mutate: func(s *jobapi.JobBackupStrategySpec) { s.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways }},
		{name: "strategy deleted", reason: backupsv1.ReasonStrategyNotFound, msg: "not found",
			before: func(f *fixture) { require.NoError(f.t, cl.Delete(f.ctx, f.strategy)) }},
		{name: "application missing", reason: backupsv1.ReasonApplicationNotFound, msg: "Shop",
			before: func(f *fixture) {
				require.NoError(f.t, cl.DeleteAllOf(f.ctx, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Shop"}}, client.InNamespace(f.ns)))
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.mutate)
			if tc.before != nil {
				tc.before(f)
			}
			bj := f.backupJob()
			reconcileOnce(t, f.backupReconciler(cl), bj)
			bj = get(t, bj)
			require.Equal(t, backupsv1.BackupJobFailed, bj.Status.Phase, bj.Status.Message)
			require.Equal(t, tc.reason, readyCondition(bj.Status.Conditions).Reason)
			require.Contains(t, bj.Status.Message, tc.msg)
			require.NotNil(t, bj.Status.CompletedAt)
			require.Empty(t, f.jobsInNamespace())
			require.NotEmpty(t, f.rec.Events, "a Warning event")
		})
	}
}

// An agent whose report is missing or invalid fails the run: a backup that cannot be located is
// not a backup. No Backup is created.
func TestBackupJobRejectsBadReports(t *testing.T) {
	for name, msg := range map[string]string{
		"no report":      "",
		"not JSON":       "all done",
		"bad checksum":   `{"uri":"s3://coffer/a.tar","sizeBytes":1,"checksum":"sha256:1234"}`,
		"no uri":         `{"sizeBytes":1,"checksum":"` + goodSum + `"}`,
		"negative size":  `{"uri":"s3://coffer/a.tar","sizeBytes":-5,"checksum":"` + goodSum + `"}`,
		"unknown fields": `{"uri":"s3://coffer/a.tar","sizeBytes":1,"checksum":"` + goodSum + `","md5":"x"}`,
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, nil)
			bj := f.backupJob()
			reconcileOnce(t, f.backupReconciler(cl), bj)
			f.finish(f.onlyJob(), 0, msg, "")
			reconcileOnce(t, f.backupReconciler(cl), bj)
			bj = get(t, bj)
			require.Equal(t, backupsv1.BackupJobFailed, bj.Status.Phase)
			require.Equal(t, backupsv1.ReasonArtifactReportInvalid, readyCondition(bj.Status.Conditions).Reason)
			require.Contains(t, bj.Status.Message, "reported no usable artifact")
			err := cl.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: bj.Name}, &backupsv1.Backup{})
			require.True(t, apierrors.IsNotFound(err), "no Backup for an unlocatable artifact")
		})
	}
}

// A failed Job fails the run with what the pod said; a Job past its deadline fails with
// DeadlineExceeded, from the Job controller or, if it never reports, from the driver's clock.
func TestBackupJobFailures(t *testing.T) {
	t.Run("agent exits non-zero", func(t *testing.T) {
		f := newFixture(t, nil)
		bj := f.backupJob()
		reconcileOnce(t, f.backupReconciler(cl), bj)
		f.finish(f.onlyJob(), 3, "bucket coffer does not exist", batchv1.JobReasonBackoffLimitExceeded)
		reconcileOnce(t, f.backupReconciler(cl), bj)
		bj = get(t, bj)
		require.Equal(t, backupsv1.BackupJobFailed, bj.Status.Phase)
		require.Equal(t, backupsv1.ReasonFailed, readyCondition(bj.Status.Conditions).Reason)
		require.Contains(t, bj.Status.Message, "exited with code 3 (Error): bucket coffer does not exist")
		require.Contains(t, bj.Status.Message, "BackoffLimitExceeded")
	})
	t.Run("Job controller deadline", func(t *testing.T) {
		f := newFixture(t, nil)
		bj := f.backupJob()
		reconcileOnce(t, f.backupReconciler(cl), bj)
		f.finish(f.onlyJob(), 137, "", batchv1.JobReasonDeadlineExceeded)
		reconcileOnce(t, f.backupReconciler(cl), bj)
		bj = get(t, bj)
		require.Equal(t, backupsv1.ReasonDeadlineExceeded, readyCondition(bj.Status.Conditions).Reason)
		require.Contains(t, bj.Status.Message, "exited with code 137")
	})
	t.Run("driver deadline when the Job never reports", func(t *testing.T) {
		f := newFixture(t, func(s *jobapi.JobBackupStrategySpec) { s.ActiveDeadlineSeconds = ptr.To[int64](60) })
		bj := f.backupJob()
		res := reconcileOnce(t, f.backupReconciler(cl), bj)
		f.clock.Step(res.RequeueAfter - time.Second)
		reconcileOnce(t, f.backupReconciler(cl), bj)
		require.Equal(t, backupsv1.BackupJobRunning, get(t, bj).Status.Phase, "not yet")
		f.clock.Step(time.Second)
		reconcileOnce(t, f.backupReconciler(cl), bj)
		bj = get(t, bj)
		require.Equal(t, backupsv1.BackupJobFailed, bj.Status.Phase)
		require.Equal(t, backupsv1.ReasonDeadlineExceeded, readyCondition(bj.Status.Conditions).Reason)
		require.Contains(t, bj.Status.Message, "kube-controller-manager")
	})
}

// BackupJobs that resolve to another driver's strategy are not touched.
func TestBackupJobOfAnotherDriverIsUntouched(t *testing.T) {
	f := newFixture(t, nil)
	f.class.Spec.Strategies[0].StrategyRef = corev1.TypedLocalObjectReference{APIGroup: ptr.To("velerodriver.backups.cozystack.io"), Kind: "VeleroBackupStrategy", Name: "x"}
	require.NoError(t, cl.Update(f.ctx, f.class))
	bj := f.backupJob()
	reconcileOnce(t, f.backupReconciler(cl), bj)
	require.Equal(t, bj.ResourceVersion, get(t, bj).ResourceVersion)
	require.Empty(t, f.jobsInNamespace())
}

// succeededBackup runs a backup to its Backup through the reconciler.
func (f *fixture) succeededBackup() *backupsv1.Backup {
	bj := f.backupJob()
	reconcileOnce(f.t, f.backupReconciler(cl), bj)
	f.finish(f.onlyJob(), 0, goodReport(f.ns+"/a.tar"), "")
	reconcileOnce(f.t, f.backupReconciler(cl), bj)
	require.Equal(f.t, backupsv1.BackupJobSucceeded, get(f.t, bj).Status.Phase)
	return get(f.t, &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: bj.Name, Namespace: f.ns}})
}

func (f *fixture) restoreJob(b *backupsv1.Backup, target *corev1.TypedLocalObjectReference) *backupsv1.RestoreJob {
	rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{GenerateName: "restore-", Namespace: f.ns},
		Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: b.Name}, TargetApplicationRef: target}}
	require.NoError(f.t, cl.Create(f.ctx, rj))
	return rj
}

func (f *fixture) jobsOf(kind string) []batchv1.Job {
	var out []batchv1.Job
	for _, j := range f.jobsInNamespace() {
		if j.Labels[names.LabelRunKind] == kind {
			out = append(out, j)
		}
	}
	return out
}

// A restore runs the restore template (or the backup template in restore mode) with the artifact
// in its env, in the RestoreJob's namespace, and reports the pod's failure verbatim.
func TestRestoreJob(t *testing.T) {
	t.Run("backup template in restore mode, into another application", func(t *testing.T) {
		f := newFixture(t, nil)
		b := f.succeededBackup()
		rj := f.restoreJob(b, &corev1.TypedLocalObjectReference{Kind: "Shop", Name: "web-copy"})
		reconcileOnce(t, f.restoreReconciler(), rj)
		require.Equal(t, backupsv1.RestoreJobRunning, get(t, rj).Status.Phase)
		restores := f.jobsOf(names.KindRestoreJob)
		require.Len(t, restores, 1)
		j := restores[0]
		require.Equal(t, f.ns, j.Namespace)
		require.True(t, metav1.IsControlledBy(&j, rj))
		c := j.Spec.Template.Spec.Containers[0]
		require.Equal(t, []string{"--dir=/data", "--app=web-copy", "--bucket=coffer", "--mode=restore"}, c.Args,
			"the target, which does not exist yet, is known by name; parameters come from the Backup's snapshot")
		e := env(c)
		require.Equal(t, jobapi.ModeRestore, e[jobapi.EnvMode])
		require.Equal(t, "web-copy", e[jobapi.EnvApplicationName])
		require.Equal(t, b.Status.Artifact.URI, e[jobapi.EnvArtifactURI])
		require.Equal(t, goodSum, e[jobapi.EnvArtifactChecksum])
		require.Equal(t, "4096", e[jobapi.EnvArtifactSizeBytes])
		require.Equal(t, b.Name, e[jobapi.EnvBackupName])
		f.finish(&j, 0, `{"restored":3}`, "")
		reconcileOnce(t, f.restoreReconciler(), rj)
		rj = get(t, rj)
		require.Equal(t, backupsv1.RestoreJobSucceeded, rj.Status.Phase)
		require.NotNil(t, rj.Status.CompletedAt)
	})
	t.Run("restore template; checksum mismatch fails the run", func(t *testing.T) {
		f := newFixture(t, func(s *jobapi.JobBackupStrategySpec) {
			s.RestoreTemplate = ptr.To(agentTemplate("restore", "{{ .Backup.status.artifact.uri }}"))
		})
		b := f.succeededBackup()
		rj := f.restoreJob(b, nil)
		reconcileOnce(t, f.restoreReconciler(), rj)
		j := f.jobsOf(names.KindRestoreJob)[0]
		require.Equal(t, []string{"restore", b.Status.Artifact.URI}, j.Spec.Template.Spec.Containers[0].Args)
		require.Equal(t, "web", env(j.Spec.Template.Spec.Containers[0])[jobapi.EnvApplicationName])
		f.finish(&j, 1, "checksum mismatch: want sha256:01.. got sha256:ff..", batchv1.JobReasonBackoffLimitExceeded)
		reconcileOnce(t, f.restoreReconciler(), rj)
		rj = get(t, rj)
		require.Equal(t, backupsv1.RestoreJobFailed, rj.Status.Phase)
		require.Contains(t, rj.Status.Message, "checksum mismatch")
	})
	t.Run("a Backup that is not Ready is refused", func(t *testing.T) {
		f := newFixture(t, nil)
		b := f.succeededBackup()
		b.Status.Phase, b.Status.Artifact = backupsv1.BackupFailed, nil
		require.NoError(t, cl.Status().Update(f.ctx, b))
		rj := f.restoreJob(b, nil)
		reconcileOnce(t, f.restoreReconciler(), rj)
		rj = get(t, rj)
		require.Equal(t, backupsv1.RestoreJobFailed, rj.Status.Phase)
		require.Equal(t, backupsv1.ReasonArtifactMissing, readyCondition(rj.Status.Conditions).Reason)
		require.Empty(t, f.jobsOf(names.KindRestoreJob))
	})
}

// Deleting a Backup runs the cleanup Job; the Backup goes only when it succeeded.
func TestBackupDeletionRunsCleanup(t *testing.T) {
	f := newFixture(t, func(s *jobapi.JobBackupStrategySpec) {
		s.CleanupTemplate = ptr.To(agentTemplate("cleanup", "{{ .Backup.status.artifact.uri }}"))
	})
	b := f.succeededBackup()
	require.Equal(t, []string{names.Finalizer}, b.Finalizers)
	require.NoError(t, cl.Delete(f.ctx, b))
	r := f.cleanupReconciler()
	reconcileOnce(t, r, b)
	cleanups := f.jobsOf(names.KindBackup)
	require.Len(t, cleanups, 1)
	j := cleanups[0]
	require.Empty(t, j.OwnerReferences, "a foreground deletion of the Backup must not delete its cleanup")
	require.Equal(t, []string{"cleanup", "s3://coffer/" + f.ns + "/a.tar"}, j.Spec.Template.Spec.Containers[0].Args)
	require.Equal(t, jobapi.ModeCleanup, env(j.Spec.Template.Spec.Containers[0])[jobapi.EnvMode])

	// A failed cleanup keeps the Backup and retries with a new Job.
	f.finish(&j, 1, "access denied", batchv1.JobReasonBackoffLimitExceeded)
	res := reconcileOnce(t, r, b)
	require.Equal(t, driverkit.DeletionRetryDelay, res.RequeueAfter)
	require.Contains(t, strings.Join(drain(f.rec), "\n"), "access denied")
	require.Equal(t, []string{names.Finalizer}, get(t, b).Finalizers)
	require.Eventually(t, func() bool { return len(f.jobsOf(names.KindBackup)) == 0 }, 30*time.Second, 100*time.Millisecond,
		"the failed attempt is deleted (nothing runs the garbage collector here, so its pod stays)")
	require.NoError(t, cl.DeleteAllOf(f.ctx, &corev1.Pod{}, client.InNamespace(f.ns)))
	reconcileOnce(t, r, b)
	retry := f.jobsOf(names.KindBackup)
	require.Len(t, retry, 1)
	require.NotEqual(t, j.UID, retry[0].UID)

	f.finish(&retry[0], 0, "", "")
	reconcileOnce(t, r, b)
	err := cl.Get(f.ctx, client.ObjectKeyFromObject(b), &backupsv1.Backup{})
	require.True(t, apierrors.IsNotFound(err), "the Backup is released after a successful cleanup")
	require.Empty(t, f.jobsOf(names.KindBackup))
}

// The deletion of a finished cleanup Job enqueues its Backup again, and may reach the cache before
// the Backup's own deletion: a Backup the driver has released, seen stale, gets no second cleanup
// Job (nothing would delete it, since nothing reconciles a Backup that is gone).
func TestReleasedBackupSeenStaleGetsNoCleanupJob(t *testing.T) {
	f := newFixture(t, func(s *jobapi.JobBackupStrategySpec) { s.CleanupTemplate = ptr.To(agentTemplate("cleanup")) })
	b := f.succeededBackup()
	require.NoError(t, cl.Delete(f.ctx, b))
	stale := get(t, b).DeepCopy() // being deleted, still holding the finalizer
	r := f.cleanupReconciler()
	reconcileOnce(t, r, b)
	cleanups := f.jobsOf(names.KindBackup)
	require.Len(t, cleanups, 1)
	f.finish(&cleanups[0], 0, "", "")
	reconcileOnce(t, r, b)
	require.True(t, apierrors.IsNotFound(cl.Get(f.ctx, client.ObjectKeyFromObject(b), &backupsv1.Backup{})), "released")
	require.Empty(t, f.jobsOf(names.KindBackup))

	cacheView := interceptor.NewClient(cl, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if bk, ok := obj.(*backupsv1.Backup); ok && key == client.ObjectKeyFromObject(stale) {
				stale.DeepCopyInto(bk)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	reconcileOnce(t, f.kit(cacheView).BackupReconciler(), b)
	require.Empty(t, f.jobsOf(names.KindBackup), "no cleanup Job for a Backup that is gone")
}

// Without a cleanup template a Backup has no finalizer; if the template is removed later, the
// Backup is released with a Warning that the artifact stays.
func TestBackupDeletionWithoutCleanupTemplate(t *testing.T) {
	f := newFixture(t, func(s *jobapi.JobBackupStrategySpec) { s.CleanupTemplate = ptr.To(agentTemplate("cleanup")) })
	b := f.succeededBackup()
	f.strategy = get(t, f.strategy)
	f.strategy.Spec.CleanupTemplate = nil
	require.NoError(t, cl.Update(f.ctx, f.strategy))
	require.NoError(t, cl.Delete(f.ctx, b))
	reconcileOnce(t, f.cleanupReconciler(), b)
	require.True(t, apierrors.IsNotFound(cl.Get(f.ctx, client.ObjectKeyFromObject(b), &backupsv1.Backup{})))
	require.Contains(t, strings.Join(drain(f.rec), "\n"), "ArtifactKept")
	require.Empty(t, f.jobsOf(names.KindBackup))
}

func drain(rec *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// A strategy's object lock covers what the run's Plan keeps a Backup for: its retention span, the
// class's deletionDelay and a day, at most the strategy's retainFor (a tenant's Plan cannot make
// the platform hold storage longer); a Plan whose retention needs more gets retainFor and a
// Warning; no Plan, or a retention without an age bound, gets retainFor.
func TestObjectLockFollowsRetention(t *testing.T) {
	f := newFixture(t, func(s *jobapi.JobBackupStrategySpec) {
		s.Artifact = &jobapi.ArtifactOptions{Format: jobapi.ArtifactFormatChunked,
			ObjectLock: &jobapi.ArtifactObjectLock{RetainFor: metav1.Duration{Duration: 800 * time.Hour}}}
	})
	f.class.Spec.RetentionFloor = &backupsv1.RetentionFloor{DeletionDelay: &metav1.Duration{Duration: 48 * time.Hour}, MinAge: &metav1.Duration{Duration: 192 * time.Hour}}
	require.NoError(t, cl.Update(f.ctx, f.class))
	n := func(v int32) *int32 { return &v }
	for _, p := range []struct {
		name      string
		retention *backupsv1.RetentionPolicy
	}{
		{"ten-days", &backupsv1.RetentionPolicy{KeepLast: n(3), MaxAge: &metav1.Duration{Duration: 240 * time.Hour}}},
		{"a-week", &backupsv1.RetentionPolicy{KeepDaily: n(7)}},
		{"two-weeks", &backupsv1.RetentionPolicy{KeepDaily: n(14)}},
		{"counted", &backupsv1.RetentionPolicy{KeepLast: n(30)}},
		{"years", &backupsv1.RetentionPolicy{KeepMonthly: n(24)}},
	} {
		require.NoError(t, cl.Create(f.ctx, &backupsv1.Plan{ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: f.ns}, Spec: backupsv1.PlanSpec{
			ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: "web"}, BackupClassName: f.class.Name,
			Schedule: backupsv1.PlanSchedule{Cron: "0 2 * * *"}, Retention: p.retention,
		}}))
	}
	for _, tc := range []struct {
		plan, lock, warning string
	}{
		{"ten-days", "312h0m0s", ""},                 // 240h + 48h + 24h
		{"two-weeks", "408h0m0s", ""},                // 14 days + 48h + 24h
		{"a-week", "264h0m0s", ""},                   // the class's minAge, 8 days, + 48h + 24h
		{"counted", "800h0m0s", ""},                  // a count has no age: the strategy's
		{"gone", "800h0m0s", ""},                     // no such Plan
		{"", "800h0m0s", ""},                         // no Plan
		{"years", "800h0m0s", "at least 17928h0m0s"}, // 24 × 31 days + 72h: more than the strategy allows
	} {
		t.Run(tc.plan, func(t *testing.T) {
			drain(f.rec)
			bj := &backupsv1.BackupJob{ObjectMeta: metav1.ObjectMeta{GenerateName: "nightly-", Namespace: f.ns},
				Spec: backupsv1.BackupJobSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: "web"}, BackupClassName: f.class.Name}}
			if tc.plan != "" {
				bj.Spec.PlanRef = &corev1.LocalObjectReference{Name: tc.plan}
			}
			require.NoError(t, cl.Create(f.ctx, bj))
			reconcileOnce(t, f.backupReconciler(cl), bj)
			var job *batchv1.Job
			jobs := f.jobsOf(names.KindBackupJob)
			for i := range jobs {
				if metav1.IsControlledBy(&jobs[i], bj) {
					job = &jobs[i]
				}
			}
			require.NotNil(t, job, "the run's Job")
			require.Equal(t, tc.lock, env(job.Spec.Template.Spec.Containers[0])[jobapi.EnvRetainFor])
			events := strings.Join(drain(f.rec), "\n")
			require.Contains(t, events, "locks what it stores for "+tc.lock)
			if tc.warning != "" {
				require.Contains(t, events, driver.ReasonLockShorterThanRetention)
				require.Contains(t, events, tc.warning)
			} else {
				require.NotContains(t, events, driver.ReasonLockShorterThanRetention)
			}
		})
	}
}

// A strategy's artifact options reach the agents: the compression level a backup, the encryption
// Secret's public keys a backup and its private keys a restore, each by secretKeyRef (the Job
// holds no key); the agent's metadata lands in the Backup's driverMetadata.
func TestArtifactOptions(t *testing.T) {
	f := newFixture(t, func(s *jobapi.JobBackupStrategySpec) {
		s.Artifact = &jobapi.ArtifactOptions{CompressionLevel: ptr.To[int32](7), Format: jobapi.ArtifactFormatChunked, Encryption: &jobapi.ArtifactEncryption{SecretName: "backup-keys"},
			ObjectLock: &jobapi.ArtifactObjectLock{RetainFor: metav1.Duration{Duration: 800 * time.Hour}}}
		s.CleanupTemplate = ptr.To(agentTemplate())
		s.Template.Spec.Containers[0].Env = append(s.Template.Spec.Containers[0].Env, corev1.EnvVar{Name: jobapi.EnvAgeRecipients, Value: "age1spoofed"})
	})
	keyRef := func(c corev1.Container, name string) *corev1.SecretKeySelector {
		for _, e := range c.Env {
			if e.Name == name {
				require.Empty(t, e.Value, "%s holds a value, not a reference", name)
				require.NotNil(t, e.ValueFrom, name)
				return e.ValueFrom.SecretKeyRef
			}
		}
		return nil
	}
	bj := f.backupJob()
	reconcileOnce(t, f.backupReconciler(cl), bj)
	j := f.onlyJob()
	c := j.Spec.Template.Spec.Containers[0]
	e := env(c)
	require.Equal(t, "7", e[jobapi.EnvCompressionLevel])
	require.Equal(t, "backup-keys", e[jobapi.EnvEncryptionSecret])
	require.Equal(t, &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "backup-keys"}, Key: jobapi.SecretKeyRecipients, Optional: ptr.To(true)},
		keyRef(c, jobapi.EnvAgeRecipients), "the template cannot replace the strategy's keys")
	require.Nil(t, keyRef(c, jobapi.EnvAgeIdentities), "a backup never sees the private keys")
	require.Equal(t, "chunked", e[jobapi.EnvArtifactFormat])
	require.Equal(t, &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "backup-keys"}, Key: jobapi.SecretKeyChunkKey, Optional: ptr.To(true)},
		keyRef(c, jobapi.EnvChunkKey), "a chunked backup gets the chunk key by reference")
	require.Equal(t, "COMPLIANCE", e[jobapi.EnvObjectLockMode], "Compliance by default")
	require.Equal(t, "800h0m0s", e[jobapi.EnvRetainFor])

	report := `{"uri":"s3://coffer/` + f.ns + `/a.tar","sizeBytes":4096,"checksum":"` + goodSum + `","metadata":{"format":"2","compression":"zstd-7","uncompressedBytes":"16384","compressionRatio":"4.00","encryption":"age","keyRef":"0123456789abcdef"}}`
	f.finish(j, 0, report, "")
	reconcileOnce(t, f.backupReconciler(cl), bj)
	require.Equal(t, backupsv1.BackupJobSucceeded, get(t, bj).Status.Phase, get(t, bj).Status.Message)
	b := get(t, &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: bj.Name, Namespace: f.ns}})
	require.Equal(t, int64(4096), b.Status.Artifact.SizeBytes, "sizeBytes is the stored size")
	require.Equal(t, "16384", b.Spec.DriverMetadata["artifact.uncompressedBytes"])
	require.Equal(t, "4.00", b.Spec.DriverMetadata["artifact.compressionRatio"])
	require.Equal(t, "0123456789abcdef", b.Spec.DriverMetadata["artifact.keyRef"])
	require.Equal(t, "2", b.Spec.DriverMetadata["artifact.format"])

	rj := f.restoreJob(b, nil)
	reconcileOnce(t, f.restoreReconciler(), rj)
	rc := f.jobsOf(names.KindRestoreJob)[0].Spec.Template.Spec.Containers[0]
	require.Equal(t, &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "backup-keys"}, Key: jobapi.SecretKeyIdentities, Optional: ptr.To(true)},
		keyRef(rc, jobapi.EnvAgeIdentities))
	require.Equal(t, "age1spoofed", env(rc)[jobapi.EnvAgeRecipients], "a restore gets no public keys from the driver")
	require.NotContains(t, env(rc), jobapi.EnvCompressionLevel)
	require.NotContains(t, env(rc), jobapi.EnvArtifactFormat, "a restore reads the format from the artifact")
	require.Nil(t, keyRef(rc, jobapi.EnvChunkKey), "a restore needs no chunk key")
	require.NotContains(t, env(rc), jobapi.EnvRetainFor, "a restore writes nothing to lock")
	require.Equal(t, "backup-keys", env(rc)[jobapi.EnvEncryptionSecret])
}

// The API server validates the artifact options (CEL).
func TestArtifactOptionsValidation(t *testing.T) {
	for name, a := range map[string]jobapi.ArtifactOptions{
		"level above 22": {CompressionLevel: ptr.To[int32](23)},
		"negative level": {CompressionLevel: ptr.To[int32](-1)},
		"bad secret":     {Encryption: &jobapi.ArtifactEncryption{SecretName: "Not_A_Name"}},
		"empty secret":   {Encryption: &jobapi.ArtifactEncryption{}},
		"unknown format": {Format: "Zip"},
		"lock of zero":   {ObjectLock: &jobapi.ArtifactObjectLock{}},
		"lock too long":  {ObjectLock: &jobapi.ArtifactObjectLock{RetainFor: metav1.Duration{Duration: 87601 * time.Hour}}},
		"lock mode":      {ObjectLock: &jobapi.ArtifactObjectLock{Mode: "Legal", RetainFor: metav1.Duration{Duration: time.Hour}}},
	} {
		s := &jobapi.JobBackupStrategy{ObjectMeta: metav1.ObjectMeta{GenerateName: "invalid-"},
			Spec: jobapi.JobBackupStrategySpec{Template: agentTemplate(), Artifact: &a}}
		err := cl.Create(context.Background(), s)
		require.True(t, apierrors.IsInvalid(err), "%s: %v", name, err)
	}
	ok := &jobapi.JobBackupStrategy{ObjectMeta: metav1.ObjectMeta{GenerateName: "valid-"},
		Spec: jobapi.JobBackupStrategySpec{Template: agentTemplate(), Artifact: &jobapi.ArtifactOptions{CompressionLevel: ptr.To[int32](0), Format: jobapi.ArtifactFormatChunked, Encryption: &jobapi.ArtifactEncryption{SecretName: "keys.v2"},
			ObjectLock: &jobapi.ArtifactObjectLock{Mode: jobapi.ObjectLockGovernance, RetainFor: metav1.Duration{Duration: 720 * time.Hour}}}}}
	require.NoError(t, cl.Create(context.Background(), ok))
}

// verificationRestoreJob is the RestoreJob a verifier makes: inert, aimed at its sandbox.
func (f *fixture) verificationRestoreJob(b *backupsv1.Backup, inert bool) *backupsv1.RestoreJob {
	f.t.Helper()
	sandbox := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-bvsandbox"}}
	if err := cl.Create(f.ctx, sandbox); err != nil && !apierrors.IsAlreadyExists(err) {
		f.t.Fatal(err)
	}
	opts := map[string]string{backupsv1.OptionTargetNamespace: sandbox.Name}
	if inert {
		opts[backupsv1.OptionInert] = "true"
	}
	rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{GenerateName: "verify-", Namespace: f.ns},
		Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: b.Name}, Options: backupsv1.StringOptions(opts)}}
	require.NoError(f.t, cl.Create(f.ctx, rj))
	return rj
}

// An inert RestoreJob aimed at another namespace is a verification (contract RJ-13): the driver
// runs the verifyTemplate in verify mode in the Backup's namespace, and turns the agent's report
// into items.compared, or a ContentMismatch failure. Without a verifyTemplate, or when the
// RestoreJob is not inert, a restore into another namespace is refused as before.
func TestVerificationRestore(t *testing.T) {
	withVerify := func(s *jobapi.JobBackupStrategySpec) {
		s.VerifyTemplate = ptr.To(agentTemplate("--mode={{ .Mode }}", "--dir=/scratch", "--backup={{ .Backup.metadata.name }}"))
	}
	t.Run("identical", func(t *testing.T) {
		f := newFixture(t, withVerify)
		b := f.succeededBackup()
		rj := f.verificationRestoreJob(b, true)
		reconcileOnce(t, f.restoreReconciler(), rj)
		require.Equal(t, backupsv1.RestoreJobRunning, get(t, rj).Status.Phase)
		jobs := f.jobsOf(names.KindRestoreJob)
		require.Len(t, jobs, 1)
		j := jobs[0]
		require.Equal(t, f.ns, j.Namespace, "the verify Job runs in the Backup's namespace: the sandbox runs no pods")
		c := j.Spec.Template.Spec.Containers[0]
		require.Equal(t, []string{"--mode=verify", "--dir=/scratch", "--backup=" + b.Name}, c.Args)
		e := env(c)
		require.Equal(t, jobapi.ModeVerify, e[jobapi.EnvMode])
		require.Equal(t, goodSum, e[jobapi.EnvArtifactChecksum])
		f.finish(&j, 0, `{"uri":"`+b.Status.Artifact.URI+`","format":3,"files":7,"compared":7,"mismatched":0}`, "")
		reconcileOnce(t, f.restoreReconciler(), rj)
		rj = get(t, rj)
		require.Equal(t, backupsv1.RestoreJobSucceeded, rj.Status.Phase)
		require.Equal(t, &backupsv1.RestoreItems{Restored: 7, Compared: 7}, rj.Status.Items)
		require.Contains(t, readyCondition(rj.Status.Conditions).Message, "compared all 7 file(s) with the manifest")
	})
	// reported runs a verification whose Job succeeds with report, and returns its RestoreJob.
	reported := func(t *testing.T, report string) *backupsv1.RestoreJob {
		f := newFixture(t, withVerify)
		rj := f.verificationRestoreJob(f.succeededBackup(), true)
		reconcileOnce(t, f.restoreReconciler(), rj)
		j := f.jobsOf(names.KindRestoreJob)[0]
		f.finish(&j, 0, report, "")
		reconcileOnce(t, f.restoreReconciler(), rj)
		return get(t, rj)
	}
	t.Run("differences fail ContentMismatch", func(t *testing.T) {
		rj := reported(t, `{"uri":"s3://coffer/a.tar","format":3,"files":7,"compared":6,"mismatched":1,"differences":["db/data.bin: SHA-256 aa restored, the backup holds bb"]}`)
		require.Equal(t, backupsv1.RestoreJobFailed, rj.Status.Phase)
		ready := readyCondition(rj.Status.Conditions)
		require.Equal(t, backupsv1.ReasonContentMismatch, ready.Reason)
		require.Contains(t, ready.Message, "db/data.bin: SHA-256 aa restored")
	})
	t.Run("a report that is not one", func(t *testing.T) {
		rj := reported(t, `{"uri":"x","format":3,"files":1,"compared":1,"mismatched":0,"extra":1}`)
		require.Equal(t, backupsv1.RestoreJobFailed, rj.Status.Phase)
		require.Equal(t, backupsv1.ReasonArtifactReportInvalid, readyCondition(rj.Status.Conditions).Reason)
	})
	for _, tc := range []struct {
		name   string
		mutate func(*jobapi.JobBackupStrategySpec)
		inert  bool
		want   string
	}{
		{"no verifyTemplate", nil, true, "has no verifyTemplate"},
		{"not inert", withVerify, false, "restores into the RestoreJob's own namespace only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.mutate)
			b := f.succeededBackup()
			rj := f.verificationRestoreJob(b, tc.inert)
			reconcileOnce(t, f.restoreReconciler(), rj)
			rj = get(t, rj)
			require.Equal(t, backupsv1.RestoreJobFailed, rj.Status.Phase)
			ready := readyCondition(rj.Status.Conditions)
			require.Equal(t, driver.ReasonTargetNotSupported, ready.Reason)
			require.Contains(t, ready.Message, tc.want)
			require.Empty(t, f.jobsOf(names.KindRestoreJob), "nothing runs")
		})
	}
}
