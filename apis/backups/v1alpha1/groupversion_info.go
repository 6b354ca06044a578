// Package v1alpha1 holds the core Coffer backup API, group backups.cozystack.io: Plan, BackupClass,
// BackupJob, Backup and RestoreJob, and the helpers of its contract with strategy drivers.
//
// The package imports only k8s.io/api, k8s.io/apimachinery and the standard library, so that a
// third-party driver can vendor it alone.
//
// +kubebuilder:object:generate=true
// +groupName=backups.cozystack.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group is the API group of the core backup kinds.
const Group = "backups.cozystack.io"

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: Group, Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&Plan{}, &PlanList{},
		&BackupClass{}, &BackupClassList{},
		&BackupJob{}, &BackupJobList{},
		&Backup{}, &BackupList{},
		&RestoreJob{}, &RestoreJobList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
