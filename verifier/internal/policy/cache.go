package policy

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/apis/cachetrim"
)

// TrimCachedBackup cuts a Backup the verifier caches (obj; any other object passes unchanged)
// to what policies read of it: its name, namespace, UID, creation and deletion, spec.planRef and
// takenAt, status.phase (the repeated strings interned, cachetrim.Intern), whether
// status.artifact is set (an empty artifact stands for one; its URI and checksum are dropped), and
// of each verdict its result and time (trimVerdict).
// The verifier watches every Backup of the cluster for its policies, so what it drops (labels, annotations, the application and strategy, driver metadata,
// conditions, verdicts' messages, the driver's record) is most of what it would hold (docs/benchmarks.md,
// "Scale"). Whatever else the verifier reads of a Backup it reads uncached: a run's Backup, and
// the Backup whose verdict it writes, so no write is computed from a trimmed copy.
func TrimCachedBackup(obj any) {
	b, ok := obj.(*backupsv1.Backup)
	if !ok {
		return
	}
	kept := backupsv1.Backup{TypeMeta: b.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: b.Name, Namespace: cachetrim.Intern(b.Namespace), UID: b.UID, ResourceVersion: b.ResourceVersion, Generation: b.Generation,
		CreationTimestamp: b.CreationTimestamp, DeletionTimestamp: b.DeletionTimestamp,
	}}
	if p := b.Spec.PlanRef; p != nil {
		kept.Spec.PlanRef = &corev1.LocalObjectReference{Name: cachetrim.Intern(p.Name)}
	}
	kept.Spec.TakenAt = b.Spec.TakenAt
	kept.Status.Phase = backupsv1.BackupPhase(cachetrim.Intern(string(b.Status.Phase)))
	if b.Status.Artifact != nil {
		kept.Status.Artifact = &backupsv1.BackupArtifact{}
	}
	if v := b.Status.Verification; v != nil {
		kept.Status.Verification = &backupsv1.BackupVerification{Checksum: trimVerdict(v.Checksum), FullRestore: trimVerdict(v.FullRestore)}
	}
	*b = kept
}

// trimVerdict keeps of a verdict its result and time: whether a Backup was verified in a mode (a
// policy makes no run for it) and whether an ended run's verdict is older than the recorded one
// (the verdict controller reads nothing live for it).
func trimVerdict(v *backupsv1.VerificationVerdict) *backupsv1.VerificationVerdict {
	if v == nil {
		return nil
	}
	return &backupsv1.VerificationVerdict{Result: backupsv1.VerificationResult(cachetrim.Intern(string(v.Result))), Time: v.Time}
}
