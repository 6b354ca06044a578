package driver

import (
	"context"
	"fmt"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/internal/names"
	"github.com/coffer-backup/coffer/driverkit"
)

// ReasonDeletionFailed: Velero processed a DeleteBackupRequest with errors.
const ReasonDeletionFailed = "DeletionFailed"

// veleroBackupOf reads the Velero backup behind a Coffer Backup. copied is true when the Backup
// is a copy: restored from a backup of its own namespace (into a verification sandbox, or back
// into place), it carries driverMetadata and the finalizer, but the Velero backup was made for the
// original. A copy never deletes or judges the artifact. An imported Backup is no copy: the
// catalog that made it found the Velero backup (and deletes it only once an admin adopted it).
// vb is nil when the Velero backup does not exist.
func (d *Driver) veleroBackupOf(ctx context.Context, b *backupsv1.Backup) (key client.ObjectKey, vb *velerov1.Backup, copied bool, err error) {
	key = client.ObjectKey{Namespace: b.Spec.DriverMetadata[names.MetaNamespace], Name: b.Spec.DriverMetadata[names.MetaBackupName]}
	if key.Name == "" {
		return key, nil, false, nil
	}
	vb = &velerov1.Backup{}
	err = d.Client.Get(ctx, key, vb)
	if apierrors.IsNotFound(err) {
		return key, nil, false, nil
	}
	if err != nil {
		return key, nil, false, err
	}
	// An imported Backup (contract BK-12) names the Velero backup its catalog found: the original.
	return key, vb, !b.Imported() && vb.Annotations[names.AnnotationRun] != b.Namespace+"/"+b.Name, nil
}

// CheckArtifact reports whether the Velero backup behind a Ready Backup still exists.
func (d *Driver) CheckArtifact(ctx context.Context, b *backupsv1.Backup) (*metav1.Condition, error) {
	key, vb, copied, err := d.veleroBackupOf(ctx, b)
	if err != nil || copied || key.Name == "" {
		return nil, err
	}
	if vb == nil || vb.Status.Phase == velerov1.BackupPhaseDeleting {
		return &metav1.Condition{Type: backupsv1.ConditionArtifactAvailable, Status: metav1.ConditionFalse, Reason: backupsv1.ReasonArtifactMissing,
			Message: fmt.Sprintf("Velero backup %s no longer exists (expired by its TTL or deleted outside Coffer); this Backup cannot be restored", key)}, nil
	}
	return &metav1.Condition{Type: backupsv1.ConditionArtifactAvailable, Status: metav1.ConditionTrue, Reason: backupsv1.ReasonArtifactPresent,
		Message: fmt.Sprintf("Velero backup %s is stored in location %s", key, b.Spec.DriverMetadata[names.MetaStorageLocation])}, nil
}

// DeleteArtifact asks Velero to delete the backup and its data through a DeleteBackupRequest (a
// plain delete would be resurrected by Velero's storage sync); done once the Velero backup is gone.
func (d *Driver) DeleteArtifact(ctx context.Context, b *backupsv1.Backup) (driverkit.DeleteOutcome, error) {
	key, vb, copied, err := d.veleroBackupOf(ctx, b)
	if err != nil {
		return driverkit.DeleteOutcome{}, err
	}
	gone := vb == nil
	dbrKey := client.ObjectKey{Namespace: key.Namespace, Name: names.DeleteRequest(key.Name)}
	switch {
	case copied:
		return driverkit.DeleteOutcome{Done: true, Reason: "ArtifactNotOwned",
			Message: fmt.Sprintf("This Backup is a restored copy; Velero backup %s belongs to the original Backup and is kept", key)}, nil
	case gone && key.Name != "":
		_ = client.IgnoreNotFound(d.Client.Delete(ctx, &velerov1.DeleteBackupRequest{ObjectMeta: metav1.ObjectMeta{Name: dbrKey.Name, Namespace: dbrKey.Namespace}}))
		return driverkit.DeleteOutcome{Done: true, Message: fmt.Sprintf("Velero backup %s and its data are deleted", key)}, nil
	case gone:
		return driverkit.DeleteOutcome{Done: true, Message: "The Backup names no Velero backup; nothing to delete"}, nil
	}
	dbr := &velerov1.DeleteBackupRequest{}
	err = d.Client.Get(ctx, dbrKey, dbr)
	if apierrors.IsNotFound(err) {
		dbr = &velerov1.DeleteBackupRequest{
			ObjectMeta: metav1.ObjectMeta{Name: dbrKey.Name, Namespace: dbrKey.Namespace,
				Labels:      map[string]string{velerov1.BackupNameLabel: key.Name},
				Annotations: map[string]string{names.AnnotationRun: b.Namespace + "/" + b.Name}},
			Spec: velerov1.DeleteBackupRequestSpec{BackupName: key.Name},
		}
		if err := d.Client.Create(ctx, dbr); err != nil {
			return driverkit.DeleteOutcome{}, fmt.Errorf("creating DeleteBackupRequest %s: %w", dbrKey, err)
		}
		return driverkit.DeleteOutcome{}, nil // the Velero Backup's deletion wakes the Backup
	}
	if err != nil {
		return driverkit.DeleteOutcome{}, err
	}
	if dbr.Status.Phase == velerov1.DeleteBackupRequestPhaseProcessed && len(dbr.Status.Errors) > 0 {
		// Ask again with a fresh request, after the kit's backoff.
		if err := client.IgnoreNotFound(d.Client.Delete(ctx, dbr)); err != nil {
			return driverkit.DeleteOutcome{}, err
		}
		return driverkit.DeleteOutcome{}, driverkit.Failf(ReasonDeletionFailed, "Velero could not delete backup %s: %v", key, dbr.Status.Errors)
	}
	return driverkit.DeleteOutcome{}, nil
}
