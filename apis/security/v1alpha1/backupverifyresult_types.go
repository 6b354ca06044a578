package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// MaxFindings bounds the findings of one result; a verifier that has more reports the first
// MaxFindings-1 and one finding saying how many were left out.
const MaxFindings = 1000

// Finding is one observation of a verification.
type Finding struct {
	// code is a stable, lower-kebab identifier, e.g. checksum-mismatch.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]+(-[a-z0-9]+)*$`
	Code string `json:"code"`

	// severity is info, low, medium, high or critical.
	// +required
	Severity Severity `json:"severity"`

	// message says what was found, for a human.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`

	// object names the object the finding is about, e.g. "apps/Deployment shop/web".
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Object string `json:"object,omitempty"`

	// detail is the message (its first 1024 bytes), in the field ugallu's consumers read
	// (ugallu's BackupVerifyResult requires it). The verifier writes it on every finding of a
	// Result.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Detail string `json:"detail,omitempty"`
}

// DerivedFromRun names the run a result was derived from, in the result's namespace (ugallu's
// field; runRef is Coffer's, with the run's UID).
type DerivedFromRun struct {
	// name of the run.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// RunReference points at the BackupVerifyRun a result belongs to.
type RunReference struct {
	// name of the run, in the result's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// uid of the run.
	// +optional
	UID types.UID `json:"uid,omitempty"`
}

// BackupVerifyResultSpec holds what a run found. It is written once, at the run's terminal phase.
type BackupVerifyResultSpec struct {
	// runRef is the run this result belongs to, with its UID (Coffer writes it; ugallu writes
	// derivedFromRun only).
	// +optional
	RunRef *RunReference `json:"runRef,omitempty"`

	// backend, backupRef and mode repeat the run's spec.
	// +required
	Backend Backend `json:"backend"`
	// +optional
	BackupRef *BackupRef `json:"backupRef,omitempty"`
	// +required
	Mode Mode `json:"mode"`

	// recordedChecksum is the checksum recorded when the backup was taken ("sha256:<hex>"), if any.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	RecordedChecksum string `json:"recordedChecksum,omitempty"`

	// computedChecksum is the checksum the verifier computed over the payload.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	ComputedChecksum string `json:"computedChecksum,omitempty"`

	// sizeBytes is the size of the payload the verifier read.
	// +optional
	// +kubebuilder:validation:Minimum=0
	SizeBytes int64 `json:"sizeBytes,omitempty"`

	// objectsExpected and objectsRestored count the namespaced objects of the backup and those
	// found in the sandbox (full-restore).
	// +optional
	ObjectsExpected int32 `json:"objectsExpected,omitempty"`
	// +optional
	ObjectsRestored int32 `json:"objectsRestored,omitempty"`

	// checksumBasis says what the computed checksum was compared with: Recorded (the checksum
	// recorded when the backup was taken), FirstVerification (the checksum the verifier computed at
	// its first verification of this backup, trusted on first use because nothing was recorded), or
	// None (nothing to compare with: this run's checksum is now the one later runs compare with).
	// Unset when the backend compares no checksum (a full-restore, an etcd snapshot without a
	// sidecar).
	// +optional
	ChecksumBasis ChecksumBasis `json:"checksumBasis,omitempty"`

	// details are backend facts recorded by the run, e.g. an etcd snapshot's revision, totalKeys,
	// totalSizeBytes and hash.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Details map[string]string `json:"details,omitempty"`

	// derivedFromRun, checksum and restoredObjectCount are ugallu's fields of a result, written
	// beside Coffer's (runRef, computedChecksum, objectsRestored) so that ugallu's consumers read
	// Coffer's Results: the run's name, the computed SHA-256 as lowercase hex without prefix, and
	// the objects a full-restore brought back.
	// +optional
	DerivedFromRun *DerivedFromRun `json:"derivedFromRun,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Checksum string `json:"checksum,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	RestoredObjectCount int64 `json:"restoredObjectCount,omitempty"`

	// findings of the run, worst first.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1000
	Findings []Finding `json:"findings,omitempty"`
}

// ChecksumBasis is what a run's computed checksum was compared with.
// +kubebuilder:validation:Enum=Recorded;FirstVerification;None
type ChecksumBasis string

const (
	// ChecksumRecorded: compared with the checksum recorded when the backup was taken.
	ChecksumRecorded ChecksumBasis = "Recorded"
	// ChecksumFirstVerification: nothing was recorded when the backup was taken; compared with the
	// checksum the verifier computed at its first verification of the backup (trust on first use).
	ChecksumFirstVerification ChecksumBasis = "FirstVerification"
	// ChecksumNone: nothing to compare with. The run proves only that the backup could be read;
	// its checksum is kept for later runs to compare with.
	ChecksumNone ChecksumBasis = "None"
)

// RunUID is the UID of the run the Result belongs to, or "" when the Result does not say.
func (s *BackupVerifyResultSpec) RunUID() types.UID {
	if s.RunRef == nil {
		return ""
	}
	return s.RunRef.UID
}

// BackupVerifyResultStatus carries the ranked outcome.
type BackupVerifyResultStatus struct {
	// worstSeverity is the highest severity among the findings (critical > high > medium > low > info).
	// +optional
	WorstSeverity Severity `json:"worstSeverity,omitempty"`
}

// BackupVerifyResult is the outcome of one BackupVerifyRun.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=bvres,categories=coffer
// +kubebuilder:validation:XValidation:rule="self.spec == oldSelf.spec",message="spec is immutable"
// +kubebuilder:printcolumn:name="Run",type=string,JSONPath=`.spec.runRef.name`
// +kubebuilder:printcolumn:name="Worst",type=string,JSONPath=`.status.worstSeverity`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BackupVerifyResult struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec BackupVerifyResultSpec `json:"spec"`
	// +optional
	Status BackupVerifyResultStatus `json:"status,omitempty"`
}

// BackupVerifyResultList is a list of BackupVerifyResults.
// +kubebuilder:object:root=true
type BackupVerifyResultList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BackupVerifyResult `json:"items"`
}
