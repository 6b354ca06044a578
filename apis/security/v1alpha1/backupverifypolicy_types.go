package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BackupVerifyPolicySpec says which Backups the verifier verifies on its own, and how.
type BackupVerifyPolicySpec struct {
	// namespaceSelector selects the namespaces whose Plans the policy covers; unset means all.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// planSelector selects the Plans the policy covers by their labels; unset means all.
	// +optional
	PlanSelector *metav1.LabelSelector `json:"planSelector,omitempty"`

	// checksumOnly verifies every new Ready Backup of a covered Plan checksum-only. Default true.
	// +optional
	// +kubebuilder:default=true
	ChecksumOnly *bool `json:"checksumOnly,omitempty"`

	// fullRestore restores every Nth new Backup of each covered Plan into a sandbox; unset means
	// never.
	// +optional
	FullRestore *FullRestorePolicy `json:"fullRestore,omitempty"`

	// maxConcurrentRuns bounds the policy's runs that are not terminal. Default 2.
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxConcurrentRuns *int32 `json:"maxConcurrentRuns,omitempty"`

	// runTimeout is each run's timeout. Unset means the run's default (30m).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	RunTimeout *metav1.Duration `json:"runTimeout,omitempty"`
}

// FullRestorePolicy is how often a policy proves its Backups restorable.
type FullRestorePolicy struct {
	// every restores the first new Backup of a Plan, then each Backup taken when the Plan's
	// last every-1 Backups were not restored: 1 restores every Backup, 7 one in seven.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Every int32 `json:"every"`
}

// BackupVerifyPolicyStatus is what the policy did.
type BackupVerifyPolicyStatus struct {
	// observedGeneration is the generation of the spec last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// plans counts the Plans the policy covers.
	// +optional
	Plans int32 `json:"plans,omitempty"`

	// activeRuns counts the policy's runs that are not terminal.
	// +optional
	ActiveRuns int32 `json:"activeRuns,omitempty"`

	// pendingBackups counts the runs waiting to be created (a Backup waiting for both a checksum
	// and a full-restore counts twice) because of maxConcurrentRuns.
	// +optional
	PendingBackups int32 `json:"pendingBackups,omitempty"`

	// conditions: Ready (True while the policy's selectors are valid and it creates runs).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// BackupVerifyPolicy makes the verifier verify the Backups (backups.cozystack.io) of the Plans it
// selects: checksum-only for every new Backup, full-restore for every Nth. Its runs are created in
// each Backup's namespace under deterministic names, labelled with the policy, and deleted with
// their Results and SecurityEvents once their Backup is gone.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=bvp,categories=coffer
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="a BackupVerifyPolicy's name must be at most 63 characters: its runs carry it as a label value"
// +kubebuilder:printcolumn:name="Plans",type=integer,JSONPath=`.status.plans`
// +kubebuilder:printcolumn:name="Active",type=integer,JSONPath=`.status.activeRuns`
// +kubebuilder:printcolumn:name="Pending",type=integer,JSONPath=`.status.pendingBackups`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BackupVerifyPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec BackupVerifyPolicySpec `json:"spec"`
	// +optional
	Status BackupVerifyPolicyStatus `json:"status,omitempty"`
}

// BackupVerifyPolicyList is a list of BackupVerifyPolicies.
// +kubebuilder:object:root=true
type BackupVerifyPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BackupVerifyPolicy `json:"items"`
}
