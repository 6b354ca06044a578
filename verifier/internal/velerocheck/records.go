package velerocheck

import (
	"strings"
	"sync"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"k8s.io/utils/lru"
)

// RememberedRecords is how many snapshot records (the digest of every file's path, size and
// SHA-256, about 300 bytes each with its key) a verifier keeps from its whole reads of kopia
// snapshots; past it, the least recently used are forgotten first.
const RememberedRecords = 4096

// DetailVolumeRecordsRemembered, on a full-restore's Result, counts the restored volumes whose
// data was compared with the record of their snapshot that this verifier read whole from the
// repository in an earlier verification (and found sound), not read again by this one.
const DetailVolumeRecordsRemembered = "volumeRecordsRemembered"

// records remembers the record of every kopia snapshot the verifier read whole and found sound,
// by repository and snapshot, the least recently used forgotten first past RememberedRecords. A
// snapshot never changes once written (kopia addresses its manifests and contents by ID), so its
// record, once read, is what a restore of it must give: a full-restore compares the restored files
// with it instead of reading the snapshot's data from the store a second time, beside Velero's
// restore of the same data. A read that finds the snapshot damaged forgets it: the next
// full-restore reads it again and says what is wrong with it. Kept in memory only: a restarted
// verifier reads again.
type records struct {
	once  sync.Once
	cache *lru.Cache // thread-safe; values *treeDigest
}

func (r *records) get() *lru.Cache {
	r.once.Do(func() { r.cache = lru.New(RememberedRecords) })
	return r.cache
}

func (r *records) recall(key string) *treeDigest {
	d, _ := r.get().Get(key)
	digest, _ := d.(*treeDigest)
	return digest
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

// rememberRecord keeps the record d of snapshot v, read whole from bsl's repository and found
// sound; a nil d forgets it.
func (c *Checker) rememberRecord(bsl *velerov1.BackupStorageLocation, v volume, d *treeDigest) {
	if d == nil {
		c.records.get().Remove(recordKey(bsl, v))
		return
	}
	c.records.get().Add(recordKey(bsl, v), d)
}

// recallRecord returns the record of snapshot v that an earlier whole read of bsl's repository
// found sound, or nil. Only a complete kopia record of a snapshot stored in bsl has one.
func (c *Checker) recallRecord(bsl *velerov1.BackupStorageLocation, v volume) *treeDigest {
	if v.snapshot == "" || v.uploader != "kopia" || v.phase != string(velerov1.PodVolumeBackupPhaseCompleted) || (v.location != "" && v.location != bsl.Name) {
		return nil
	}
	return c.records.recall(recordKey(bsl, v))
}

// Remembers tells whether the verifier remembers the record of kopia snapshot snapshot of the
// repository of namespace ns in storage location bsl: read whole and found sound, and not found
// damaged since.
func (c *Checker) Remembers(bsl *velerov1.BackupStorageLocation, ns, snapshot string) bool {
	return c.records.recall(recordKey(bsl, volume{namespace: ns, snapshot: snapshot})) != nil
}
