package realstack

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/internal/names"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

// TestFailedRunLeavesVeleroNothingToDo: a run whose Velero object no Velero server picks up (its
// strategy's veleroNamespace has no server here, as when the server is down) fails
// DeadlineExceeded saying so, and once it has failed its Velero Backup or Restore is deleted, so
// that a server coming back later does not run it after the run said it failed. One that Velero
// has started is left to finish.
func TestFailedRunLeavesVeleroNothingToDo(t *testing.T) {
	ctx := context.Background()
	suffix := time.Now().Format("150405")
	ns, veleroNS := "unpicked-"+suffix, "no-velero-"+suffix // neither served by the running manager
	for _, n := range []string{ns, veleroNS} {
		require.NoError(t, cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}))
	}
	shop(t, ns, "shop")
	ref := corev1.TypedLocalObjectReference{APIGroup: ptr(veleroapi.Group), Kind: veleroapi.Kind, Name: ns}
	params := map[string]string{names.ParamStorageLocation: velerostack.BSLName}
	for _, o := range []client.Object{
		&veleroapi.VeleroBackupStrategy{ObjectMeta: metav1.ObjectMeta{Name: ns}, Spec: veleroapi.VeleroBackupStrategySpec{
			VeleroNamespace: veleroNS,
			BackupTemplate:  veleroapi.VeleroTemplate{Spec: k8sruntime.RawExtension{Raw: []byte(`{"includedNamespaces": ["{{ .Application.metadata.namespace }}"]}`)}},
			Deadline:        &metav1.Duration{Duration: time.Minute},
		}},
		&backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: ns}, Spec: backupsv1.BackupClassSpec{Strategies: []backupsv1.BackupClassStrategy{
			{Application: backupsv1.ApplicationSelector{Kind: "Shop"}, StrategyRef: ref, Parameters: params},
		}}},
	} {
		require.NoError(t, cl.Create(ctx, o))
	}
	clock := clocktesting.NewFakePassiveClock(time.Now())
	rec := events.NewFakeRecorder(100)
	kit := newKit(cl, rec)
	kit.Clock = clock
	backups, restores := kit.BackupJobReconciler(), kit.RestoreJobReconciler()
	pastDeadline := func() { clock.SetTime(clock.Now().Add(2 * time.Minute)) }

	// backup claims a BackupJob (the Velero Backup is created) and returns the Velero Backup.
	backup := func(t *testing.T, name string) (*backupsv1.BackupJob, *velerov1.Backup) {
		j := backupJob(ns, name, ns, "Shop")
		require.NoError(t, cl.Create(ctx, j))
		_, err := backups.Reconcile(ctx, requestFor(j))
		require.NoError(t, err)
		vb := &velerov1.Backup{}
		require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: veleroNS, Name: names.VeleroBackup(j)}, vb))
		return j, vb
	}

	t.Run("a Velero Backup never picked up is deleted once the run failed", func(t *testing.T) {
		j, vb := backup(t, "never-picked-up")
		pastDeadline()
		_, err := backups.Reconcile(ctx, requestFor(j))
		require.NoError(t, err)
		require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(j), j))
		require.Equal(t, backupsv1.BackupJobFailed, j.Status.Phase)
		assert.Equal(t, backupsv1.ReasonDeadlineExceeded, meta.FindStatusCondition(j.Status.Conditions, backupsv1.ConditionReady).Reason)
		assert.Contains(t, j.Status.Message, "velero backup "+veleroNS+"/"+vb.Name+" had not been picked up by a Velero server")
		assert.Contains(t, j.Status.Message, "check that the velero server of namespace "+veleroNS+" runs")

		_, err = backups.Reconcile(ctx, requestFor(j)) // the failed run: RunFinished
		require.NoError(t, err)
		err = cl.Get(ctx, client.ObjectKeyFromObject(vb), &velerov1.Backup{})
		assert.True(t, apierrors.IsNotFound(err), "the failed run's Velero Backup is deleted (err %v)", err)
		assert.True(t, sawEvent(rec, "VeleroBackupCancelled"), "an event says so")
	})

	t.Run("a Velero Backup Velero has started is left to finish", func(t *testing.T) {
		j, vb := backup(t, "started")
		orig := vb.DeepCopy()
		vb.Status.Phase = velerov1.BackupPhaseInProgress // as the Velero server does when it picks it up
		require.NoError(t, cl.Patch(ctx, vb, client.MergeFrom(orig)))
		pastDeadline()
		for range 2 {
			_, err := backups.Reconcile(ctx, requestFor(j))
			require.NoError(t, err)
		}
		require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(j), j))
		require.Equal(t, backupsv1.BackupJobFailed, j.Status.Phase)
		assert.Contains(t, j.Status.Message, "is still InProgress")
		require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(vb), vb), "a started Velero Backup is not deleted")
	})

	t.Run("a Velero Restore never picked up is deleted once the run failed", func(t *testing.T) {
		b := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "restorable", Namespace: ns}, Spec: backupsv1.BackupSpec{
			ApplicationRef: corev1.TypedLocalObjectReference{APIGroup: ptr(backupsv1.DefaultApplicationAPIGroup), Kind: "Shop", Name: "shop"},
			StrategyRef:    ref, TakenAt: metav1.Now(),
			DriverMetadata: map[string]string{names.MetaNamespace: veleroNS, names.MetaBackupName: "restorable", names.MetaStorageLocation: velerostack.BSLName},
		}}
		require.NoError(t, cl.Create(ctx, b))
		b.Status.Phase = backupsv1.BackupReady
		b.Status.Artifact = &backupsv1.BackupArtifact{URI: "s3://coffer/velero/backups/restorable/restorable.tar.gz"}
		require.NoError(t, cl.Status().Update(ctx, b))
		rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: "never-picked-up", Namespace: ns},
			Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: b.Name}}}
		require.NoError(t, cl.Create(ctx, rj))
		_, err := restores.Reconcile(ctx, requestFor(rj))
		require.NoError(t, err)
		vr := &velerov1.Restore{}
		require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: veleroNS, Name: names.VeleroRestore(rj)}, vr))

		pastDeadline()
		_, err = restores.Reconcile(ctx, requestFor(rj))
		require.NoError(t, err)
		require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(rj), rj))
		require.Equal(t, backupsv1.RestoreJobFailed, rj.Status.Phase)
		assert.Contains(t, rj.Status.Message, "velero restore "+veleroNS+"/"+vr.Name+" had not been picked up by a Velero server")

		_, err = restores.Reconcile(ctx, requestFor(rj))
		require.NoError(t, err)
		err = cl.Get(ctx, client.ObjectKeyFromObject(vr), &velerov1.Restore{})
		assert.True(t, apierrors.IsNotFound(err), "the failed restore's Velero Restore is deleted (err %v)", err)
		assert.True(t, sawEvent(rec, "VeleroRestoreCancelled"), "an event says so")
	})
}

// sawEvent drains rec and reports whether an event had reason.
func sawEvent(rec *events.FakeRecorder, reason string) bool {
	seen := false
	for {
		select {
		case e := <-rec.Events:
			seen = seen || strings.Contains(e, " "+reason+" ")
		default:
			return seen
		}
	}
}
