package driver

import (
	"context"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"k8s.io/apimachinery/pkg/runtime"

	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/velerokit/volumes"
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

// volumeRecords lists the volume data of Velero backup vb (volumes.Records), read uncached from
// Velero's namespace once the backup has ended.
func (d *Driver) volumeRecords(ctx context.Context, vb *velerov1.Backup) (veleroapi.VolumeData, error) {
	records, err := volumes.Records(ctx, d.uncached(), vb)
	return veleroapi.VolumeData{Volumes: records}, err
}
