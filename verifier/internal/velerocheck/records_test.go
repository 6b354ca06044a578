package velerocheck

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSnapshotRecordsAreRememberedByRepository: a record is recalled only for the same snapshot
// in the same repository (store, bucket, prefix, namespace), only for a complete kopia record
// stored where the location says, until it is forgotten; past RememberedRecords the least
// recently used go.
func TestSnapshotRecordsAreRememberedByRepository(t *testing.T) {
	bsl := func(bucket, prefix string) *velerov1.BackupStorageLocation {
		return &velerov1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: velerov1.BackupStorageLocationSpec{
			Provider: "aws", Config: map[string]string{"s3Url": "https://s3.example"},
			StorageType: velerov1.StorageType{ObjectStorage: &velerov1.ObjectStorageLocation{Bucket: bucket, Prefix: prefix}}}}
	}
	here := bsl("velero", "cluster-a")
	v := volume{namespace: "shop", snapshot: "k1", uploader: "kopia", phase: string(velerov1.PodVolumeBackupPhaseCompleted), location: "default"}
	d := &treeDigest{Files: 2, Bytes: 3, Sum: "s"}
	c := &Checker{}
	assert.Nil(t, c.recallRecord(here, v), "nothing read yet")
	c.rememberRecord(here, v, d)
	assert.Same(t, d, c.recallRecord(here, v))

	other := v
	other.snapshot = "k2"
	assert.Nil(t, c.recallRecord(here, other), "another snapshot")
	other = v
	other.namespace = "cart"
	assert.Nil(t, c.recallRecord(here, other), "another namespace's repository")
	assert.Nil(t, c.recallRecord(bsl("velero", "cluster-b"), v), "another prefix")
	assert.Nil(t, c.recallRecord(bsl("backups", "cluster-a"), v), "another bucket")
	for name, change := range map[string]func(*volume){
		"not complete":       func(v *volume) { v.phase = "Failed" },
		"not kopia":          func(v *volume) { v.uploader = "restic" },
		"another location":   func(v *volume) { v.location = "elsewhere" },
		"no snapshot at all": func(v *volume) { v.snapshot = "" },
	} {
		w := v
		change(&w)
		assert.Nil(t, c.recallRecord(here, w), name)
	}

	c.rememberRecord(here, v, nil)
	assert.Nil(t, c.recallRecord(here, v), "forgotten once found damaged")

	for i := range RememberedRecords + 1 {
		w := v
		w.snapshot = "s" + strconv.Itoa(i)
		c.rememberRecord(here, w, d)
	}
	first, last := v, v
	first.snapshot, last.snapshot = "s0", "s"+strconv.Itoa(RememberedRecords)
	assert.Nil(t, c.recallRecord(here, first), "the least recently used is forgotten past the bound")
	assert.Same(t, d, c.recallRecord(here, last))
	assert.Equal(t, RememberedRecords, c.records.get().Len())
}
