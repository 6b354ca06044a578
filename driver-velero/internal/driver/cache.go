package driver

import (
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/apis/cachetrim"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/internal/names"
	"github.com/coffer-backup/coffer/driverkit"
)

// cacheAnnotations are the annotations the driver reads: driverkit's, and on Velero Backups and
// Restores the run they serve, the record (the catalog) and the checksum.
var cacheAnnotations = cachetrim.Merge(driverkit.CacheAnnotations, cachetrim.Keep{
	names.AnnotationRun:           320,
	names.AnnotationDeleteRequest: 64,
	veleroapi.AnnotationRecord:    backupsv1.MaxRecordBytes + 1, // one byte more, so that ParseArtifactRecord says it is too long
	backupsv1.AnnotationChecksum:  80,
})

// CacheOptions trim every cached object to what the driver reads (docs/security.md, "Bounds and
// caches"): no managedFields and only cacheAnnotations; of the Backups only those of the driver's
// strategy kind are cached, cut to what the kit and CheckArtifact decide from
// (driverkit.TrimBackup), of their driverMetadata only where the Velero backup is; of the Velero
// backups only those not settled (settle.go). The driver
// writes cached objects only with Patch and Status().Patch, and a Backup's status only from a copy
// read uncached, so nothing dropped is written back.
func CacheOptions() cache.Options {
	trim := driverkit.BackupTrimmerOwn([]string{names.MetaNamespace, names.MetaStorageLocation}, []string{names.MetaBackupName})
	return driverkit.CacheBackupsOf(cache.Options{DefaultTransform: cachetrim.Transform(cacheAnnotations, trim),
		ByObject: map[client.Object]cache.ByObject{&velerov1.Backup{}: {Label: unsettledSelector()}}}, Kind)
}
