package driver

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
