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
)
