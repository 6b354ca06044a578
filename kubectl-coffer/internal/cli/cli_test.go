package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/yaml"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	velerov1 "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/kubectl-coffer/internal/view"
)

func TestParseRun(t *testing.T) {
	for _, tc := range []struct {
		arg, kind, name, err string
	}{
		{arg: "b1", name: "b1"},
		{arg: "bj/b1", kind: kindBackupJob, name: "b1"},
		{arg: "BackupJob/b1", kind: kindBackupJob, name: "b1"},
		{arg: "backupjobs.backups.cozystack.io/b1", kind: kindBackupJob, name: "b1"},
		{arg: "rj/r1", kind: kindRestoreJob, name: "r1"},
		{arg: "restorejob/r1", kind: kindRestoreJob, name: "r1"},
		{arg: "backup/b1", err: `"backup" is not a run kind: use backupjob (bj) or restorejob (rj)`},
		{arg: "bj/", err: `"bj/" is not KIND/NAME`},
		{arg: "bj/a/b", err: `"bj/a/b" is not KIND/NAME`},
	} {
		t.Run(tc.arg, func(t *testing.T) {
			kind, name, err := parseRun(tc.arg)
			if tc.err != "" {
				assert.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, [2]string{tc.kind, tc.name}, [2]string{kind, name})
		})
	}
}

var created = metav1.NewTime(time.Date(2026, 4, 29, 2, 0, 0, 0, time.UTC))

func testPlan() *backupsv1.Plan {
	return &backupsv1.Plan{
		ObjectMeta: metav1.ObjectMeta{Name: "shop-nightly", Namespace: "shop", UID: "plan-uid"},
		Spec: backupsv1.PlanSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"},
			BackupClassName: "golden", Schedule: backupsv1.PlanSchedule{Cron: "0 2 * * *"}},
	}
}

func testBackup(name string, strategy corev1.TypedLocalObjectReference) *backupsv1.Backup {
	return &backupsv1.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"},
		Spec: backupsv1.BackupSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"}, StrategyRef: strategy,
			TakenAt: created, DriverMetadata: map[string]string{"veleroBackupName": "shop-" + name + "-1a2b", "veleroNamespace": "velero"}},
		Status: backupsv1.BackupStatus{Phase: backupsv1.BackupReady,
			Artifact: &backupsv1.BackupArtifact{URI: "s3://coffer/velero/backups/x", SizeBytes: 2048, Checksum: "sha256:" + strings.Repeat("a", 64)}},
	}
}

var (
	veleroStrategy = corev1.TypedLocalObjectReference{APIGroup: ptr.To(velerov1.Group), Kind: velerov1.Kind, Name: "shop-namespace"}
	jobStrategy    = corev1.TypedLocalObjectReference{APIGroup: ptr.To(jobv1.Group), Kind: jobv1.Kind, Name: "volume-tar"}
)

// harness runs commands against a fake client holding objs (and a fake clientset, for logs).
type harness struct {
	t         *testing.T
	client    client.WithWatch
	clientset kubernetes.Interface
	out       *bytes.Buffer
	errOut    *bytes.Buffer
}

func newHarness(t *testing.T, funcs *interceptor.Funcs, objs ...client.Object) *harness {
	b := fake.NewClientBuilder().WithScheme(Scheme).WithObjects(objs...).
		WithStatusSubresource(&backupsv1.BackupJob{}, &backupsv1.RestoreJob{}, &backupsv1.Backup{}, &backupsv1.Plan{}, &securityv1.BackupVerifyRun{}).
		WithIndex(&corev1.Event{}, "involvedObject.uid", func(o client.Object) []string { return []string{string(o.(*corev1.Event).InvolvedObject.UID)} })
	if funcs != nil {
		b = b.WithInterceptorFuncs(*funcs)
	}
	return &harness{t: t, client: b.Build()}
}

func (h *harness) run(args ...string) error {
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	h.out, h.errOut = out, errOut
	n := 0
	o := &Options{ConfigFlags: genericclioptions.NewConfigFlags(false), IOStreams: streams, Clock: clock.RealClock{},
		PollInterval: time.Millisecond, Suffix: func() string { n++; return []string{"aaaaa", "bbbbb", "ccccc", "ddddd"}[n-1] },
		client: h.client, clientset: h.clientset}
	cmd := newRootCommand(o)
	cmd.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cmd.ExecuteContext(ctx)
}

func TestBackupCreatesTheBackupJobOfThePlan(t *testing.T) {
	h := newHarness(t, nil, testPlan())
	require.NoError(t, h.run("backup", "shop-nightly", "-n", "shop"))
	assert.Equal(t, "backupjob.backups.cozystack.io/shop-nightly-manual-aaaaa created\n", h.out.String())

	require.NoError(t, h.run("backup", "shop-nightly", "-n", "shop", "-o", "yaml"))
	job := &backupsv1.BackupJob{}
	require.NoError(t, yaml.UnmarshalStrict(h.out.Bytes(), job), h.out.String())
	assert.Equal(t, metav1.TypeMeta{APIVersion: "backups.cozystack.io/v1alpha1", Kind: "BackupJob"}, job.TypeMeta)
	assert.Equal(t, "shop-nightly-manual-bbbbb", job.Name, "the first run holds the name of the first suffix")
	assert.Equal(t, "shop-nightly", job.Labels[backupsv1.LabelPlan])
	assert.True(t, metav1.IsControlledBy(job, testPlan()), "controlled by the Plan")
	assert.Equal(t, "shop-nightly", job.Spec.PlanRef.Name)
	assert.Equal(t, "golden", job.Spec.BackupClassName)
	assert.Equal(t, "apps.cozystack.io", *job.Spec.ApplicationRef.APIGroup)

	err := h.run("backup", "nope", "-n", "shop")
	assert.EqualError(t, err, `Plan "nope" not found in namespace shop`)
	assert.EqualError(t, h.run("backup", "shop-nightly", "-n", "shop", "-o", "wide"), `unknown output format "wide": use json or yaml`)
}

func TestBackupDrawsAnotherNameWhenTaken(t *testing.T) {
	taken := &backupsv1.BackupJob{ObjectMeta: metav1.ObjectMeta{Name: "shop-nightly-manual-aaaaa", Namespace: "shop"}}
	h := newHarness(t, nil, testPlan(), taken)
	require.NoError(t, h.run("backup", "shop-nightly", "-n", "shop"))
	assert.Equal(t, "backupjob.backups.cozystack.io/shop-nightly-manual-bbbbb created\n", h.out.String())
}

// progress moves a run through phases as it is read, one step per read.
func progress[T client.Object](steps ...func(T)) *interceptor.Funcs {
	reads := 0
	return &interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if err := c.Get(ctx, key, obj, opts...); err != nil {
			return err
		}
		if run, ok := obj.(T); ok {
			if reads < len(steps) {
				steps[reads](run)
			} else {
				steps[len(steps)-1](run)
			}
			reads++
		}
		return nil
	}}
}

func TestBackupWait(t *testing.T) {
	running := func(j *backupsv1.BackupJob) {
		j.Status.Phase = backupsv1.BackupJobRunning
		j.Status.Conditions = []metav1.Condition{{Type: "Accepted", Status: "True", Reason: "Claimed", Message: "Claimed by coffer-driver-velero"}}
	}
	succeeded := func(j *backupsv1.BackupJob) {
		running(j)
		j.Status.Phase = backupsv1.BackupJobSucceeded
		j.Status.BackupRef = &corev1.LocalObjectReference{Name: "done"}
		j.Status.Conditions = append(j.Status.Conditions, metav1.Condition{Type: "Ready", Status: "True", Reason: "Succeeded", Message: "Backup done is Ready"})
	}
	h := newHarness(t, progress(func(*backupsv1.BackupJob) {}, running, running, succeeded), testPlan(), testBackup("done", veleroStrategy))
	require.NoError(t, h.run("backup", "shop-nightly", "-n", "shop", "--wait"))
	lines := strings.Split(strings.TrimSpace(h.out.String()), "\n")
	require.Len(t, lines, 5, h.out.String())
	assert.Equal(t, "backupjob.backups.cozystack.io/shop-nightly-manual-aaaaa created", lines[0])
	assert.Regexp(t, `^\[ +\d+s\] backupjob.backups.cozystack.io/shop-nightly-manual-aaaaa Pending$`, lines[1])
	assert.Regexp(t, `Running \(Claimed: Claimed by coffer-driver-velero\)$`, lines[2], "one line per change")
	assert.Regexp(t, `Succeeded \(Succeeded: Backup done is Ready\)$`, lines[3])
	assert.Equal(t, "Backup done: Ready, 2.0 KiB, sha256:"+strings.Repeat("a", 64)+", s3://coffer/velero/backups/x", lines[4])

	failed := func(j *backupsv1.BackupJob) {
		j.Status.Phase = backupsv1.BackupJobFailed
		j.Status.Message = `BackupClass "golden" not found`
		j.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: "False", Reason: "BackupClassNotFound", Message: `BackupClass "golden" not found`}}
	}
	h = newHarness(t, progress(failed), testPlan())
	err := h.run("backup", "shop-nightly", "-n", "shop", "--wait", "-o", "json")
	var failure *RunFailedError
	require.ErrorAs(t, err, &failure)
	assert.EqualError(t, err, `backupjob.backups.cozystack.io/shop-nightly-manual-aaaaa Failed (BackupClassNotFound: BackupClass "golden" not found)`)
	job := &backupsv1.BackupJob{}
	require.NoError(t, json.Unmarshal(h.out.Bytes(), job), "stdout holds the object alone: %s", h.out.String())
	assert.Equal(t, backupsv1.BackupJobFailed, job.Status.Phase)
	assert.Contains(t, h.errOut.String(), "Failed (BackupClassNotFound", "progress goes to stderr with -o")
}

func TestWaitFor(t *testing.T) {
	o := &Options{Clock: clock.RealClock{}, PollInterval: time.Millisecond}
	var out bytes.Buffer
	reads := 0
	_, err := o.waitFor(context.Background(), &out, "r", 0, func(context.Context) (view.State, error) {
		reads++
		switch reads {
		case 1, 2:
			return view.State{}, errors.New("connection refused")
		case 3:
			return view.State{Phase: "Running"}, nil
		}
		return view.State{}, apierrors.NewNotFound(schema.GroupResource{Resource: "restorejobs"}, "r")
	})
	assert.EqualError(t, err, "r was deleted while waiting for it")
	assert.Equal(t, 1, strings.Count(out.String(), "connection refused"), "trouble is said once: %s", out.String())
	assert.Contains(t, out.String(), "] r Running\n")

	_, err = o.waitFor(context.Background(), &out, "r", 20*time.Millisecond, func(context.Context) (view.State, error) {
		return view.State{Phase: "Running"}, nil
	})
	assert.EqualError(t, err, "timed out after 20ms waiting for r, which is Running")
}

func TestRestore(t *testing.T) {
	pending := testBackup("pending", veleroStrategy)
	pending.Status = backupsv1.BackupStatus{}
	h := newHarness(t, nil, testBackup("b1", veleroStrategy), pending)
	require.NoError(t, h.run("restore", "b1", "-n", "shop", "--to-namespace", "shop-copy", "-o", "yaml"))
	rj := &backupsv1.RestoreJob{}
	require.NoError(t, yaml.UnmarshalStrict(h.out.Bytes(), rj))
	assert.Equal(t, "b1-restore-aaaaa", rj.Name)
	assert.Equal(t, "b1", rj.Spec.BackupRef.Name)
	require.NotNil(t, rj.Spec.Options)
	assert.JSONEq(t, `{"targetNamespace": "shop-copy"}`, string(rj.Spec.Options.Raw))

	err := h.run("restore", "pending", "-n", "shop")
	assert.EqualError(t, err, "backup is not restorable: Backup shop/pending is Pending, not Ready with an artifact")
}

func TestVerify(t *testing.T) {
	h := newHarness(t, nil, testBackup("b1", veleroStrategy), testBackup("j1", jobStrategy))
	require.NoError(t, h.run("verify", "b1", "-n", "shop", "--full", "-o", "yaml"))
	run := &securityv1.BackupVerifyRun{}
	require.NoError(t, yaml.UnmarshalStrict(h.out.Bytes(), run))
	assert.Equal(t, "ugallu-system", run.Namespace)
	assert.Equal(t, securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendVelero, Mode: securityv1.ModeFullRestore,
		BackupRef: securityv1.BackupRef{Name: "shop-b1-1a2b", Namespace: "velero"}, SandboxNamespace: "shop-aaaaa-bvsandbox"}, run.Spec)

	err := h.run("verify", "j1", "-n", "shop")
	assert.ErrorContains(t, err, "was made by a JobBackupStrategy")
	runs := &securityv1.BackupVerifyRunList{}
	require.NoError(t, h.client.List(context.Background(), runs))
	assert.Len(t, runs.Items, 1, "nothing created for the refused Backup")
}

func TestStatus(t *testing.T) {
	p := testPlan()
	p.Status = backupsv1.PlanStatus{LastBackupRef: &corev1.LocalObjectReference{Name: "b1"}}
	h := newHarness(t, nil, p, testBackup("b1", veleroStrategy))
	require.NoError(t, h.run("status", "-A"))
	assert.Contains(t, h.out.String(), "NAMESPACE   PLAN")
	assert.Regexp(t, `shop +shop-nightly +0 2 \* \* \* +never +- +- +b1 +Ready`, h.out.String())

	require.NoError(t, h.run("status", "-n", "shop", "-o", "json"))
	list := &corev1.List{}
	require.NoError(t, json.Unmarshal(h.out.Bytes(), list))
	require.Len(t, list.Items, 1)
	plan := &backupsv1.Plan{}
	require.NoError(t, json.Unmarshal(list.Items[0].Raw, plan))
	assert.Equal(t, "Plan", plan.Kind)
	assert.Equal(t, "shop-nightly", plan.Name)

	require.NoError(t, h.run("status", "-n", "empty"))
	assert.Equal(t, "No Plans found in namespace empty.\n", h.errOut.String())
}

// With many Plans, status reads their newest Backups from a label-selected list in pages, not
// one Get each: 60 Plans take a list of the Backups with the plan label, statusPageSize at a
// time, and one Get, for the Backup whose plan label was removed.
func TestStatusOfManyPlansLists(t *testing.T) {
	var objs []client.Object
	for i := range 60 {
		p := testPlan()
		p.Name = fmt.Sprintf("p-%02d", i)
		p.Status = backupsv1.PlanStatus{LastBackupRef: &corev1.LocalObjectReference{Name: fmt.Sprintf("b-%02d", i)}}
		b := testBackup(fmt.Sprintf("b-%02d", i), veleroStrategy)
		if i != 7 {
			b.Labels = map[string]string{backupsv1.LabelPlan: p.Name}
		}
		if i == 9 {
			b.Status.Phase = backupsv1.BackupFailed
		}
		objs = append(objs, p, b)
	}
	// Backups no Plan names, in the same list.
	for i := range 40 {
		b := testBackup(fmt.Sprintf("old-%02d", i), veleroStrategy)
		b.Labels = map[string]string{backupsv1.LabelPlan: "p-00"}
		objs = append(objs, b)
	}
	var gets, lists int
	h := newHarness(t, &interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*backupsv1.Backup); ok {
				gets++
			}
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*backupsv1.BackupList); ok {
				lists++
				lo := (&client.ListOptions{}).ApplyOptions(opts)
				require.NotNil(t, lo.LabelSelector, "the list is label-selected")
				assert.Equal(t, backupsv1.LabelPlan, lo.LabelSelector.String())
				assert.EqualValues(t, statusPageSize, lo.Limit)
			}
			return c.List(ctx, list, opts...)
		},
	}, objs...)
	require.NoError(t, h.run("status", "-n", "shop"))
	assert.Equal(t, 1, gets, "only the Backup the list could not return is read by itself")
	assert.GreaterOrEqual(t, lists, 1)
	assert.Regexp(t, `p-00 +0 2 \* \* \* +never +- +- +b-00 +Ready`, h.out.String())
	assert.Regexp(t, `p-07 +0 2 \* \* \* +never +- +- +b-07 +Ready`, h.out.String())
	assert.Regexp(t, `p-09 +0 2 \* \* \* +never +- +- +b-09 +Failed`, h.out.String())
	assert.Regexp(t, `p-59 +0 2 \* \* \* +never +- +- +b-59 +Ready`, h.out.String())
}

func TestDescribe(t *testing.T) {
	j := &backupsv1.BackupJob{
		ObjectMeta: metav1.ObjectMeta{Name: "b1", Namespace: "shop", UID: "job-uid", CreationTimestamp: created},
		Spec:       backupsv1.BackupJobSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"}, BackupClassName: "nope"},
		Status: backupsv1.BackupJobStatus{Phase: backupsv1.BackupJobFailed, Message: `BackupClass "nope" not found`,
			Conditions: []metav1.Condition{{Type: "Ready", Status: "False", Reason: "BackupClassNotFound", Message: `BackupClass "nope" not found`}}},
	}
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e1", Namespace: "shop"}, InvolvedObject: corev1.ObjectReference{UID: "job-uid"},
		Type: "Warning", Reason: "BackupClassNotFound", Message: "failed by core", ReportingController: "coffer-core-controller"}
	other := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e2", Namespace: "shop"}, InvolvedObject: corev1.ObjectReference{UID: "other"}, Reason: "Elsewhere"}
	rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: "b1", Namespace: "shop"}, Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: "gone"}}}
	h := newHarness(t, nil, j, ev, other)
	require.NoError(t, h.run("describe", "b1", "-n", "shop"))
	out := h.out.String()
	assert.Contains(t, out, "Phase:        Failed\nReason:       BackupClassNotFound\nMessage:      BackupClass \"nope\" not found\n")
	assert.Contains(t, out, "Plan:         - (ad hoc)\n")
	assert.Regexp(t, `Warning +BackupClassNotFound +coffer-core-controller +failed by core`, out)
	assert.NotContains(t, out, "Elsewhere", "only the run's events")

	require.NoError(t, h.client.Create(context.Background(), rj))
	assert.EqualError(t, h.run("describe", "b1", "-n", "shop"),
		`both a BackupJob and a RestoreJob are named "b1" in namespace shop: say which, as backupjob/b1 or restorejob/b1`)
	require.NoError(t, h.run("describe", "rj/b1", "-n", "shop"))
	assert.Contains(t, h.out.String(), "Backup:            gone (not found)\nTarget namespace:  shop\n")
	require.NoError(t, h.run("describe", "bj/b1", "-n", "shop", "-o", "yaml"))
	got := &backupsv1.BackupJob{}
	require.NoError(t, yaml.UnmarshalStrict(h.out.Bytes(), got))
	assert.Equal(t, "BackupJob", got.Kind)
	assert.EqualError(t, h.run("describe", "nope", "-n", "shop"), `no BackupJob or RestoreJob "nope" in namespace shop`)
}

func TestDescribeJobDriverRun(t *testing.T) {
	j := &backupsv1.BackupJob{
		ObjectMeta: metav1.ObjectMeta{Name: "b1", Namespace: "shop", UID: "job-uid", CreationTimestamp: created,
			Annotations: map[string]string{backupsv1.AnnotationScheduledTime: "2026-04-29T02:00:00Z"}},
		Spec: backupsv1.BackupJobSpec{PlanRef: &corev1.LocalObjectReference{Name: "shop-nightly"},
			ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"}, BackupClassName: "files"},
		Status: backupsv1.BackupJobStatus{Phase: backupsv1.BackupJobRunning, StartedAt: &created,
			Strategy:   &backupsv1.RunStrategy{BackupClassName: "files", StrategyRef: jobStrategy},
			Conditions: []metav1.Condition{{Type: "Accepted", Status: "True", Reason: "Claimed", Message: "Claimed by coffer-driver-job"}}},
	}
	bj := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "backup-b1-job-uid", Namespace: "shop", UID: "batch-uid",
		Labels: map[string]string{jobRunUIDLabel: "job-uid"}},
		Status: batchv1.JobStatus{Active: 1}}
	other := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "someone-else", Namespace: "shop", Labels: map[string]string{jobRunUIDLabel: "other"}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "backup-b1-job-uid-abcde", Namespace: "shop",
		Labels: map[string]string{jobControllerUIDLabel: "batch-uid"}},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "agent"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	h := newHarness(t, nil, j, bj, other, pod)
	h.clientset = kubefake.NewClientset()
	require.NoError(t, h.run("describe", "b1", "-n", "shop"))
	out := h.out.String()
	assert.Contains(t, out, "Plan:         shop-nightly (tick 2026-04-29T02:00:00Z)\n")
	assert.Contains(t, out, "Strategy:     JobBackupStrategy volume-tar (jobdriver.backups.cozystack.io)\nClaimed by:   coffer-driver-job\n")
	assert.Contains(t, out, "Driver objects:\n  batch/v1 Job shop/backup-b1-job-uid: active 1, succeeded 0, failed 0\n"+
		"    Pod backup-b1-job-uid-abcde container agent: Running\n      | fake logs\n")
	assert.NotContains(t, out, "someone-else")
}

func TestCompletionCommand(t *testing.T) {
	h := newHarness(t, nil)
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		require.NoError(t, h.run("completion", shell))
		assert.Contains(t, h.out.String(), "kubectl-coffer", shell)
	}
}

// convert-strategy converts a file without touching the cluster: the converted documents on
// standard output, the notes on standard error.
func TestConvertStrategy(t *testing.T) {
	h := newHarness(t, nil)
	require.NoError(t, h.run("convert-strategy", "-f", "../convert/testdata/nats.yaml"))
	assert.Contains(t, h.out.String(), "kind: JobBackupStrategy\n")
	assert.Contains(t, h.errOut.String(), `note: JobBackupStrategy nats-backup: "{{ default`)
	list := &backupsv1.BackupJobList{}
	require.NoError(t, h.client.List(context.Background(), list))
	assert.Empty(t, list.Items, "nothing was sent to the cluster")
	assert.Error(t, h.run("convert-strategy"), "-f is required")
}
