package main

import (
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/core-controller/internal/plan"
)

// Retention decides the same of a trimmed Backup as of the Backup the server holds, whatever its
// phase, conditions and verdicts: every combination of Ready or Failed, ArtifactAvailable,
// PartiallyFailed and Verified (absent, or each status and reason that matters) and of the two
// modes' verdicts (none, passed, failed once, failed twice, passed with a measured restore time);
// and the restore time a passed full-restore measured stays.
func TestTrimmedBackupsDecideRetentionAlike(t *testing.T) {
	type cond struct{ status, reason string }
	absent := cond{}
	artifact := []cond{absent, {"True", "ArtifactFound"}, {"False", "ArtifactMissing"}, {"Unknown", "Checking"}}
	partial := []cond{absent, {"True", "ItemsFailed"}, {"False", "NoItemsFailed"}}
	verified := []cond{absent, {"True", backupsv1.ReasonRestoreVerified}, {"True", backupsv1.ReasonChecksumVerified}, {"False", backupsv1.ReasonRestoreMismatch}, {"Unknown", "NotVerified"}}
	verdicts := []*backupsv1.VerificationVerdict{nil, {Result: backupsv1.VerificationPassed, Message: "ok"},
		{Result: backupsv1.VerificationFailed, Failures: 1, Message: "differs"}, {Result: backupsv1.VerificationFailed, Failures: 2, Message: "differs again"},
		{Result: backupsv1.VerificationPassed, Message: "restored", RestoreDuration: &metav1.Duration{Duration: 83 * time.Second}}}
	group := "apps.cozystack.io"
	n := 0
	for _, phase := range []backupsv1.BackupPhase{backupsv1.BackupReady, backupsv1.BackupFailed} {
		for _, a := range artifact {
			for _, p := range partial {
				for _, v := range verified {
					for _, cs := range verdicts {
						for _, fr := range verdicts {
							b := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("b-%d", n), Namespace: "shop"},
								Spec: backupsv1.BackupSpec{ApplicationRef: corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "VirtualMachine", Name: "vm"},
									PlanRef: &corev1.LocalObjectReference{Name: "nightly"}, TakenAt: metav1.NewTime(time.Unix(int64(n), 0))},
								Status: backupsv1.BackupStatus{Phase: phase, Artifact: &backupsv1.BackupArtifact{URI: "s3://x"}}}
							for typ, c := range map[string]cond{backupsv1.ConditionArtifactAvailable: a, backupsv1.ConditionPartiallyFailed: p, backupsv1.ConditionVerified: v} {
								if c != absent {
									b.Status.Conditions = append(b.Status.Conditions, metav1.Condition{Type: typ, Status: metav1.ConditionStatus(c.status), Reason: c.reason, Message: "m"})
								}
							}
							if cs != nil || fr != nil {
								b.Status.Verification = &backupsv1.BackupVerification{Checksum: cs.DeepCopy(), FullRestore: fr.DeepCopy()}
							}
							trimmed := b.DeepCopy()
							trimBackup(trimmed)
							assert.Equal(t, plan.RetentionItem(b), plan.RetentionItem(trimmed), "%s: %+v", b.Name, b.Status)
							assert.Equal(t, b.VerifyFailureConfirmed(), trimmed.VerifyFailureConfirmed(), b.Name)
							if fr != nil && fr.RestoreDuration != nil {
								assert.Equal(t, fr.RestoreDuration, trimmed.Status.Verification.FullRestore.RestoreDuration, "the Plan shows it: %s", b.Name)
							}
							n++
						}
					}
				}
			}
		}
	}
	assert.Equal(t, 2*4*3*5*5*5, n)
}

// Trimmed Backups share their repeated strings: two Backups of one namespace and strategy hold
// one copy of the namespace, the kind and the group.
func TestTrimmedBackupsShareStrings(t *testing.T) {
	mk := func(name string) *backupsv1.Backup {
		g := string([]byte("velerodriver.backups.cozystack.io")) // a fresh copy, as decoding makes
		return &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: string([]byte("tenant-0001"))},
			Spec: backupsv1.BackupSpec{StrategyRef: corev1.TypedLocalObjectReference{APIGroup: &g, Kind: string([]byte("VeleroBackupStrategy")), Name: "s"}}}
	}
	a, b := mk("a"), mk("b")
	trimBackup(a)
	trimBackup(b)
	assert.Equal(t, unsafe.StringData(a.Namespace), unsafe.StringData(b.Namespace))
	assert.Equal(t, unsafe.StringData(a.Spec.StrategyRef.Kind), unsafe.StringData(b.Spec.StrategyRef.Kind))
	assert.Same(t, a.Spec.StrategyRef.APIGroup, b.Spec.StrategyRef.APIGroup)
	assert.Equal(t, "tenant-0001", a.Namespace)
	assert.Equal(t, "velerodriver.backups.cozystack.io", *b.Spec.StrategyRef.APIGroup)
}
