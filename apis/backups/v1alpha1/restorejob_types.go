package v1alpha1

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RestoreJobPhase summarises the conditions of a RestoreJob.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed
type RestoreJobPhase string

const (
	RestoreJobPending   RestoreJobPhase = "Pending"
	RestoreJobRunning   RestoreJobPhase = "Running"
	RestoreJobSucceeded RestoreJobPhase = "Succeeded"
	RestoreJobFailed    RestoreJobPhase = "Failed"
)

// RestoreJobSpec is one restore from a Backup. It is immutable once created.
type RestoreJobSpec struct {
	// backupRef is the Backup to restore from, in the same namespace.
	// +required
	// +kubebuilder:validation:XValidation:rule="size(self.name) > 0 && size(self.name) <= 253",message="backupRef.name must be 1-253 characters"
	BackupRef corev1.LocalObjectReference `json:"backupRef"`

	// targetApplicationRef is the application to restore into; unset means the Backup's application.
	// +optional
	// +kubebuilder:validation:XValidation:rule="size(self.name) > 0 && size(self.name) <= 253",message="targetApplicationRef.name must be 1-253 characters"
	// +kubebuilder:validation:XValidation:rule="size(self.kind) > 0 && size(self.kind) <= 63",message="targetApplicationRef.kind must be 1-63 characters"
	TargetApplicationRef *corev1.TypedLocalObjectReference `json:"targetApplicationRef,omitempty"`

	// options are restore options. Standard ones are read alike by every driver and by the
	// admission policies shipped with core: targetNamespace (OptionTargetNamespace) restores into
	// another namespace, admitted (coffer-restore-target) only when the creating user may create
	// RestoreJobs there; restoreRBAC (OptionRestoreRBAC) "true" restores the backup's Roles,
	// RoleBindings and ServiceAccounts, which are left out otherwise, admitted (coffer-restore-rbac)
	// only when the creating user may create and bind them in the target namespace; inert
	// (OptionInert). The others are driver-specific.
	// Bounded (MaxOptions, MaxOptionKeyLength, MaxOptionValueLength): every controller holds every
	// RestoreJob in memory.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) > 0 && size(k) <= 63 && size(self[k]) <= 1024)",message="options: keys must be 1-63 characters and values at most 1024 characters"
	Options map[string]string `json:"options,omitempty"`
}

// RestoreJobStatus is written by the driver that owns the Backup's strategy.
type RestoreJobStatus struct {
	// observedGeneration is the generation last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase is Pending, Running, Succeeded or Failed.
	// +optional
	Phase RestoreJobPhase `json:"phase,omitempty"`

	// startedAt is when a driver first picked the restore up.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`

	// completedAt is when the restore reached Succeeded or Failed.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`

	// message is a human-readable summary, set on failure.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Message string `json:"message,omitempty"`

	// items counts what the restore did with the backup's items, when the driver can tell
	// (contract RJ-10): an in-place restore over objects that still exist restores nothing.
	// +optional
	Items *RestoreItems `json:"items,omitempty"`

	// conditions: Accepted and Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RestoreItems counts the items of a restore by what happened to them.
type RestoreItems struct {
	// restored items were created or updated.
	Restored int64 `json:"restored"`
	// skipped items were left alone, most often because they already existed.
	Skipped int64 `json:"skipped"`
	// failed items could not be restored.
	Failed int64 `json:"failed"`
	// compared items were compared by content, after the restore, with the backup's own record
	// of them (driver-job: every file's path, size and SHA-256 against the manifest inside the
	// artifact), and matched. Zero when the driver compares nothing; a verifier then says so.
	// A restore whose content differs fails ContentMismatch (contract RJ-13).
	// +optional
	Compared int64 `json:"compared,omitempty"`
}

// RestoreJob is a single restore from a Backup, into the same or another application.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rj,categories=coffer
// +kubebuilder:validation:XValidation:rule="self.spec == oldSelf.spec",message="spec is immutable"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Backup",type=string,JSONPath=`.spec.backupRef.name`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RestoreJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec RestoreJobSpec `json:"spec"`
	// +optional
	Status RestoreJobStatus `json:"status,omitempty"`
}

// RestoreJobList is a list of RestoreJobs.
// +kubebuilder:object:root=true
type RestoreJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RestoreJob `json:"items"`
}

// Bounds of spec.options, enforced at admission by the CRD's schema. Every option a driver reads
// today is a namespace name or "true"/"false".
const (
	MaxOptions           = 32
	MaxOptionKeyLength   = 63
	MaxOptionValueLength = 1024
)

// OptionTargetNamespace is the standard restore option naming the namespace to restore into, when
// it is not the RestoreJob's own (contract RJ-5, RJ-9).
const OptionTargetNamespace = "targetNamespace"

// OptionInert is the standard restore option asking the driver to restore nothing that runs
// ("true"): no Pods, and workloads that start none where the driver can say so (contract RJ-12).
// The backup verifier sets it on the restores into its sandboxes, which also hold a ResourceQuota
// of zero pods, so a driver that ignores it cannot make a sandbox run anything either.
const OptionInert = "inert"

// OptionRestoreRBAC is the standard restore option asking the driver to restore the backup's Roles,
// RoleBindings and ServiceAccounts ("true"; "false" or unset leaves them out, any other value fails
// the run InvalidOption). A driver restores objects with its own rights, not its requester's, so
// the API server's RBAC escalation check never sees who asked: the admission policy
// RestoreRBACPolicy admits the option only from a user who may create those objects in the target
// namespace and bind and escalate roles there, and drivers run it only when that policy's binding
// existed when the RestoreJob was created (contract RJ-14). An inert restore restores none of
// them, whatever this option says.
const OptionRestoreRBAC = "restoreRBAC"

// RestoreRBACPolicy is the ValidatingAdmissionPolicy (and its binding) that authorizes
// spec.options.restoreRBAC.
const RestoreRBACPolicy = "coffer-restore-rbac"

// RestoresRBAC reports whether the RestoreJob asks for the backup's Roles, RoleBindings and
// ServiceAccounts, and an error naming the option when its value is neither "true" nor "false".
func (r *RestoreJob) RestoresRBAC() (bool, error) {
	switch v, set := r.Spec.Options[OptionRestoreRBAC]; {
	case !set || v == "false":
		return false, nil
	case v == "true":
		return true, nil
	default:
		return false, fmt.Errorf("spec.options.%s is %.64q; it must be \"true\" or \"false\"", OptionRestoreRBAC, v)
	}
}

// RestoreTargetPolicy is the ValidatingAdmissionPolicy (and its binding) that authorizes a restore
// into another namespace.
const RestoreTargetPolicy = "coffer-restore-target"

// TargetNamespace is the namespace the restore writes into: spec.options.targetNamespace, or the
// RestoreJob's own namespace.
func (r *RestoreJob) TargetNamespace() string {
	if t := r.Spec.Options[OptionTargetNamespace]; t != "" {
		return t
	}
	return r.Namespace
}
