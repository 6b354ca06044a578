package driver

import (
	"sigs.k8s.io/controller-runtime/pkg/cache"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/apis/cachetrim"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/internal/names"
	"github.com/coffer-backup/coffer/driverkit"
)

// cacheAnnotations are the annotations the driver reads: driverkit's, and on Velero Backups and
// Restores the run they serve, the record (the catalog) and the checksum.
var cacheAnnotations = cachetrim.Merge(driverkit.CacheAnnotations, cachetrim.Keep{
	names.AnnotationRun:          320,
	veleroapi.AnnotationRecord:   backupsv1.MaxRecordBytes + 1, // one byte more, so that ParseArtifactRecord says it is too long
	backupsv1.AnnotationChecksum: 80,
})

// CacheOptions trim every cached object to what the driver reads (docs/security.md, "Bounds and
// caches"): no managedFields and only cacheAnnotations; of the Backups only those of the driver's
// strategy kind are cached. The driver writes cached objects only with Patch and Status().Patch,
// so nothing dropped is written back.
func CacheOptions() cache.Options {
	return driverkit.CacheBackupsOf(cache.Options{DefaultTransform: cachetrim.Transform(cacheAnnotations)}, Kind)
}
