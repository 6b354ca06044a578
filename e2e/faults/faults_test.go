//go:build e2e

// Package faults provokes, for real, the faults a run must survive (contract GEN-11: every run
// ends, and tells the truth), on one golden stack of real processes shared by the scenarios:
// kube-apiserver with kube-controller-manager, a Velero server, MinIO, and core-controller and
// driver-velero as processes under their shipped RBAC. Runs meant to fail use a strategy with a
// short deadline (VeleroBackupStrategy spec.deadline); core's claim timeout is short too.
//
// Every scenario asserts that the run reaches a terminal phase within its deadline plus
// driverkit.MaxRetryDelay, with the documented reason and a message saying what to check, and
// that the driver does not loop meanwhile: the reconciles of the run's controller
// (controller_runtime_reconcile_total, scraped from the driver) over the failing window stay
// within what driverkit's backoff allows (1 s doubling to MaxRetryDelay), plus a few wake-ups.
//
//   - MinIO stopped after the Velero backup completed and before the driver measured the tarball
//     (the driver is held with SIGSTOP meanwhile), never back: the BackupJob fails
//     ObjectStoreUnavailable, no Backup is made, and no presigned URL signature (X-Amz-Signature,
//     Signature=) appears in its status, in an event, or in the driver's log.
//   - The same, MinIO restarted on its address and data after a few seconds: the run succeeds and
//     the Backup's checksum is the stored tarball's.
//   - The Velero server stopped while a run waits for it, started again: the run succeeds.
//   - The Velero server stopped for longer than the run's deadline: the run fails
//     DeadlineExceeded, naming the Velero backup and the server to check; the driver deletes the
//     Velero backup no server picked up (event VeleroBackupCancelled), so it does not run once
//     Velero is back.
//   - The BackupClass edited and deleted and the strategy edited while a run is claimed: the run
//     succeeds with the resolution it was claimed with in status.strategy (BJ-10).
//   - A Backup deleted while a RestoreJob of it waits for Velero: the RestoreJob fails
//     BackupNotFound (RJ-8) saying what to do, its Velero restore is cancelled before Velero is
//     back (event VeleroRestoreCancelled), and the Backup's deletion completes once it is.
//   - An application of group example.com (a CRD the suite installs), which the shipped RBAC does
//     not cover: the run fails Forbidden naming the resource to grant; once a ClusterRole bound to
//     the driver's ServiceAccount grants it, a new run succeeds.
//   - A namespace holding a Backup of driver-velero deleted: the namespace goes within a bound
//     (no finalizer hang) and the artifact with it (BK-7; the Job driver's case, whose cleanup Job
//     a terminating namespace refuses, is in e2e/jobdriver).
//   - MinIO serving TLS from its own CA (velerostack.ServeTLS; the storage location's
//     objectStorage.caCert carries the CA, which Velero hands to its AWS plugin): a backup and a
//     restore through driver-velero succeed, and the restore's item counts (read from the store
//     with the caCert trusted) are recorded.
//
// It is part of `make e2e`.
package faults

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
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
	"sigs.k8s.io/yaml"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/driverkit"
	"github.com/coffer-backup/coffer/e2e/golden"
	"github.com/coffer-backup/coffer/e2e/harness/components"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

const (
	ns           = "faults"
	claimTimeout = 20 * time.Second
	// shortDeadline is the deadline of the runs the suite lets fail: long enough for a Velero
	// backup of a few objects, short enough to keep the suite short.
	shortDeadline = 15 * time.Second
	// deadline is the deadline of the runs that must succeed despite a fault.
	deadline = 2 * time.Minute

	driverName        = "coffer-driver-velero"
	backupController  = driverName + "-backupjob"
	restoreController = driverName + "-restorejob"
	// wakeups bounds the reconciles of a run besides its retries in a failing window: a watch
	// event pending when the window opens, the event of the run's terminal status write, and the
	// reconcile of a terminal run (RunFinished).
	wakeups = 3
)

var (
	shopRef    = corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"}
	widgetRef  = corev1.TypedLocalObjectReference{APIGroup: ptr.To("example.com"), Kind: "Widget", Name: "widget"}
	params     = map[string]string{"backupStorageLocationName": velerostack.BSLName}
	signature  = regexp.MustCompile(`(?i)x-amz-signature|signature=`)
	strategies = map[string]time.Duration{"faults": deadline, "faults-short": shortDeadline, "doomed": deadline}
)

func strategyRef(name string) corev1.TypedLocalObjectReference {
	return corev1.TypedLocalObjectReference{APIGroup: ptr.To(veleroapi.Group), Kind: veleroapi.Kind, Name: name}
}

// suite is the shared stack and what the scenarios need of it.
type suite struct {
	ctx    context.Context
	s      *golden.Stack
	c      client.Client
	driver *components.Component
}

func TestFaults(t *testing.T) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	s, err := golden.Start(ctx, golden.Options{Say: t.Logf, Components: []components.Spec{
		{Module: "core-controller", Binary: "core-controller", Namespace: "coffer-system", Args: []string{"--driver-claim-timeout=" + claimTimeout.String()}},
		{Module: "driver-velero", Binary: "driver-velero", Namespace: "coffer-system"},
	}})
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	f := &suite{ctx: ctx, s: s, c: s.Client, driver: s.Components["driver-velero"]}
	t.Cleanup(func() { f.stopAndCheck(t) })
	f.setup(t)
	t.Logf("stack up and fixtures created in %s", time.Since(began).Round(time.Second))

	for _, sc := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"object store down before the tarball is measured, never back: ObjectStoreUnavailable, no signature leaked", f.objectStoreGone},
		{"object store down for a moment: the run succeeds", f.objectStoreBlip},
		{"Velero server away for a moment: the run succeeds", f.veleroBlip},
		{"Velero server away past the deadline: DeadlineExceeded, and its backup never runs", f.veleroGone},
		{"class edited and deleted, strategy edited, under a claimed run: it finishes as claimed", f.classDeleted},
		{"Backup deleted under a running restore: BackupNotFound, and its restore never runs", f.backupDeleted},
		{"application outside apps.cozystack.io: Forbidden naming the rule, then granted", f.forbidden},
		{"namespace holding a Backup deleted: it goes, with the artifact", f.namespaceDeleted},
		{"object store serving TLS from its own CA: backup and restore succeed", f.tls},
	} {
		start := time.Now()
		t.Run(sc.name, sc.run)
		t.Logf("%-70.70s %s", sc.name, time.Since(start).Round(100*time.Millisecond))
	}
	t.Logf("suite wall time %s", time.Since(began).Round(time.Second))
}

func (f *suite) setup(t *testing.T) {
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		shop(ns),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "catalog", Namespace: ns}, Data: map[string]string{"items": "tea,coffee"}},
	}
	for name, d := range strategies {
		objs = append(objs, &veleroapi.VeleroBackupStrategy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: veleroapi.VeleroBackupStrategySpec{
			BackupTemplate: veleroapi.VeleroTemplate{Spec: runtime.RawExtension{Raw: []byte(`{"includedNamespaces": ["{{ .Application.metadata.namespace }}"], "snapshotVolumes": false}`)}},
			Deadline:       &metav1.Duration{Duration: d},
		}})
	}
	class := func(name, strategy string, extra ...backupsv1.BackupClassStrategy) *backupsv1.BackupClass {
		return &backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: backupsv1.BackupClassSpec{Strategies: append([]backupsv1.BackupClassStrategy{{
			Application: backupsv1.ApplicationSelector{Kind: shopRef.Kind}, StrategyRef: strategyRef(strategy), Parameters: params,
		}}, extra...)}}
	}
	objs = append(objs,
		class("faults", "faults", backupsv1.BackupClassStrategy{
			Application: backupsv1.ApplicationSelector{APIGroup: widgetRef.APIGroup, Kind: widgetRef.Kind}, StrategyRef: strategyRef("faults"), Parameters: params,
		}),
		class("faults-short", "faults-short"),
		class("doomed", "doomed"),
	)
	for _, o := range objs {
		require.NoError(t, f.c.Create(f.ctx, o), "creating %T %s", o, o.GetName())
	}
}

func shop(namespace string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Shop",
		"metadata": map[string]any{"name": shopRef.Name, "namespace": namespace}, "spec": map[string]any{"size": "small"}}}
}

// objectStoreGone: MinIO goes away between the Velero backup's completion and the driver's
// measurement of the tarball, and stays away past the run's deadline.
func (f *suite) objectStoreGone(t *testing.T) {
	defer f.minIOBack(t)
	j, w := f.storeDownAfterCompleted(t, "store-gone", "faults-short")
	f.waitBackupJob(t, j, "the run to fail", shortDeadline+driverkit.MaxRetryDelay+30*time.Second, (*backupsv1.BackupJob).IsTerminal)
	f.assertFailed(t, j, driverkit.ReasonObjectStoreUnavailable, shortDeadline, "object store", "check")
	f.assertBackoff(t, w)
	err := f.c.Get(f.ctx, client.ObjectKey{Namespace: ns, Name: j.Name}, &backupsv1.Backup{})
	assert.True(t, apierrors.IsNotFound(err), "a failed run made no Backup (err %v)", err)

	status, err := json.Marshal(j.Status)
	require.NoError(t, err)
	assert.NotRegexp(t, signature, string(status), "the BackupJob's status carries no presigned URL signature")
	for _, e := range f.events(t, ns, "") {
		assert.NotRegexp(t, signature, e, "no event carries a presigned URL signature")
	}
	assert.NotRegexp(t, signature, f.driver.Log.String(), "the driver's log carries no presigned URL signature")
}

// objectStoreBlip: as objectStoreGone, MinIO back after a few failed measurements.
func (f *suite) objectStoreBlip(t *testing.T) {
	defer f.minIOBack(t)
	j, w := f.storeDownAfterCompleted(t, "store-blip", "faults")
	// Let the driver fail once more, then bring the store back on its address and data.
	f.waitErrors(t, backupController, 1)
	f.assertBackoff(t, w)
	require.NoError(t, f.s.Velero.StartMinIOAgain(f.ctx))
	f.waitBackupJob(t, j, "the run to end", deadline+driverkit.MaxRetryDelay, (*backupsv1.BackupJob).IsTerminal)
	require.Equal(t, backupsv1.BackupJobSucceeded, j.Status.Phase, "%s: %s", j.Name, j.Status.Message)
	f.assertInTime(t, j.Status.StartedAt, j.Status.CompletedAt, deadline)
	f.assertArtifact(t, j)
}

// storeDownAfterCompleted creates a BackupJob, holds the driver (SIGSTOP) once it has created
// its Velero backup, waits for Velero to complete it, stops MinIO, and lets the driver go on,
// which then finds the store gone when it measures the tarball. It returns the run once the
// driver has caught up with the Velero backup's updates queued while it was held and failed to
// measure, and the failing window opened then.
func (f *suite) storeDownAfterCompleted(t *testing.T, name, class string) (*backupsv1.BackupJob, window) {
	j := f.backupJob(t, ns, name, class, shopRef)
	vb := f.waitVeleroObject(t, "Backup", backupsv1.LabelBackupJobUID, j.UID)
	errs := f.metric(t, "controller_runtime_reconcile_errors_total", backupController)
	release := hold(t, f.driver)
	defer release()
	require.NoError(t, f.c.Get(f.ctx, client.ObjectKeyFromObject(j), j))
	require.Nil(t, j.Status.BackupRef, "the driver was held before it could measure the tarball")
	f.waitVeleroPhase(t, vb, "Completed")
	f.s.Velero.StopMinIO()
	release()
	t.Logf("velero backup %s Completed; MinIO stopped before the driver measured it", vb.GetName())
	waitFor(t, f.ctx, "the driver to fail to measure the tarball", 30*time.Second, func(context.Context) (bool, error) {
		return f.metric(t, "controller_runtime_reconcile_errors_total", backupController) >= errs+2, nil
	})
	return j, f.failing(t, backupController)
}

// waitErrors waits for n more failed reconciles of controller.
func (f *suite) waitErrors(t *testing.T, controller string, n float64) {
	t.Helper()
	errs := f.metric(t, "controller_runtime_reconcile_errors_total", controller)
	waitFor(t, f.ctx, fmt.Sprintf("%s to fail %.0f more times", controller, n), time.Minute, func(context.Context) (bool, error) {
		return f.metric(t, "controller_runtime_reconcile_errors_total", controller) >= errs+n, nil
	})
}

// minIOBack restarts MinIO if a scenario left it stopped and waits until Velero found the
// storage location Available again, so the next scenario starts on a working store.
func (f *suite) minIOBack(t *testing.T) {
	if err := f.s.Velero.StartMinIOAgain(f.ctx); err != nil {
		t.Logf("MinIO: %v", err) // running already
	}
	require.NoError(t, f.s.Velero.WaitStorageValidated(f.ctx))
}

// veleroBlip: the Velero server is down when the run is claimed and creates its Velero backup,
// and comes back a few seconds later.
func (f *suite) veleroBlip(t *testing.T) {
	f.s.Velero.StopVelero()
	defer f.veleroBack(t)
	stopped := time.Now()
	w := f.starting(t, backupController)
	j := f.backupJob(t, ns, "velero-blip", "faults", shopRef)
	vb := f.waitVeleroObject(t, "Backup", backupsv1.LabelBackupJobUID, j.UID)
	time.Sleep(3 * time.Second)
	require.NoError(t, f.c.Get(f.ctx, client.ObjectKeyFromObject(j), j))
	assert.Equal(t, backupsv1.BackupJobRunning, j.Status.Phase, "the run waits for Velero")
	assert.Empty(t, phase(f.get(t, vb)), "no Velero server picked velero backup %s up", vb.GetName())
	f.assertBackoff(t, w)
	require.NoError(t, f.s.Velero.StartVelero(f.ctx))
	t.Logf("velero server back after %s", time.Since(stopped).Round(100*time.Millisecond))
	f.waitBackupJob(t, j, "the run to end", deadline+driverkit.MaxRetryDelay, (*backupsv1.BackupJob).IsTerminal)
	require.Equal(t, backupsv1.BackupJobSucceeded, j.Status.Phase, "%s: %s", j.Name, j.Status.Message)
	f.assertInTime(t, j.Status.StartedAt, j.Status.CompletedAt, deadline)
	f.assertArtifact(t, j)
}

// veleroGone: the Velero server is down for longer than the run's deadline.
func (f *suite) veleroGone(t *testing.T) {
	f.s.Velero.StopVelero()
	defer f.veleroBack(t)
	w := f.starting(t, backupController)
	j := f.backupJob(t, ns, "velero-gone", "faults-short", shopRef)
	vb := f.waitVeleroObject(t, "Backup", backupsv1.LabelBackupJobUID, j.UID)
	f.waitBackupJob(t, j, "the run to fail", shortDeadline+driverkit.MaxRetryDelay+30*time.Second, (*backupsv1.BackupJob).IsTerminal)
	f.assertFailed(t, j, backupsv1.ReasonDeadlineExceeded, shortDeadline, vb.GetName(), "velero server")
	assert.GreaterOrEqual(t, j.Status.CompletedAt.Sub(j.Status.StartedAt.Time), shortDeadline-time.Second, "not failed before its deadline")
	f.assertBackoff(t, w)

	// The run said it failed: its Velero backup must not run after all once Velero is back.
	f.waitCancelled(t, vb)
	f.assertEvent(t, j.UID, "VeleroBackupCancelled")
	require.NoError(t, f.s.Velero.StartVelero(f.ctx))
}

// veleroBack starts the Velero server again if a scenario left it stopped.
func (f *suite) veleroBack(t *testing.T) {
	if err := f.s.Velero.StartVelero(f.ctx); err != nil {
		t.Logf("Velero: %v", err) // running already
	}
}

// waitCancelled waits for the driver to delete the Velero backup or restore of a failed run that
// no Velero server picked up, while the server is still away: once back, it has nothing to run.
func (f *suite) waitCancelled(t *testing.T, o *unstructured.Unstructured) {
	t.Helper()
	waitFor(t, f.ctx, fmt.Sprintf("the driver to cancel velero %s %s of the failed run", o.GetKind(), o.GetName()), 30*time.Second, func(ctx context.Context) (bool, error) {
		live := o.DeepCopy()
		err := f.c.Get(ctx, client.ObjectKeyFromObject(o), live)
		if err == nil && phase(live) != "" {
			return false, fmt.Errorf("velero %s %s of a failed run was picked up (phase %s)", o.GetKind(), o.GetName(), phase(live))
		}
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

// classDeleted: while the run waits for Velero, its class is pointed elsewhere with other
// parameters and then deleted, and its strategy's template is broken.
func (f *suite) classDeleted(t *testing.T) {
	f.s.Velero.StopVelero()
	defer f.veleroBack(t)
	w := f.starting(t, backupController)
	j := f.backupJob(t, ns, "doomed", "doomed", shopRef)
	f.waitVeleroObject(t, "Backup", backupsv1.LabelBackupJobUID, j.UID)
	require.NoError(t, f.c.Get(f.ctx, client.ObjectKeyFromObject(j), j))
	require.NotNil(t, j.Status.Strategy, "the claim recorded its strategy")
	claimed := j.Status.Strategy.DeepCopy()

	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		class := &backupsv1.BackupClass{}
		if err := f.c.Get(f.ctx, client.ObjectKey{Name: "doomed"}, class); err != nil {
			return err
		}
		class.Spec.Strategies[0].StrategyRef = strategyRef("faults-short")
		class.Spec.Strategies[0].Parameters = map[string]string{"backupStorageLocationName": "elsewhere"}
		return f.c.Update(f.ctx, class)
	}))
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := &veleroapi.VeleroBackupStrategy{}
		if err := f.c.Get(f.ctx, client.ObjectKey{Name: "doomed"}, s); err != nil {
			return err
		}
		s.Spec.BackupTemplate.Spec.Raw = []byte(`{"includedNamespaces": ["{{ .Parameters.nowhere }}"]}`)
		return f.c.Update(f.ctx, s)
	}))
	time.Sleep(time.Second)
	require.NoError(t, f.c.Delete(f.ctx, &backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}))
	time.Sleep(2 * time.Second)

	f.assertBackoff(t, w)
	require.NoError(t, f.s.Velero.StartVelero(f.ctx))
	f.waitBackupJob(t, j, "the run to end", deadline+driverkit.MaxRetryDelay, (*backupsv1.BackupJob).IsTerminal)
	require.Equal(t, backupsv1.BackupJobSucceeded, j.Status.Phase, "%s: %s", j.Name, j.Status.Message)
	f.assertInTime(t, j.Status.StartedAt, j.Status.CompletedAt, deadline)
	if assert.NotNil(t, j.Status.Strategy) {
		assert.Equal(t, *claimed, *j.Status.Strategy, "status.strategy is the resolution the run was claimed with")
		assert.Equal(t, "doomed", j.Status.Strategy.BackupClassName)
		assert.Equal(t, strategyRef("doomed"), j.Status.Strategy.StrategyRef)
		assert.Equal(t, params, j.Status.Strategy.Parameters)
	}
	b := f.assertArtifact(t, j)
	assert.Equal(t, strategyRef("doomed"), b.Spec.StrategyRef, "the Backup names the strategy the run was claimed with")
	assert.Len(t, f.veleroObjects(t, "Backup", backupsv1.LabelBackupJobUID, j.UID), 1, "one velero backup for the run")
}

// backupDeleted: a Backup is deleted while a RestoreJob of it waits for Velero.
func (f *suite) backupDeleted(t *testing.T) {
	j := f.backupJob(t, ns, "to-delete", "faults", shopRef)
	f.waitBackupJob(t, j, "the backup", deadline, (*backupsv1.BackupJob).IsTerminal)
	require.Equal(t, backupsv1.BackupJobSucceeded, j.Status.Phase, "%s: %s", j.Name, j.Status.Message)
	backup := f.assertArtifact(t, j)

	f.s.Velero.StopVelero()
	defer f.veleroBack(t)
	rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: "of-deleted", Namespace: ns},
		Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: backup.Name}}}
	require.NoError(t, f.c.Create(f.ctx, rj))
	vr := f.waitVeleroObject(t, "Restore", backupsv1.LabelRestoreJobUID, rj.UID)
	deleted := time.Now()
	w := f.failing(t, restoreController)
	require.NoError(t, f.c.Delete(f.ctx, backup))
	waitFor(t, f.ctx, "the restore to end", deadline+driverkit.MaxRetryDelay, func(ctx context.Context) (bool, error) {
		err := f.c.Get(ctx, client.ObjectKeyFromObject(rj), rj)
		return rj.IsTerminal(), err
	})
	t.Logf("RestoreJob %s ended within %s of its Backup's deletion: %s", rj.Name, time.Since(deleted).Round(100*time.Millisecond), rj.Status.Message)
	require.Equal(t, backupsv1.RestoreJobFailed, rj.Status.Phase)
	f.assertInTime(t, rj.Status.StartedAt, rj.Status.CompletedAt, deadline)
	f.assertReason(t, rj.Status.Conditions, backupsv1.ReasonBackupNotFound, rj.Status.Message, backup.Name, "another Backup")
	f.assertBackoff(t, w)

	// The failed restore's Velero restore is cancelled before Velero is back, so it never writes
	// into the namespace; then Velero completes the Backup's deletion.
	f.waitCancelled(t, vr)
	f.assertEvent(t, rj.UID, "VeleroRestoreCancelled")
	require.NoError(t, f.s.Velero.StartVelero(f.ctx))
	// Velero's deletion waits up to a minute for the restores of the backup to go, and a request
	// it fails (its storage location not yet validated again, say) is asked again after the
	// driver's backoff: the bound is both.
	live := &backupsv1.Backup{}
	err := wait.PollUntilContextTimeout(f.ctx, 200*time.Millisecond, time.Minute+driverkit.MaxRetryDelay, true, func(ctx context.Context) (bool, error) {
		err := f.c.Get(ctx, client.ObjectKeyFromObject(backup), live)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if err != nil {
		dbrs := &unstructured.UnstructuredList{}
		dbrs.SetAPIVersion("velero.io/v1")
		dbrs.SetKind("DeleteBackupRequestList")
		if f.c.List(f.ctx, dbrs, client.InNamespace(velerostack.Namespace)) == nil {
			for _, o := range dbrs.Items {
				t.Logf("velero DeleteBackupRequest %s: %v", o.GetName(), o.Object["status"])
			}
		}
		t.Fatalf("Backup %s not deleted once Velero was back: %v; conditions %+v", backup.Name, err, live.Status.Conditions)
	}
}

// forbidden: the application is of a group the driver's shipped ClusterRole does not cover.
func (f *suite) forbidden(t *testing.T) {
	crd := object(`{apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, metadata: {name: widgets.example.com},
spec: {group: example.com, scope: Namespaced, names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget},
  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}]}}`)
	require.NoError(t, manifests.Apply(f.ctx, f.c, []*unstructured.Unstructured{crd}))
	widget := object(`{apiVersion: example.com/v1, kind: Widget, metadata: {name: widget, namespace: ` + ns + `}, spec: {size: 3}}`)
	waitFor(t, f.ctx, "the API server to serve widgets", 30*time.Second, func(ctx context.Context) (bool, error) {
		err := f.c.Create(ctx, widget.DeepCopy())
		return err == nil, client.IgnoreNotFound(ignoreNoMatch(err))
	})

	w := f.starting(t, backupController)
	j := f.backupJob(t, ns, "widget-denied", "faults", widgetRef)
	f.waitBackupJob(t, j, "the run to fail", deadline+driverkit.MaxRetryDelay, (*backupsv1.BackupJob).IsTerminal)
	f.assertFailed(t, j, driverkit.ReasonForbidden, deadline, "widgets.example.com", "grant", "system:serviceaccount:coffer-system:coffer-driver-velero")
	f.assertBackoff(t, w)
	assert.Empty(t, f.veleroObjects(t, "Backup", backupsv1.LabelBackupJobUID, j.UID), "a refused run creates nothing")

	t.Log("The admin grants what the message asks: get on widgets.example.com, to the driver's ServiceAccount")
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "coffer-driver-velero-widgets"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"example.com"}, Resources: []string{"widgets"}, Verbs: []string{"get"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "coffer-driver-velero-widgets"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "coffer-system", Name: "coffer-driver-velero"}}}
	require.NoError(t, f.c.Create(f.ctx, role))
	require.NoError(t, f.c.Create(f.ctx, binding))
	time.Sleep(2 * time.Second) // the authorizer's informers
	j2 := f.backupJob(t, ns, "widget-granted", "faults", widgetRef)
	f.waitBackupJob(t, j2, "the run to end", deadline+driverkit.MaxRetryDelay, (*backupsv1.BackupJob).IsTerminal)
	require.Equal(t, backupsv1.BackupJobSucceeded, j2.Status.Phase, "%s: %s", j2.Name, j2.Status.Message)
	f.assertArtifact(t, j2)
}

// namespaceDeleted: a namespace holding a Ready Backup (with the driver's finalizer) is deleted.
func (f *suite) namespaceDeleted(t *testing.T) {
	const gone = "faults-gone"
	require.NoError(t, f.c.Create(f.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: gone}}))
	require.NoError(t, f.c.Create(f.ctx, shop(gone)))
	j := f.backupJob(t, gone, "before-deletion", "faults", shopRef)
	f.waitBackupJob(t, j, "the backup", deadline, (*backupsv1.BackupJob).IsTerminal)
	require.Equal(t, backupsv1.BackupJobSucceeded, j.Status.Phase, "%s: %s", j.Name, j.Status.Message)
	b := f.assertArtifact(t, j)
	require.Contains(t, b.Finalizers, "velerodriver.backups.cozystack.io/artifact")
	vb := b.Spec.DriverMetadata["veleroBackupName"]

	start := time.Now()
	require.NoError(t, f.c.Delete(f.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: gone}}))
	const bound = 90 * time.Second
	waitFor(t, f.ctx, "the namespace to go", bound, func(ctx context.Context) (bool, error) {
		err := f.c.Get(ctx, client.ObjectKey{Name: gone}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	t.Logf("namespace %s gone %s after its deletion", gone, time.Since(start).Round(100*time.Millisecond))
	// BK-7: the driver's deletion runs outside the namespace (a DeleteBackupRequest in Velero's),
	// so the artifact goes with the namespace rather than being kept.
	vbObj := &unstructured.Unstructured{}
	vbObj.SetAPIVersion("velero.io/v1")
	vbObj.SetKind("Backup")
	err := f.c.Get(f.ctx, client.ObjectKey{Namespace: velerostack.Namespace, Name: vb}, vbObj)
	assert.True(t, apierrors.IsNotFound(err), "velero backup %s is deleted with the namespace's Backup (err %v)", vb, err)
	_, err = f.s.Velero.S3.StatObject(f.ctx, velerostack.Bucket, velerostack.ObjectKey(vb), minio.StatObjectOptions{})
	assert.Equal(t, "NoSuchKey", minio.ToErrorResponse(err).Code, "the tarball is deleted from the store")
	assert.Contains(t, f.driver.Log.String(), "Deleted artifact; released Backup", "the driver says so in its log")
}

// tls: MinIO restarted serving HTTPS with a certificate of its own CA; the storage location
// carries the CA in objectStorage.caCert.
func (f *suite) tls(t *testing.T) {
	require.NoError(t, f.s.Velero.ServeTLS(f.ctx))
	require.NoError(t, f.s.Velero.WaitStorageValidated(f.ctx), "Velero validates the storage location over TLS")
	t.Logf("MinIO serves %s; the storage location trusts its CA", f.s.Velero.S3URL())
	j := f.backupJob(t, ns, "over-tls", "faults", shopRef)
	f.waitBackupJob(t, j, "the backup", deadline+driverkit.MaxRetryDelay, (*backupsv1.BackupJob).IsTerminal)
	require.Equal(t, backupsv1.BackupJobSucceeded, j.Status.Phase, "%s: %s", j.Name, j.Status.Message)
	b := f.assertArtifact(t, j)

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "catalog", Namespace: ns}}
	require.NoError(t, f.c.Delete(f.ctx, cm))
	waitFor(t, f.ctx, "the ConfigMap to go", time.Minute, func(ctx context.Context) (bool, error) {
		err := f.c.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: "over-tls", Namespace: ns},
		Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: b.Name}}}
	require.NoError(t, f.c.Create(f.ctx, rj))
	waitFor(t, f.ctx, "the restore to end", deadline+driverkit.MaxRetryDelay, func(ctx context.Context) (bool, error) {
		err := f.c.Get(ctx, client.ObjectKeyFromObject(rj), rj)
		return rj.IsTerminal(), err
	})
	require.Equal(t, backupsv1.RestoreJobSucceeded, rj.Status.Phase, "%s: %s", rj.Name, rj.Status.Message)
	require.NoError(t, f.c.Get(f.ctx, client.ObjectKeyFromObject(cm), cm), "the ConfigMap is back")
	assert.Equal(t, "tea,coffee", cm.Data["items"])
	if assert.NotNil(t, rj.Status.Items, "the restore's item counts, read from the store over TLS, are recorded") {
		assert.Positive(t, rj.Status.Items.Restored, "the ConfigMap was restored")
	}
}

// --- helpers ---

func (f *suite) backupJob(t *testing.T, namespace, name, class string, app corev1.TypedLocalObjectReference) *backupsv1.BackupJob {
	t.Helper()
	j := &backupsv1.BackupJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: backupsv1.BackupJobSpec{ApplicationRef: app, BackupClassName: class}}
	require.NoError(t, f.c.Create(f.ctx, j))
	return j
}

func (f *suite) waitBackupJob(t *testing.T, j *backupsv1.BackupJob, what string, timeout time.Duration, cond func(*backupsv1.BackupJob) bool) {
	t.Helper()
	waitFor(t, f.ctx, fmt.Sprintf("%s (BackupJob %s)", what, j.Name), timeout, func(ctx context.Context) (bool, error) {
		err := f.c.Get(ctx, client.ObjectKeyFromObject(j), j)
		return err == nil && cond(j), err
	})
}

func waitFor(t *testing.T, ctx context.Context, what string, timeout time.Duration, cond func(context.Context) (bool, error)) {
	t.Helper()
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, cond), "waiting for %s", what)
}

// assertFailed asserts a failed run: Failed within its deadline plus MaxRetryDelay, Ready=False
// with reason, and a message naming each of words.
func (f *suite) assertFailed(t *testing.T, j *backupsv1.BackupJob, reason string, d time.Duration, words ...string) {
	t.Helper()
	require.Equal(t, backupsv1.BackupJobFailed, j.Status.Phase, "%s: %s", j.Name, j.Status.Message)
	t.Logf("BackupJob %s failed %s after it started: %s", j.Name, j.Status.CompletedAt.Sub(j.Status.StartedAt.Time).Round(time.Second), j.Status.Message)
	f.assertInTime(t, j.Status.StartedAt, j.Status.CompletedAt, d)
	f.assertReason(t, j.Status.Conditions, reason, j.Status.Message, words...)
}

func (f *suite) assertReason(t *testing.T, conds []metav1.Condition, reason, message string, words ...string) {
	t.Helper()
	ready := meta.FindStatusCondition(conds, backupsv1.ConditionReady)
	if assert.NotNil(t, ready, "a Ready condition") {
		assert.Equal(t, metav1.ConditionFalse, ready.Status)
		assert.Equal(t, reason, ready.Reason, "Ready: %s", ready.Message)
	}
	for _, w := range words {
		assert.Contains(t, strings.ToLower(message), strings.ToLower(w), "the message names %q", w)
	}
}

// assertInTime asserts GEN-11: the run ended within its deadline d plus driverkit.MaxRetryDelay
// (timestamps are stored to the second).
func (f *suite) assertInTime(t *testing.T, started, completed *metav1.Time, d time.Duration) {
	t.Helper()
	require.NotNil(t, started, "startedAt")
	require.NotNil(t, completed, "completedAt")
	assert.LessOrEqual(t, completed.Sub(started.Time), d+driverkit.MaxRetryDelay+time.Second, "ended within its deadline plus MaxRetryDelay")
}

// window is the start of a failing window of one of the driver's controllers: the reconciles
// it had counted, and when.
type window struct {
	controller string
	before     float64
	from       time.Time
	wakeups    int
}

// failing opens a failing window of controller now, on a run already going.
func (f *suite) failing(t *testing.T, controller string) window {
	t.Helper()
	return window{controller: controller, before: f.metric(t, "controller_runtime_reconcile_total", controller), from: time.Now(), wakeups: wakeups}
}

// starting opens a failing window of controller now, before a run is created: its start adds
// the claim, the event of the claim's write and that of its Velero object's creation.
func (f *suite) starting(t *testing.T, controller string) window {
	t.Helper()
	w := f.failing(t, controller)
	w.wakeups += 3
	return w
}

// assertBackoff asserts that the window's controller reconciled no more than driverkit's backoff
// allows from the window's start to now: a run that fails throughout is retried after 1 s, 2 s,
// 4 s … (at most MaxRetryDelay), and woken by a few watch events besides (wakeups).
func (f *suite) assertBackoff(t *testing.T, w window) {
	t.Helper()
	time.Sleep(time.Second) // a reconcile is counted once it returns
	n := f.metric(t, "controller_runtime_reconcile_total", w.controller) - w.before
	d := time.Since(w.from)
	bound := retries(d) + w.wakeups
	t.Logf("%s: %.0f reconciles over %s of failure (bound %d)", w.controller, n, d.Round(100*time.Millisecond), bound)
	assert.LessOrEqual(t, n, float64(bound), "%s reconciles no more than its backoff allows", w.controller)
}

// retries is how many times driverkit's rate limiter lets a run that fails throughout be
// reconciled within window: at 0, then after waits of 1 s, 2 s, 4 s … capped at MaxRetryDelay.
func retries(window time.Duration) int {
	n, at, delay := 1, time.Duration(0), time.Second
	for {
		if at += delay; at > window {
			return n
		}
		n++
		delay = min(2*delay, driverkit.MaxRetryDelay)
	}
}

// assertArtifact asserts that the run made a Ready Backup whose artifact's size and checksum are
// those of the tarball in the store, and returns the Backup.
func (f *suite) assertArtifact(t *testing.T, j *backupsv1.BackupJob) *backupsv1.Backup {
	t.Helper()
	require.NotNil(t, j.Status.BackupRef, "%s has a backupRef", j.Name)
	b := &backupsv1.Backup{}
	require.NoError(t, f.c.Get(f.ctx, client.ObjectKey{Namespace: j.Namespace, Name: j.Status.BackupRef.Name}, b))
	require.Equal(t, backupsv1.BackupReady, b.Status.Phase)
	require.NotNil(t, b.Status.Artifact)
	obj, err := f.s.Velero.S3.GetObject(f.ctx, velerostack.Bucket, velerostack.ObjectKey(b.Spec.DriverMetadata["veleroBackupName"]), minio.GetObjectOptions{})
	require.NoError(t, err)
	defer obj.Close()
	h := sha256.New()
	n, err := io.Copy(h, obj)
	require.NoError(t, err)
	assert.Equal(t, "sha256:"+hex.EncodeToString(h.Sum(nil)), b.Status.Artifact.Checksum, "the Backup's checksum is the stored tarball's")
	assert.Equal(t, n, b.Status.Artifact.SizeBytes, "and its size")
	return b
}

// events are the reasons and notes of the events about the object uid (every object: "") in
// namespace.
func (f *suite) events(t *testing.T, namespace string, uid types.UID) []string {
	t.Helper()
	list := &eventsv1.EventList{}
	require.NoError(t, f.c.List(f.ctx, list, client.InNamespace(namespace)))
	var notes []string
	for _, e := range list.Items {
		if uid == "" || e.Regarding.UID == uid {
			notes = append(notes, e.Reason+": "+e.Note)
		}
	}
	return notes
}

// assertEvent asserts that an event about the object uid in the suite's namespace has reason.
func (f *suite) assertEvent(t *testing.T, uid types.UID, reason string) {
	t.Helper()
	notes := f.events(t, ns, uid)
	for _, n := range notes {
		if strings.HasPrefix(n, reason+": ") {
			return
		}
	}
	t.Errorf("no %s event among %q", reason, notes)
}

// veleroObjects lists the velero.io objects of kind labelled with a run's UID.
func (f *suite) veleroObjects(t *testing.T, kind, label string, uid types.UID) []unstructured.Unstructured {
	t.Helper()
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("velero.io/v1")
	list.SetKind(kind + "List")
	require.NoError(t, f.c.List(f.ctx, list, client.InNamespace(velerostack.Namespace), client.MatchingLabels{label: string(uid)}))
	return list.Items
}

// waitVeleroObject waits for the driver to create the run's velero.io object of kind.
func (f *suite) waitVeleroObject(t *testing.T, kind, label string, uid types.UID) *unstructured.Unstructured {
	t.Helper()
	var found *unstructured.Unstructured
	waitFor(t, f.ctx, "the driver's velero "+kind, time.Minute, func(context.Context) (bool, error) {
		if items := f.veleroObjects(t, kind, label, uid); len(items) > 0 {
			found = &items[0]
		}
		return found != nil, nil
	})
	return found
}

func (f *suite) waitVeleroPhase(t *testing.T, o *unstructured.Unstructured, want string) {
	t.Helper()
	waitFor(t, f.ctx, fmt.Sprintf("velero %s %s to be %s", o.GetKind(), o.GetName(), want), time.Minute, func(context.Context) (bool, error) {
		return phase(f.get(t, o)) == want, nil
	})
}

func (f *suite) get(t *testing.T, o *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	live := o.DeepCopy()
	require.NoError(t, f.c.Get(f.ctx, client.ObjectKeyFromObject(o), live))
	return live
}

func phase(o *unstructured.Unstructured) string {
	p, _, _ := unstructured.NestedString(o.Object, "status", "phase")
	return p
}

// hold stops a component's process (SIGSTOP) without ending it; the returned func, idempotent,
// lets it go on (SIGCONT). A hold of a few seconds stays well inside the component's Lease
// renewal deadline (10 s), so it keeps leading.
func hold(t *testing.T, c *components.Component) func() {
	t.Helper()
	require.NoError(t, syscall.Kill(c.Pid(), syscall.SIGSTOP))
	held := time.Now()
	released := false
	return func() {
		if !released {
			released = true
			require.NoError(t, syscall.Kill(c.Pid(), syscall.SIGCONT))
			t.Logf("%s held for %s", c.Binary, time.Since(held).Round(100*time.Millisecond))
		}
	}
}

// metric sums a counter of the driver over the series of one controller.
func (f *suite) metric(t *testing.T, name, controller string) float64 {
	t.Helper()
	var body string
	var last error
	// A scrape may be refused while the endpoint starts: retry a little.
	err := wait.PollUntilContextTimeout(f.ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		body, last = f.driver.Metrics()
		return last == nil, nil
	})
	require.NoError(t, err, "scraping the driver's metrics: %v", last)
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") || !strings.Contains(line, `controller="`+controller+`"`) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		require.NoError(t, err, line)
		sum += v
	}
	require.NoError(t, sc.Err())
	return sum
}

// stopAndCheck stops the components and checks their logs: no panic, and no RBAC denial but the
// one the Forbidden scenario provokes on purpose.
func (f *suite) stopAndCheck(t *testing.T) {
	for name, c := range f.s.Components {
		assert.False(t, c.Exited(), "%s is running", name)
		c.Stop(10 * time.Second)
		log := c.Log.String()
		assert.NotContains(t, log, "panic", "%s log", name)
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, "is forbidden: User") && !strings.Contains(line, "widgets") {
				t.Errorf("%s hit an RBAC denial: %s", name, line)
			}
		}
		if t.Failed() {
			t.Logf("%s log (tail):\n%s", name, c.Tail())
		}
	}
	if t.Failed() {
		t.Logf("velero server log (tail):\n%s", f.s.Velero.VeleroLog())
	}
}

// ignoreNoMatch is nil for a kind the client's REST mapper does not know yet.
func ignoreNoMatch(err error) error {
	if meta.IsNoMatchError(err) {
		return nil
	}
	return err
}

// object decodes a YAML document into an unstructured object.
func object(doc string) *unstructured.Unstructured {
	m := map[string]any{}
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		panic(err)
	}
	return &unstructured.Unstructured{Object: m}
}
