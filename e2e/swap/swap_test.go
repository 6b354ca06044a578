//go:build e2e

// Package swap proves that the driver running an application's backups is chosen by its
// BackupClass at the time of each run, on the golden stack: a class moved from Velero to the Job
// driver sends new runs to the Job driver while the Velero Backups already taken stay restorable
// through Velero; a run claimed by the Job driver stays the Job driver's (with the strategy it was
// claimed with in status.strategy) when the class moves back to Velero; a run created while the
// Velero driver is down is failed by core-controller once the claim timeout has passed (Failed,
// NoDriverClaimed naming the strategy), is left alone by the driver when it returns, and the next
// run is the driver's again.
package swap

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/golden"
	"github.com/coffer-backup/coffer/e2e/harness/components"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

const (
	ns           = "swap"
	className    = "swap"
	claimTimeout = 20 * time.Second
	// runUIDLabel is the Job driver's label pointing a batch/v1 Job back at its run.
	runUIDLabel = "jobdriver.backups.cozystack.io/run-uid"
)

var (
	veleroRef = corev1.TypedLocalObjectReference{APIGroup: ptr.To(veleroapi.Group), Kind: veleroapi.Kind, Name: "swap-velero"}
	jobRef    = corev1.TypedLocalObjectReference{APIGroup: ptr.To(jobapi.Group), Kind: jobapi.Kind, Name: "swap-job"}
	shopRef   = corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"}
	catalog   = map[string]string{"items": "tea,coffee,cocoa", "currency": "EUR"}
)

func TestDriverSwap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	s, err := golden.Start(ctx, golden.Options{Say: t.Logf, Components: []components.Spec{
		{Module: "core-controller", Binary: "core-controller", Namespace: "coffer-system", Args: []string{"--driver-claim-timeout=" + claimTimeout.String()}},
		{Module: "driver-velero", Binary: "driver-velero", Namespace: "coffer-system"},
		{Module: "driver-job", Binary: "driver-job", Namespace: "coffer-system"},
	}})
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	for _, c := range s.Components {
		t.Cleanup(func() { components.StopAndCheck(t, c) })
	}
	c := s.Client
	velero := s.Components["driver-velero"]
	setup(t, ctx, c)

	t.Log("1. The class sends Shops to Velero: an ad-hoc BackupJob is run by driver-velero")
	b1 := backupJob(t, ctx, c, "b1")
	waitJob(t, ctx, c, b1, "b1 to finish", 3*time.Minute, b1.IsTerminal)
	backup1 := assertVeleroBackedUp(t, ctx, c, b1)

	t.Log("2. The class now sends Shops to the Job driver: the next BackupJob is driver-job's")
	setClassStrategy(t, ctx, c, jobRef, nil)
	b2 := backupJob(t, ctx, c, "b2")
	waitJob(t, ctx, c, b2, "driver-job to claim b2", time.Minute, func() bool { return claimed(b2) })
	assertClaimedBy(t, b2, "coffer-driver-job")
	assertStrategy(t, b2, jobRef)
	assert.Equal(t, backupsv1.BackupJobRunning, b2.Status.Phase, "no node runs the Job's pod: the run stays Running")
	var jobs *batchv1.JobList
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		jobs = &batchv1.JobList{}
		err := c.List(ctx, jobs, client.InNamespace(ns), client.MatchingLabels{runUIDLabel: string(b2.UID)})
		return len(jobs.Items) > 0, err
	})
	require.NoError(t, err, "waiting for driver-job's batch/v1 Job for b2")
	require.Len(t, jobs.Items, 1, "one batch/v1 Job for b2")
	t.Logf("driver-job created Job %s/%s for b2", ns, jobs.Items[0].Name)

	t.Log("3. The Velero Backup taken before the swap is still restored through driver-velero")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "catalog", Namespace: ns}}
	require.NoError(t, c.Delete(ctx, cm))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}))
	rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: "r1", Namespace: ns},
		Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: backup1.Name}}}
	require.NoError(t, c.Create(ctx, rj))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(rj), rj)
		return rj.IsTerminal(), err
	}), "waiting for the restore of %s", backup1.Name)
	require.Equal(t, backupsv1.RestoreJobSucceeded, rj.Status.Phase, "r1: %s", rj.Status.Message)
	if acc := meta.FindStatusCondition(rj.Status.Conditions, backupsv1.ConditionAccepted); assert.NotNil(t, acc) {
		assert.Equal(t, "Claimed by coffer-driver-velero", acc.Message)
	}
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(cm), cm), "the ConfigMap is back")
	assert.Equal(t, catalog, cm.Data, "with its data")
	// driver-velero has handled a later object (the RestoreJob) by now: it saw b2 and left it alone.
	assert.Empty(t, veleroBackupsOf(t, ctx, c, b2.UID), "driver-velero made no velero Backup for driver-job's b2")
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(b2), b2))
	assertClaimedBy(t, b2, "coffer-driver-job")

	t.Log("4. Back to Velero while driver-velero is down: core-controller fails the run after the claim timeout (NoDriverClaimed); once the driver is back, the next run is its")
	setClassStrategy(t, ctx, c, veleroRef, map[string]string{"backupStorageLocationName": velerostack.BSLName})
	velero.Stop(10 * time.Second)
	require.True(t, velero.Exited())
	b3 := backupJob(t, ctx, c, "b3")
	waitJob(t, ctx, c, b3, "core-controller to fail b3", claimTimeout+time.Minute, b3.IsTerminal)
	require.Equal(t, backupsv1.BackupJobFailed, b3.Status.Phase, "b3: %s", b3.Status.Message)
	require.NotNil(t, b3.Status.CompletedAt, "a failed run has completedAt")
	// Timestamps are stored to the second: allow one second of rounding.
	waited := b3.Status.CompletedAt.Sub(b3.CreationTimestamp.Time)
	assert.GreaterOrEqual(t, waited, claimTimeout-time.Second, "not failed before the claim timeout")
	acc := meta.FindStatusCondition(b3.Status.Conditions, backupsv1.ConditionAccepted)
	if assert.NotNil(t, acc, "b3 has an Accepted condition") {
		assert.Equal(t, metav1.ConditionFalse, acc.Status, "Accepted: %s %s", acc.Reason, acc.Message)
		assert.Equal(t, backupsv1.ReasonNoDriverClaimed, acc.Reason)
		assert.Contains(t, acc.Message, veleroRef.Kind, "the message names the strategy kind")
		assert.Contains(t, acc.Message, `"`+veleroRef.Name+`"`, "and the strategy")
	}
	ready := meta.FindStatusCondition(b3.Status.Conditions, backupsv1.ConditionReady)
	if assert.NotNil(t, ready, "b3 has a Ready condition") {
		assert.Equal(t, metav1.ConditionFalse, ready.Status)
		assert.Equal(t, backupsv1.ReasonNoDriverClaimed, ready.Reason)
	}
	assert.Contains(t, b3.Status.Message, veleroRef.Kind, "status.message names the strategy kind")
	assert.Contains(t, b3.Status.Message, `"`+veleroRef.Name+`"`, "and the strategy")
	assert.Empty(t, b3.ClaimedBy(), "no driver claimed b3")
	assert.Nil(t, b3.Status.Strategy, "no claim recorded a strategy for b3")
	assert.Nil(t, b3.Status.BackupRef)
	t.Logf("b3 failed %s after its creation: %s", waited, b3.Status.Message)
	none := &batchv1.JobList{}
	require.NoError(t, c.List(ctx, none, client.InNamespace(ns), client.MatchingLabels{runUIDLabel: string(b3.UID)}))
	assert.Empty(t, none.Items, "driver-job left the Velero run alone")
	failedB3 := b3.Status.DeepCopy()

	require.NoError(t, velero.Restart())
	restarted := time.Now()
	b4 := backupJob(t, ctx, c, "b4")
	waitJob(t, ctx, c, b4, "driver-velero to claim and finish b4", 4*time.Minute, b4.IsTerminal)
	t.Logf("b4 finished %s after driver-velero was restarted", time.Since(restarted).Round(time.Second))
	assertVeleroBackedUp(t, ctx, c, b4)
	assertStrategy(t, b4, veleroRef)
	// driver-velero, restarted, listed every BackupJob (b3 among them) before it could finish b4.
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(b3), b3))
	assert.True(t, apiequality.Semantic.DeepEqual(*failedB3, b3.Status), "the returning driver leaves the failed b3 as core-controller wrote it: was %+v, now %+v", *failedB3, b3.Status)
	assert.Empty(t, veleroBackupsOf(t, ctx, c, b3.UID), "driver-velero made no velero Backup for the failed b3")
	err = c.Get(ctx, client.ObjectKey{Namespace: ns, Name: b3.Name}, &backupsv1.Backup{})
	assert.True(t, apierrors.IsNotFound(err), "no Backup for b3 (err %v)", err)

	t.Run("a run claimed by driver-job stays driver-job's after the class moves back to Velero", func(t *testing.T) {
		// driver-velero, restarted, listed every BackupJob (b2 among them) before it could finish b4;
		// core-controller leaves b2 alone too, claimed long past the claim timeout. No node runs
		// the Job's pod here, so b2 stays Running, with the strategy it was claimed with.
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(b2), b2))
		assertClaimedBy(t, b2, "coffer-driver-job")
		assertStrategy(t, b2, jobRef)
		assert.Equal(t, backupsv1.BackupJobRunning, b2.Status.Phase, "b2: %s", b2.Status.Message)
		assert.Nil(t, b2.Status.CompletedAt, "b2 has not ended")
		hijacked := veleroBackupsOf(t, ctx, c, b2.UID)
		assert.Empty(t, hijacked, "driver-velero made no velero Backup for driver-job's b2")
		if len(hijacked) > 0 {
			// Show where it leads: let driver-velero finish what it started.
			_ = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
				err := c.Get(ctx, client.ObjectKeyFromObject(b2), b2)
				return b2.IsTerminal(), err
			})
			acc := meta.FindStatusCondition(b2.Status.Conditions, backupsv1.ConditionAccepted)
			t.Logf("driver-velero took over b2, claimed by driver-job: velero Backup %v; b2 is now %s, backupRef %v, Accepted %q; driver-job's Job still exists: %v",
				hijacked, b2.Status.Phase, b2.Status.BackupRef, acc.Message, len(jobs.Items) == 1)
		}
		b := &backupsv1.Backup{}
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: b2.Name}, b)
		assert.True(t, apierrors.IsNotFound(err), "no Backup for b2 (err %v, strategy %s)", err, b.Spec.StrategyRef.Kind)
	})
	for name, comp := range s.Components {
		assert.False(t, comp.Exited(), "%s is running", name)
		assert.NotContains(t, comp.Log.String(), "panic", "%s log", name)
	}
}

func setup(t *testing.T, ctx context.Context, c client.Client) {
	shop := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Shop",
		"metadata": map[string]any{"name": shopRef.Name, "namespace": ns}, "spec": map[string]any{"size": "small"}}}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		shop,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "catalog", Namespace: ns}, Data: catalog},
		&veleroapi.VeleroBackupStrategy{ObjectMeta: metav1.ObjectMeta{Name: veleroRef.Name}, Spec: veleroapi.VeleroBackupStrategySpec{
			BackupTemplate: veleroapi.VeleroTemplate{Spec: runtime.RawExtension{Raw: []byte(`{"includedNamespaces": ["{{ .Application.metadata.namespace }}"], "snapshotVolumes": false}`)}},
		}},
		// A plain Job strategy; no node runs its pod here.
		&jobapi.JobBackupStrategy{ObjectMeta: metav1.ObjectMeta{Name: jobRef.Name}, Spec: jobapi.JobBackupStrategySpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
				Name: "backup", Image: "registry.example/backup:1", Args: []string{"--app={{ .Application.metadata.name }}"},
			}}}},
			ActiveDeadlineSeconds: ptr.To[int64](600),
		}},
		&backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: className}, Spec: backupsv1.BackupClassSpec{Strategies: []backupsv1.BackupClassStrategy{{
			Application: backupsv1.ApplicationSelector{Kind: shopRef.Kind},
			StrategyRef: veleroRef,
			Parameters:  map[string]string{"backupStorageLocationName": velerostack.BSLName},
		}}}},
	} {
		require.NoError(t, c.Create(ctx, o), "creating %T %s", o, o.GetName())
	}
}

// setClassStrategy points the class's Shop strategy at ref. The drivers read the class from their
// caches; the pause lets the update reach them before the next run is created.
func setClassStrategy(t *testing.T, ctx context.Context, c client.Client, ref corev1.TypedLocalObjectReference, params map[string]string) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		class := &backupsv1.BackupClass{}
		if err := c.Get(ctx, client.ObjectKey{Name: className}, class); err != nil {
			return err
		}
		class.Spec.Strategies[0].StrategyRef = ref
		class.Spec.Strategies[0].Parameters = params
		return c.Update(ctx, class)
	}))
	time.Sleep(2 * time.Second)
}

func backupJob(t *testing.T, ctx context.Context, c client.Client, name string) *backupsv1.BackupJob {
	t.Helper()
	j := &backupsv1.BackupJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: backupsv1.BackupJobSpec{ApplicationRef: shopRef, BackupClassName: className}}
	require.NoError(t, c.Create(ctx, j))
	return j
}

func waitJob(t *testing.T, ctx context.Context, c client.Client, j *backupsv1.BackupJob, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(j), j); err != nil {
			return false, err
		}
		return cond(), nil
	})
	require.NoError(t, err, "waiting for %s (phase %q, conditions %v)", what, j.Status.Phase, j.Status.Conditions)
}

func claimed(j *backupsv1.BackupJob) bool {
	acc := meta.FindStatusCondition(j.Status.Conditions, backupsv1.ConditionAccepted)
	return acc != nil && acc.Status == metav1.ConditionTrue
}

// assertVeleroBackedUp asserts that driver-velero ran j to success: claimed by it, one velero
// Backup, and a Ready Backup of the Velero strategy, which it returns.
func assertVeleroBackedUp(t *testing.T, ctx context.Context, c client.Client, j *backupsv1.BackupJob) *backupsv1.Backup {
	t.Helper()
	require.Equal(t, backupsv1.BackupJobSucceeded, j.Status.Phase, "%s: %s", j.Name, j.Status.Message)
	assertClaimedBy(t, j, "coffer-driver-velero")
	b := &backupsv1.Backup{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: j.Namespace, Name: j.Status.BackupRef.Name}, b))
	assert.Equal(t, backupsv1.BackupReady, b.Status.Phase)
	assert.Equal(t, veleroRef.Kind, b.Spec.StrategyRef.Kind)
	require.NotEmpty(t, b.Spec.DriverMetadata["veleroBackupName"])
	assert.Len(t, veleroBackupsOf(t, ctx, c, j.UID), 1, "one velero Backup for %s", j.Name)
	return b
}

func assertClaimedBy(t *testing.T, j *backupsv1.BackupJob, driver string) {
	t.Helper()
	acc := meta.FindStatusCondition(j.Status.Conditions, backupsv1.ConditionAccepted)
	if assert.NotNil(t, acc, "%s has an Accepted condition", j.Name) {
		assert.Equal(t, metav1.ConditionTrue, acc.Status, "%s Accepted", j.Name)
		assert.Equal(t, backupsv1.ReasonClaimed, acc.Reason, "%s Accepted reason", j.Name)
		assert.Equal(t, "Claimed by "+driver, acc.Message, "%s was claimed by %s", j.Name, driver)
	}
}

// assertStrategy asserts that j's claim recorded the class and ref in status.strategy (BJ-10).
func assertStrategy(t *testing.T, j *backupsv1.BackupJob, ref corev1.TypedLocalObjectReference) {
	t.Helper()
	if assert.NotNil(t, j.Status.Strategy, "%s records the strategy it was claimed with", j.Name) {
		assert.Equal(t, className, j.Status.Strategy.BackupClassName, "%s status.strategy.backupClassName", j.Name)
		assert.Equal(t, ref, j.Status.Strategy.StrategyRef, "%s status.strategy.strategyRef", j.Name)
	}
}

// veleroBackupsOf lists the velero.io Backups that driver-velero labelled with a run's UID.
func veleroBackupsOf(t *testing.T, ctx context.Context, c client.Client, uid types.UID) []string {
	t.Helper()
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("velero.io/v1")
	list.SetKind("BackupList")
	require.NoError(t, c.List(ctx, list, client.InNamespace(velerostack.Namespace), client.MatchingLabels{backupsv1.LabelBackupJobUID: string(uid)}))
	var names []string
	for _, b := range list.Items {
		names = append(names, b.GetName())
	}
	return names
}
