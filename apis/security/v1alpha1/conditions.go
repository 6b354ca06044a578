package v1alpha1

// Condition types of a BackupVerifyRun and a BackupVerifyPolicy. Each reason is UpperCamel, as
// the API server requires.
const (
	// ConditionReady on a BackupVerifyRun is written when the run ends; its reason is the run's
	// terminal SecurityEvent type. True (ReasonBackupVerifyCompleted) when the backup verified
	// clean; False when the run Succeeded with a finding of high or worse
	// (ReasonBackupVerifyMismatch: the run was carried out, as ugallu has it, and its verdict is
	// no success) or Failed (ReasonBackupVerifyFailed). On a
	// BackupVerifyPolicy it is True (ReasonActive) while its selectors are valid and it creates
	// runs, False (ReasonInvalidSelector) otherwise.
	ConditionReady = "Ready"

	// ConditionProgressing on a BackupVerifyRun is True while the run is Running, with a reason
	// saying what it does (ReasonVerifying, ReasonRestoreInProgress, ReasonRetrying), and False
	// once it ended, with Ready's reason.
	ConditionProgressing = "Progressing"
)

// Reasons of a BackupVerifyRun's conditions.
const (
	// ReasonVerifying: the backend is being checked.
	ReasonVerifying = "Verifying"
	// ReasonRestoreInProgress: a full-restore waits for its restore (polled every 10 s).
	ReasonRestoreInProgress = "RestoreInProgress"
	// ReasonRetrying: the last attempt met infrastructure trouble (the message says which and
	// what to check); it is retried with backoff until the run's timeout.
	ReasonRetrying = "Retrying"
	// ReasonBackupVerifyCompleted: the run Succeeded; no finding is high or worse.
	ReasonBackupVerifyCompleted = EventBackupVerifyCompleted
	// ReasonBackupVerifyMismatch: the run Succeeded (it was carried out) with a finding of high or
	// worse about the backup.
	ReasonBackupVerifyMismatch = EventBackupVerifyMismatch
	// ReasonBackupVerifyFailed: the run Failed: the verification could not be carried out
	// (infrastructure trouble a retry cannot fix, the timeout passed, the backup's snapshot file
	// or Velero's CRDs missing, a sandbox it may not use).
	ReasonBackupVerifyFailed = EventBackupVerifyFailed
)

// Why a run could not be carried out, at the head of its failure (the Result's details.failure
// and the run's message) when the verifier itself cannot run it.
const (
	// ReasonBackendNotConfigured: this verifier runs no backend of the run's spec.backend.
	ReasonBackendNotConfigured = "BackendNotConfigured"
	// ReasonModeNotSupported: a full-restore run of a backend that verifies by checksum only.
	ReasonModeNotSupported = "ModeNotSupported"
)

// Reasons of a BackupVerifyPolicy's Ready condition.
const (
	// ReasonActive: the policy's selectors are valid and it creates runs.
	ReasonActive = "Active"
	// ReasonInvalidSelector: a selector does not parse; the message quotes the parser.
	ReasonInvalidSelector = "InvalidSelector"
	// ReasonCofferNotInstalled: a coffer policy, and the cluster serves no backups.cozystack.io
	// (the verifier looks at its start).
	ReasonCofferNotInstalled = "CofferNotInstalled"
	// ReasonVeleroNotInstalled: a velero policy, and the cluster serves no velero.io Backups.
	ReasonVeleroNotInstalled = "VeleroNotInstalled"
	// ReasonSnapshotDirNotConfigured: an etcd-snapshot policy, and this verifier has no
	// --etcd-snapshot-dir (the managed install).
	ReasonSnapshotDirNotConfigured = "SnapshotDirNotConfigured"
	// ReasonSnapshotDirUnreadable: the verifier cannot list its --etcd-snapshot-dir.
	ReasonSnapshotDirUnreadable = "SnapshotDirUnreadable"
	// ReasonNoSnapshotNodes: an etcd-snapshot policy's nodeSelector selects no node.
	ReasonNoSnapshotNodes = "NoSnapshotNodes"
	// ReasonTooManySnapshotNodes: an etcd-snapshot policy's nodeSelector selects more nodes than
	// a policy lists (MaxSnapshotNodes).
	ReasonTooManySnapshotNodes = "TooManySnapshotNodes"
)

// DetailFailure is the key, in a BackupVerifyResult's details, of why its run could not be
// carried out (BackupVerifyFailed).
const DetailFailure = "failure"

// DetailRestoreSeconds is the detail of a full-restore Result that says how long the restore into
// the sandbox took, in whole seconds, from the restore's creation (the velero backend's Restore,
// the coffer backend's RestoreJob) to its completion: the measured recovery time.
const DetailRestoreSeconds = "restoreSeconds"
