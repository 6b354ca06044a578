package v1alpha1

// Severity ranks a finding: critical > high > medium > low > info.
// +kubebuilder:validation:Enum=info;low;medium;high;critical
type Severity string

const (
	SeverityInfo     Severity = "info"
	SeverityLow      Severity = "low"
	SeverityMedium   Severity = "medium"
	SeverityHigh     Severity = "high"
	SeverityCritical Severity = "critical"
)

// Rank orders severities: info 1 … critical 5; an unknown or empty severity ranks 0.
func (s Severity) Rank() int {
	switch s {
	case SeverityInfo:
		return 1
	case SeverityLow:
		return 2
	case SeverityMedium:
		return 3
	case SeverityHigh:
		return 4
	case SeverityCritical:
		return 5
	}
	return 0
}

// AtLeast reports whether s ranks at or above other.
func (s Severity) AtLeast(other Severity) bool { return s.Rank() >= other.Rank() }

// Finding codes, in priority order: when two findings share the worst severity, the one whose code
// comes first here decides the SecurityEvent. Codes not listed rank after all of these.
const (
	CodeChecksumMismatch        = "checksum-mismatch"
	CodeEtcdSnapshotCorrupt     = "etcd-snapshot-corrupt"
	CodeRestoreFailed           = "restore-failed"
	CodeSandboxNotOwned         = "sandbox-not-owned"
	CodeVeleroBackupNotFound    = "velero-backup-not-found"
	CodeEtcdSnapshotNotFound    = "etcd-snapshot-not-found"
	CodeEtcdSnapshotRefInvalid  = "etcd-snapshot-ref-invalid"
	CodeVeleroCRDMissing        = "velero-crd-missing"
	CodeObjectMissing           = "object-missing"
	CodeRestorePartiallyFailed  = "restore-partially-failed"
	CodeTimeout                 = "timeout"
	CodeStorageUnavailable      = "storage-location-unavailable"
	CodeVeleroBackupNotComplete = "velero-backup-not-completed"
	CodeChecksumNotRecorded     = "checksum-not-recorded"
	// CodeChecksumFirstUse: nothing was recorded when a backup was taken and no earlier
	// verification computed its checksum; this run's is kept, and later runs compare with it
	// (trust on first use; low).
	CodeChecksumFirstUse = "checksum-trusted-on-first-use"
	CodeCleanupFailed    = "cleanup-failed"
	// CodeCleanupDeferred: a run ended while Velero was still restoring into its sandboxes; they
	// and the Restore are kept, confined, until the Restore ends, then swept (info).
	CodeCleanupDeferred   = "cleanup-deferred"
	CodeFindingsTruncated = "findings-truncated"
	CodeChecksumMatch     = "checksum-match"

	// Codes of the coffer backend (backups.cozystack.io Backups).

	// CodeSizeMismatch: the stored artifact's size differs from the Backup's status.artifact.
	CodeSizeMismatch = "size-mismatch"
	// CodeArtifactMissing: the storage has no object where the Backup's artifact should be.
	CodeArtifactMissing = "artifact-missing"
	// CodeBackupNotFound: the Backup named by the run does not exist (or is being deleted).
	CodeBackupNotFound = "backup-not-found"
	// CodeBackupNotReady: the Backup is not Ready with an artifact: there is nothing to verify.
	CodeBackupNotReady = "backup-not-ready"
	// CodeRestoreSucceeded: the Backup's driver restored it into the sandbox.
	CodeRestoreSucceeded = "restore-succeeded"
	// CodeObjectUnlocked: the Backup's bucket has object lock, and some of the Backup's objects
	// are not locked (or no longer): whoever may write to the bucket can delete them (medium).
	CodeObjectUnlocked = "object-unlocked"

	// CodeSandboxTampered: before the diff, a full-restore's sandbox was found unconfined (either
	// backend): its zero-pods ResourceQuota or deny-all NetworkPolicy gone or changed, or a Role,
	// RoleBinding, ServiceAccount, NetworkPolicy or Pod in it that the verifier did not put there;
	// critical.
	CodeSandboxTampered = "sandbox-tampered"
)

// CodeVolumeDataNotVerified: a full-restore compared a Backup's objects, but the Backup records
// volume data (driver-velero's VeleroVolumeData) that the verification neither restored nor
// compared; info: it says what the verdict does not cover.
const CodeVolumeDataNotVerified = "volume-data-not-verified"

// Codes of the volume data of a Velero backup (file-system backup or data movement, uploader
// kopia), which checksum-only reads from its kopia repository.
const (
	// CodeVolumeDataCorrupt: a content of a volume's snapshot does not verify (its hash, its
	// decryption or decompression); critical.
	CodeVolumeDataCorrupt = "volume-data-corrupt"
	// CodeVolumeDataMissing: a volume's snapshot, or a content, object or blob it needs, is not in
	// the repository, or the repository is not there; critical.
	CodeVolumeDataMissing = "volume-data-missing"
	// CodeVolumeDataMatch: every file of every volume snapshot was read whole and verified; info.
	CodeVolumeDataMatch = "volume-data-match"
	// CodeVolumeDataNotRead: a volume's data is not of a kind checksum-only reads (another
	// uploader than kopia, a snapshot left in the storage system) or not complete in Velero;
	// medium: the verdict does not cover it.
	CodeVolumeDataNotRead = "volume-data-not-read"
	// CodeVolumeDataRestoreMismatch: a full-restore restored a volume's data into a sandbox, and
	// what came back is not what the repository holds (a file missing, added or changed), or the
	// volume did not come back; critical.
	CodeVolumeDataRestoreMismatch = "volume-data-restore-mismatch"
)

// CodeCheckNotRun: the verifier could not run one of its checks. It is a fault of the verifier's
// environment, not evidence about the backup, so it ranks after the codes that are.
const CodeCheckNotRun = "check-not-run"

var codePriority = func() map[string]int {
	order := []string{
		CodeChecksumMismatch, CodeSizeMismatch, CodeArtifactMissing, CodeVolumeDataCorrupt, CodeVolumeDataMissing, CodeVolumeDataRestoreMismatch, CodeEtcdSnapshotCorrupt, CodeRestoreFailed, CodeSandboxNotOwned, CodeSandboxTampered,
		CodeBackupNotFound, CodeBackupNotReady,
		CodeVeleroBackupNotFound, CodeEtcdSnapshotNotFound, CodeEtcdSnapshotRefInvalid,
		CodeVeleroCRDMissing, CodeObjectMissing, CodeRestorePartiallyFailed, CodeTimeout, CodeCheckNotRun,
		CodeStorageUnavailable, CodeVeleroBackupNotComplete, CodeChecksumNotRecorded, CodeChecksumFirstUse, CodeVolumeDataNotRead,
		CodeCleanupFailed, CodeCleanupDeferred, CodeFindingsTruncated, CodeChecksumMatch, CodeVolumeDataMatch, CodeRestoreSucceeded, CodeVolumeDataNotVerified,
	}
	m := make(map[string]int, len(order))
	for i, c := range order {
		m[c] = i
	}
	return m
}()

// CodePriority is the tie-breaking rank of a finding code: lower wins.
func CodePriority(code string) int {
	if p, ok := codePriority[code]; ok {
		return p
	}
	return len(codePriority)
}

// WorstSeverity is the highest severity among findings, or "" when there are none.
func WorstSeverity(findings []Finding) Severity {
	var worst Severity
	for _, f := range findings {
		if f.Severity.Rank() > worst.Rank() {
			worst = f.Severity
		}
	}
	return worst
}

// TopFinding is the finding that decides the SecurityEvent: the worst severity, ties broken by
// CodePriority, then by order. It returns nil for no findings.
func TopFinding(findings []Finding) *Finding {
	var top *Finding
	for i := range findings {
		f := &findings[i]
		if top == nil || f.Severity.Rank() > top.Severity.Rank() ||
			f.Severity.Rank() == top.Severity.Rank() && CodePriority(f.Code) < CodePriority(top.Code) {
			top = f
		}
	}
	return top
}

// TerminalEventType picks the SecurityEvent a run emits at its terminal phase:
// BackupVerifyMismatch when any finding is high or worse, else BackupVerifyFailed for a failed run,
// else BackupVerifyCompleted.
func TerminalEventType(phase RunPhase, findings []Finding) string {
	if WorstSeverity(findings).AtLeast(SeverityHigh) {
		return EventBackupVerifyMismatch
	}
	if phase == RunFailed {
		return EventBackupVerifyFailed
	}
	return EventBackupVerifyCompleted
}
