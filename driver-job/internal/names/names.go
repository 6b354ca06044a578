// Package names holds the Job driver's deterministic names, labels and metadata keys.
package names

import (
	"k8s.io/apimachinery/pkg/types"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// DriverName identifies the driver in conditions, events and the managed-by label.
const DriverName = "coffer-driver-job"

// Finalizer holds a Backup until its cleanup Job has deleted the artifact. It is set only when the
// strategy has a cleanupTemplate.
const Finalizer = "jobdriver.backups.cozystack.io/cleanup"

// Labels on the Jobs the driver creates, pointing back at the object each Job serves.
const (
	LabelRunKind = "jobdriver.backups.cozystack.io/run-kind"
	LabelRunName = "jobdriver.backups.cozystack.io/run-name"
	LabelRunUID  = "jobdriver.backups.cozystack.io/run-uid"
)

// AnnotationNextCheck on a Backup holds when its artifact is next checked (RFC 3339): the
// driver writes it when it has read a check Job's result, a period later after a conclusive
// check and sooner after an inconclusive one. Without it, the first check is due a period after
// the Backup's creation. Setting it to a past time asks for a check at the next look.
const AnnotationNextCheck = "jobdriver.backups.cozystack.io/next-artifact-check"

// Keys of Backup.spec.driverMetadata.
const (
	MetaJobName = "jobName"
	// MetaParamPrefix prefixes the snapshot of the BackupClass parameters the backup ran with;
	// restores and cleanups use the snapshot, not the class as it is now.
	MetaParamPrefix = "param."
)

// Run kinds, the values of LabelRunKind. KindBackup is the cleanup Job of a Backup being
// deleted, KindBackupCheck the Job that checks that a Backup's artifact still exists.
const (
	KindBackupJob   = "BackupJob"
	KindRestoreJob  = "RestoreJob"
	KindBackup      = "Backup"
	KindBackupCheck = "BackupCheck"
	// KindMaintenance is the maintenance Job a chunked Backup's cleanup starts in its namespace.
	KindMaintenance = "Maintenance"
)

// Job is the name of the batch/v1 Job that serves an object: deterministic, bounded, and distinct
// per kind and per object incarnation (the UID), so a recreated BackupJob of the same name never
// meets its predecessor's Job.
func Job(kind, name string, uid types.UID) string {
	prefix := map[string]string{KindBackupJob: "backup", KindRestoreJob: "restore", KindBackup: "cleanup", KindBackupCheck: "check", KindMaintenance: "maintain"}[kind]
	u := string(uid)
	if len(u) > 8 {
		u = u[:8]
	}
	return backupsv1.BoundedName(backupsv1.MaxGeneratedNameLength, prefix, name, u)
}

// Labels are the labels of the Job serving an object.
func Labels(kind, name string, uid types.UID) map[string]string {
	return map[string]string{
		LabelRunKind:             kind,
		LabelRunName:             backupsv1.BoundedName(backupsv1.MaxGeneratedNameLength, name),
		LabelRunUID:              string(uid),
		backupsv1.LabelManagedBy: DriverName,
	}
}
