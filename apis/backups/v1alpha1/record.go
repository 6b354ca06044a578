package v1alpha1

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// An ArtifactRecord is the small document a driver stores next to each artifact (contract rule
// BK-11): enough of the Backup to list it, restore from it and delete it again in a cluster that
// has only the storage, after the cluster that took it is gone. It is JSON, versioned by
// RecordFormat, and never holds a secret.
//
// Records are read from storage that other clusters and people write: ParseArtifactRecord treats
// one as hostile input.
//
// +kubebuilder:object:generate=false
type ArtifactRecord struct {
	// APIVersion and Kind identify the document: RecordAPIVersion and RecordKind.
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Format is the record's format version, RecordFormat when written by this package. Readers
	// refuse a version they do not know.
	Format int `json:"format"`

	// SourceCluster is the cluster the Backup was taken in.
	SourceCluster SourceCluster `json:"sourceCluster"`
	// Namespace, Name and UID are the Backup's in its source cluster. UID is empty in a record
	// written before the Backup existed (driver-job's agent writes it while the Backup is still
	// to be made); the label backups.cozystack.io/backupjob-uid then names the run.
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid,omitempty"`
	// Labels are the Backup's labels the contract defines (application, Plan, BackupJob UID);
	// others are left out.
	Labels map[string]string `json:"labels,omitempty"`
	// Spec is the Backup's spec: application, Plan, strategy, time and driver metadata.
	Spec BackupSpec `json:"spec"`
	// Artifact is the Backup's status.artifact: URI, stored size and checksum.
	Artifact BackupArtifact `json:"artifact"`
}

// SourceCluster identifies a cluster.
//
// +kubebuilder:object:generate=false
type SourceCluster struct {
	// ID is the UID of the cluster's kube-system namespace: set once when the cluster is made and
	// never reused.
	ID string `json:"id"`
	// Name is the name an admin gave the cluster (a component flag), if any.
	Name string `json:"name,omitempty"`
}

// The identity and bounds of records.
const (
	RecordAPIVersion = "backups.cozystack.io/v1alpha1"
	RecordKind       = "ArtifactRecord"
	RecordFormat     = 1
	// MaxRecordBytes bounds a record; ParseArtifactRecord refuses a longer one.
	MaxRecordBytes = 64 << 10
)

// recordLabels are the Backup labels a record keeps.
var recordLabels = []string{LabelApplicationKind, LabelApplicationName, LabelPlan, LabelBackupJobUID}

// NewArtifactRecord is the record of a Backup that has its artifact, taken in cluster.
func NewArtifactRecord(b *Backup, cluster SourceCluster) (*ArtifactRecord, error) {
	if b.Status.Artifact == nil {
		return nil, fmt.Errorf("Backup %s/%s has no artifact to record", b.Namespace, b.Name)
	}
	r := &ArtifactRecord{
		APIVersion: RecordAPIVersion, Kind: RecordKind, Format: RecordFormat,
		SourceCluster: cluster, Namespace: b.Namespace, Name: b.Name, UID: b.UID,
		Spec: *b.Spec.DeepCopy(), Artifact: *b.Status.Artifact,
	}
	for _, k := range recordLabels {
		if v, ok := b.Labels[k]; ok {
			if r.Labels == nil {
				r.Labels = map[string]string{}
			}
			r.Labels[k] = v
		}
	}
	return r, r.Validate()
}

// Marshal encodes the record after validating it.
func (r *ArtifactRecord) Marshal() ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	if len(data) > MaxRecordBytes {
		return nil, fmt.Errorf("the record of Backup %s/%s is %d bytes, more than %d", r.Namespace, r.Name, len(data), MaxRecordBytes)
	}
	return append(data, '\n'), nil
}

// ParseArtifactRecord decodes and validates a record: at most MaxRecordBytes, one JSON object
// with no unknown field, of a format this package reads, with valid names, a Backup spec that has
// its required fields, and an artifact with a URI and a well-formed checksum.
func ParseArtifactRecord(data []byte) (*ArtifactRecord, error) {
	r, err := decodeRecord(data)
	if err != nil {
		return nil, err
	}
	return r, r.Validate()
}

// ParseRecordTemplate decodes and validates a record template (Kit.RecordTemplate): a record
// without its artifact, which its backup process fills in. It is checked as the record it will
// become, with a stand-in artifact and time, so that a bad template fails before anything is
// stored.
func ParseRecordTemplate(data []byte) (*ArtifactRecord, error) {
	r, err := decodeRecord(data)
	if err != nil {
		return nil, err
	}
	check := *r
	check.Spec.TakenAt = metav1.Now()
	check.Artifact = BackupArtifact{URI: "s3://bucket/key"}
	return r, check.Validate()
}

// decodeRecord decodes one record: at most MaxRecordBytes, one JSON object, no unknown field.
func decodeRecord(data []byte) (*ArtifactRecord, error) {
	if len(data) > MaxRecordBytes {
		return nil, fmt.Errorf("the record is %d bytes, more than %d", len(data), MaxRecordBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	r := &ArtifactRecord{}
	if err := dec.Decode(r); err != nil {
		return nil, fmt.Errorf("the record is not an ArtifactRecord: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("the record has data after its JSON object")
	}
	return r, nil
}

var checksumPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// IsChecksum tells whether s is a checksum as status.artifact.checksum holds it: "sha256:" and 64
// lower-case hex digits (the CRD's pattern).
func IsChecksum(s string) bool { return checksumPattern.MatchString(s) }

// Validate checks what a cluster relies on when it imports the record.
func (r *ArtifactRecord) Validate() error {
	switch {
	case r.APIVersion != RecordAPIVersion || r.Kind != RecordKind:
		return fmt.Errorf("the record is %s %s, not %s %s", r.APIVersion, r.Kind, RecordAPIVersion, RecordKind)
	case r.Format != RecordFormat:
		return fmt.Errorf("the record has format %d; this version of Coffer reads format %d", r.Format, RecordFormat)
	case r.SourceCluster.ID == "":
		return fmt.Errorf("the record names no source cluster")
	}
	if errs := validation.IsDNS1123Label(r.Namespace); len(errs) > 0 {
		return fmt.Errorf("the record's namespace %q is not a namespace name: %v", r.Namespace, errs)
	}
	if errs := validation.IsDNS1123Subdomain(r.Name); len(errs) > 0 {
		return fmt.Errorf("the record's name %q is not an object name: %v", r.Name, errs)
	}
	for k, v := range r.Labels {
		if !slices.Contains(recordLabels, k) {
			return fmt.Errorf("the record has the label %s, which records do not carry (only %v)", k, recordLabels)
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return fmt.Errorf("the record's label %s=%q is not a label value: %v", k, v, errs)
		}
	}
	s := r.Spec
	switch {
	case s.ApplicationRef.Kind == "" || s.ApplicationRef.Name == "":
		return fmt.Errorf("the record names no application")
	case s.StrategyRef.APIGroup == nil || *s.StrategyRef.APIGroup == "" || s.StrategyRef.Kind == "" || s.StrategyRef.Name == "":
		return fmt.Errorf("the record names no strategy (apiGroup, kind and name)")
	case s.TakenAt.IsZero():
		return fmt.Errorf("the record has no takenAt")
	case len(s.DriverMetadata) > 64:
		return fmt.Errorf("the record has %d driverMetadata entries, more than 64", len(s.DriverMetadata))
	case r.Artifact.URI == "" || len(r.Artifact.URI) > 2048:
		return fmt.Errorf("the record's artifact URI is empty or longer than 2048 characters")
	case r.Artifact.SizeBytes < 0:
		return fmt.Errorf("the record's artifact size is negative")
	case r.Artifact.Checksum != "" && !IsChecksum(r.Artifact.Checksum):
		return fmt.Errorf("the record's artifact checksum %q is not sha256:<64 hex digits>", r.Artifact.Checksum)
	}
	return nil
}
