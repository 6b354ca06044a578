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

	// retentionFloor is the administrator's lower bound on the retention of every Plan that names
	// this class: tenants own their Plans' retention but cannot lower it below the floor, so that a
	// tenant denied deleting Backups cannot destroy them through retention either.
	// +optional
	RetentionFloor *RetentionFloor `json:"retentionFloor,omitempty"`

	// namespaceSelector restricts the class to the namespaces whose labels it selects: a Plan or
	// BackupJob in any other namespace may not name it (refused at admission by the policy
	// coffer-backupclass-namespaces, and a resolution failure BackupClassNotAllowed at run time).
	// Unset selects every namespace; an empty selector ({}) selects every namespace too.
	// matchExpressions use the operators In, NotIn, Exists and DoesNotExist.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.matchLabels) || size(self.matchLabels) <= 32",message="namespaceSelector.matchLabels: at most 32 entries"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || size(self.matchExpressions) <= 32",message="namespaceSelector.matchExpressions: at most 32 entries"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'] && ((e.operator in ['In', 'NotIn']) == (has(e.values) && size(e.values) > 0)))",message="namespaceSelector.matchExpressions: operator must be In, NotIn, Exists or DoesNotExist; In and NotIn need values, Exists and DoesNotExist take none"
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
}

// RetentionFloor bounds from below what a Plan's retention may prune. Unset fields add nothing.
type RetentionFloor struct {
	// minKeepLast keeps at least the newest N usable Backups of each application, whatever the
	// Plan's keep rules and maxAge say.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	MinKeepLast *int32 `json:"minKeepLast,omitempty"`

	// minAge keeps every Backup younger than this duration (e.g. "168h"), whatever the Plan's
	// rules say: a Plan's maxAge below it acts as minAge.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	MinAge *metav1.Duration `json:"minAge,omitempty"`

	// deletionDelay holds a Backup that retention selects for this long before it is deleted (and
	// its driver deletes the artifact). Meanwhile the Plan lists it in status.pendingPrunes; a
	// Backup that retention no longer selects (the floor or the Plan changed) is not deleted.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	DeletionDelay *metav1.Duration `json:"deletionDelay,omitempty"`
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
