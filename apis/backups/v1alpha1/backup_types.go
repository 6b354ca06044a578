package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// BackupPhase summarises the conditions of a Backup.
// +kubebuilder:validation:Enum=Pending;Ready;Failed
type BackupPhase string

const (
	BackupPending BackupPhase = "Pending"
	BackupReady   BackupPhase = "Ready"
	BackupFailed  BackupPhase = "Failed"
)

// BackupSpec describes one backup artifact. It is immutable once created.
type BackupSpec struct {
	// applicationRef is the application the backup was taken of.
	// +required
	// +kubebuilder:validation:XValidation:rule="size(self.name) > 0 && size(self.name) <= 253",message="applicationRef.name must be 1-253 characters"
	// +kubebuilder:validation:XValidation:rule="size(self.kind) > 0 && size(self.kind) <= 63",message="applicationRef.kind must be 1-63 characters"
	// +kubebuilder:validation:XValidation:rule="!has(self.apiGroup) || size(self.apiGroup) <= 253",message="applicationRef.apiGroup must be at most 253 characters"
	ApplicationRef corev1.TypedLocalObjectReference `json:"applicationRef"`

	// planRef is the Plan whose run produced this backup, if any.
	// +optional
	// +kubebuilder:validation:XValidation:rule="size(self.name) <= 253",message="planRef.name must be at most 253 characters"
	PlanRef *corev1.LocalObjectReference `json:"planRef,omitempty"`

	// strategyRef is the strategy resolved from the BackupClass when the backup was taken. Its
	// apiGroup names the driver that owns the backup (restores and deletion).
	// +required
	// +kubebuilder:validation:XValidation:rule="has(self.apiGroup) && size(self.apiGroup) > 0 && size(self.apiGroup) <= 253",message="strategyRef.apiGroup is required: it names the driver"
	// +kubebuilder:validation:XValidation:rule="size(self.kind) > 0 && size(self.kind) <= 63",message="strategyRef.kind must be 1-63 characters"
	// +kubebuilder:validation:XValidation:rule="size(self.name) > 0 && size(self.name) <= 253",message="strategyRef.name must be 1-253 characters"
	StrategyRef corev1.TypedLocalObjectReference `json:"strategyRef"`

	// takenAt is when the backup was taken.
	// +required
	TakenAt metav1.Time `json:"takenAt"`

	// driverMetadata is opaque to core: what the driver needs to find the artifact again.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) > 0 && size(k) <= 253 && size(self[k]) <= 4096)",message="driverMetadata: keys must be 1-253 characters and values at most 4096 characters"
	DriverMetadata map[string]string `json:"driverMetadata,omitempty"`
}

// BackupArtifact describes the stored artifact.
type BackupArtifact struct {
	// uri locates the artifact, e.g. s3://bucket/prefix/backups/name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	URI string `json:"uri"`

	// sizeBytes is the size of the artifact in bytes.
	// +optional
	// +kubebuilder:validation:Minimum=0
	SizeBytes int64 `json:"sizeBytes,omitempty"`

	// checksum is the digest of the artifact, "sha256:" followed by 64 lower-case hex digits.
	// +optional
	// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
	Checksum string `json:"checksum,omitempty"`
}

// BackupStatus is written by the owning driver.
type BackupStatus struct {
	// phase is Pending, Ready or Failed.
	// +optional
	Phase BackupPhase `json:"phase,omitempty"`

	// artifact describes the stored object.
	// +optional
	Artifact *BackupArtifact `json:"artifact,omitempty"`

	// verification holds the newest verdict of each verification mode. It and the Verified
	// condition are written by the backup verifier only (contract BK-10); drivers preserve them.
	// +optional
	Verification *BackupVerification `json:"verification,omitempty"`

	// underlyingResources is what a driver found of the application while backing it up and a
	// restore of it may need (a VM's disks and addresses, a database's parameters), as
	// Cozystack's drivers record it: a JSON object carrying its own apiVersion and kind so the
	// reader can tell its shape. Written by the driver that made the Backup (tenants cannot write
	// a Backup's status), read by restores and verifiers. driver-velero records the volume data
	// of its Velero backups here (kind VeleroVolumeData, velerodriver.backups.cozystack.io).
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	UnderlyingResources *runtime.RawExtension `json:"underlyingResources,omitempty"`

	// conditions: ArtifactAvailable and PartiallyFailed (the driver's), Verified (the verifier's).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// BackupVerification is what the backup verifier proved about a Backup, per mode.
type BackupVerification struct {
	// checksum is the newest checksum-only verdict: the stored artifact's size and SHA-256
	// against status.artifact.
	// +optional
	Checksum *VerificationVerdict `json:"checksum,omitempty"`

	// fullRestore is the newest full-restore verdict: the Backup restored into a sandbox and
	// compared with what it holds.
	// +optional
	FullRestore *VerificationVerdict `json:"fullRestore,omitempty"`
}

// VerificationResult is the outcome of a verification, as recorded on a Backup.
// +kubebuilder:validation:Enum=Passed;Failed
type VerificationResult string

const (
	// VerificationPassed: the verification ran and found nothing high or worse.
	VerificationPassed VerificationResult = "Passed"
	// VerificationFailed: the verification ran and found the Backup bad (a mismatch). A
	// verification that could not be carried out is no verdict and is not recorded here.
	VerificationFailed VerificationResult = "Failed"
)

// VerificationVerdict is one verification's verdict on a Backup.
type VerificationVerdict struct {
	// result is Passed or Failed.
	// +required
	Result VerificationResult `json:"result"`

	// time is when the verification ended.
	// +required
	Time metav1.Time `json:"time"`

	// resultRef names the BackupVerifyResult (security.ugallu.io) holding the findings.
	// +optional
	ResultRef *VerificationResultRef `json:"resultRef,omitempty"`

	// message summarises the verdict.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// failures counts the verifications of this mode in a row, this one included, that found the
	// Backup bad (0 when it passed). One failed verification is a signal; two in a row, or a
	// failure of each mode, confirm it (Backup.VerifyFailureConfirmed).
	// +optional
	// +kubebuilder:validation:Minimum=0
	Failures int32 `json:"failures,omitempty"`

	// restoreDuration, for a full-restore verification, is how long the restore into the sandbox
	// took, from the restore's creation to its completion (objects and, where the driver restores
	// them, volume data): a measured recovery time of this Backup.
	// +optional
	RestoreDuration *metav1.Duration `json:"restoreDuration,omitempty"`
}

// VerificationResultRef locates a BackupVerifyResult.
type VerificationResultRef struct {
	// +required
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// Backup is one backup artifact of an application: a stable thing to list and restore from. It
// carries no ownerReference to the BackupJob that made it; deleting it runs the owning driver's
// finalizer, which deletes the artifact. The Backups of one application are listed with the field
// selectors spec.applicationRef.kind and spec.applicationRef.name, or with the labels
// backups.cozystack.io/application-kind and backups.cozystack.io/application-name. A driver
// watches only the Backups of its own strategy kind, with the field selectors
// spec.strategyRef.apiGroup and spec.strategyRef.kind.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=bk,categories=coffer
// +kubebuilder:validation:XValidation:rule="self.spec == oldSelf.spec",message="spec is immutable"
// +kubebuilder:selectablefield:JSONPath=`.spec.planRef.name`
// +kubebuilder:selectablefield:JSONPath=`.spec.applicationRef.apiGroup`
// +kubebuilder:selectablefield:JSONPath=`.spec.applicationRef.kind`
// +kubebuilder:selectablefield:JSONPath=`.spec.applicationRef.name`
// +kubebuilder:selectablefield:JSONPath=`.spec.strategyRef.apiGroup`
// +kubebuilder:selectablefield:JSONPath=`.spec.strategyRef.kind`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Application",type=string,JSONPath=`.spec.applicationRef.name`
// +kubebuilder:printcolumn:name="Taken",type=date,JSONPath=`.spec.takenAt`
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.status.artifact.sizeBytes`
// +kubebuilder:printcolumn:name="Verified",type=string,JSONPath=`.status.conditions[?(@.type=="Verified")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Backup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec BackupSpec `json:"spec"`
	// +optional
	Status BackupStatus `json:"status,omitempty"`
}

// BackupList is a list of Backups.
// +kubebuilder:object:root=true
type BackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Backup `json:"items"`
}
