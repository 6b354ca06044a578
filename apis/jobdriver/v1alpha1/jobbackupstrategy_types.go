package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// JobBackupStrategySpec says how the Job driver runs a backup, restore or cleanup as a batch/v1 Job.
//
// The pod templates are stored without an OpenAPI schema (three full pod schemas would make the
// CRD too large) and are checked when rendered: every string is a Go template rendered with
// .Application, .Parameters, .Mode (and .Backup on restore), and the result must decode as a pod
// template. Rendering fails closed.
type JobBackupStrategySpec struct {
	// template is the pod template of the backup Job.
	// +required
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	Template corev1.PodTemplateSpec `json:"template"`

	// restoreTemplate is the pod template of the restore Job. Unset means template, rendered with
	// .Mode "restore".
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	RestoreTemplate *corev1.PodTemplateSpec `json:"restoreTemplate,omitempty"`

	// cleanupTemplate is the pod template of the Job run when a Backup is deleted, to delete its
	// artifact. Unset means the artifact stays when its Backup is deleted.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	CleanupTemplate *corev1.PodTemplateSpec `json:"cleanupTemplate,omitempty"`

	// backoffLimit is the Jobs' backoffLimit. Unset means 0 (a backup is not retried blindly).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10
	BackoffLimit *int32 `json:"backoffLimit,omitempty"`

	// activeDeadlineSeconds is the Jobs' activeDeadlineSeconds. Unset means 3600.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds,omitempty"`

	// ttlSecondsAfterFinished is the Jobs' ttlSecondsAfterFinished. Unset keeps finished Jobs
	// until their BackupJob or RestoreJob is deleted.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
}

// JobBackupStrategy is a cluster-scoped strategy run by the Coffer Job driver.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=backups
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type JobBackupStrategy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec JobBackupStrategySpec `json:"spec"`
}

// JobBackupStrategyList is a list of JobBackupStrategies.
// +kubebuilder:object:root=true
type JobBackupStrategyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []JobBackupStrategy `json:"items"`
}
