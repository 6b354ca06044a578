// Package v1alpha1 holds the backup-verify API, group security.ugallu.io: BackupVerifyRun,
// BackupVerifyResult and SecurityEvent, with severity ordering and finding codes.
//
// +kubebuilder:object:generate=true
// +groupName=security.ugallu.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group is the API group of the backup-verify kinds.
const Group = "security.ugallu.io"

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: Group, Version: "v1alpha1"}
	// SchemeBuilder registers the kinds of this package with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(func(s *runtime.Scheme) error {
		s.AddKnownTypes(GroupVersion,
			&BackupVerifyRun{}, &BackupVerifyRunList{},
			&BackupVerifyResult{}, &BackupVerifyResultList{},
			&SecurityEvent{}, &SecurityEventList{},
			&BackupVerifyPolicy{}, &BackupVerifyPolicyList{},
		)
		metav1.AddToGroupVersion(s, GroupVersion)
		return nil
	})
	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
