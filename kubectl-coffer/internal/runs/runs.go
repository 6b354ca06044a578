// Package runs builds the objects the plugin creates: a BackupJob of a Plan made now, a RestoreJob of
// a Backup, a BackupVerifyRun of a Velero-made Backup. It is pure: names take a random suffix from
// the caller, so tests pin it and a retry after AlreadyExists draws another.
package runs

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	velerov1 "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
)

// Keys of the driverMetadata driver-velero writes on the Backups it makes (docs/driver-velero.md).
const (
	MetaVeleroBackupName = "veleroBackupName"
	MetaVeleroNamespace  = "veleroNamespace"
)

// DefaultVeleroNamespace is where a Velero Backup lives when driverMetadata names no namespace.
const DefaultVeleroNamespace = "velero"

// DefaultVerifyNamespace is the verifier's namespace, where verifications are kept.
const DefaultVerifyNamespace = "ugallu-system"

// named ends a bounded stem with "-<suffix>", the whole at most MaxGeneratedNameLength long.
func named(suffix string, parts ...string) string {
	return backupsv1.BoundedName(backupsv1.MaxGeneratedNameLength-len(suffix)-1, parts...) + "-" + suffix
}

// PlanBackupJob is the BackupJob `kubectl coffer backup PLAN` creates: what a tick of the Plan
// creates (contract CORE-1: spec.planRef, the application normalized with its default apiGroup,
// the class; the Plan's label, PlanLabelValue), controlled by the Plan as a tick's BackupJob is, so
// that core counts it in the Plan's active runs, last success and history limits. It carries no
// scheduled-time annotation and is named "<plan>-manual-<suffix>": it is no tick, so it never takes
// a tick's name nor moves the Plan's schedule. The ownerReference does not block the Plan's
// deletion, which would need the right to update the Plan's finalizers.
func PlanBackupJob(plan *backupsv1.Plan, suffix string) *backupsv1.BackupJob {
	return &backupsv1.BackupJob{
		ObjectMeta: metav1.ObjectMeta{
			Name:      named(suffix, plan.Name, "manual"),
			Namespace: plan.Namespace,
			Labels:    map[string]string{backupsv1.LabelPlan: backupsv1.PlanLabelValue(plan.Name)},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: backupsv1.GroupVersion.String(), Kind: "Plan", Name: plan.Name, UID: plan.UID,
				Controller: ptr.To(true),
			}},
		},
		Spec: backupsv1.BackupJobSpec{
			PlanRef:         &corev1.LocalObjectReference{Name: plan.Name},
			ApplicationRef:  backupsv1.NormalizeApplicationRef(plan.Spec.ApplicationRef),
			BackupClassName: plan.Spec.BackupClassName,
		},
	}
}

// RestoreJob restores backup into its application, or into targetNamespace (the standard option,
// contract RJ-9) when that is set and is not the Backup's namespace. It is named
// "<backup>-restore-<suffix>".
func RestoreJob(backup *backupsv1.Backup, targetNamespace, suffix string) *backupsv1.RestoreJob {
	rj := &backupsv1.RestoreJob{
		ObjectMeta: metav1.ObjectMeta{Name: named(suffix, backup.Name, "restore"), Namespace: backup.Namespace},
		Spec:       backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: backup.Name}},
	}
	if targetNamespace != "" && targetNamespace != backup.Namespace {
		rj.Spec.Options = backupsv1.StringOptions(map[string]string{backupsv1.OptionTargetNamespace: targetNamespace})
	}
	return rj
}

// ErrNotRestorable says a Backup has no usable artifact yet (or any more).
var ErrNotRestorable = errors.New("backup is not restorable")

// CheckRestorable refuses a Backup that a driver would refuse (contract RJ-8): not Ready with an
// artifact, or with ArtifactAvailable=False.
func CheckRestorable(b *backupsv1.Backup) error {
	switch {
	case !b.DeletionTimestamp.IsZero():
		return fmt.Errorf("%w: Backup %s/%s is being deleted", ErrNotRestorable, b.Namespace, b.Name)
	case b.Status.Phase != backupsv1.BackupReady || b.Status.Artifact == nil:
		phase := string(b.Status.Phase)
		if phase == "" {
			phase = string(backupsv1.BackupPending)
		}
		return fmt.Errorf("%w: Backup %s/%s is %s, not Ready with an artifact", ErrNotRestorable, b.Namespace, b.Name, phase)
	case b.ArtifactMissing():
		return fmt.Errorf("%w: the artifact of Backup %s/%s is missing from storage", ErrNotRestorable, b.Namespace, b.Name)
	}
	return nil
}

// ErrNotVerifiable says the verifier cannot verify a Backup: only Velero-made Backups are.
var ErrNotVerifiable = errors.New("backup is not verifiable")

// VerifyRun is a BackupVerifyRun of a Velero-made Backup, in runNamespace: backend velero,
// backupRef the Velero backup named in the Backup's driverMetadata, checksum-only, or full-restore
// into a new sandbox "<backup namespace>-<suffix>-bvsandbox" that the verifier creates (and the
// sandbox admission policy admits: it ends in -bvsandbox). The run is named
// "<backup namespace>-<backup>-<suffix>". A Backup of another driver is refused with
// ErrNotVerifiable.
func VerifyRun(b *backupsv1.Backup, runNamespace string, full bool, suffix string) (*securityv1.BackupVerifyRun, error) {
	if !backupsv1.StrategyIs(b.Spec.StrategyRef, velerov1.Group, velerov1.Kind) {
		group := ""
		if b.Spec.StrategyRef.APIGroup != nil {
			group = *b.Spec.StrategyRef.APIGroup
		}
		return nil, fmt.Errorf("%w: Backup %s/%s was made by a %s (%s), and the verifier verifies Velero backups only (%s)",
			ErrNotVerifiable, b.Namespace, b.Name, b.Spec.StrategyRef.Kind, group, velerov1.Kind)
	}
	name := b.Spec.DriverMetadata[MetaVeleroBackupName]
	if name == "" {
		return nil, fmt.Errorf("%w: Backup %s/%s names no Velero backup (driverMetadata.%s is empty)",
			ErrNotVerifiable, b.Namespace, b.Name, MetaVeleroBackupName)
	}
	ns := b.Spec.DriverMetadata[MetaVeleroNamespace]
	if ns == "" {
		ns = DefaultVeleroNamespace
	}
	run := &securityv1.BackupVerifyRun{
		ObjectMeta: metav1.ObjectMeta{Name: named(suffix, b.Namespace, b.Name), Namespace: runNamespace},
		Spec: securityv1.BackupVerifyRunSpec{
			Backend:   securityv1.BackendVelero,
			BackupRef: securityv1.BackupRef{Name: name, Namespace: ns},
			Mode:      securityv1.ModeChecksumOnly,
		},
	}
	if full {
		run.Spec.Mode = securityv1.ModeFullRestore
		run.Spec.SandboxNamespace = SandboxName(b.Namespace, suffix)
	}
	return run, nil
}

// SandboxName is a sandbox namespace for a verification of a Backup of namespace ns:
// "<ns>-<suffix>-bvsandbox", bounded to a namespace name's 63 characters.
func SandboxName(ns, suffix string) string {
	stem := backupsv1.BoundedName(backupsv1.MaxGeneratedNameLength-len(securityv1.SandboxSuffix)-len(suffix)-1, ns)
	return stem + "-" + suffix + securityv1.SandboxSuffix
}
