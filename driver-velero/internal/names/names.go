// Package names derives the names and labels of the driver's Velero objects from the run they
// serve, so that after any crash the driver finds its objects again instead of creating others.
package names

import (
	"k8s.io/apimachinery/pkg/types"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	velerodriverv1 "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
)

// DriverName identifies the driver in claims, events, the managed-by label and logs.
const DriverName = "coffer-driver-velero"

// Finalizer on a Coffer Backup whose artifact this driver deletes.
const Finalizer = "velerodriver.backups.cozystack.io/artifact"

// AnnotationRun on a Velero object holds "<namespace>/<name>" of the run it serves (label values
// are bounded to 63 characters; this is exact).
const AnnotationRun = "velerodriver.backups.cozystack.io/run"

// AnnotationDeleteRequest on a Coffer Backup being deleted holds the UID of the Velero
// DeleteBackupRequest the driver made for it, written as soon as the request is seen to exist and
// removed when Velero fails it: the driver's own record, in metadata no status write touches, that
// it asked Velero to delete the backup.
const AnnotationDeleteRequest = "velerodriver.backups.cozystack.io/delete-request"

// LabelSettled ("true") on a velero.io Backup the driver made marks it settled: Velero completed
// it and its Coffer Backup was made. The driver caches only the Velero backups without it (a
// settled one changes only when it goes), and learns of a settled one's change or deletion from a
// watch that keeps nothing (driver.SettledSource).
const LabelSettled = "velerodriver.backups.cozystack.io/settled"

// Driver metadata keys the driver writes on a Coffer Backup.
const (
	MetaBackupName      = velerodriverv1.MetaBackupName
	MetaNamespace       = velerodriverv1.MetaNamespace
	MetaStorageLocation = velerodriverv1.MetaStorageLocation
	MetaSourceNamespace = velerodriverv1.MetaSourceNamespace
)

// ParamStorageLocation is the BackupClass parameter naming the Velero BackupStorageLocation.
const ParamStorageLocation = "backupStorageLocationName"

// ExcludedResources are never put in a Velero backup nor restored from one, whatever the templates
// say (velerodriverv1.Excluded says which and why).
var ExcludedResources = velerodriverv1.Resources(velerodriverv1.Excluded())

// object names a Velero object after a run: namespace, name and the start of the UID, bounded.
func object(ns, name string, uid types.UID) string {
	u := string(uid)
	if len(u) > 8 {
		u = u[:8]
	}
	return backupsv1.BoundedName(backupsv1.MaxGeneratedNameLength, ns, name, u)
}

// VeleroBackup is the name of the velero.io Backup of a BackupJob.
func VeleroBackup(job *backupsv1.BackupJob) string { return object(job.Namespace, job.Name, job.UID) }

// VeleroRestore is the name of the velero.io Restore of a RestoreJob.
func VeleroRestore(rj *backupsv1.RestoreJob) string { return object(rj.Namespace, rj.Name, rj.UID) }

// Download is the name of the DownloadRequest for a Velero backup's tarball.
func Download(veleroBackup string) string {
	return backupsv1.BoundedName(backupsv1.MaxGeneratedNameLength, veleroBackup, "contents")
}

// DeleteRequest is the name of the DeleteBackupRequest of a Velero backup.
func DeleteRequest(veleroBackup string) string {
	return backupsv1.BoundedName(backupsv1.MaxGeneratedNameLength, veleroBackup, "delete")
}

// JobLabels point a Velero Backup back to its BackupJob.
func JobLabels(job *backupsv1.BackupJob) map[string]string {
	return map[string]string{
		backupsv1.LabelBackupJob:          backupsv1.BoundedName(backupsv1.MaxGeneratedNameLength, job.Name),
		backupsv1.LabelBackupJobNamespace: job.Namespace,
		backupsv1.LabelBackupJobUID:       string(job.UID),
		backupsv1.LabelManagedBy:          DriverName,
	}
}

// RestoreLabels point a Velero Restore back to its RestoreJob.
func RestoreLabels(rj *backupsv1.RestoreJob) map[string]string {
	return map[string]string{
		backupsv1.LabelRestoreJob:          backupsv1.BoundedName(backupsv1.MaxGeneratedNameLength, rj.Name),
		backupsv1.LabelRestoreJobNamespace: rj.Namespace,
		backupsv1.LabelRestoreJobUID:       string(rj.UID),
		backupsv1.LabelManagedBy:           DriverName,
	}
}
