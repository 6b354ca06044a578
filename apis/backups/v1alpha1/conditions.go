package v1alpha1

// Condition types of the core kinds. Each reason is UpperCamel, as the API server requires.
const (
	// ConditionReady on a Plan is True while its schedule is valid, it is scheduling and its
	// BackupClass resolves to a strategy for its application. It is False with InvalidSchedule,
	// InvalidTimeZone or Suspended while the Plan does not schedule, and with BackupClassNotFound
	// or NoMatchingStrategy while it schedules BackupJobs that no driver can run. On a BackupJob or
	// RestoreJob it is True once the run Succeeded and False once it Failed.
	ConditionReady = "Ready"

	// ConditionAccepted on a BackupJob or RestoreJob is True once a driver claimed it. Core sets it
	// False (and fails the run) when no driver claimed it within the claim timeout, with the reason
	// it found: BackupClassNotFound, NoMatchingStrategy, BackupNotFound or NoDriverClaimed.
	ConditionAccepted = "Accepted"

	// ConditionTickSkipped on a Plan is True after a tick did not fire (missed past
	// startingDeadlineSeconds, or forbidden by the concurrency policy); its message says which.
	ConditionTickSkipped = "TickSkipped"

	// ConditionArtifactAvailable on a Backup is True while the driver knows the artifact exists,
	// and False (ReasonArtifactMissing) when it is gone, so a stale Backup never looks usable. An
	// absence is confirmed before it is written: first seen, the condition is Unknown with
	// ReasonArtifactAbsenceUnconfirmed, and turns False only when a later check, at least the
	// driver kit's confirmation delay on, still finds the artifact gone (and, for Velero, after
	// Velero's storage sync found no such backup).
	ConditionArtifactAvailable = "ArtifactAvailable"

	// ConditionPartiallyFailed on a Backup is True when the driver completed with errors; the
	// message lists them. Retention never treats such a Backup as the newest good one.
	ConditionPartiallyFailed = "PartiallyFailed"

	// ConditionVerified on a Backup is written by the backup verifier only (contract BK-10): True
	// once a verification passed and none failed, with reason RestoreVerified (a full-restore
	// passed) or ChecksumVerified (only checksum-only did); False with ChecksumMismatch or
	// RestoreMismatch once a verification found the Backup bad. A False Backup is not good: retention
	// never counts it as the newest good one. Absent: never verified.
	ConditionVerified = "Verified"
)

// ReasonArtifactAbsenceUnconfirmed: the driver found the artifact gone once; it is checked again
// before the Backup counts as missing (ArtifactAvailable=Unknown meanwhile).
const ReasonArtifactAbsenceUnconfirmed = "ArtifactAbsenceUnconfirmed"

// Reasons of the Verified condition.
const (
	// ReasonChecksumVerified: the stored artifact matches status.artifact; no full-restore yet.
	ReasonChecksumVerified = "ChecksumVerified"
	// ReasonRestoreVerified: the Backup was restored into a sandbox and matched what it holds.
	ReasonRestoreVerified = "RestoreVerified"
	// ReasonChecksumMismatch: the stored artifact differs from status.artifact (or is gone).
	ReasonChecksumMismatch = "ChecksumMismatch"
	// ReasonRestoreMismatch: the Backup did not restore, or restored other content than it holds.
	ReasonRestoreMismatch = "RestoreMismatch"
)

// Condition reasons.
const (
	// ReasonScheduling: the Plan is valid and waits for its next tick.
	ReasonScheduling = "Scheduling"
	// ReasonSuspended: the Plan has suspend: true.
	ReasonSuspended = "Suspended"
	// ReasonInvalidSchedule: the cron expression does not parse; the message quotes the parser.
	ReasonInvalidSchedule = "InvalidSchedule"
	// ReasonInvalidTimeZone: schedule.timeZone is not a known IANA zone.
	ReasonInvalidTimeZone = "InvalidTimeZone"
	// ReasonMissedDeadline: a tick was missed by more than startingDeadlineSeconds.
	ReasonMissedDeadline = "MissedDeadline"
	// ReasonConcurrencyForbidden: a tick came while a BackupJob of the Plan was still running.
	ReasonConcurrencyForbidden = "ConcurrencyForbidden"
	// ReasonTickFired: the most recent tick created its BackupJob (TickSkipped=False).
	ReasonTickFired = "TickFired"
	// ReasonNameConflict (an event reason): the BackupJob name of a tick is taken by an object the
	// Plan does not control; the tick fires once the name is free.
	ReasonNameConflict = "NameConflict"

	// ReasonClaimed: a driver took the run.
	ReasonClaimed = "Claimed"
	// ReasonNoDriverClaimed: no driver took the run within the claim timeout.
	ReasonNoDriverClaimed = "NoDriverClaimed"

	// ReasonBackupClassNotFound: spec.backupClassName names no BackupClass.
	ReasonBackupClassNotFound = "BackupClassNotFound"
	// ReasonBackupClassNotAllowed: the BackupClass's spec.namespaceSelector does not select the
	// run's (or the Plan's) namespace.
	ReasonBackupClassNotAllowed = "BackupClassNotAllowed"
	// ReasonNoMatchingStrategy: the BackupClass has no strategy for the application's group and kind.
	ReasonNoMatchingStrategy = "NoMatchingStrategy"
	// ReasonStrategyNotFound: the strategy object the class points at does not exist.
	ReasonStrategyNotFound = "StrategyNotFound"
	// ReasonApplicationNotFound: the application object does not exist.
	ReasonApplicationNotFound = "ApplicationNotFound"
	// ReasonTargetApplicationUnsupported: a RestoreJob's targetApplicationRef names another
	// application than its Backup's, and the driver can restore a Backup only into the application
	// it was taken of (contract RJ-13); nothing was created.
	ReasonTargetApplicationUnsupported = "TargetApplicationUnsupported"
	// ReasonBackupNotFound: a RestoreJob names a Backup that does not exist.
	ReasonBackupNotFound = "BackupNotFound"
	// ReasonTemplateRenderFailed: the strategy template failed to render; nothing was created.
	ReasonTemplateRenderFailed = "TemplateRenderFailed"
	// ReasonArtifactReportInvalid: the driver could not locate the artifact it produced.
	ReasonArtifactReportInvalid = "ArtifactReportInvalid"
	// ReasonTTLShorterThanRetention: the storage would expire the run's artifact before the
	// retention of the run's Plan lets its Backup go (RetentionPolicy.Span, contract BK-9); the run
	// fails before creating anything, and the message names both durations.
	ReasonTTLShorterThanRetention = "TTLShorterThanRetention"
	// ReasonDeadlineExceeded: the run did not finish within the strategy's deadline.
	ReasonDeadlineExceeded = "DeadlineExceeded"
	// ReasonSucceeded: the run completed.
	ReasonSucceeded = "Succeeded"
	// ReasonFailed: the run failed; the message says why.
	ReasonFailed = "Failed"
	// ReasonInvalidOption fails a RestoreJob whose standard option has a value the contract does
	// not define (spec.options.restoreRBAC neither "true" nor "false"); nothing was restored.
	ReasonInvalidOption = "InvalidOption"
	// ReasonContentMismatch fails a RestoreJob whose driver restored the Backup and found the
	// restored content different from the backup's own record of it (contract RJ-13): the Backup
	// does not restore what it holds.
	ReasonContentMismatch = "ContentMismatch"

	// ReasonArtifactPresent: the artifact was found in storage.
	ReasonArtifactPresent = "ArtifactPresent"
	// ReasonArtifactMissing: the artifact is gone from storage (e.g. expired).
	ReasonArtifactMissing = "ArtifactMissing"
	// ReasonCompletedWithErrors: the backup completed with errors or warnings.
	ReasonCompletedWithErrors = "CompletedWithErrors"
)
