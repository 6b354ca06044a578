package driverkit

import (
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// BackupSelector selects the Backups of strategy kind k, server-side: the Backup CRD's selectable
// fields spec.strategyRef.apiGroup and spec.strategyRef.kind.
func (k StrategyKind) BackupSelector() fields.Selector {
	return fields.SelectorFromSet(fields.Set{"spec.strategyRef.apiGroup": k.Group, "spec.strategyRef.kind": k.Kind})
}

// CacheBackupsOf makes a driver's manager cache only the Backups of its strategy kind k: a
// driver reads no other driver's Backups, so it neither holds nor watches them (another
// driver's Backups are, to it, as if they did not exist: a RestoreJob of one is left to its
// driver, a name a catalog finds taken by one is skipped). opts.ByObject gains the selector.
func CacheBackupsOf(opts cache.Options, k StrategyKind) cache.Options {
	by := make(map[client.Object]cache.ByObject, len(opts.ByObject)+1)
	for o, b := range opts.ByObject {
		by[o] = b
	}
	by[&backupsv1.Backup{}] = cache.ByObject{Field: k.BackupSelector()}
	opts.ByObject = by
	return opts
}
