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

	// artifact says how the agent stores the artifact: compression and encryption. The driver
	// passes it to the agent's containers as environment variables (COFFER_COMPRESSION_LEVEL,
	// COFFER_ENCRYPTION_SECRET, and the keys by secretKeyRef); coffer-agent honours them, other
	// agents may ignore them. Unset means coffer-agent's defaults: zstd level 1, no encryption.
	// +optional
	Artifact *ArtifactOptions `json:"artifact,omitempty"`
}

// ArtifactOptions is how the agent stores artifacts.
type ArtifactOptions struct {
	// compressionLevel is the zstd level of new backups, on zstd's scale: 1 (fastest) to 22
	// (smallest); coffer-agent maps it onto its encoder's four speeds (1-2, 3-5, 6-9, 10-22).
	// 0 stores the tar uncompressed. Unset means 1, zstd's fastest (earlier agents used 3). Restores
	// read any level.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self >= 0 && self <= 22",message="compressionLevel must be 0 (no compression) to 22"
	CompressionLevel *int32 `json:"compressionLevel,omitempty"`

	// encryption encrypts new backups with age, client-side, to the public keys of a Secret, and
	// decrypts restores with its private keys. Unset means no encryption (restores still read
	// encrypted artifacts when the Secret is set).
	// +optional
	Encryption *ArtifactEncryption `json:"encryption,omitempty"`
}

// ArtifactEncryption names the Secret of an artifact's keys.
type ArtifactEncryption struct {
	// secretName is a Secret in the namespace of each run (the application's) with the keys
	// "recipients" (age public keys, one per line; backups encrypt to them) and "identities" (age
	// private keys, one per line; restores decrypt with them). Backup Jobs see only the
	// recipients, restore Jobs only the identities, each as an environment variable read from the
	// Secret (secretKeyRef); the Job spec never holds a key.
	// +required
	// +kubebuilder:validation:XValidation:rule="size(self) > 0 && size(self) <= 253",message="secretName must be 1-253 characters"
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="secretName must be a DNS subdomain name"
	SecretName string `json:"secretName"`
}

// JobBackupStrategy is a cluster-scoped strategy run by the Coffer Job driver.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=jbs,categories=coffer
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
