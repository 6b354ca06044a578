package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// DefaultVeleroNamespace is where Velero runs when a strategy names no namespace.
const DefaultVeleroNamespace = "velero"

// VeleroTemplate is a templated Velero object spec.
type VeleroTemplate struct {
	// spec is a velero.io/v1 BackupSpec (for backupTemplate) or RestoreSpec (for restoreTemplate).
	// Every string in it is a Go template rendered with .Application, .Parameters and .Mode (and
	// .Backup on restore); rendering fails closed.
	// +required
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	Spec runtime.RawExtension `json:"spec"`
}

// VeleroBackupStrategySpec says how the Velero driver backs up and restores an application type.
type VeleroBackupStrategySpec struct {
	// veleroNamespace is the namespace Velero runs in. Unset means "velero".
	// +optional
	// +kubebuilder:validation:MaxLength=63
	VeleroNamespace string `json:"veleroNamespace,omitempty"`

	// backupTemplate renders the velero.io/v1 Backup spec of each BackupJob. The driver sets the
	// storage location from the BackupClass parameter backupStorageLocationName when the template
	// names none.
	// +required
	BackupTemplate VeleroTemplate `json:"backupTemplate"`

	// restoreTemplate renders the velero.io/v1 Restore spec of each RestoreJob. Unset means a
	// restore of everything in the backup, restricted to the application's namespace.
	// +optional
	RestoreTemplate *VeleroTemplate `json:"restoreTemplate,omitempty"`

	// deadline fails a BackupJob or RestoreJob whose Velero object is still in progress after this
	// long. Unset means 1h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	Deadline *metav1.Duration `json:"deadline,omitempty"`
}

// VeleroBackupStrategy is a cluster-scoped strategy run by the Coffer Velero driver.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=vbs,categories=coffer
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VeleroBackupStrategy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec VeleroBackupStrategySpec `json:"spec"`
}

// VeleroBackupStrategyList is a list of VeleroBackupStrategies.
// +kubebuilder:object:root=true
type VeleroBackupStrategyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VeleroBackupStrategy `json:"items"`
}
