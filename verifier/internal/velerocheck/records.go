package velerocheck

import (
	"strings"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
)

// RememberedRecords is how many snapshot records (the digest of every file's path, size and
// SHA-256, about 300 bytes each with its key) a verifier keeps from its whole reads of kopia
// snapshots; past it, the oldest are forgotten first.
const RememberedRecords = 4096

// DetailVolumeRecordsRemembered, on a full-restore's Result, counts the restored volumes whose
// data was compared with the record of their snapshot that this verifier read whole from the
// repository in an earlier verification (and found sound), not read again by this one.
const DetailVolumeRecordsRemembered = "volumeRecordsRemembered"

// records remembers the record of every kopia snapshot the verifier read whole and found sound,
// by repository and snapshot. A snapshot never changes once written (kopia addresses its
// manifests and contents by ID), so its record, once read, is what a restore of it must give: a
// full-restore compares the restored files with it instead of reading the snapshot's data from
// the store a second time, beside Velero's restore of the same data. A read that finds the
// snapshot damaged forgets it: the next full-restore reads it again and says what is wrong with
// it. Kept in memory only: a restarted verifier reads again. Guarded by Checker.mu.
type records struct {
	order []string // oldest first
	by    map[string]*treeDigest
}

// recordKey names snapshot v's record in the repository of storage location bsl: the store, the
// bucket and prefix, the volume's namespace (each has a repository) and the snapshot's ID.
func recordKey(bsl *velerov1.BackupStorageLocation, v volume) string {
	var bucket string
	if bsl.Spec.ObjectStorage != nil {
		bucket = bsl.Spec.ObjectStorage.Bucket
	}
	return strings.Join([]string{bsl.Spec.Provider, bsl.Spec.Config["s3Url"], bucket, bslPrefix(bsl), v.namespace, v.snapshot}, "\x00")
}

func (r *records) remember(key string, d *treeDigest) {
	if r.by == nil {
		r.by = map[string]*treeDigest{}
	}
	if _, ok := r.by[key]; !ok {
		r.order = append(r.order, key)
	}
	r.by[key] = d
	for len(r.order) > RememberedRecords {
		delete(r.by, r.order[0])
		r.order = r.order[1:]
	}
}

func (r *records) forget(key string) {
	if _, ok := r.by[key]; !ok {
		return
	}
	delete(r.by, key)
	for i, k := range r.order {
		if k == key {
			r.order = append(r.order[:i], r.order[i+1:]...)
			break
		}
	}
}

func (r *records) recall(key string) *treeDigest { return r.by[key] }

// rememberRecord keeps the record d of snapshot v, read whole from bsl's repository and found
// sound; a nil d forgets it.
func (c *Checker) rememberRecord(bsl *velerov1.BackupStorageLocation, v volume, d *treeDigest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d == nil {
		c.records.forget(recordKey(bsl, v))
		return
	}
	c.records.remember(recordKey(bsl, v), d)
}

// recallRecord returns the record of snapshot v that an earlier whole read of bsl's repository
// found sound, or nil. Only a complete kopia record of a snapshot stored in bsl has one.
func (c *Checker) recallRecord(bsl *velerov1.BackupStorageLocation, v volume) *treeDigest {
	if v.snapshot == "" || v.uploader != "kopia" || v.phase != string(velerov1.PodVolumeBackupPhaseCompleted) || (v.location != "" && v.location != bsl.Name) {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.records.recall(recordKey(bsl, v))
}

// Remembers tells whether the verifier remembers the record of kopia snapshot snapshot of the
// repository of namespace ns in storage location bsl: read whole and found sound, and not found
// damaged since.
func (c *Checker) Remembers(bsl *velerov1.BackupStorageLocation, ns, snapshot string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.records.recall(recordKey(bsl, volume{namespace: ns, snapshot: snapshot})) != nil
}
