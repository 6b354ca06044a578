package driver

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/driver-job/internal/names"
	"github.com/coffer-backup/coffer/driverkit"
)

// Snapshot-first backups (spec.volumeSnapshot): a backup Job reads clones of its claims, each
// provisioned from a CSI VolumeSnapshot the driver takes first, instead of the claims the
// application writes. Snapshots and clones are named after the run's Job and the pod volume (a
// crash before or after a create finds what the first attempt made), owned by the BackupJob (the
// garbage collector removes what a deleted BackupJob leaves), and deleted once the Job has ended.
//
// +kubebuilder:rbac:groups=snapshot.storage.k8s.io,resources=volumesnapshots,verbs=get;create;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;create;delete

// Reasons a snapshot-first backup fails with.
const (
	// ReasonVolumeSnapshotFailed: the CSI snapshot of a claim reported an error, or its claim or
	// clone cannot be made as the strategy asks.
	ReasonVolumeSnapshotFailed = "VolumeSnapshotFailed"
	// ReasonVolumeSnapshotNameTaken: an object of the snapshot's or clone's name exists and is not
	// this run's (a tenant made it): the backup would read what it holds.
	ReasonVolumeSnapshotNameTaken = "VolumeSnapshotNameTaken"
)

// snapshotPoll is how often a run waiting for its snapshots looks again (the driver does not
// watch VolumeSnapshots).
const snapshotPoll = 2 * time.Second

var volumeSnapshotGVK = schema.GroupVersionKind{Group: "snapshot.storage.k8s.io", Version: "v1", Kind: "VolumeSnapshot"}

// snapshotName is the name of the snapshot and of the clone of pod volume volume in the Job
// named job.
func snapshotName(job, volume string) string {
	return backupsv1.BoundedName(backupsv1.MaxGeneratedNameLength, job, volume)
}

// snapshotClaims takes a snapshot of each claim pod mounts and points the pod at a read-only clone
// of each. waiting is non-empty while a snapshot is not ready (the Job must not start yet).
func (d *Driver) snapshotClaims(ctx context.Context, run *driverkit.BackupRun[Strategy], jobName string, pod *corev1.PodTemplateSpec) (waiting string, err error) {
	opts := run.Strategy.Spec.VolumeSnapshot
	ns := run.Job.Namespace
	owner := metav1.OwnerReference{APIVersion: backupsv1.GroupVersion.String(), Kind: "BackupJob", Name: run.Job.Name, UID: run.Job.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	labels := names.Labels(names.KindBackupJob, run.Job.Name, run.Job.UID)
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if v.PersistentVolumeClaim == nil {
			continue
		}
		source := &corev1.PersistentVolumeClaim{}
		if err := d.Live.Get(ctx, client.ObjectKey{Namespace: ns, Name: v.PersistentVolumeClaim.ClaimName}, source); err != nil {
			if apierrors.IsNotFound(err) {
				return "", driverkit.Failf(ReasonVolumeSnapshotFailed, "claim %s/%s of pod volume %s does not exist", ns, v.PersistentVolumeClaim.ClaimName, v.Name)
			}
			return "", err
		}
		name := snapshotName(jobName, v.Name)
		snap, err := d.ensureSnapshot(ctx, ns, name, source.Name, opts.VolumeSnapshotClassName, owner, labels)
		if err != nil {
			return "", err
		}
		if msg, _, _ := unstructured.NestedString(snap.Object, "status", "error", "message"); msg != "" {
			return "", driverkit.Failf(ReasonVolumeSnapshotFailed, "VolumeSnapshot %s/%s of claim %s failed: %s", ns, name, source.Name, msg)
		}
		if ready, _, _ := unstructured.NestedBool(snap.Object, "status", "readyToUse"); !ready {
			return fmt.Sprintf("VolumeSnapshot %s/%s of claim %s is not ready to use", ns, name, source.Name), nil
		}
		size := source.Spec.Resources.Requests[corev1.ResourceStorage]
		if s, _, _ := unstructured.NestedString(snap.Object, "status", "restoreSize"); s != "" {
			if q, err := resource.ParseQuantity(s); err == nil && q.Cmp(size) > 0 {
				size = q
			}
		}
		if err := d.ensureClone(ctx, source, name, size, owner, labels); err != nil {
			return "", err
		}
		v.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name, ReadOnly: true}
	}
	return "", nil
}

// ensureSnapshot gets or creates the run's VolumeSnapshot name of claim; one of that name that is
// not the run's fails the run.
func (d *Driver) ensureSnapshot(ctx context.Context, ns, name, claim, class string, owner metav1.OwnerReference, labels map[string]string) (*unstructured.Unstructured, error) {
	snap := &unstructured.Unstructured{}
	snap.SetGroupVersionKind(volumeSnapshotGVK)
	err := d.Live.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, snap)
	if apierrors.IsNotFound(err) {
		spec := map[string]any{"source": map[string]any{"persistentVolumeClaimName": claim}}
		if class != "" {
			spec["volumeSnapshotClassName"] = class
		}
		snap = &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
		snap.SetGroupVersionKind(volumeSnapshotGVK)
		snap.SetNamespace(ns)
		snap.SetName(name)
		snap.SetLabels(labels)
		snap.SetOwnerReferences([]metav1.OwnerReference{owner})
		if err := d.Client.Create(ctx, snap); err != nil {
			if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
				return nil, driverkit.Failf(ReasonVolumeSnapshotFailed, "VolumeSnapshots cannot be created (is the CSI snapshot controller installed?): %v", err)
			}
			return nil, err
		}
		return snap, nil
	}
	if meta.IsNoMatchError(err) {
		return nil, driverkit.Failf(ReasonVolumeSnapshotFailed, "VolumeSnapshots cannot be read (is the CSI snapshot controller installed?): %v", err)
	}
	if err != nil {
		return nil, err
	}
	if !controlledBy(snap, owner.UID) {
		return nil, driverkit.Failf(ReasonVolumeSnapshotNameTaken, "VolumeSnapshot %s/%s exists and is not this run's; the backup would read it", ns, name)
	}
	if src, _, _ := unstructured.NestedString(snap.Object, "spec", "source", "persistentVolumeClaimName"); src != claim {
		return nil, driverkit.Failf(ReasonVolumeSnapshotNameTaken, "VolumeSnapshot %s/%s is of claim %q, not %q", ns, name, src, claim)
	}
	return snap, nil
}

// ensureClone gets or creates the run's claim name, provisioned from the snapshot of the same name
// with source's StorageClass and access modes.
func (d *Driver) ensureClone(ctx context.Context, source *corev1.PersistentVolumeClaim, name string, size resource.Quantity, owner metav1.OwnerReference, labels map[string]string) error {
	clone := &corev1.PersistentVolumeClaim{}
	err := d.Live.Get(ctx, client.ObjectKey{Namespace: source.Namespace, Name: name}, clone)
	if err == nil {
		ds := clone.Spec.DataSource
		if !controlledBy(clone, owner.UID) || ds == nil || ds.Kind != volumeSnapshotGVK.Kind || ds.Name != name {
			return driverkit.Failf(ReasonVolumeSnapshotNameTaken, "claim %s/%s exists and is not this run's clone of its snapshot; the backup would read it", source.Namespace, name)
		}
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return err
	}
	clone = &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: source.Namespace, Labels: labels, OwnerReferences: []metav1.OwnerReference{owner}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      source.Spec.AccessModes,
			StorageClassName: source.Spec.StorageClassName,
			VolumeMode:       source.Spec.VolumeMode,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
			DataSource:       &corev1.TypedLocalObjectReference{APIGroup: ptr.To(volumeSnapshotGVK.Group), Kind: volumeSnapshotGVK.Kind, Name: name},
		},
	}
	if err := d.Client.Create(ctx, clone); err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			return driverkit.Failf(ReasonVolumeSnapshotFailed, "the clone of claim %s/%s cannot be created: %v", source.Namespace, source.Name, err)
		}
		return err
	}
	return nil
}

// releaseSnapshots deletes the clones and snapshots of the run's Job (those it finds: a crash may
// have left fewer).
func (d *Driver) releaseSnapshots(ctx context.Context, run *driverkit.BackupRun[Strategy], jobName string, pod corev1.PodSpec) error {
	for _, v := range pod.Volumes {
		if v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != snapshotName(jobName, v.Name) {
			continue
		}
		key := client.ObjectKey{Namespace: run.Job.Namespace, Name: v.PersistentVolumeClaim.ClaimName}
		clone := &corev1.PersistentVolumeClaim{}
		snap := &unstructured.Unstructured{}
		snap.SetGroupVersionKind(volumeSnapshotGVK)
		for _, o := range []client.Object{clone, snap} {
			if err := d.Live.Get(ctx, key, o); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return err
			}
			if !controlledBy(o, run.Job.UID) {
				continue // never the run's: not deleted
			}
			if err := d.Client.Delete(ctx, o, client.Preconditions{UID: ptr.To(o.GetUID())}); client.IgnoreNotFound(err) != nil {
				return err
			}
		}
	}
	return nil
}

// controlledBy says whether o's controller is the object of UID uid.
func controlledBy(o metav1.Object, uid types.UID) bool {
	c := metav1.GetControllerOf(o)
	return c != nil && c.UID == uid
}
