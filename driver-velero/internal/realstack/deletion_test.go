package realstack

import (
	"context"
	"fmt"
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
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/internal/driver"
	"github.com/coffer-backup/coffer/driver-velero/internal/names"
	"github.com/coffer-backup/coffer/driverkit"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

// TestOwnDeletionKnownAfterVeleroDroppedItsRequest: Velero deletes the backup object, then marks
// the driver's DeleteBackupRequest Processed and deletes it. An attempt that failed meanwhile (the
// API server did not answer for a moment) overwrote the Backup's ArtifactDeletion=DeletionInProgress
// with DeletionFailing. The attempt that then finds both the backup and the request gone still knows
// the deletion was its own, and releases the Backup at once saying it deleted the backup and its
// data, without waiting for the storage location to sync. The real Velero server deletes; the
// namespace is not served by the running manager: the test calls the reconcilers.
func TestOwnDeletionKnownAfterVeleroDroppedItsRequest(t *testing.T) {
	ctx := context.Background()
	ns := "deleting-" + time.Now().Format("150405")
	require.NoError(t, cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	shop(t, ns, "shop")
	rec := events.NewFakeRecorder(1000)
	kit := newKit(cl, rec)
	jobs, backups := kit.BackupJobReconciler(), kit.BackupReconciler()

	job := backupJob(ns, "nightly", "velero", "Shop")
	require.NoError(t, cl.Create(ctx, job))
	var last error
	waitFor(t, "the backup", 3*time.Minute, func(ctx context.Context) (bool, error) {
		if _, err := jobs.Reconcile(ctx, requestFor(job)); err != nil {
			last = err // retried: the run's own errors end it, below
		}
		return job.IsTerminal(), cl.Get(ctx, client.ObjectKeyFromObject(job), job)
	})
	require.Equal(t, backupsv1.BackupJobSucceeded, job.Status.Phase, "%s (last error %v)", job.Status.Message, last)
	b := &backupsv1.Backup{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: job.Name}, b))
	require.Contains(t, b.Finalizers, names.Finalizer)
	vbKey := client.ObjectKey{Namespace: velerostack.Namespace, Name: b.Spec.DriverMetadata[names.MetaBackupName]}
	dbrKey := client.ObjectKey{Namespace: velerostack.Namespace, Name: names.DeleteRequest(vbKey.Name)}

	require.NoError(t, cl.Delete(ctx, b))
	_, err := backups.Reconcile(ctx, requestFor(b))
	require.NoError(t, err)
	require.Equal(t, driverkit.ReasonDeletionInProgress, artifactDeletion(t, b).Reason, "the first attempt asked Velero to delete")

	unavailable := newKit(interceptor.NewClient(cl, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*velerov1.Backup); ok {
				return apierrors.NewServiceUnavailable("injected: the API server does not answer")
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}), rec).BackupReconciler()
	_, err = unavailable.Reconcile(ctx, requestFor(b))
	require.Error(t, err)
	require.Equal(t, driverkit.ReasonDeletionFailing, artifactDeletion(t, b).Reason, "the failed attempt overwrote DeletionInProgress")

	waitFor(t, "Velero to delete the backup and then its request", 3*time.Minute, func(ctx context.Context) (bool, error) {
		backupErr, requestErr := cl.Get(ctx, vbKey, &velerov1.Backup{}), cl.Get(ctx, dbrKey, &velerov1.DeleteBackupRequest{})
		for _, err := range []error{backupErr, requestErr} {
			if client.IgnoreNotFound(err) != nil {
				return false, err
			}
		}
		return apierrors.IsNotFound(backupErr) && apierrors.IsNotFound(requestErr), nil
	})
	_, err = backups.Reconcile(ctx, requestFor(b))
	require.NoError(t, err)
	err = cl.Get(ctx, client.ObjectKeyFromObject(b), b)
	said := drain(rec)
	require.True(t, apierrors.IsNotFound(err), "the Backup is released at once (err %v, ArtifactDeletion %+v); the driver said:\n%s",
		err, meta.FindStatusCondition(b.Status.Conditions, driverkit.ConditionArtifactDeletion), strings.Join(said, "\n"))
	assert.True(t, has(said, "ArtifactDeleted", vbKey.String()+" and its data are deleted"), "the release says the driver deleted it:\n%s", strings.Join(said, "\n"))
}

// TestDeletionRecordsItsRequest plays Velero's part by hand, in a namespace no Velero server
// watches, to order every step: the driver records its DeleteBackupRequest on the Backup being
// deleted; an attempt that finds its own request missing from a cache behind the API server is no
// failure; once the request was recorded, the backup gone, the request Processed and deleted, the
// Backup is released as deleted whatever failed between. An absence the driver's own request does
// not explain still waits for storage: a Velero backup deleted outside Coffer before the Backup,
// and one whose deletion Velero failed ("backup not found": it was deleted outside Coffer while
// the request waited), whose record goes with the failed request.
func TestDeletionRecordsItsRequest(t *testing.T) {
	ctx := context.Background()
	suffix := time.Now().Format("150405")
	ns, veleroNS := "scripted-"+suffix, "scripted-velero-"+suffix // neither served by the running manager nor by a Velero server
	for _, n := range []string{ns, veleroNS} {
		require.NoError(t, cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}))
	}
	rec := events.NewFakeRecorder(1000)
	backups := newKit(cl, rec).BackupReconciler()
	// backup makes a Ready Backup of the driver and its Completed Velero backup, and deletes the Backup.
	backup := func(t *testing.T, name string) (*backupsv1.Backup, *velerov1.Backup) {
		t.Helper()
		vb := &velerov1.Backup{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name, Namespace: veleroNS,
			Annotations: map[string]string{names.AnnotationRun: ns + "/" + name}},
			Spec:   velerov1.BackupSpec{StorageLocation: velerostack.BSLName},
			Status: velerov1.BackupStatus{Phase: velerov1.BackupPhaseCompleted}}
		require.NoError(t, cl.Create(ctx, vb))
		b := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Finalizers: []string{names.Finalizer}}, Spec: backupsv1.BackupSpec{
			ApplicationRef: corev1.TypedLocalObjectReference{APIGroup: ptr(backupsv1.DefaultApplicationAPIGroup), Kind: "Shop", Name: "shop"},
			StrategyRef:    corev1.TypedLocalObjectReference{APIGroup: ptr(veleroapi.Group), Kind: veleroapi.Kind, Name: "namespace"},
			TakenAt:        metav1.Now(),
			// Its storage location does not exist in veleroNS: an absence cannot be confirmed.
			DriverMetadata: map[string]string{names.MetaNamespace: veleroNS, names.MetaBackupName: vb.Name, names.MetaStorageLocation: velerostack.BSLName},
		}}
		require.NoError(t, cl.Create(ctx, b))
		b.Status.Phase = backupsv1.BackupReady
		b.Status.Artifact = &backupsv1.BackupArtifact{URI: fmt.Sprintf("s3://%s/velero/backups/%s/%s.tar.gz", velerostack.Bucket, vb.Name, vb.Name)}
		require.NoError(t, cl.Status().Update(ctx, b))
		require.NoError(t, cl.Delete(ctx, b))
		return b, vb
	}
	reconcileOnce := func(t *testing.T, r reconcile.Reconciler, b *backupsv1.Backup) (reconcile.Result, error) {
		t.Helper()
		res, err := r.Reconcile(ctx, requestFor(b))
		if gerr := cl.Get(ctx, client.ObjectKeyFromObject(b), b); gerr != nil {
			require.True(t, apierrors.IsNotFound(gerr), gerr)
		}
		return res, err
	}
	requestOf := func(t *testing.T, vb *velerov1.Backup) *velerov1.DeleteBackupRequest {
		t.Helper()
		dbr := &velerov1.DeleteBackupRequest{}
		require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: veleroNS, Name: names.DeleteRequest(vb.Name)}, dbr))
		return dbr
	}
	// processed does what Velero does once it dealt with a request: Processed, with errors if any.
	processed := func(t *testing.T, dbr *velerov1.DeleteBackupRequest, errs ...string) {
		t.Helper()
		dbr.Status = velerov1.DeleteBackupRequestStatus{Phase: velerov1.DeleteBackupRequestPhaseProcessed, Errors: errs}
		require.NoError(t, cl.Update(ctx, dbr))
	}
	unconfirmed := func(t *testing.T, b *backupsv1.Backup) {
		t.Helper()
		require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(b), b), "the Backup is kept")
		c := artifactDeletion(t, b)
		assert.Equal(t, driverkit.ReasonDeletionFailing, c.Reason)
		assert.Contains(t, c.Message, "its deletion cannot be confirmed yet")
	}

	t.Run("a deletion recorded, then a failed attempt, then Velero's: the Backup is released as deleted", func(t *testing.T) {
		b, vb := backup(t, "own")
		_, err := reconcileOnce(t, backups, b)
		require.NoError(t, err)
		dbr := requestOf(t, vb)
		assert.Equal(t, ns+"/own", dbr.Annotations[names.AnnotationRun])
		assert.Equal(t, string(dbr.UID), b.Annotations[names.AnnotationDeleteRequest], "the request is recorded on the Backup")
		assert.Equal(t, driverkit.ReasonDeletionInProgress, artifactDeletion(t, b).Reason)

		// A cache behind the API server: it holds the Velero backup, not yet the request.
		behind := newKit(interceptor.NewClient(cl, interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if _, ok := obj.(*velerov1.DeleteBackupRequest); ok {
					return apierrors.NewNotFound(velerov1.Resource("deletebackuprequests"), key.Name)
				}
				return c.Get(ctx, key, obj, opts...)
			},
		}), rec)
		behind.Driver.(*driver.Driver).Live = cl
		_, err = reconcileOnce(t, behind.BackupReconciler(), b)
		require.NoError(t, err, "its own request, found existing, is no failure")
		assert.Equal(t, driverkit.ReasonDeletionInProgress, artifactDeletion(t, b).Reason)
		assert.Equal(t, dbr.UID, requestOf(t, vb).UID, "the same request")

		// Velero deletes the backup; the request is not Processed yet: the deletion waits for it.
		require.NoError(t, cl.Delete(ctx, vb))
		res, err := reconcileOnce(t, backups, b)
		require.NoError(t, err)
		assert.Positive(t, res.RequeueAfter, "looked at again soon")
		require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(b), &backupsv1.Backup{}), "not released yet")

		// An attempt fails: ArtifactDeletion=False overwrites DeletionInProgress.
		_, err = reconcileOnce(t, newKit(interceptor.NewClient(cl, interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if _, ok := obj.(*velerov1.Backup); ok {
					return apierrors.NewServiceUnavailable("injected: the API server does not answer")
				}
				return c.Get(ctx, key, obj, opts...)
			},
		}), rec).BackupReconciler(), b)
		require.Error(t, err)
		require.Equal(t, driverkit.ReasonDeletionFailing, artifactDeletion(t, b).Reason)

		// Velero marks the request Processed and deletes it before the driver looks again.
		processed(t, dbr)
		require.NoError(t, cl.Delete(ctx, dbr))
		drain(rec)
		_, err = reconcileOnce(t, backups, b)
		require.NoError(t, err)
		said := drain(rec)
		err = cl.Get(ctx, client.ObjectKeyFromObject(b), &backupsv1.Backup{})
		require.True(t, apierrors.IsNotFound(err), "released at once (err %v); the driver said:\n%s", err, strings.Join(said, "\n"))
		assert.True(t, has(said, "ArtifactDeleted", vb.Name+" and its data are deleted"), "the driver said:\n%s", strings.Join(said, "\n"))
	})

	t.Run("a Velero backup deleted outside Coffer waits for storage", func(t *testing.T) {
		b, vb := backup(t, "lost")
		require.NoError(t, cl.Delete(ctx, vb))
		_, err := reconcileOnce(t, backups, b)
		require.NoError(t, err)
		unconfirmed(t, b)
		assert.NotContains(t, b.Annotations, names.AnnotationDeleteRequest)
	})

	t.Run("a request Velero failed proves nothing, and its record goes", func(t *testing.T) {
		b, vb := backup(t, "refused")
		_, err := reconcileOnce(t, backups, b)
		require.NoError(t, err)
		dbr := requestOf(t, vb)
		require.Equal(t, string(dbr.UID), b.Annotations[names.AnnotationDeleteRequest])

		// Deleted outside Coffer while the request waited: Velero finds no backup to delete.
		require.NoError(t, cl.Delete(ctx, vb))
		processed(t, dbr, "backup not found")
		_, err = reconcileOnce(t, backups, b)
		require.NoError(t, err)
		unconfirmed(t, b)
		assert.NotContains(t, b.Annotations, names.AnnotationDeleteRequest, "the failed request's record is gone")

		// Velero deletes the failed request later (it expires): still nothing proves a deletion.
		require.NoError(t, cl.Delete(ctx, dbr))
		_, err = reconcileOnce(t, backups, b)
		require.NoError(t, err)
		unconfirmed(t, b)
	})
}

// artifactDeletion reads b again and returns its ArtifactDeletion condition.
func artifactDeletion(t *testing.T, b *backupsv1.Backup) metav1.Condition {
	t.Helper()
	require.NoError(t, cl.Get(context.Background(), client.ObjectKeyFromObject(b), b))
	c := meta.FindStatusCondition(b.Status.Conditions, driverkit.ConditionArtifactDeletion)
	require.NotNil(t, c, "ArtifactDeletion on Backup %s", b.Name)
	return *c
}

// drain returns the events waiting in rec.
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

// has reports whether one of events has reason and a message containing what.
func has(events []string, reason, what string) bool {
	for _, e := range events {
		if strings.Contains(e, " "+reason+" ") && strings.Contains(e, what) {
			return true
		}
	}
	return false
}
