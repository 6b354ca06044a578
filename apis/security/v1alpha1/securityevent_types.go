package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// The SecurityEvent is ugallu's (ninsun-labs/ugallu, securityevents.security.ugallu.io): the CRD
// every ugallu operator emits into and ugallu's attestor reads and attests. These types are
// written from that CRD's schema, field for field, so that an event Coffer writes is valid under
// ugallu's CRD and an event ugallu writes is valid under Coffer's. Coffer's copy of the CRD is an
// optional install (deploy/verifier/securityevents) for clusters that do not run ugallu.
//
// Where Coffer's schema is looser than ugallu's, it is on purpose and only there: the subject's
// per-kind snapshots that Coffer never writes (pod, node, workload, ...) are kept as free objects
// rather than ugallu's 7,000 lines of per-kind schema, so an event ugallu wrote is stored whole.

// EventClass is the taxonomy class of a SecurityEvent.
// +kubebuilder:validation:Enum=Detection;Anomaly;PolicyViolation;Forensic;Compliance;Audit
type EventClass string

const (
	// ClassDetection records a finding of high or critical severity.
	ClassDetection EventClass = "Detection"
	// ClassAnomaly records a control that could not be carried out.
	ClassAnomaly EventClass = "Anomaly"
	// ClassPolicyViolation records a policy broken (not emitted by the verifier).
	ClassPolicyViolation EventClass = "PolicyViolation"
	// ClassForensic records forensic evidence (not emitted by the verifier).
	ClassForensic EventClass = "Forensic"
	// ClassCompliance records a control carried out: a verification started or passed.
	ClassCompliance EventClass = "Compliance"
	// ClassAudit records that something happened, with no verdict: a verification that had
	// nothing to compare its checksum with.
	ClassAudit EventClass = "Audit"
)

// SecurityEvent types emitted by the backup verifier, once per run each (ugallu's catalog).
const (
	EventBackupVerifyStarted   = "BackupVerifyStarted"
	EventBackupVerifyCompleted = "BackupVerifyCompleted"
	EventBackupVerifyMismatch  = "BackupVerifyMismatch"
	EventBackupVerifyFailed    = "BackupVerifyFailed"
)

// EventClassOf returns the class of a backup-verify event type, as ugallu's backup-verify
// classifies it: Mismatch is a Detection, Failed an Anomaly, Started and Completed Compliance.
func EventClassOf(eventType string) EventClass {
	switch eventType {
	case EventBackupVerifyMismatch:
		return ClassDetection
	case EventBackupVerifyFailed:
		return ClassAnomaly
	default:
		return ClassCompliance
	}
}

// EventClassFor is EventClassOf, except that a BackupVerifyCompleted run that compared its
// checksum with nothing (basis None) is an Audit: it happened, and it proves no compliance.
func EventClassFor(eventType string, basis ChecksumBasis) EventClass {
	if eventType == EventBackupVerifyCompleted && basis == ChecksumNone {
		return ClassAudit
	}
	return EventClassOf(eventType)
}

// SubjectKind is the kind of object a SecurityEvent is about.
// +kubebuilder:validation:Enum=Pod;Container;Node;ServiceAccount;Secret;ConfigMap;Namespace;Service;EndpointSlice;Deployment;StatefulSet;DaemonSet;Job;CronJob;Role;ClusterRole;RoleBinding;ClusterRoleBinding;NetworkPolicy;CiliumNetworkPolicy;Ingress;Gateway;MutatingWebhookConfiguration;ValidatingWebhookConfiguration;CustomResourceDefinition;APIService;CertificateSigningRequest;Cluster;External
type SubjectKind string

// SubjectKindCluster is the subject of cluster-wide facts, the backup-verify events among them.
const SubjectKindCluster SubjectKind = "Cluster"

// SourceRef names the controller that emitted an event.
type SourceRef struct {
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// +required
	Kind string `json:"kind"`
	// +required
	Name string `json:"name"`
	// +optional
	Version string `json:"version,omitempty"`
	// +optional
	Instance string `json:"instance,omitempty"`
}

// ClusterIdentity says which cluster emitted an event.
type ClusterIdentity struct {
	// +optional
	ClusterName string `json:"clusterName,omitempty"`
	// +optional
	ClusterID string `json:"clusterID,omitempty"`
}

// ClusterSubject is the snapshot of a subject of kind Cluster.
type ClusterSubject struct {
	// +optional
	ClusterID string `json:"clusterID,omitempty"`
	// +optional
	ClusterName string `json:"clusterName,omitempty"`
	// +optional
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// +optional
	DistroProvider string `json:"distroProvider,omitempty"`
}

// ExternalSubject is a subject outside the cluster.
type ExternalSubject struct {
	// +required
	Kind string `json:"kind"`
	// +required
	Identity string `json:"identity"`
	// +optional
	Source string `json:"source,omitempty"`
}

// EventSubject is the object an event is about, with at most one per-kind snapshot matching its
// kind (or unresolved when none could be taken).
type EventSubject struct {
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// +required
	Kind SubjectKind `json:"kind"`
	// +required
	Name string `json:"name"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	UID types.UID `json:"uid,omitempty"`
	// +optional
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// +optional
	OwnerReferences []metav1.OwnerReference `json:"ownerReferences,omitempty"`

	// Cluster is the snapshot of a subject of kind Cluster.
	// +optional
	Cluster *ClusterSubject `json:"cluster,omitempty"`
	// External is the snapshot of a subject of kind External.
	// +optional
	External *ExternalSubject `json:"external,omitempty"`

	// The snapshots of the other kinds, which Coffer never writes, kept whole as written.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	Pod *runtime.RawExtension `json:"pod,omitempty"`
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	Container *runtime.RawExtension `json:"container,omitempty"`
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	Node *runtime.RawExtension `json:"node,omitempty"`
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	ServiceAccount *runtime.RawExtension `json:"serviceAccount,omitempty"`
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	Secret *runtime.RawExtension `json:"secret,omitempty"`
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	ConfigMap *runtime.RawExtension `json:"configMap,omitempty"`
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	NamespaceData *runtime.RawExtension `json:"namespaceData,omitempty"`
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	Service *runtime.RawExtension `json:"service,omitempty"`
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	EndpointSlice *runtime.RawExtension `json:"endpointSlice,omitempty"`
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	Workload *runtime.RawExtension `json:"workload,omitempty"`
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	Job *runtime.RawExtension `json:"job,omitempty"`
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	Role *runtime.RawExtension `json:"role,omitempty"`
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	RoleBinding *runtime.RawExtension `json:"roleBinding,omitempty"`
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	NetworkPolicy *runtime.RawExtension `json:"networkPolicy,omitempty"`
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	Ingress *runtime.RawExtension `json:"ingress,omitempty"`
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	WebhookConfig *runtime.RawExtension `json:"webhookConfig,omitempty"`
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	CRD *runtime.RawExtension `json:"crd,omitempty"`
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	APIService *runtime.RawExtension `json:"apiService,omitempty"`
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	CSR *runtime.RawExtension `json:"csr,omitempty"`

	// Partial, Tombstone and Unresolved mark a snapshot taken in part, of a deleted object, or not
	// at all.
	// +optional
	Partial bool `json:"partial,omitempty"`
	// +optional
	Tombstone bool `json:"tombstone,omitempty"`
	// +optional
	Unresolved bool `json:"unresolved,omitempty"`
}

// EvidenceRef points at an immutable blob.
type EvidenceRef struct {
	// +required
	MediaType string `json:"mediaType"`
	// +required
	URL string `json:"url"`
	// +optional
	SHA256 string `json:"sha256,omitempty"`
	// +optional
	Size int64 `json:"size,omitempty"`
}

// SecurityEventSpec is one security-relevant event. It is immutable once created.
type SecurityEventSpec struct {
	// class is the taxonomy class.
	// +required
	Class EventClass `json:"class"`

	// type is the catalog type, e.g. BackupVerifyMismatch (UpperCamel, as every type of ugallu's
	// catalog).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Za-z0-9]*$`
	Type string `json:"type"`

	// severity is info, low, medium, high or critical.
	// +required
	Severity Severity `json:"severity"`

	// clusterIdentity says which cluster emitted the event.
	// +required
	ClusterIdentity ClusterIdentity `json:"clusterIdentity"`

	// source is the controller that emitted the event.
	// +required
	Source SourceRef `json:"source"`

	// subject is what the event is about.
	// +required
	Subject EventSubject `json:"subject"`

	// detectedAt is when the emitter observed it.
	// +required
	DetectedAt metav1.Time `json:"detectedAt"`

	// signals are machine-readable facts (for backup-verify: run.namespace, run.name,
	// backup.backend, backup.mode, backup.refName, backup.refNamespace, findings.count,
	// findings.first.code, and Coffer's additions).
	// +optional
	// +kubebuilder:validation:MaxProperties=128
	Signals map[string]string `json:"signals,omitempty"`

	// evidence references immutable blobs.
	// +optional
	Evidence []EvidenceRef `json:"evidence,omitempty"`

	// parents are the events this one follows from (a run's terminal event names its Started).
	// +optional
	Parents []corev1.ObjectReference `json:"parents,omitempty"`

	// correlationID groups related events (one run's events share it).
	// +optional
	CorrelationID string `json:"correlationID,omitempty"`

	// traceparent is a W3C traceparent.
	// +optional
	TraceParent string `json:"traceparent,omitempty"`
}

// EventPhase is an event's lifecycle phase; empty means just emitted.
// +kubebuilder:validation:Enum=Active;Attested;Archived
type EventPhase string

// SecurityEventStatus is written by the event's consumers (ugallu's attestor), never by its
// emitter.
type SecurityEventStatus struct {
	// +optional
	Phase EventPhase `json:"phase,omitempty"`
	// +optional
	Acknowledged bool `json:"acknowledged,omitempty"`
	// +optional
	AcknowledgedBy string `json:"acknowledgedBy,omitempty"`
	// +optional
	AcknowledgedAt *metav1.Time `json:"acknowledgedAt,omitempty"`
	// +optional
	AttestationDigest string `json:"attestationDigest,omitempty"`
	// +optional
	AttestationBundleRef *corev1.ObjectReference `json:"attestationBundleRef,omitempty"`
	// +optional
	ArchivedAt *metav1.Time `json:"archivedAt,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SecurityEvent is a cluster-scoped record of a security-relevant event; its spec is immutable.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=se,categories=coffer
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="self.spec == oldSelf.spec",message="spec is immutable"
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.class`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Severity",type=string,JSONPath=`.spec.severity`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Subject",type=string,JSONPath=`.spec.subject.name`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SecurityEvent struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec SecurityEventSpec `json:"spec"`
	// +optional
	Status SecurityEventStatus `json:"status,omitempty"`
}

// SecurityEventList is a list of SecurityEvents.
// +kubebuilder:object:root=true
type SecurityEventList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SecurityEvent `json:"items"`
}
