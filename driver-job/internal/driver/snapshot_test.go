package driver_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-job/internal/driver"
	"github.com/coffer-backup/coffer/driver-job/internal/names"
)

// snapshotFirst is a fixture whose strategy takes a VolumeSnapshot of the Shop's claim (web-data,
// of StorageClass fast, 1Gi) before the backup Job, which also mounts an emptyDir.
func snapshotFirst(t *testing.T) *fixture {
	f := newFixture(t, func(s *jobapi.JobBackupStrategySpec) {
		s.VolumeSnapshot = &jobapi.VolumeSnapshotOptions{VolumeSnapshotClassName: "csi-fast"}
		s.Template.Spec.Volumes = []corev1.Volume{
			{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "{{ .Application.metadata.name }}-data"}}},
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		}
	})
	require.NoError(t, cl.Create(f.ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "web-data", Namespace: f.ns},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To("fast"),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}))
	return f
}

func (f *fixture) snapshots() []unstructured.Unstructured {
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("snapshot.storage.k8s.io/v1")
	list.SetKind("VolumeSnapshotList")
	require.NoError(f.t, cl.List(f.ctx, list, client.InNamespace(f.ns)))
	return list.Items
}

// clones are the claims of the namespace but the application's.
func (f *fixture) clones() []corev1.PersistentVolumeClaim {
	list := &corev1.PersistentVolumeClaimList{}
	require.NoError(f.t, cl.List(f.ctx, list, client.InNamespace(f.ns)))
	var out []corev1.PersistentVolumeClaim
	for _, c := range list.Items {
		if c.Name != "web-data" {
			out = append(out, c)
		}
	}
	return out
}

// snapshotStatus plays the CSI snapshot controller: snapshot name gets status.
func (f *fixture) snapshotStatus(name string, status map[string]any) {
	snap := &unstructured.Unstructured{}
	snap.SetAPIVersion("snapshot.storage.k8s.io/v1")
	snap.SetKind("VolumeSnapshot")
	require.NoError(f.t, cl.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, snap))
	require.NoError(f.t, unstructured.SetNestedField(snap.Object, status, "status"))
	require.NoError(f.t, cl.Status().Update(f.ctx, snap))
}

// snapshotReady: the snapshot is ready to use, of restoreSize.
func (f *fixture) snapshotReady(name, restoreSize string) {
	f.snapshotStatus(name, map[string]any{"readyToUse": true, "restoreSize": restoreSize, "boundVolumeSnapshotContentName": "snapcontent-x"})
}

// A snapshot-first backup: the snapshot first, no Job until it is ready, then a clone of it that
// the Job mounts read-only in place of the application's claim; once the Job has ended, the clone
// and the snapshot are deleted. Each step is taken once, a crash after each create included.
func TestSnapshotFirstBackupReadsAClone(t *testing.T) {
	f := snapshotFirst(t)
	bj := f.backupJob()
	job := names.Job(names.KindBackupJob, bj.Name, get(t, bj).UID)
	name := driver.SnapshotName(job, "data")
	crash := errors.New("killed right after the write")
	crashAfterCreate := interceptor.NewClient(cl, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := c.Create(ctx, obj, opts...); err != nil {
				return err
			}
			return crash
		},
	})
	_, err := f.backupReconciler(crashAfterCreate).Reconcile(f.ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(bj)})
	require.ErrorIs(t, err, crash)
	res := reconcileOnce(t, f.backupReconciler(cl), bj)
	assert.Positive(t, res.RequeueAfter, "the run looks again for its snapshot")
	assert.Equal(t, backupsv1.BackupJobRunning, get(t, bj).Status.Phase)
	snaps := f.snapshots()
	require.Len(t, snaps, 1, "one snapshot, taken once")
	snap := snaps[0]
	assert.Equal(t, name, snap.GetName())
	src, _, _ := unstructured.NestedString(snap.Object, "spec", "source", "persistentVolumeClaimName")
	assert.Equal(t, "web-data", src)
	class, _, _ := unstructured.NestedString(snap.Object, "spec", "volumeSnapshotClassName")
	assert.Equal(t, "csi-fast", class)
	require.NotNil(t, metav1.GetControllerOf(&snap))
	assert.Equal(t, bj.UID, metav1.GetControllerOf(&snap).UID, "owned by the BackupJob")
	assert.Empty(t, f.jobsInNamespace(), "no Job before the snapshot is ready")
	assert.Empty(t, f.clones())

	f.snapshotReady(name, "2Gi")
	_, err = f.backupReconciler(crashAfterCreate).Reconcile(f.ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(bj)})
	require.ErrorIs(t, err, crash, "the clone is created, then the process dies")
	require.Empty(t, f.jobsInNamespace())
	reconcileOnce(t, f.backupReconciler(cl), bj)
	clones := f.clones()
	require.Len(t, clones, 1, "one clone, made once")
	c := clones[0]
	assert.Equal(t, name, c.Name)
	require.NotNil(t, c.Spec.DataSource)
	assert.Equal(t, corev1.TypedLocalObjectReference{APIGroup: ptr.To("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: name}, *c.Spec.DataSource)
	assert.Equal(t, "fast", ptr.Deref(c.Spec.StorageClassName, ""), "the source claim's StorageClass")
	assert.Equal(t, "2Gi", ptr.To(c.Spec.Resources.Requests[corev1.ResourceStorage]).String(), "the snapshot's restore size, larger than the claim's request")
	assert.Equal(t, bj.UID, metav1.GetControllerOf(&c).UID)
	j := f.onlyJob()
	require.Len(t, j.Spec.Template.Spec.Volumes, 2)
	assert.Equal(t, &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name, ReadOnly: true}, j.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim, "the Job reads the clone")
	assert.NotNil(t, j.Spec.Template.Spec.Volumes[1].EmptyDir)

	f.finish(j, 0, goodReport(f.ns+"/a.tar"), "")
	reconcileOnce(t, f.backupReconciler(cl), bj)
	require.Equal(t, backupsv1.BackupJobSucceeded, get(t, bj).Status.Phase, get(t, bj).Status.Message)
	assert.Empty(t, f.snapshots(), "the snapshot is deleted")
	for _, c := range f.clones() {
		assert.NotNil(t, c.DeletionTimestamp, "the clone is deleted (its protection finalizer holds it while a pod uses it)")
	}
	// The application's claim is untouched.
	require.NoError(t, cl.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "web-data"}, &corev1.PersistentVolumeClaim{}))
}

// A failed Job releases the clone and the snapshot too.
func TestSnapshotFirstBackupReleasesOnFailure(t *testing.T) {
	f := snapshotFirst(t)
	bj := f.backupJob()
	name := driver.SnapshotName(names.Job(names.KindBackupJob, bj.Name, get(t, bj).UID), "data")
	reconcileOnce(t, f.backupReconciler(cl), bj)
	f.snapshotReady(name, "1Gi")
	reconcileOnce(t, f.backupReconciler(cl), bj)
	f.finish(f.onlyJob(), 1, "disk on fire", "BackoffLimitExceeded")
	reconcileOnce(t, f.backupReconciler(cl), bj)
	require.Equal(t, backupsv1.BackupJobFailed, get(t, bj).Status.Phase)
	assert.Empty(t, f.snapshots())
	for _, c := range f.clones() {
		assert.NotNil(t, c.DeletionTimestamp)
	}
}

// What a tenant, or a broken snapshot, can do to a snapshot-first backup: each fails the run with
// a reason, and the driver neither starts a Job nor deletes what is not its own.
func TestSnapshotFirstBackupFailures(t *testing.T) {
	t.Run("the tenant made an object of the snapshot's name", func(t *testing.T) {
		f := snapshotFirst(t)
		bj := f.backupJob()
		name := driver.SnapshotName(names.Job(names.KindBackupJob, bj.Name, get(t, bj).UID), "data")
		// A snapshot of the same claim the tenant took earlier (yesterday's data, say), planted
		// under the name the run will use.
		planted := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
			"metadata": map[string]any{"name": name, "namespace": f.ns}, "spec": map[string]any{"source": map[string]any{"persistentVolumeClaimName": "web-data"}}}}
		require.NoError(t, cl.Create(f.ctx, planted))
		reconcileOnce(t, f.backupReconciler(cl), bj)
		bj = get(t, bj)
		require.Equal(t, backupsv1.BackupJobFailed, bj.Status.Phase)
		assert.Equal(t, driver.ReasonVolumeSnapshotNameTaken, readyCondition(bj.Status.Conditions).Reason)
		assert.Empty(t, f.jobsInNamespace())
		require.NoError(t, cl.Get(f.ctx, client.ObjectKeyFromObject(planted), planted), "the tenant's snapshot is left alone")
	})
	t.Run("the tenant made a claim of the clone's name", func(t *testing.T) {
		f := snapshotFirst(t)
		bj := f.backupJob()
		name := driver.SnapshotName(names.Job(names.KindBackupJob, bj.Name, get(t, bj).UID), "data")
		reconcileOnce(t, f.backupReconciler(cl), bj)
		f.snapshotReady(name, "1Gi")
		// A claim of the tenant's under the clone's name, even made from the run's snapshot: the
		// tenant chose everything else about it (and may have written to it since).
		require.NoError(t, cl.Create(f.ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				DataSource: &corev1.TypedLocalObjectReference{APIGroup: ptr.To("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: name},
				Resources:  corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}))
		reconcileOnce(t, f.backupReconciler(cl), bj)
		bj = get(t, bj)
		require.Equal(t, backupsv1.BackupJobFailed, bj.Status.Phase)
		assert.Equal(t, driver.ReasonVolumeSnapshotNameTaken, readyCondition(bj.Status.Conditions).Reason)
		assert.Contains(t, bj.Status.Message, "claim "+f.ns+"/"+name)
		assert.Empty(t, f.jobsInNamespace())
		c := &corev1.PersistentVolumeClaim{}
		require.NoError(t, cl.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, c))
		assert.Nil(t, c.DeletionTimestamp, "the tenant's claim is left alone")
	})
	t.Run("the snapshot failed", func(t *testing.T) {
		f := snapshotFirst(t)
		bj := f.backupJob()
		name := driver.SnapshotName(names.Job(names.KindBackupJob, bj.Name, get(t, bj).UID), "data")
		reconcileOnce(t, f.backupReconciler(cl), bj)
		f.snapshotStatus(name, map[string]any{"readyToUse": false, "error": map[string]any{"message": "the disk is gone"}})
		reconcileOnce(t, f.backupReconciler(cl), bj)
		bj = get(t, bj)
		require.Equal(t, backupsv1.BackupJobFailed, bj.Status.Phase)
		assert.Equal(t, driver.ReasonVolumeSnapshotFailed, readyCondition(bj.Status.Conditions).Reason)
		assert.Contains(t, bj.Status.Message, "the disk is gone")
		assert.Empty(t, f.jobsInNamespace())
		assert.Empty(t, f.clones())
	})
	t.Run("the claim does not exist", func(t *testing.T) {
		f := snapshotFirst(t)
		require.NoError(t, cl.Delete(f.ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "web-data", Namespace: f.ns}}))
		require.NoError(t, dropProtection(f, "web-data"))
		bj := f.backupJob()
		reconcileOnce(t, f.backupReconciler(cl), bj)
		bj = get(t, bj)
		require.Equal(t, backupsv1.BackupJobFailed, bj.Status.Phase)
		assert.Equal(t, driver.ReasonVolumeSnapshotFailed, readyCondition(bj.Status.Conditions).Reason)
		assert.Contains(t, bj.Status.Message, "web-data")
		assert.Empty(t, f.snapshots())
	})
}

// dropProtection removes the protection finalizer of claim name (no controller does here) so that
// its deletion completes.
func dropProtection(f *fixture, name string) error {
	c := &corev1.PersistentVolumeClaim{}
	if err := cl.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, c); err != nil {
		return client.IgnoreNotFound(err)
	}
	c.Finalizers = nil
	if err := cl.Update(f.ctx, c); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}
