package driverkit

import (
	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/apis/cachetrim"
)

// CacheAnnotations are the annotations driverkit reads on the objects a driver caches: the origin
// of an imported Backup (the catalog) and an administrator's adoption of one. A driver's manager
// keeps these, and its own, in its cache transform (cachetrim.Transform) and drops the rest.
var CacheAnnotations = cachetrim.Keep{
	backupsv1.AnnotationSourceCluster:     64,
	backupsv1.AnnotationSourceClusterName: 253,
	backupsv1.AnnotationSourceUID:         64,
	backupsv1.AnnotationRecord:            4096,
	backupsv1.AnnotationAdopted:           8,
}
