// Package lifecycle runs the golden lifecycle on a cluster of real processes: core-controller,
// driver-velero and the verifier, each built from its own module and started as a separate
// process that authenticates as the ServiceAccount deploy/ defines for it (API-server
// impersonation), so the shipped RBAC is what is tested. They cooperate through objects only.
package lifecycle

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/cluster"
	"github.com/coffer-backup/coffer/e2e/components"
	"github.com/coffer-backup/coffer/e2e/manifests"
	"github.com/coffer-backup/coffer/e2e/velerostack"
)

func TestGoldenLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := manifests.RepoRoot()
	require.NoError(t, err)
	c, err := cluster.Start(ctx, cluster.Options{ControllerManager: true,
		CRDDirectoryPaths: []string{filepath.Join(root, "e2e", "testdata")}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop() })
	cl, err := client.New(c.Config, client.Options{Scheme: cluster.Scheme})
	require.NoError(t, err)
	require.NoError(t, manifests.InstallNodeless(ctx, cl, root))
	stack, err := velerostack.Start(ctx, c)
	require.NoError(t, err)
	t.Cleanup(stack.Stop)

	bin := t.TempDir()
	for _, spec := range []components.Spec{
		{Module: "core-controller", Binary: "core-controller", Namespace: "coffer-system", Args: []string{"--driver-claim-timeout=5m"}},
		{Module: "driver-velero", Binary: "driver-velero", Namespace: "coffer-system"},
		{Module: "verifier", Binary: "verifier", Namespace: "ugallu-system", Args: []string{"--cluster-id=e2e", "--cluster-name=lifecycle", "--etcd-snapshot-dir=" + t.TempDir()}},
	} {
		p, err := components.Launch(root, bin, c.Kubeconfig, spec)
		require.NoError(t, err)
		t.Cleanup(func() { components.StopAndCheck(t, p) })
	}

	// The application: a Shop with its objects.
	ns := "shop"
	shop := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Shop",
		"metadata": map[string]any{"name": "shop", "namespace": ns}, "spec": map[string]any{"size": "s"}}}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		shop,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "catalog", Namespace: ns}, Data: map[string]string{"items": "tea,coffee"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, Data: map[string][]byte{"password": []byte("pw")}},
		&veleroapi.VeleroBackupStrategy{ObjectMeta: metav1.ObjectMeta{Name: "shop-namespace"}, Spec: veleroapi.VeleroBackupStrategySpec{
			BackupTemplate: veleroapi.VeleroTemplate{Spec: runtime.RawExtension{Raw: []byte(`{"includedNamespaces": ["{{ .Application.metadata.namespace }}"], "snapshotVolumes": false}`)}},
		}},
		&backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: backupsv1.BackupClassSpec{Strategies: []backupsv1.BackupClassStrategy{{
			Application: backupsv1.ApplicationSelector{Kind: "Shop"},
			StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr(veleroapi.Group), Kind: veleroapi.Kind, Name: "shop-namespace"},
			Parameters:  map[string]string{"backupStorageLocationName": velerostack.BSLName},
		}}}},
		&backupsv1.Plan{ObjectMeta: metav1.ObjectMeta{Name: "shop-minutely", Namespace: ns}, Spec: backupsv1.PlanSpec{
			ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"}, BackupClassName: "default",
			Schedule: backupsv1.PlanSchedule{Cron: "* * * * *"}, Retention: &backupsv1.RetentionPolicy{KeepLast: ptr(int32(5))},
		}},
	} {
		require.NoError(t, cl.Create(ctx, o), "%T", o)
	}

	// Core fires the Plan at the next minute; the Velero driver claims the BackupJob and makes the Backup.
	var backup backupsv1.Backup
	poll(t, ctx, "the first scheduled backup", 3*time.Minute, func() (bool, error) {
		list := &backupsv1.BackupList{}
		if err := cl.List(ctx, list, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, b := range list.Items {
			if b.Status.Phase == backupsv1.BackupReady {
				backup = b
				return true, nil
			}
		}
		return false, nil
	})
	job := &backupsv1.BackupJob{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: backup.Name}, job))
	assert.Equal(t, backupsv1.BackupJobSucceeded, job.Status.Phase)
	assert.Equal(t, "shop-minutely", job.Spec.PlanRef.Name)
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, backup.Status.Artifact.Checksum)
	plan := &backupsv1.Plan{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop-minutely"}, plan))
	require.NotNil(t, plan.Status.LastScheduleTime)

	// The verifier checks the artifact and restores it into a sandbox.
	veleroBackup := backup.Spec.DriverMetadata["veleroBackupName"]
	for _, m := range []securityv1.Mode{securityv1.ModeChecksumOnly, securityv1.ModeFullRestore} {
		run := &securityv1.BackupVerifyRun{ObjectMeta: metav1.ObjectMeta{Name: "verify-" + string(m), Namespace: "ugallu-system"},
			Spec: securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendVelero, Mode: m,
				BackupRef: securityv1.BackupRef{Name: veleroBackup, Namespace: velerostack.Namespace}}}
		if m == securityv1.ModeFullRestore {
			run.Spec.SandboxNamespace = "shop-bvsandbox"
		}
		require.NoError(t, cl.Create(ctx, run))
		poll(t, ctx, "verification "+string(m), 3*time.Minute, func() (bool, error) {
			err := cl.Get(ctx, client.ObjectKeyFromObject(run), run)
			return run.Status.Phase.IsTerminal(), err
		})
		assert.Equal(t, securityv1.RunSucceeded, run.Status.Phase, "%s: %s", m, run.Status.Message)
		res := &securityv1.BackupVerifyResult{}
		require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: run.Status.ResultRef}, res))
		if m == securityv1.ModeChecksumOnly {
			assert.Equal(t, backup.Status.Artifact.Checksum, res.Spec.ComputedChecksum, "the verifier recomputes what the driver recorded")
		} else {
			assert.Equal(t, res.Spec.ObjectsExpected, res.Spec.ObjectsRestored)
			assert.Positive(t, res.Spec.ObjectsExpected)
		}
	}
	poll(t, ctx, "the sandbox to be deleted", 2*time.Minute, func() (bool, error) {
		err := cl.Get(ctx, client.ObjectKey{Name: "shop-bvsandbox"}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})

	// Data lost, then restored from the Backup.
	require.NoError(t, cl.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "catalog", Namespace: ns}}))
	rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: "undo", Namespace: ns},
		Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: backup.Name}}}
	require.NoError(t, cl.Create(ctx, rj))
	poll(t, ctx, "the restore", 3*time.Minute, func() (bool, error) {
		err := cl.Get(ctx, client.ObjectKeyFromObject(rj), rj)
		return rj.IsTerminal(), err
	})
	require.Equal(t, backupsv1.RestoreJobSucceeded, rj.Status.Phase, rj.Status.Message)
	cm := &corev1.ConfigMap{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "catalog"}, cm))
	assert.Equal(t, "tea,coffee", cm.Data["items"])
}

func poll(t *testing.T, ctx context.Context, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return cond() })
	require.NoError(t, err, "waiting for %s", what)
}

func ptr[T any](v T) *T { return &v }
