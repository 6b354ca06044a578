package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ApplicationSelector selects application types by API group and kind.
type ApplicationSelector struct {
	// apiGroup is the API group of the application. Unset means "apps.cozystack.io".
	// +optional
	// +kubebuilder:validation:MaxLength=253
	APIGroup *string `json:"apiGroup,omitempty"`

	// kind is the kind of the application (e.g. VirtualMachine, MariaDB).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`
}

// BackupClassStrategy binds one application type to a driver strategy and its parameters.
type BackupClassStrategy struct {
	// strategyRef references the driver-specific strategy object (cluster-scoped), e.g.
	// velerodriver.backups.cozystack.io VeleroBackupStrategy. Its apiGroup says which driver runs it.
	// +required
	// +kubebuilder:validation:XValidation:rule="has(self.apiGroup) && size(self.apiGroup) > 0 && size(self.apiGroup) <= 253",message="strategyRef.apiGroup is required: it names the driver"
	// +kubebuilder:validation:XValidation:rule="size(self.kind) > 0 && size(self.kind) <= 63",message="strategyRef.kind must be 1-63 characters"
	// +kubebuilder:validation:XValidation:rule="size(self.name) > 0 && size(self.name) <= 253",message="strategyRef.name must be 1-253 characters"
	StrategyRef corev1.TypedLocalObjectReference `json:"strategyRef"`

	// application says which application types this strategy applies to.
	// +required
	Application ApplicationSelector `json:"application"`

	// parameters are strategy-specific parameters such as backupStorageLocationName. They must not
	// hold secret values: they are copied into Backup metadata.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) > 0 && size(k) <= 253 && size(self[k]) <= 4096)",message="parameters: keys must be 1-253 characters and values at most 4096 characters"
	Parameters map[string]string `json:"parameters,omitempty"`
}

// BackupClassSpec lists the strategies of a class, one per application type.
type BackupClassSpec struct {
	// strategies are tried in order; the first whose application selector matches wins.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	Strategies []BackupClassStrategy `json:"strategies"`
}

// BackupClass is a cluster-scoped, reusable set of backup strategies and parameters per application type.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=bclass,categories=coffer
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BackupClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec BackupClassSpec `json:"spec"`
}

// BackupClassList is a list of BackupClasses.
// +kubebuilder:object:root=true
type BackupClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BackupClass `json:"items"`
}
