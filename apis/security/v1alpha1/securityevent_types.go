package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// EventClass groups SecurityEvents for downstream consumers.
// +kubebuilder:validation:Enum=Audit;Compliance;Detection;Anomaly
type EventClass string

const (
	// ClassAudit records that something started or happened, with no verdict.
	ClassAudit EventClass = "Audit"
	// ClassCompliance records a control that passed (a backup verified clean).
	ClassCompliance EventClass = "Compliance"
	// ClassDetection records a finding of high or critical severity.
	ClassDetection EventClass = "Detection"
	// ClassAnomaly records a control that could not be carried out.
	ClassAnomaly EventClass = "Anomaly"
)

// SecurityEvent types emitted by the backup verifier, once per run each.
const (
	EventBackupVerifyStarted   = "BackupVerifyStarted"
	EventBackupVerifyCompleted = "BackupVerifyCompleted"
	EventBackupVerifyMismatch  = "BackupVerifyMismatch"
	EventBackupVerifyFailed    = "BackupVerifyFailed"
)

// EventClassOf returns the class of a backup-verify event type.
func EventClassOf(eventType string) EventClass {
	switch eventType {
	case EventBackupVerifyCompleted:
		return ClassCompliance
	case EventBackupVerifyMismatch:
		return ClassDetection
	case EventBackupVerifyFailed:
		return ClassAnomaly
	default:
		return ClassAudit
	}
}

// EventSubject is the object an event is about.
type EventSubject struct {
	// +optional
	// +kubebuilder:validation:MaxLength=253
	APIVersion string `json:"apiVersion,omitempty"`
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// +optional
	UID types.UID `json:"uid,omitempty"`
}

// SecurityEventSpec is one security-relevant event. It is immutable once created.
type SecurityEventSpec struct {
	// type is an UpperCamel event type, e.g. BackupVerifyMismatch.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Za-z0-9]*$`
	Type string `json:"type"`

	// class is Audit, Compliance, Detection or Anomaly.
	// +required
	Class EventClass `json:"class"`

	// severity is info, low, medium, high or critical.
	// +required
	Severity Severity `json:"severity"`

	// clusterID and clusterName identify the cluster that emitted the event.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ClusterID string `json:"clusterID,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ClusterName string `json:"clusterName,omitempty"`

	// source is the component that emitted the event, e.g. backup-verify.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Source string `json:"source"`

	// subject is the object the event is about.
	// +required
	Subject EventSubject `json:"subject"`

	// occurredAt is when the event happened.
	// +required
	OccurredAt metav1.Time `json:"occurredAt"`

	// message says what happened, for a human.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`

	// attributes are machine-readable details (backend, mode, finding code, counts).
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Attributes map[string]string `json:"attributes,omitempty"`
}

// SecurityEvent is a cluster-scoped, immutable record of a security-relevant event.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=se,categories=coffer
// +kubebuilder:validation:XValidation:rule="self.spec == oldSelf.spec",message="spec is immutable"
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.class`
// +kubebuilder:printcolumn:name="Severity",type=string,JSONPath=`.spec.severity`
// +kubebuilder:printcolumn:name="Subject",type=string,JSONPath=`.spec.subject.name`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SecurityEvent struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec SecurityEventSpec `json:"spec"`
}

// SecurityEventList is a list of SecurityEvents.
// +kubebuilder:object:root=true
type SecurityEventList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SecurityEvent `json:"items"`
}
