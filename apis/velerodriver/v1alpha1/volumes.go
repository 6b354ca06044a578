package v1alpha1

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
)

// KindVolumeData is the kind of what driver-velero records in a Backup's
// status.underlyingResources: the data of the volumes its Velero backup holds beside the objects.
const KindVolumeData = "VeleroVolumeData"

// Volume data methods: how Velero took a volume's data.
const (
	// VolumeMethodFileSystem: Velero's file-system backup (a PodVolumeBackup) read the volume
	// through the pod that mounts it.
	VolumeMethodFileSystem = "FileSystem"
	// VolumeMethodDataMover: a CSI snapshot of the volume moved to the storage location (a
	// DataUpload).
	VolumeMethodDataMover = "DataMover"
)

// VolumeData is the record of a Backup's volume data (status.underlyingResources, with apiVersion
// velerodriver.backups.cozystack.io/v1alpha1 and kind VeleroVolumeData). It lets a verifier or a
// catalog find each volume's snapshot in Velero's repository without the Velero objects that
// produced it.
//
// +kubebuilder:object:generate=false
type VolumeData struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Volumes are the volumes whose data the Velero backup holds, in a stable order.
	Volumes []VolumeRecord `json:"volumes"`
}

// VolumeRecord is one volume's data in a Velero backup.
//
// +kubebuilder:object:generate=false
type VolumeRecord struct {
	// Method is VolumeMethodFileSystem or VolumeMethodDataMover.
	Method string `json:"method"`
	// Namespace is the volume's namespace; Pod and PodVolume name the pod and its volume that
	// file-system backup read; PersistentVolumeClaim names the claim a data mover snapshot was
	// taken of, PersistentVolumeClaimUID the claim either read (when the volume was a claim).
	Namespace                string `json:"namespace"`
	Pod                      string `json:"pod,omitempty"`
	PodVolume                string `json:"podVolume,omitempty"`
	PersistentVolumeClaim    string `json:"persistentVolumeClaim,omitempty"`
	PersistentVolumeClaimUID string `json:"persistentVolumeClaimUID,omitempty"`
	// Uploader is the uploader that wrote the data ("kopia"); StorageLocation the Velero
	// storage location whose repository for the volume's namespace holds it (Velero keeps one
	// repository per namespace, location and uploader); Repository is Velero's repository
	// identifier when it recorded one (older releases); SnapshotID is the snapshot of the data in
	// that repository (empty when the volume was empty or its backup failed).
	Uploader        string `json:"uploader,omitempty"`
	StorageLocation string `json:"storageLocation,omitempty"`
	Repository      string `json:"repository,omitempty"`
	SnapshotID      string `json:"snapshotID,omitempty"`
	// Bytes is the volume data's size as the uploader counted it.
	Bytes int64 `json:"bytes"`
	// Phase is Velero's phase of the volume's backup (Completed when its data is stored), and
	// Source the Velero object that recorded it (a PodVolumeBackup or DataUpload name).
	Phase  string `json:"phase"`
	Source string `json:"source"`
}

// Raw encodes d as a Backup's status.underlyingResources, with its apiVersion and kind set.
func (d VolumeData) Raw() (*runtime.RawExtension, error) {
	d.APIVersion, d.Kind = GroupVersion.String(), KindVolumeData
	if d.Volumes == nil {
		d.Volumes = []VolumeRecord{}
	}
	b, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	return &runtime.RawExtension{Raw: b}, nil
}

// VolumeDataOf reads the volume data record of a Backup's status.underlyingResources. ok is false
// when raw is empty or is another kind of record; a record of this kind that does not parse is an
// error.
func VolumeDataOf(raw *runtime.RawExtension) (d VolumeData, ok bool, err error) {
	if raw == nil || len(raw.Raw) == 0 {
		return d, false, nil
	}
	var head struct{ APIVersion, Kind string }
	if err := json.Unmarshal(raw.Raw, &head); err != nil {
		return d, false, fmt.Errorf("underlyingResources is not a JSON object: %w", err)
	}
	if head.APIVersion != GroupVersion.String() || head.Kind != KindVolumeData {
		return d, false, nil
	}
	if err := json.Unmarshal(raw.Raw, &d); err != nil {
		return d, false, fmt.Errorf("underlyingResources of kind %s: %w", KindVolumeData, err)
	}
	return d, true, nil
}

// RestoreClaimsModifier is the name of the Velero resource modifier ConfigMap, in a strategy's
// Velero namespace, that driver-velero's restores apply when their strategy's restoreTemplate names
// none: it unbinds each restored PersistentVolumeClaim from the PersistentVolume it had, so that
// the claim gets a new volume for its data. A restore confined to a namespace restores no
// PersistentVolume (cluster-scoped), and a claim still naming its old volume would wait for it
// forever. RestoreClaimsModifierRules is its content (data key RestoreClaimsModifierKey).
const (
	RestoreClaimsModifier    = "coffer-restore-claims"
	RestoreClaimsModifierKey = "rules.yaml"
	// A merge patch: null removes a field, and removing one that is absent is no error.
	RestoreClaimsModifierRules = `version: v1
resourceModifierRules:
- conditions:
    groupResource: persistentvolumeclaims
  mergePatches:
  - patchData: |
      {"spec": {"volumeName": null}, "metadata": {"annotations": {"pv.kubernetes.io/bind-completed": null, "pv.kubernetes.io/bound-by-controller": null, "volume.kubernetes.io/selected-node": null}}}
`
)
