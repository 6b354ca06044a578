package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BackupVerifyPolicySpec says which backups the verifier verifies on its own, and how.
//
// +kubebuilder:validation:XValidation:rule="!has(self.backend) || self.backend == 'coffer' || (!has(self.namespaceSelector) && !has(self.planSelector))",message="namespaceSelector and planSelector select Coffer Plans: only for backend coffer"
// +kubebuilder:validation:XValidation:rule="has(self.backend) && self.backend == 'velero' || !has(self.velero)",message="velero is only for backend velero"
// +kubebuilder:validation:XValidation:rule="has(self.backend) && self.backend == 'etcd-snapshot' || !has(self.etcdSnapshots)",message="etcdSnapshots is only for backend etcd-snapshot"
// +kubebuilder:validation:XValidation:rule="!has(self.backend) || self.backend != 'etcd-snapshot' || !has(self.fullRestore)",message="etcd snapshots are verified checksum-only: fullRestore is not supported"
// +kubebuilder:validation:XValidation:rule="!has(self.backend) || self.backend == 'coffer' || has(self.runNamespace)",message="runNamespace is required for backends velero and etcd-snapshot"
type BackupVerifyPolicySpec struct {
	// backend is what the policy verifies: coffer (default: the Backups of the Plans it selects),
	// velero (Velero's own backups, e.g. those of a Velero Schedule, in velero's namespace) or
	// etcd-snapshot (the snapshots saved into the verifier's --etcd-snapshot-dir).
	// +optional
	// +kubebuilder:default=coffer
	Backend Backend `json:"backend,omitempty"`

	// namespaceSelector selects the namespaces whose Plans the policy covers; unset means all.
	// Backend coffer only.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// planSelector selects the Plans the policy covers by their labels; unset means all. Backend
	// coffer only.
	// +optional
	PlanSelector *metav1.LabelSelector `json:"planSelector,omitempty"`

	// velero selects the Velero backups of a backend velero policy.
	// +optional
	Velero *VeleroBackupSource `json:"velero,omitempty"`

	// etcdSnapshots selects the snapshot files of a backend etcd-snapshot policy.
	// +optional
	EtcdSnapshots *EtcdSnapshotSource `json:"etcdSnapshots,omitempty"`

	// runNamespace is where the runs of a velero or etcd-snapshot policy are made (and their
	// Results); the runs of a coffer policy are made in each Backup's namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	RunNamespace string `json:"runNamespace,omitempty"`

	// checksumOnly verifies every new backup checksum-only (a coffer Backup once Ready, a Velero
	// backup once Completed, a snapshot once its file has settled). Default true.
	// +optional
	// +kubebuilder:default=true
	ChecksumOnly *bool `json:"checksumOnly,omitempty"`

	// fullRestore restores every Nth new Backup of each covered Plan (backend velero: of each
	// Velero Schedule, by its label velero.io/schedule-name; backups of no schedule count as one)
	// into a sandbox; unset means never.
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

// VeleroBackupSource selects Velero backups.
type VeleroBackupSource struct {
	// namespace is Velero's namespace, where its Backups are. Default velero.
	// +optional
	// +kubebuilder:default=velero
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace,omitempty"`

	// backupSelector selects the Velero Backups by their labels, e.g. velero.io/schedule-name for
	// the backups of one Schedule; unset means all.
	// +optional
	BackupSelector *metav1.LabelSelector `json:"backupSelector,omitempty"`
}

// EtcdSnapshotSource selects etcd snapshot files.
type EtcdSnapshotSource struct {
	// pattern selects files of the snapshot directory by name (shell pattern, Go's path.Match;
	// no directories). Default "*". Sidecars (*.sha256) and files being written (*.part, *.tmp)
	// are never runs of their own.
	// +optional
	// +kubebuilder:default="*"
	// +kubebuilder:validation:MaxLength=253
	Pattern string `json:"pattern,omitempty"`

	// settle is how long a snapshot file must be left unchanged before it is verified, so that a
	// snapshot still being written is not taken for a truncated one. Default 2m.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	Settle *metav1.Duration `json:"settle,omitempty"`

	// nodeSelector selects the nodes whose snapshot directories the policy verifies (Coffer's
	// addition): on an HA control plane each node saves its own snapshots. The verifier of the
	// shipped install (--etcd-check-pods) lists each selected node's directory with a short-lived
	// pod on that node, every few minutes, and checks each snapshot there. Default: the
	// control-plane nodes (label node-role.kubernetes.io/control-plane). At most 16 nodes. A
	// verifier that reads snapshots itself lists only its own directory and ignores it.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
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

	// backups counts the backups a velero or etcd-snapshot policy covers (Velero backups, or
	// snapshot files).
	// +optional
	Backups int32 `json:"backups,omitempty"`

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

// BackupVerifyPolicy makes the verifier verify, as they appear, the Backups (backups.cozystack.io)
// of the Plans it selects, Velero's own backups, or etcd snapshots: checksum-only for every new
// one, full-restore for every Nth. Its runs are created under deterministic names (in each
// Backup's namespace, or the policy's runNamespace), labelled with the policy, and deleted with
// their Results and SecurityEvents once their backup is gone.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=bvp,categories=coffer
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="a BackupVerifyPolicy's name must be at most 63 characters: its runs carry it as a label value"
// +kubebuilder:printcolumn:name="Backend",type=string,JSONPath=`.spec.backend`
// +kubebuilder:printcolumn:name="Plans",type=integer,JSONPath=`.status.plans`
// +kubebuilder:printcolumn:name="Backups",type=integer,JSONPath=`.status.backups`,priority=1
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
