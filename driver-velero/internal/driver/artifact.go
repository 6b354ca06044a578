package driver

import (
	"context"
	"fmt"
	"time"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/internal/names"
	"github.com/coffer-backup/coffer/driverkit"
)

// ReasonDeletionFailed: Velero processed a DeleteBackupRequest with errors.
const ReasonDeletionFailed = "DeletionFailed"

// ReasonAbsenceUnconfirmed: a Backup being deleted names a Velero backup missing from the
// cluster whose absence from storage is not confirmed yet (its location has not synced since).
const ReasonAbsenceUnconfirmed = "AbsenceUnconfirmed"

// veleroBackupOf reads the Velero backup behind a Coffer Backup. copied is true when the Backup
// is a copy: restored from a backup of its own namespace (into a verification sandbox, or back
// into place), it carries driverMetadata and the finalizer, but the Velero backup was made for the
// original. A copy never deletes or judges the artifact. An imported Backup is no copy: the
// catalog that made it found the Velero backup (and deletes it only once an admin adopted it).
// vb is nil when the Velero backup does not exist. The cache holds no settled Velero backup
// (settle.go): one missing from it is read from the API server, unless trustMiss, when it is taken
// for a settled one and vb is nil.
func (d *Driver) veleroBackupOf(ctx context.Context, b *backupsv1.Backup, trustMiss bool) (key client.ObjectKey, vb *velerov1.Backup, copied bool, err error) {
	key = veleroKey(b)
	if key.Name == "" {
		return key, nil, false, nil
	}
	vb = &velerov1.Backup{}
	err = d.Client.Get(ctx, key, vb)
	if apierrors.IsNotFound(err) && !trustMiss {
		err = d.uncached().Get(ctx, key, vb)
	}
	if apierrors.IsNotFound(err) {
		return key, nil, false, nil
	}
	if err != nil {
		return key, nil, false, err
	}
	// An imported Backup (contract BK-12) names the Velero backup its catalog found: the original.
	return key, vb, !b.Imported() && vb.Annotations[names.AnnotationRun] != b.Namespace+"/"+b.Name, nil
}

// CheckArtifact reports whether the Velero backup behind a Ready Backup still exists. Velero
// re-creates a backup object from storage at its next sync, so an object missing from the
// cluster proves nothing about the data: the absence is confirmed (read uncached) and counts only
// once the storage location has synced since it was first seen (Velero's sync found no such
// backup in storage); until then the answer is Unknown (ArtifactAbsenceUnconfirmed). The kit
// confirms it once more after its delay before the Backup counts as missing.
//
// A settled Velero backup is not in the cache: a Backup whose artifact was present at its last
// check and whose Velero backup has not changed since (trustsAbsence) is left as it is (nil), with
// no request; otherwise it is read from the API server. A completed Velero backup of a Ready
// Backup found in the cache is settled.
func (d *Driver) CheckArtifact(ctx context.Context, b *backupsv1.Backup) (*metav1.Condition, error) {
	trust := d.trustsAbsence(b)
	key, vb, copied, err := d.veleroBackupOf(ctx, b, trust)
	if err != nil || copied || key.Name == "" || (vb == nil && trust) {
		return nil, err
	}
	if vb != nil && vb.Status.Phase != velerov1.BackupPhaseDeleting {
		d.suspects.clear(client.ObjectKeyFromObject(b))
		if err := d.settle(ctx, b, vb); err != nil {
			return nil, err
		}
		return &metav1.Condition{Type: backupsv1.ConditionArtifactAvailable, Status: metav1.ConditionTrue, Reason: backupsv1.ReasonArtifactPresent,
			Message: fmt.Sprintf("Velero backup %s is stored in location %s", key, b.Spec.DriverMetadata[names.MetaStorageLocation])}, nil
	}
	if vb != nil {
		return &metav1.Condition{Type: backupsv1.ConditionArtifactAvailable, Status: metav1.ConditionFalse, Reason: backupsv1.ReasonArtifactMissing,
			Message: fmt.Sprintf("Velero backup %s is being deleted (outside Coffer); this Backup cannot be restored", key)}, nil
	}
	since := metav1.NewTime(time.Now())
	if c := meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionArtifactAvailable); c != nil && c.Status != metav1.ConditionTrue {
		since = c.LastTransitionTime
	}
	synced, err := d.absentFromStorage(ctx, b, key, since)
	if err != nil {
		return nil, err
	}
	if !synced.confirmed {
		return &metav1.Condition{Type: backupsv1.ConditionArtifactAvailable, Status: metav1.ConditionUnknown, Reason: backupsv1.ReasonArtifactAbsenceUnconfirmed,
			Message: fmt.Sprintf("Velero backup %s is not in the cluster; %s", key, synced.why)}, nil
	}
	return &metav1.Condition{Type: backupsv1.ConditionArtifactAvailable, Status: metav1.ConditionFalse, Reason: backupsv1.ReasonArtifactMissing,
		Message: fmt.Sprintf("Velero backup %s no longer exists: %s (expired by its TTL or deleted outside Coffer); this Backup cannot be restored", key, synced.why)}, nil
}

// storageAnswer is what the storage location says of a backup missing from the cluster.
type storageAnswer struct {
	confirmed bool   // the location synced after since and the backup is still not in the cluster
	why       string // for messages
}

// absentFromStorage confirms that a Velero backup missing from the cluster (its caller read it
// from the API server: veleroBackupOf) is not in its storage location either: the location
// (available) has synced with its storage after since, so Velero's sync would have brought it back
// had its data been there.
func (d *Driver) absentFromStorage(ctx context.Context, b *backupsv1.Backup, key client.ObjectKey, since metav1.Time) (storageAnswer, error) {
	loc := b.Spec.DriverMetadata[names.MetaStorageLocation]
	bsl := &velerov1.BackupStorageLocation{}
	if err := d.Client.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: loc}, bsl); apierrors.IsNotFound(err) || loc == "" {
		return storageAnswer{why: fmt.Sprintf("its storage location %q does not exist, so storage cannot be asked; waiting for it", loc)}, nil
	} else if err != nil {
		return storageAnswer{}, err
	}
	if bsl.Status.Phase != velerov1.BackupStorageLocationPhaseAvailable || bsl.Status.LastSyncedTime == nil || !bsl.Status.LastSyncedTime.After(since.Time) {
		return storageAnswer{why: fmt.Sprintf("waiting for storage location %s (phase %q) to sync with its storage after %s before it counts as gone",
			loc, bsl.Status.Phase, since.UTC().Format(time.RFC3339))}, nil
	}
	return storageAnswer{confirmed: true, why: fmt.Sprintf("storage location %s synced at %s and holds no such backup", loc, bsl.Status.LastSyncedTime.UTC().Format(time.RFC3339))}, nil
}

// deleteRequestPoll is how soon a deletion looks again at a DeleteBackupRequest Velero is
// finishing (it deleted the backup, and has yet to mark the request Processed).
const deleteRequestPoll = 2 * time.Second

// DeleteArtifact asks Velero to delete the backup and its data through a DeleteBackupRequest (a
// plain delete would be resurrected by Velero's storage sync); done once the Velero backup is gone.
func (d *Driver) DeleteArtifact(ctx context.Context, b *backupsv1.Backup) (driverkit.DeleteOutcome, error) {
	key, vb, copied, err := d.veleroBackupOf(ctx, b, false)
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
		return d.deletedOrGone(ctx, b, key, dbrKey)
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
		if err = d.Client.Create(ctx, dbr); apierrors.IsAlreadyExists(err) {
			// The cache has yet to see the request an attempt a moment ago created: it is
			// read from the API server, and looked after as found (not a failed attempt).
			dbr = &velerov1.DeleteBackupRequest{}
			err = d.uncached().Get(ctx, dbrKey, dbr)
		} else if err != nil {
			return driverkit.DeleteOutcome{}, fmt.Errorf("creating DeleteBackupRequest %s: %w", dbrKey, err)
		}
	}
	if err != nil {
		return driverkit.DeleteOutcome{}, err
	}
	if dbr.Status.Phase == velerov1.DeleteBackupRequestPhaseProcessed && len(dbr.Status.Errors) > 0 {
		// Ask again with a fresh request, after the kit's backoff. The failed one proves nothing:
		// its record goes first (were the Velero backup to vanish before the next request, that
		// absence would be no deletion of ours).
		if err := d.forgetDeleteRequest(ctx, b); err != nil {
			return driverkit.DeleteOutcome{}, err
		}
		if err := client.IgnoreNotFound(d.Client.Delete(ctx, dbr)); err != nil {
			return driverkit.DeleteOutcome{}, err
		}
		return driverkit.DeleteOutcome{}, driverkit.Failf(ReasonDeletionFailed, "Velero could not delete backup %s: %v", key, dbr.Status.Errors)
	}
	if ownDeleteRequest(b, dbr) {
		if err := d.recordDeleteRequest(ctx, b, dbr); err != nil {
			return driverkit.DeleteOutcome{}, err
		}
	}
	return driverkit.DeleteOutcome{}, nil // the Velero Backup's deletion wakes the Backup
}

// deletedOrGone ends the deletion of a Backup whose Velero backup key is gone from the cluster:
// deleted by our own request, or missing (deleted outside Coffer, or for a while: Velero re-syncs
// it from storage).
//
// Velero deletes the data, then the backup object, then marks our request Processed and deletes
// it: the request may be gone by the time we look. The proof that the deletion was ours is the
// record of our request on the Backup (names.AnnotationDeleteRequest), written as soon as the
// request is seen alive: metadata, which the kit's status writes never touch. (The condition read
// here before, the kit's ArtifactDeletion=DeletionInProgress, is overwritten by any failed
// attempt's DeletionFailing, which sent our own deletions to wait for a storage sync.) Velero
// removes the backup object only when a deletion succeeded, and a request it failed loses its
// record, so a recorded request no longer there makes the absence our own deletion. Any other
// absence still waits for the storage location to sync after the deletion began. A decision made
// on a stale cached Backup never lands: the kit releases with an optimistic lock.
func (d *Driver) deletedOrGone(ctx context.Context, b *backupsv1.Backup, key, dbrKey client.ObjectKey) (driverkit.DeleteOutcome, error) {
	if b.ArtifactMissing() {
		// Its absence was confirmed before the deletion (ArtifactAvailable=False).
		return driverkit.DeleteOutcome{Done: true, Reason: "ArtifactAlreadyGone",
			Message: fmt.Sprintf("Velero backup %s was already gone (%s); nothing was deleted", key, meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionArtifactAvailable).Message)}, nil
	}
	dbr := &velerov1.DeleteBackupRequest{}
	err := d.Client.Get(ctx, dbrKey, dbr)
	if client.IgnoreNotFound(err) != nil {
		return driverkit.DeleteOutcome{}, err
	}
	found := err == nil
	ours := found && ownDeleteRequest(b, dbr)
	deleted := driverkit.DeleteOutcome{Done: true, Message: fmt.Sprintf("Velero backup %s and its data are deleted", key)}
	switch {
	case ours && dbr.Status.Phase != velerov1.DeleteBackupRequestPhaseProcessed:
		// Finishing: Velero has yet to mark it Processed.
		if err := d.recordDeleteRequest(ctx, b, dbr); err != nil {
			return driverkit.DeleteOutcome{}, err
		}
		return driverkit.DeleteOutcome{RequeueAfter: deleteRequestPoll}, nil
	case ours && len(dbr.Status.Errors) == 0:
		_ = client.IgnoreNotFound(d.Client.Delete(ctx, &velerov1.DeleteBackupRequest{ObjectMeta: metav1.ObjectMeta{Name: dbrKey.Name, Namespace: dbrKey.Namespace}}))
		return deleted, nil
	case ours:
		// Failed, the backup gone by other means (Velero found no backup to delete).
		if err := d.forgetDeleteRequest(ctx, b); err != nil {
			return driverkit.DeleteOutcome{}, err
		}
	case !found && b.Annotations[names.AnnotationDeleteRequest] != "":
		return deleted, nil
	}
	synced, err := d.absentFromStorage(ctx, b, key, *b.DeletionTimestamp)
	if err != nil {
		return driverkit.DeleteOutcome{}, err
	}
	if !synced.confirmed {
		return driverkit.DeleteOutcome{}, driverkit.Failf(ReasonAbsenceUnconfirmed,
			"Velero backup %s is not in the cluster and its deletion cannot be confirmed yet: %s", key, synced.why)
	}
	// Gone before this deletion could see it go (outside Coffer, or by a request of an earlier
	// attempt that crashed before it was recorded): storage holds none, which is all that can be
	// said.
	return driverkit.DeleteOutcome{Done: true, Reason: "ArtifactGone",
		Message: fmt.Sprintf("Velero backup %s is gone and storage holds no such backup (%s); nothing is left to delete", key, synced.why)}, nil
}

// ownDeleteRequest reports whether dbr is the driver's request for Backup b (it names b).
func ownDeleteRequest(b *backupsv1.Backup, dbr *velerov1.DeleteBackupRequest) bool {
	return dbr.Annotations[names.AnnotationRun] == b.Namespace+"/"+b.Name
}

// recordDeleteRequest records on b that the driver's request dbr exists (AnnotationDeleteRequest);
// b is updated in place, so the kit's writes after this one start from it.
func (d *Driver) recordDeleteRequest(ctx context.Context, b *backupsv1.Backup, dbr *velerov1.DeleteBackupRequest) error {
	if b.Annotations[names.AnnotationDeleteRequest] == string(dbr.UID) {
		return nil
	}
	orig := b.DeepCopy()
	if b.Annotations == nil {
		b.Annotations = map[string]string{}
	}
	b.Annotations[names.AnnotationDeleteRequest] = string(dbr.UID)
	if err := d.Client.Patch(ctx, b, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("recording DeleteBackupRequest %s on Backup %s: %w", client.ObjectKeyFromObject(dbr), b.Name, err)
	}
	return nil
}

// forgetDeleteRequest removes the record of a request Velero failed.
func (d *Driver) forgetDeleteRequest(ctx context.Context, b *backupsv1.Backup) error {
	if _, ok := b.Annotations[names.AnnotationDeleteRequest]; !ok {
		return nil
	}
	orig := b.DeepCopy()
	delete(b.Annotations, names.AnnotationDeleteRequest)
	if err := d.Client.Patch(ctx, b, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("removing the record of a failed DeleteBackupRequest from Backup %s: %w", b.Name, err)
	}
	return nil
}
