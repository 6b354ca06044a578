package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BackupJobPhase summarises the conditions of a BackupJob.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed
type BackupJobPhase string

const (
	BackupJobPending   BackupJobPhase = "Pending"
	BackupJobRunning   BackupJobPhase = "Running"
	BackupJobSucceeded BackupJobPhase = "Succeeded"
	BackupJobFailed    BackupJobPhase = "Failed"
)

// BackupJobSpec is one backup run. It is immutable once created.
type BackupJobSpec struct {
	// planRef is the Plan that triggered this run, if any.
	// +optional
	// +kubebuilder:validation:XValidation:rule="size(self.name) <= 253",message="planRef.name must be at most 253 characters"
	PlanRef *corev1.LocalObjectReference `json:"planRef,omitempty"`

	// applicationRef is the application to back up. An unset apiGroup means "apps.cozystack.io".
	// +required
	// +kubebuilder:validation:XValidation:rule="size(self.name) > 0 && size(self.name) <= 253",message="applicationRef.name must be 1-253 characters"
	// +kubebuilder:validation:XValidation:rule="size(self.kind) > 0 && size(self.kind) <= 63",message="applicationRef.kind must be 1-63 characters"
	// +kubebuilder:validation:XValidation:rule="!has(self.apiGroup) || size(self.apiGroup) <= 253",message="applicationRef.apiGroup must be at most 253 characters"
	ApplicationRef corev1.TypedLocalObjectReference `json:"applicationRef"`

	// backupClassName is the BackupClass resolved for the application.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	BackupClassName string `json:"backupClassName"`
}

// BackupJobStatus is written by the driver that claims the run (and by core for Accepted=False).
type BackupJobStatus struct {
	// observedGeneration is the generation last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase is Pending, Running, Succeeded or Failed.
	// +optional
	Phase BackupJobPhase `json:"phase,omitempty"`

	// backupRef is the Backup this run created.
	// +optional
	BackupRef *corev1.LocalObjectReference `json:"backupRef,omitempty"`

	// startedAt is when a driver first picked the run up.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`

	// completedAt is when the run reached Succeeded or Failed.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`

	// message is a human-readable summary, set on failure.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Message string `json:"message,omitempty"`

	// strategy is what the claiming driver resolved the BackupClass to when it claimed the run. The
	// driver finishes the run with it, so editing or deleting the class mid-run changes nothing for
	// runs already claimed (contract rule BJ-10).
	// +optional
	Strategy *RunStrategy `json:"strategy,omitempty"`

	// conditions: Accepted (a driver claimed the run) and Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RunStrategy records the strategy a run was claimed with.
type RunStrategy struct {
	// backupClassName is the BackupClass the strategy was resolved from.
	// +required
	// +kubebuilder:validation:MaxLength=253
	BackupClassName string `json:"backupClassName"`

	// strategyRef is the driver strategy the run uses.
	// +required
	// +kubebuilder:validation:XValidation:rule="(!has(self.apiGroup) || size(self.apiGroup) <= 253) && size(self.kind) <= 63 && size(self.name) <= 253",message="strategyRef: apiGroup and name must be at most 253 characters, kind at most 63"
	StrategyRef corev1.TypedLocalObjectReference `json:"strategyRef"`

	// parameters are the class parameters for that strategy at claim time. Class parameters are
	// not secret (contract GEN-10): they are shown to the tenant who owns the run. Bounded as a
	// BackupClass's are (MaxParameters, MaxParameterKeyLength, MaxParameterValueLength).
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) > 0 && size(k) <= 253 && size(self[k]) <= 4096)",message="parameters: keys must be 1-253 characters and values at most 4096 characters"
	Parameters map[string]string `json:"parameters,omitempty"`
}

// BackupJob is a single execution of a backup, created by a Plan or by hand.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=bj,categories=coffer
// +kubebuilder:validation:XValidation:rule="self.spec == oldSelf.spec",message="spec is immutable"
// +kubebuilder:selectablefield:JSONPath=`.spec.planRef.name`
// +kubebuilder:selectablefield:JSONPath=`.spec.applicationRef.apiGroup`
// +kubebuilder:selectablefield:JSONPath=`.spec.applicationRef.kind`
// +kubebuilder:selectablefield:JSONPath=`.spec.applicationRef.name`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Application",type=string,JSONPath=`.spec.applicationRef.name`
// +kubebuilder:printcolumn:name="Plan",type=string,JSONPath=`.spec.planRef.name`
// +kubebuilder:printcolumn:name="Backup",type=string,JSONPath=`.status.backupRef.name`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BackupJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec BackupJobSpec `json:"spec"`
	// +optional
	Status BackupJobStatus `json:"status,omitempty"`
}

// BackupJobList is a list of BackupJobs.
// +kubebuilder:object:root=true
type BackupJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BackupJob `json:"items"`
}

// Bounds of a strategy's parameters (BackupClass spec.strategies[].parameters, and the copy a run
// records in status.strategy.parameters), enforced at admission by the CRDs' schemas.
const (
	MaxParameters           = 64
	MaxParameterKeyLength   = 253
	MaxParameterValueLength = 4096
)
