package driver

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/internal/names"
)

// TestCachedBackupsShareWhereTheirVeleroBackupIs: the cache keeps no map of its own per Backup for
// the Velero backup's name where the artifact names the same backup, and reads the name back from
// it; where the artifact names another (or none), the name is kept as written.
func TestCachedBackupsShareWhereTheirVeleroBackupIs(t *testing.T) {
	bsl := &velerov1.BackupStorageLocation{Spec: velerov1.BackupStorageLocationSpec{Provider: "aws",
		StorageType: velerov1.StorageType{ObjectStorage: &velerov1.ObjectStorageLocation{Bucket: "b", Prefix: "/coffer/"}}}}
	backup := func(name, artifactOf string) *backupsv1.Backup {
		b := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"}}
		b.Spec.DriverMetadata = veleroMetadata(client.ObjectKey{Namespace: "velero", Name: "vb-" + name}, "default")
		if artifactOf != "" {
			b.Status.Artifact = &backupsv1.BackupArtifact{URI: artifactURI(bsl, &velerov1.Backup{ObjectMeta: metav1.ObjectMeta{Name: artifactOf}})}
		}
		return b
	}
	one, two := backup("one", "vb-one"), backup("two", "vb-two")
	other, none := backup("other", "vb-elsewhere"), backup("none", "")
	for _, b := range []*backupsv1.Backup{one, two, other, none} {
		want := veleroKey(b)
		trimBackup(b)
		assert.Equal(t, want, veleroKey(b), "%s: the cache finds the same Velero backup", b.Name)
	}
	assert.Equal(t, nameFromArtifact, one.Spec.DriverMetadata[names.MetaBackupName])
	assert.Equal(t, reflect.ValueOf(one.Spec.DriverMetadata).UnsafePointer(), reflect.ValueOf(two.Spec.DriverMetadata).UnsafePointer(),
		"Backups of one location share one map")
	assert.Equal(t, "vb-other", other.Spec.DriverMetadata[names.MetaBackupName], "an artifact naming another backup does not stand for the name")
	assert.Equal(t, "vb-none", none.Spec.DriverMetadata[names.MetaBackupName])

	for uri, want := range map[string]string{
		"s3://b/backups/x/x.tar.gz":     "x",
		"s3://b/p/q/backups/x/x.tar.gz": "x",
		"s3://b/backups/x/y.tar.gz":     "",
		"s3://b/other/x/x.tar.gz":       "",
		"s3://b/backups/x/x.tgz":        "",
		"":                              "",
		"s3://b/backups//.tar.gz":       "",
	} {
		assert.Equal(t, want, nameInArtifact(uri), uri)
	}
}

// BenchmarkCachedBackupBytes reports the heap a Backup as the driver records it takes once decoded
// and trimmed as the driver's cache trims it (trimBackup), and as it took with its Velero backup's
// name in a driverMetadata map of its own (trimOwn): the live heap after a collection, over
// COFFER_BENCH_BACKUPS Backups (default 10,000) decoded from JSON as an informer decodes them.
func BenchmarkCachedBackupBytes(b *testing.B) {
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("COFFER_BENCH_BACKUPS")); err == nil && v > 0 {
		n = v
	}
	bsl := &velerov1.BackupStorageLocation{Spec: velerov1.BackupStorageLocationSpec{Provider: "aws",
		StorageType: velerov1.StorageType{ObjectStorage: &velerov1.ObjectStorageLocation{Bucket: "coffer", Prefix: "velero"}}}}
	docs := make([][]byte, n)
	for i := range docs {
		name := fmt.Sprintf("shop-nightly-%06d", i)
		vb := &velerov1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: fmt.Sprintf("shop-%06d-%s-0f3c2a1b", i, name)}}
		bk := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: fmt.Sprintf("tenant-%03d", i%1000),
			UID: types.UID(fmt.Sprintf("5b0e1c4a-1d2e-4f3a-8b9c-%012d", i)), ResourceVersion: strconv.Itoa(1000 + i),
			Finalizers: []string{names.Finalizer}},
			Spec: backupsv1.BackupSpec{StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr.To("velerodriver.backups.cozystack.io"), Kind: "VeleroBackupStrategy", Name: "nightly"},
				DriverMetadata: veleroMetadata(client.ObjectKeyFromObject(vb), "default")},
			Status: backupsv1.BackupStatus{Phase: backupsv1.BackupReady,
				Artifact: &backupsv1.BackupArtifact{URI: artifactURI(bsl, vb), SizeBytes: 4096, Checksum: "sha256:" + strings.Repeat("0", 64)},
				Conditions: []metav1.Condition{{Type: backupsv1.ConditionArtifactAvailable, Status: metav1.ConditionTrue, Reason: backupsv1.ReasonArtifactPresent,
					Message: fmt.Sprintf("Velero backup %s is stored in location default", client.ObjectKeyFromObject(vb))}}}}
		doc, err := json.Marshal(bk)
		require.NoError(b, err)
		docs[i] = doc
	}
	measure := func(trim func(any)) float64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		kept := make([]*backupsv1.Backup, n)
		for i, doc := range docs {
			bk := &backupsv1.Backup{}
			require.NoError(b, json.Unmarshal(doc, bk))
			trim(bk)
			kept[i] = bk
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(kept)
		return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
	}
	// Once each before measuring: the first decode also grows the intern tables.
	measure(trimBackup)
	measure(trimOwn)
	b.ResetTimer()
	for range b.N {
		b.ReportMetric(measure(trimBackup), "bytes/backup")
		b.ReportMetric(measure(trimOwn), "bytes/backup-own-map")
	}
}
