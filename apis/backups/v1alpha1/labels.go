package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Label and annotation keys of the contract.
const (
	// LabelPlan on a BackupJob (and the Backup made from it) names the Plan that created it; its
	// value is PlanLabelValue(plan name).
	LabelPlan = Group + "/plan"

	// LabelApplicationKind and LabelApplicationName on a Backup name the application it was taken
	// of (spec.applicationRef kind and name), as LabelValue makes them valid label values; select
	// a Backup by them, then check spec.applicationRef, which the field selectors of the same names
	// match exactly.
	LabelApplicationKind = Group + "/application-kind"
	LabelApplicationName = Group + "/application-name"

	// AnnotationScheduledTime on a BackupJob created by a Plan holds its tick in RFC 3339.
	AnnotationScheduledTime = Group + "/scheduled-time"

	// LabelBackupJob, LabelBackupJobNamespace and LabelBackupJobUID on a driver's objects point back
	// to the BackupJob they serve.
	LabelBackupJob          = Group + "/backupjob"
	LabelBackupJobNamespace = Group + "/backupjob-namespace"
	LabelBackupJobUID       = Group + "/backupjob-uid"

	// LabelRestoreJob, LabelRestoreJobNamespace and LabelRestoreJobUID on a driver's objects point
	// back to the RestoreJob they serve.
	LabelRestoreJob          = Group + "/restorejob"
	LabelRestoreJobNamespace = Group + "/restorejob-namespace"
	LabelRestoreJobUID       = Group + "/restorejob-uid"

	// AnnotationChecksum on a driver's own backup object (e.g. a velero.io Backup) repeats
	// status.artifact.checksum of the Coffer Backup, so a verifier finds it from either side.
	AnnotationChecksum = Group + "/checksum"

	// LabelManagedBy is the well-known label naming the component that manages an object.
	LabelManagedBy = "app.kubernetes.io/managed-by"

	// LabelImported ("true") marks a Backup a catalog sync made from the record of an artifact
	// another cluster took (contract BK-12); LabelCatalog names the catalog (a strategy of the
	// importing driver) that made it. AnnotationSourceCluster, AnnotationSourceClusterName and
	// AnnotationSourceUID say where the Backup was taken, AnnotationRecord where its record is.
	LabelImported               = Group + "/imported"
	LabelCatalog                = Group + "/catalog"
	AnnotationSourceCluster     = Group + "/source-cluster"
	AnnotationSourceClusterName = Group + "/source-cluster-name"
	AnnotationSourceUID         = Group + "/source-uid"
	AnnotationRecord            = Group + "/record"
	// AnnotationAdopted ("true"), set by an admin on an imported Backup, makes it this cluster's:
	// retention may prune it, and deleting it deletes its artifact. Without it, an imported
	// Backup is read-only towards the source's data.
	AnnotationAdopted = Group + "/adopted"
)

// PlanLabelValue is the LabelPlan value for a Plan: its name, bounded to a valid label value.
// Long names are cut and hashed (BoundedName), so always check the ownerReference too.
func PlanLabelValue(plan string) string { return BoundedName(MaxGeneratedNameLength, plan) }

// ApplicationLabels are the labels that name the application of ref on a Backup:
// LabelApplicationKind and LabelApplicationName.
func ApplicationLabels(ref corev1.TypedLocalObjectReference) map[string]string {
	return map[string]string{LabelApplicationKind: LabelValue(ref.Kind), LabelApplicationName: LabelValue(ref.Name)}
}

// LabelValue returns v when it is a valid label value. Otherwise (too long, or with characters a
// label value cannot hold) it returns a valid one made from v: its characters outside
// [A-Za-z0-9-_.] turned into "-", cut, and suffixed with "-" and ten hex digits of the SHA-256 of
// v, so distinct values stay distinct and the same value always gives the same label.
func LabelValue(v string) string {
	if len(validation.IsValidLabelValue(v)) == 0 {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	suffix := hex.EncodeToString(sum[:])[:10]
	head := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '-'
	}, v)
	if limit := validation.LabelValueMaxLength - len(suffix) - 1; len(head) > limit {
		head = head[:limit]
	}
	if head = strings.Trim(head, "-_."); head == "" {
		return suffix
	}
	return head + "-" + suffix
}
