package v1alpha1

// Label keys of the backup-verify objects.
const (
	// LabelRunUID on a sandbox namespace holds the UID of the run that created it; the verifier
	// deletes only namespaces carrying the UID of the run being cleaned up.
	LabelRunUID = Group + "/run-uid"
	// LabelRun on results, restores and events names the run they belong to.
	LabelRun = Group + "/run"
	// LabelPolicy on a run names the BackupVerifyPolicy that created it.
	LabelPolicy = Group + "/policy"
	// LabelBackupUID on a run of the coffer backend holds the UID of the Backup it verifies.
	LabelBackupUID = Group + "/backup-uid"
	// LabelPlan on a policy's run names the Plan of the Backup it verifies.
	LabelPlan = Group + "/plan"
	// LabelSettled ("true") on a policy's ended coffer run says that its Backup records the run's
	// verdict (or a newer one): nothing reads the run again but its pruning, so the verifier
	// caches it no longer (a policy keeps one run per verified Backup).
	LabelSettled = Group + "/settled"
	// LabelChecksumTrust marks the ConfigMaps, in the verifier's own namespace, that hold the
	// checksum first computed for a Velero backup nothing was recorded for (trust on first use).
	LabelChecksumTrust = Group + "/checksum-trust"
)

// CodeContentMismatch: a full-restore found an object in its sandbox whose content differs from
// its copy in the backup (after the normalization the verifier documents); severity high.
const CodeContentMismatch = "content-mismatch"
