package driver

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	velerov2 "github.com/vmware-tanzu/velero/pkg/apis/velero/v2alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
)

// volumeData is the record of the volume data Velero backup vb holds (the Backup's
// status.underlyingResources, veleroapi.VolumeData, of volumeRecords). A backup of objects alone
// records an empty list: that it holds no volume data is worth saying too.
func (d *Driver) volumeData(ctx context.Context, vb *velerov1.Backup) (*runtime.RawExtension, error) {
	data, err := d.volumeRecords(ctx, vb)
	if err != nil {
		return nil, err
	}
	return data.Raw()
}

// volumeRecords lists the volume data of Velero backup vb: one entry per PodVolumeBackup
// (file-system backup) and per DataUpload (a CSI snapshot moved to the storage location) that
// Velero labelled with vb's UID, read uncached from Velero's namespace once the backup has ended.
func (d *Driver) volumeRecords(ctx context.Context, vb *velerov1.Backup) (veleroapi.VolumeData, error) {
	sel := client.MatchingLabels{velerov1.BackupUIDLabel: string(vb.UID)}
	var data veleroapi.VolumeData
	pvbs := &velerov1.PodVolumeBackupList{}
	if err := d.uncached().List(ctx, pvbs, client.InNamespace(vb.Namespace), sel); err != nil {
		return data, fmt.Errorf("listing the pod volume backups of velero backup %s: %w", vb.Name, err)
	}
	for _, p := range pvbs.Items {
		data.Volumes = append(data.Volumes, veleroapi.VolumeRecord{
			Method: veleroapi.VolumeMethodFileSystem, Namespace: p.Spec.Pod.Namespace, Pod: p.Spec.Pod.Name, PodVolume: p.Spec.Volume,
			PersistentVolumeClaimUID: p.Spec.Tags["pvc-uid"], Uploader: p.Spec.UploaderType, StorageLocation: p.Spec.BackupStorageLocation, Repository: p.Spec.RepoIdentifier,
			SnapshotID: p.Status.SnapshotID, Bytes: p.Status.Progress.TotalBytes, Phase: string(p.Status.Phase), Source: p.Name,
		})
	}
	dus := &velerov2.DataUploadList{}
	switch err := d.uncached().List(ctx, dus, client.InNamespace(vb.Namespace), sel); {
	case meta.IsNoMatchError(err): // a Velero without data movement
	case err != nil:
		return data, fmt.Errorf("listing the data uploads of velero backup %s: %w", vb.Name, err)
	}
	for _, u := range dus.Items {
		data.Volumes = append(data.Volumes, veleroapi.VolumeRecord{
			Method: veleroapi.VolumeMethodDataMover, Namespace: u.Spec.SourceNamespace, PersistentVolumeClaim: u.Spec.SourcePVC,
			Uploader: u.Spec.DataMover, StorageLocation: u.Spec.BackupStorageLocation, SnapshotID: u.Status.SnapshotID, Bytes: u.Status.Progress.TotalBytes,
			Phase: string(u.Status.Phase), Source: u.Name,
		})
	}
	slices.SortFunc(data.Volumes, func(a, b veleroapi.VolumeRecord) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.PodVolume, b.PodVolume),
			cmp.Compare(a.PersistentVolumeClaim, b.PersistentVolumeClaim), cmp.Compare(a.Source, b.Source))
	})
	return data, nil
}
