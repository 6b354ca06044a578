package driver

import backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"

// CacheTransform is the driver's cache transform, for tests that read as its cache does.
var CacheTransform = cacheTransform()

// Unremarkable is the driver's Kit.Unremarkable.
func (d *Driver) Unremarkable(b *backupsv1.Backup) bool { return d.unremarkable(b) }

// Known is how many records the catalog knows of strategy (read at an ETag it may list again).
func (c *Catalog) Known(strategy string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.known[strategy])
}

// SnapshotName is the name of the snapshot and clone of a pod volume of a snapshot-first Job.
var SnapshotName = snapshotName
