package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/types"

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

func modeWord(m Mode) string {
	if m == ModeFullRestore {
		return "restore"
	}
	return "checksum"
}

// VeleroPolicyRunName is the name of a policy's run verifying the Velero backup name (UID uid) in
// mode m, in the policy's runNamespace: one per backup and mode, whatever policy asks for it.
func VeleroPolicyRunName(name string, uid types.UID, m Mode) string {
	return backupsv1.BoundedName(253, "velero", name, modeWord(m), shortUID(uid))
}

// VeleroPolicySandboxName is the sandbox of a policy's full-restore run of a Velero backup: a DNS
// label ending in SandboxSuffix (for a backup of several namespaces, the stem of theirs).
func VeleroPolicySandboxName(name string, uid types.UID) string {
	stem := strings.ReplaceAll(name, ".", "-")
	return backupsv1.BoundedName(63-len(SandboxSuffix), stem, shortUID(uid)) + SandboxSuffix
}

// EtcdPolicyRunName is the name of a policy's run verifying the etcd snapshot file ref whose
// identity (size and modification time) is id: a snapshot saved again under the same name is a
// new snapshot, with a run of its own.
func EtcdPolicyRunName(ref, id string) string {
	return EtcdNodePolicyRunName("", ref, id)
}

// EtcdNodePolicyRunName is EtcdPolicyRunName for the snapshot file ref on node (empty: the
// verifier's own directory): each node's snapshot of a name is a snapshot of its own.
func EtcdNodePolicyRunName(node, ref, id string) string {
	stem := strings.Trim(dnsUnsafe.ReplaceAllString(strings.ToLower(ref), "-"), "-")
	key, parts := ref+"\x00"+id, []string{"etcd"}
	if node != "" {
		key, parts = node+"\x00"+key, append(parts, node)
	}
	sum := sha256.Sum256([]byte(key))
	return backupsv1.BoundedName(253, append(parts, stem, "checksum", hex.EncodeToString(sum[:])[:8])...)
}

var dnsUnsafe = regexp.MustCompile(`[^a-z0-9]+`)

func shortUID(uid types.UID) string {
	if len(uid) > 8 {
		return string(uid)[:8]
	}
	return string(uid)
}
