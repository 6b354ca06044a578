// Package toydriver is a toy Coffer strategy driver written with the apis and driverkit modules
// alone: a backup stores the application's spec in a ConfigMap beside it, a restore re-creates
// the application from that ConfigMap, and deleting the Backup deletes the ConfigMap.
package toydriver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/driverkit"
)

const (
	// Name is the driver's name in claims, events and the managed-by label.
	Name = "toydriver"
	// DefaultDeadline bounds a run whose strategy sets no deadline.
	DefaultDeadline = 10 * time.Minute
	specKey         = "spec.json" // the ConfigMap key holding the artifact
	configMapKey    = "configMap" // the driverMetadata key naming the ConfigMap
)

// metrics are registered once per process.
var metrics = driverkit.NewMetrics("toydriver", Name, nil)

// New returns the kit running the driver with client c; SetupWithManager registers it.
func New(c client.Client) *driverkit.Kit[*ConfigMapStrategy] {
	return &driverkit.Kit[*ConfigMapStrategy]{
		Name:        Name,
		Strategy:    driverkit.StrategyKind{Group: GroupVersion.Group, Kind: Kind},
		NewStrategy: func() *ConfigMapStrategy { return &ConfigMapStrategy{} },
		Finalizer:   GroupVersion.Group + "/artifact",
		Driver:      &Driver{Client: c},
		Client:      c,
		Metrics:     metrics,
	}
}

// Driver implements driverkit.Driver.
type Driver struct{ Client client.Client }

func (d *Driver) Deadline(s *ConfigMapStrategy) time.Duration {
	if s.Spec.Deadline != nil {
		return s.Spec.Deadline.Duration
	}
	return DefaultDeadline
}

// Backup stores the application's spec in the run's ConfigMap, named after the run and labelled
// with its UID, so that a crash after the create finds it again.
func (d *Driver) Backup(ctx context.Context, run *driverkit.BackupRun[*ConfigMapStrategy]) (driverkit.BackupOutcome, error) {
	job := run.Job
	name := backupsv1.BoundedName(backupsv1.MaxGeneratedNameLength, "toy", job.Name, string(job.UID))
	cm := &corev1.ConfigMap{}
	err := d.Client.Get(ctx, client.ObjectKey{Namespace: job.Namespace, Name: name}, cm)
	switch {
	case apierrors.IsNotFound(err):
		app, err := driverkit.Application(ctx, d.Client, job.Namespace, job.Spec.ApplicationRef)
		if err != nil {
			return driverkit.BackupOutcome{}, err
		}
		spec, err := json.Marshal(app.Object["spec"])
		if err != nil {
			return driverkit.BackupOutcome{}, err
		}
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: job.Namespace, Labels: map[string]string{
			backupsv1.LabelBackupJobUID: string(job.UID), backupsv1.LabelManagedBy: Name}}, Data: map[string]string{specKey: string(spec)}}
		if err := d.Client.Create(ctx, cm); err != nil {
			return driverkit.BackupOutcome{}, err
		}
	case err != nil:
		return driverkit.BackupOutcome{}, err
	case cm.Labels[backupsv1.LabelBackupJobUID] != string(job.UID):
		return driverkit.BackupOutcome{}, driverkit.Failf(backupsv1.ReasonNameConflict,
			"ConfigMap %s exists and was not made by this run; it was not adopted: delete or rename it", name)
	}
	data := []byte(cm.Data[specKey])
	return driverkit.BackupOutcome{Result: &driverkit.BackupResult{
		Artifact:       backupsv1.BackupArtifact{URI: fmt.Sprintf("configmap://%s/%s", cm.Namespace, cm.Name), SizeBytes: int64(len(data)), Checksum: checksum(data)},
		DriverMetadata: map[string]string{configMapKey: cm.Name},
		Finalize:       true,
	}}, nil
}

// Restore applies the stored spec to the target application in the restore's target namespace
// (the kit has checked that its creator may write there), creating it when it does not exist.
func (d *Driver) Restore(ctx context.Context, run *driverkit.RestoreRun[*ConfigMapStrategy]) (driverkit.RestoreOutcome, error) {
	b, rj := run.Backup, run.RestoreJob
	cm := &corev1.ConfigMap{}
	if err := d.Client.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.DriverMetadata[configMapKey]}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return driverkit.RestoreOutcome{}, driverkit.Failf(backupsv1.ReasonArtifactMissing, "%s is gone", b.Status.Artifact.URI)
		}
		return driverkit.RestoreOutcome{}, err
	}
	data := []byte(cm.Data[specKey])
	if sum := checksum(data); sum != b.Status.Artifact.Checksum {
		return driverkit.RestoreOutcome{}, driverkit.Failf("ChecksumMismatch",
			"%s holds %s, not the %s Backup %s recorded; it was not restored", b.Status.Artifact.URI, sum, b.Status.Artifact.Checksum, b.Name)
	}
	target := b.Spec.ApplicationRef
	if rj.Spec.TargetApplicationRef != nil {
		target = *rj.Spec.TargetApplicationRef
	}
	m, err := d.Client.RESTMapper().RESTMapping(schema.GroupKind{Group: backupsv1.ApplicationAPIGroup(target), Kind: target.Kind})
	if err != nil {
		return driverkit.RestoreOutcome{}, err
	}
	app := &unstructured.Unstructured{}
	app.SetGroupVersionKind(m.GroupVersionKind)
	app.SetNamespace(rj.TargetNamespace())
	app.SetName(target.Name)
	var spec any
	if err := json.Unmarshal(data, &spec); err != nil {
		return driverkit.RestoreOutcome{}, driverkit.Failf(backupsv1.ReasonArtifactMissing, "%s is not JSON: %v", b.Status.Artifact.URI, err)
	}
	if spec != nil {
		app.Object["spec"] = spec
	}
	if err := d.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(app), client.FieldOwner(Name), client.ForceOwnership); err != nil {
		return driverkit.RestoreOutcome{}, err
	}
	return driverkit.RestoreOutcome{Done: true, Items: &backupsv1.RestoreItems{Restored: 1},
		Message: fmt.Sprintf("Restored %s %s/%s from %s", target.Kind, app.GetNamespace(), target.Name, b.Status.Artifact.URI)}, nil
}

// DeleteArtifact deletes the Backup's ConfigMap.
func (d *Driver) DeleteArtifact(ctx context.Context, b *backupsv1.Backup) (driverkit.DeleteOutcome, error) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: b.Namespace, Name: b.Spec.DriverMetadata[configMapKey]}}
	if cm.Name == "" {
		return driverkit.DeleteOutcome{Done: true, Message: "The Backup names no ConfigMap"}, nil
	}
	if err := d.Client.Delete(ctx, cm); client.IgnoreNotFound(err) != nil {
		return driverkit.DeleteOutcome{}, err
	}
	return driverkit.DeleteOutcome{Done: true, Message: fmt.Sprintf("Deleted ConfigMap %s/%s", cm.Namespace, cm.Name)}, nil
}

func checksum(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}
