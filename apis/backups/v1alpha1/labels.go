package v1alpha1

// Label and annotation keys of the contract.
const (
	// LabelPlan on a BackupJob (and the Backup made from it) names the Plan that created it; its
	// value is PlanLabelValue(plan name).
	LabelPlan = Group + "/plan"

	// AnnotationScheduledTime on a BackupJob created by a Plan holds its tick in RFC 3339.
	AnnotationScheduledTime = Group + "/scheduled-time"

	// LabelBackupJob, LabelBackupJobNamespace and LabelBackupJobUID on a driver's objects point back
	// to the BackupJob they serve.
	LabelBackupJob          = Group + "/backupjob"
	LabelBackupJobNamespace = Group + "/backupjob-namespace"
	LabelBackupJobUID       = Group + "/backupjob-uid"

	// LabelRestoreJob, LabelRestoreJobNamespace and LabelRestoreJobUID on a driver's objects point
	// back to the RestoreJob they serve.
	LabelRestoreJob          = Group + "/restorejob"
	LabelRestoreJobNamespace = Group + "/restorejob-namespace"
	LabelRestoreJobUID       = Group + "/restorejob-uid"

	// AnnotationChecksum on a driver's own backup object (e.g. a velero.io Backup) repeats
	// status.artifact.checksum of the Coffer Backup, so a verifier finds it from either side.
	AnnotationChecksum = Group + "/checksum"

	// LabelManagedBy is the well-known label naming the component that manages an object.
	LabelManagedBy = "app.kubernetes.io/managed-by"
)

// PlanLabelValue is the LabelPlan value for a Plan: its name, bounded to a valid label value.
// Long names are cut and hashed (BoundedName), so always check the ownerReference too.
func PlanLabelValue(plan string) string { return BoundedName(MaxGeneratedNameLength, plan) }
