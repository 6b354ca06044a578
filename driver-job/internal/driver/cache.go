package driver

import (
	"github.com/coffer-backup/coffer/apis/cachetrim"
	"github.com/coffer-backup/coffer/driver-job/internal/jobs"
	"github.com/coffer-backup/coffer/driver-job/internal/names"
	"github.com/coffer-backup/coffer/driverkit"
)

// cacheAnnotations are the annotations the driver reads: driverkit's, on its Jobs the run they
// serve and their TTL, and on Backups the time of the next artifact check.
var cacheAnnotations = cachetrim.Merge(driverkit.CacheAnnotations, cachetrim.Keep{
	jobs.AnnotationRun:        320,
	jobs.AnnotationTTL:        20,
	names.AnnotationNextCheck: 64,
})

// cacheTransform trims every cached object to what the driver reads (docs/security.md, "Bounds
// and caches"): no managedFields and only cacheAnnotations; Backups cut to what the kit and the
// artifact checks decide from (driverkit.TrimBackup), of their driverMetadata only the bucket the
// backup ran with (backupScope). The driver writes cached objects only with Patch and
// Status().Patch, and a Backup's status only from a copy read uncached, so nothing dropped is
// written back.
func cacheTransform() func(any) (any, error) {
	return cachetrim.Transform(cacheAnnotations, driverkit.BackupTrimmer(names.MetaParamPrefix+ParamBucket))
}
