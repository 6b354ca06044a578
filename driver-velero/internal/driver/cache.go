package driver

import (
	"path"
	"slices"
	"strings"

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
// (driverkit.TrimBackup), of their driverMetadata only where the Velero backup is (trimBackup); of the Velero
// backups only those not settled (settle.go). The driver
// writes cached objects only with Patch and Status().Patch, and a Backup's status only from a copy
// read uncached, so nothing dropped is written back.
func CacheOptions() cache.Options {
	return driverkit.CacheBackupsOf(cache.Options{DefaultTransform: cachetrim.Transform(cacheAnnotations, trimBackup),
		ByObject: map[client.Object]cache.ByObject{&velerov1.Backup{}: {Label: unsettledSelector()}}}, Kind)
}

var (
	// locationMetadata is alike on every Backup of a backup storage location.
	locationMetadata = []string{names.MetaNamespace, names.MetaStorageLocation}
	// The catalog reuses the checksum it measured of an imported Backup's tarball (catalog.go).
	trimShared = driverkit.TrimOptions{Shared: slices.Concat(locationMetadata, []string{names.MetaBackupName}), ImportedChecksum: true}.Trimmer()
	trimOwn    = driverkit.TrimOptions{Shared: locationMetadata, Own: []string{names.MetaBackupName}, ImportedChecksum: true}.Trimmer()
)

// nameFromArtifact stands in a cached Backup's driverMetadata for the name of its Velero backup
// where its artifact's URI ends in that name (artifactURI). It is no object's name (a name has no
// "<"), so no Backup written by anyone but the trim means it.
const nameFromArtifact = "<from the artifact>"

// trimBackup cuts a Backup as driverkit.TrimBackup does, keeping where its Velero backup is. The
// Velero backup's name is each Backup's own, so the map holding it would be too (about 300 bytes a
// Backup); where the artifact's URI, which the cache keeps anyway, names the same backup, the name
// is replaced by nameFromArtifact and the map, alike on every Backup of a location, is shared.
// veleroKey reads the name back from the URI.
func trimBackup(obj any) {
	b, ok := obj.(*backupsv1.Backup)
	if !ok {
		return
	}
	name, ok := b.Spec.DriverMetadata[names.MetaBackupName]
	if !ok || name == "" || b.Status.Artifact == nil || nameInArtifact(b.Status.Artifact.URI) != name {
		trimOwn(b)
		return
	}
	// b is the decoder's own copy, and trimShared copies what it keeps into a map of its own.
	b.Spec.DriverMetadata[names.MetaBackupName] = nameFromArtifact
	trimShared(b)
}

// nameInArtifact is the name of the Velero backup whose tarball uri locates
// (.../backups/<name>/<name>.tar.gz, artifactURI), or "".
func nameInArtifact(uri string) string {
	dir, file := path.Split(uri)
	name, ok := strings.CutSuffix(file, ".tar.gz")
	if !ok || name == "" || path.Base(strings.TrimSuffix(dir, "/")) != name || path.Base(path.Dir(strings.TrimSuffix(dir, "/"))) != "backups" {
		return ""
	}
	return name
}
