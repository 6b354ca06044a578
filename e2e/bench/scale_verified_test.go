package bench

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
)

// scaleVerified (COFFER_BENCH_SCALE_VERIFIED=1) makes every Backup of BenchmarkScale one a
// checksum-only BackupVerifyPolicy verified, as the verifier leaves it: the policy (created before
// the Backups, so it covers them all), and per Backup its ended run (settled: the verdict is on
// the Backup), the run's Result and the verdict on the Backup. Three more requests per Backup.
var scaleVerified = envInt("COFFER_BENCH_SCALE_VERIFIED", 0) == 1

// scalePolicy is the policy of a verified scale: every Plan of every namespace, checksum-only.
const scalePolicy = "scale"

func createScalePolicy(ctx context.Context, cl client.Client) error {
	return cl.Create(ctx, &securityv1.BackupVerifyPolicy{ObjectMeta: metav1.ObjectMeta{Name: scalePolicy},
		Spec: securityv1.BackupVerifyPolicySpec{}})
}

// verifyScaleBackup records on b (created, its status not yet written) a passed checksum-only
// verdict, and creates the ended run and the Result that gave it.
func verifyScaleBackup(ctx context.Context, cl client.Client, b *backupsv1.Backup) error {
	run := &securityv1.BackupVerifyRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: b.Namespace, Name: securityv1.PolicyRunName(b, securityv1.ModeChecksumOnly), Labels: map[string]string{
			securityv1.LabelPolicy: scalePolicy, securityv1.LabelBackupUID: string(b.UID), securityv1.LabelPlan: b.Spec.PlanRef.Name,
			securityv1.LabelSettled: "true"}},
		Spec: securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendCoffer, Mode: securityv1.ModeChecksumOnly,
			BackupRef: securityv1.BackupRef{Name: b.Name, Namespace: b.Namespace}},
	}
	if err := cl.Create(ctx, run); err != nil {
		return err
	}
	done := metav1.NewTime(b.Spec.TakenAt.Add(10 * time.Minute))
	result := securityv1.ResultName(run.Name)
	msg := fmt.Sprintf("Verification succeeded: %d bytes match the recorded %s", b.Status.Artifact.SizeBytes, b.Status.Artifact.Checksum)
	run.Status = securityv1.BackupVerifyRunStatus{Phase: securityv1.RunSucceeded, StartTime: &done, CompletionTime: &done,
		ResultRef: &securityv1.ResultReference{Name: result}, WorstSeverity: securityv1.SeverityInfo, Message: msg,
		Conditions: []metav1.Condition{
			{Type: securityv1.ConditionReady, Status: metav1.ConditionTrue, Reason: securityv1.EventBackupVerifyCompleted, Message: msg, LastTransitionTime: done},
			{Type: securityv1.ConditionProgressing, Status: metav1.ConditionFalse, Reason: securityv1.EventBackupVerifyCompleted, Message: "the run ended", LastTransitionTime: done},
		}}
	if err := cl.Status().Update(ctx, run); err != nil {
		return err
	}
	if err := cl.Create(ctx, &securityv1.BackupVerifyResult{
		ObjectMeta: metav1.ObjectMeta{Namespace: run.Namespace, Name: result, Labels: map[string]string{securityv1.LabelRun: run.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: securityv1.GroupVersion.String(), Kind: "BackupVerifyRun", Name: run.Name, UID: run.UID}}},
		Spec: securityv1.BackupVerifyResultSpec{RunRef: &securityv1.RunReference{Name: run.Name, UID: run.UID}, Backend: securityv1.BackendCoffer,
			BackupRef: &run.Spec.BackupRef, Mode: securityv1.ModeChecksumOnly, RecordedChecksum: b.Status.Artifact.Checksum,
			ComputedChecksum: b.Status.Artifact.Checksum, SizeBytes: b.Status.Artifact.SizeBytes},
	}); err != nil {
		return err
	}
	b.Status.Verification = &backupsv1.BackupVerification{Checksum: &backupsv1.VerificationVerdict{Result: backupsv1.VerificationPassed, Time: done,
		ResultRef: &backupsv1.VerificationResultRef{Namespace: run.Namespace, Name: result}, Message: msg}}
	return nil
}

// checkScalePolicy checks that the verifier took the verified Backups for what they are: its
// policy Ready, no run in flight or pending, and no run made beside the one per Backup.
func checkScalePolicy(ctx context.Context, cl client.Client) error {
	pol := &securityv1.BackupVerifyPolicy{}
	if err := cl.Get(ctx, client.ObjectKey{Name: scalePolicy}, pol); err != nil {
		return err
	}
	ready := meta.FindStatusCondition(pol.Status.Conditions, securityv1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionTrue || pol.Status.ActiveRuns != 0 || pol.Status.PendingBackups != 0 {
		return fmt.Errorf("the policy is not Ready with nothing to do: %+v", pol.Status)
	}
	runs := &metav1.PartialObjectMetadataList{}
	runs.SetGroupVersionKind(securityv1.GroupVersion.WithKind("BackupVerifyRunList"))
	if err := cl.List(ctx, runs); err != nil {
		return err
	}
	if len(runs.Items) != scaleBackups {
		return fmt.Errorf("%d runs, not one per Backup (%d)", len(runs.Items), scaleBackups)
	}
	return nil
}
