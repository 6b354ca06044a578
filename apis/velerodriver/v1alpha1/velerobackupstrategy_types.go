package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
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

	// catalog, when set, makes this cluster import the Backups another cluster made with the
	// Velero driver into the storage locations this cluster's Velero reads: Velero syncs their
	// Velero backups from storage, each carrying its record (contract BK-11), and the driver keeps
	// one Backup per record of another cluster, naming this strategy (contract BK-12;
	// docs/disaster-recovery.md). Opt-in; unset imports nothing. Give one strategy per Velero
	// namespace a catalog.
	// +optional
	Catalog *VeleroCatalog `json:"catalog,omitempty"`
}

// VeleroCatalog is which synced Velero backups a catalog imports, and where.
type VeleroCatalog struct {
	// storageLocation limits the catalog to the Velero backups of one BackupStorageLocation in
	// veleroNamespace; empty imports those of every location. Make the recovery cluster's
	// locations ReadOnly: Velero then never deletes the source's data from them.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	StorageLocation string `json:"storageLocation,omitempty"`

	// namespaceMapping maps a record's namespace (in the source cluster) to the namespace its
	// Backup is imported into here; a namespace it does not name keeps its name. A namespace that
	// does not exist here is skipped (the sync never creates namespaces) and reported.
	// +optional
	// +kubebuilder:validation:MaxProperties=256
	NamespaceMapping map[string]backupsv1.NamespaceName `json:"namespaceMapping,omitempty"`

	// intervalSeconds is the time between two syncs (a Velero backup synced from storage also
	// starts one). Unset means 300.
	// +optional
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=86400
	IntervalSeconds *int32 `json:"intervalSeconds,omitempty"`
}

// VeleroBackupStrategyStatus is what the driver observed of a strategy.
type VeleroBackupStrategyStatus struct {
	// catalog is the outcome of the last catalog sync, when spec.catalog is set.
	// +optional
	Catalog *backupsv1.CatalogStatus `json:"catalog,omitempty"`

	// conditions: CatalogSynced (True after a sync that read every record; False with the reason
	// a sync failed or was incomplete).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// VeleroBackupStrategy is a cluster-scoped strategy run by the Coffer Velero driver.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=vbs,categories=coffer
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Catalog",type=string,JSONPath=`.status.conditions[?(@.type=="CatalogSynced")].status`
// +kubebuilder:printcolumn:name="Imported",type=integer,JSONPath=`.status.catalog.imported`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VeleroBackupStrategy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec VeleroBackupStrategySpec `json:"spec"`
	// +optional
	Status VeleroBackupStrategyStatus `json:"status,omitempty"`
}

// VeleroBackupStrategyList is a list of VeleroBackupStrategies.
// +kubebuilder:object:root=true
type VeleroBackupStrategyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VeleroBackupStrategy `json:"items"`
}
