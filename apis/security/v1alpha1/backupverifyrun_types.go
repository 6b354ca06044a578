package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Backend is where the backup under verification lives.
// +kubebuilder:validation:Enum=velero;etcd-snapshot;coffer
type Backend string

const (
	BackendVelero       Backend = "velero"
	BackendEtcdSnapshot Backend = "etcd-snapshot"
	// BackendCoffer verifies a backups.cozystack.io Backup, whatever driver made it:
	// checksum-only reads the artifact its status records, full-restore restores it through the
	// driver contract (a RestoreJob into the sandbox).
	BackendCoffer Backend = "coffer"
)

// Mode is how deeply a backup is verified.
// +kubebuilder:validation:Enum=checksum-only;full-restore
type Mode string

const (
	// ModeChecksumOnly recomputes the SHA-256 of the payload and compares it with the recorded one.
	ModeChecksumOnly Mode = "checksum-only"
	// ModeFullRestore (velero and coffer backends) restores into a sandbox namespace and diffs it
	// with the backup.
	ModeFullRestore Mode = "full-restore"
)

// SandboxSuffix is the suffix every full-restore sandbox namespace must carry.
const SandboxSuffix = "-bvsandbox"

// RunPhase is the state of a BackupVerifyRun: Pending (implicit at create), Running, Succeeded, Failed.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed
type RunPhase string

const (
	RunPending   RunPhase = "Pending"
	RunRunning   RunPhase = "Running"
	RunSucceeded RunPhase = "Succeeded"
	RunFailed    RunPhase = "Failed"
)

// IsTerminal reports whether the run has finished; terminal runs are never touched again.
func (p RunPhase) IsTerminal() bool { return p == RunSucceeded || p == RunFailed }

// FieldRunPhase is the run's selectable field status.phase: the runs in flight are selected by
// the API server (FieldRunPhase!=Succeeded,FieldRunPhase!=Failed) rather than listed whole.
const FieldRunPhase = "status.phase"

// BackupRef names the backup to verify.
type BackupRef struct {
	// name is the velero.io Backup name (velero backend), the backups.cozystack.io Backup name
	// (coffer backend) or the snapshot file, relative to --etcd-snapshot-dir (etcd-snapshot
	// backend).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// namespace is the namespace of the velero.io Backup (unset: "velero") or of the
	// backups.cozystack.io Backup (unset: the run's namespace).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`

	// storageLocation, for the velero backend, is the BackupStorageLocation the backup is expected
	// in (ugallu's field): a backup stored elsewhere is not verified (the run fails, saying where
	// it is). Unset: wherever Velero stored it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	StorageLocation string `json:"storageLocation,omitempty"`

	// node, for the etcd-snapshot backend, is the node whose snapshot directory holds the snapshot
	// (Coffer's addition): on an HA control plane each node saves its own. The check runs as a
	// short-lived pod on that node. Unset: the node the verifier runs on.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	Node string `json:"node,omitempty"`
}

// BackupVerifyRunSpec is one verification. It is immutable once created.
// +kubebuilder:validation:XValidation:rule="self.backend == 'etcd-snapshot' || !has(self.backupRef.node)",message="backupRef.node is only for the etcd-snapshot backend"
// +kubebuilder:validation:XValidation:rule="self.backend != 'etcd-snapshot' || self.mode == 'checksum-only'",message="full-restore is supported only by the velero and coffer backends"
// +kubebuilder:validation:XValidation:rule="self.mode != 'full-restore' || has(self.sandboxNamespace)",message="sandboxNamespace is required for full-restore"
type BackupVerifyRunSpec struct {
	// backend is velero or etcd-snapshot.
	// +required
	Backend Backend `json:"backend"`

	// backupRef names the backup to verify.
	// +required
	BackupRef BackupRef `json:"backupRef"`

	// mode is checksum-only (unset) or full-restore.
	// +optional
	// +kubebuilder:default=checksum-only
	Mode Mode `json:"mode,omitempty"`

	// sandboxNamespace is the namespace a full-restore restores into. It must end in -bvsandbox
	// (enforced by a ValidatingAdmissionPolicy) and must not exist yet: the verifier creates it,
	// labels it with the run's UID, and deletes it afterwards.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	SandboxNamespace string `json:"sandboxNamespace,omitempty"`

	// timeout bounds the whole run; past it the run ends with a timeout finding and cleanup.
	// Unset means 15m, as with ugallu.
	// +optional
	// +kubebuilder:default="15m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// ResultReference names a BackupVerifyResult in the run's namespace.
type ResultReference struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// ResultName is the name of the run's Result, or "" before it has one.
func (s *BackupVerifyRunStatus) ResultName() string {
	if s.ResultRef == nil {
		return ""
	}
	return s.ResultRef.Name
}

// BackupVerifyRunStatus is the observed state of a run.
type BackupVerifyRunStatus struct {
	// phase is Pending (implicit), Running, Succeeded or Failed.
	// +optional
	Phase RunPhase `json:"phase,omitempty"`

	// startTime is when the run entered Running.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// completionTime is when the run reached a terminal phase.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// resultRef names the BackupVerifyResult of this run, in the same namespace.
	// +optional
	ResultRef *ResultReference `json:"resultRef,omitempty"`

	// worstSeverity repeats the worst severity of the run's findings.
	// +optional
	WorstSeverity Severity `json:"worstSeverity,omitempty"`

	// message summarises the outcome.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Message string `json:"message,omitempty"`

	// conditions of the run.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// BackupVerifyRun is one scheduled or ad-hoc verification of a backup.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=bvr,categories=coffer
// +kubebuilder:validation:XValidation:rule="self.spec == oldSelf.spec",message="spec is immutable"
// +kubebuilder:selectablefield:JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Backend",type=string,JSONPath=`.spec.backend`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Worst",type=string,JSONPath=`.status.worstSeverity`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BackupVerifyRun struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec BackupVerifyRunSpec `json:"spec"`
	// +optional
	Status BackupVerifyRunStatus `json:"status,omitempty"`
}

// BackupVerifyRunList is a list of BackupVerifyRuns.
// +kubebuilder:object:root=true
type BackupVerifyRunList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BackupVerifyRun `json:"items"`
}

// CofferBackup is the backups.cozystack.io Backup a run of the coffer backend verifies: its
// backupRef, in the run's namespace unless backupRef.namespace says another.
func (r *BackupVerifyRun) CofferBackup() types.NamespacedName {
	ns := r.Spec.BackupRef.Namespace
	if ns == "" {
		ns = r.Namespace
	}
	return types.NamespacedName{Namespace: ns, Name: r.Spec.BackupRef.Name}
}
