package v1alpha1

import (
	"strings"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// PolicyRunName is the name of the run verifying Backup b in mode m, in b's namespace: one per
// Backup and mode, whatever policy asks for it, so that a restarted verifier or a second policy
// finds the run instead of making another.
func PolicyRunName(b *backupsv1.Backup, m Mode) string {
	word := "checksum"
	if m == ModeFullRestore {
		word = "restore"
	}
	return backupsv1.BoundedName(253, b.Name, word, string(b.UID)[:8])
}

// PolicySandboxName is the sandbox of Backup b's full-restore run: a DNS label ending in
// SandboxSuffix.
func PolicySandboxName(b *backupsv1.Backup) string {
	stem := strings.ReplaceAll(b.Name, ".", "-")
	return backupsv1.BoundedName(63-len(SandboxSuffix), stem, string(b.UID)[:8]) + SandboxSuffix
}

// ResultName is the name of a run's BackupVerifyResult, in the run's namespace: "<run>-result", as
// ugallu names it (bounded to 253 characters).
func ResultName(runName string) string {
	return backupsv1.BoundedName(253, runName, "result")
}
