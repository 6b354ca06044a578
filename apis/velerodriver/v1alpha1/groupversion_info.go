// Package v1alpha1 holds the strategy kind of the Coffer Velero driver, group
// velerodriver.backups.cozystack.io: VeleroBackupStrategy.
//
// +kubebuilder:object:generate=true
// +groupName=velerodriver.backups.cozystack.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group is the API group of the Velero driver; Kind is its strategy kind.
const (
	Group = "velerodriver.backups.cozystack.io"
	Kind  = "VeleroBackupStrategy"
)

var (
	// GroupVersion is the group and version of this package.
	GroupVersion = schema.GroupVersion{Group: Group, Version: "v1alpha1"}
	// SchemeBuilder registers the kinds of this package with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(func(s *runtime.Scheme) error {
		s.AddKnownTypes(GroupVersion, &VeleroBackupStrategy{}, &VeleroBackupStrategyList{})
		metav1.AddToGroupVersion(s, GroupVersion)
		return nil
	})
	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Driver metadata keys driver-velero writes on the Backups it makes: where the Velero backup is.
// The backup verifier reads them to find a Backup's tarball.
const (
	MetaBackupName      = "veleroBackupName"
	MetaNamespace       = "veleroNamespace"
	MetaStorageLocation = "backupStorageLocationName"
	// MetaSourceNamespace is, on a Backup imported from another cluster (contract BK-12) into
	// another namespace, the namespace the Velero backup holds: restores map it onto their target.
	MetaSourceNamespace = "sourceNamespace"
)

// OptionVolumeData is driver-velero's restore option for the data of the backup's volumes: "false"
// restores their claims without it (Velero's restorePVs false: no data mover restore, no volume
// from a snapshot; the claims are left to bind as new ones would), "true" or unset as the backup
// holds it. The backup verifier sets "false" on the inert restores of its full-restore
// verifications, whose volume phase restores the data into a sandbox of its own and compares it:
// without it, the data was moved a second time into the object sandbox, where nothing reads it.
const OptionVolumeData = "volumeData"

// AnnotationRecord on a velero.io Backup holds the record of the Coffer Backup it makes (contract
// BK-11), without its artifact: Velero stores the annotation with the backup's metadata in its
// storage location, and a cluster that syncs that location reads it back (its catalog measures the
// artifact again).
const AnnotationRecord = "velerodriver.backups.cozystack.io/record"
