package volumes

import (
	"testing"

	"github.com/stretchr/testify/assert"

	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
)

func TestRepositoryPrefix(t *testing.T) {
	assert.Equal(t, "velero/kopia/shop/", RepositoryPrefix("/velero/", "shop"))
	assert.Equal(t, "kopia/shop/", RepositoryPrefix("", "shop"))
	assert.Equal(t, "a/b/kopia/", RepositoryPrefix("a/b", ""))
}

func TestNames(t *testing.T) {
	fs := veleroapi.VolumeRecord{Method: veleroapi.VolumeMethodFileSystem, Namespace: "shop", Pod: "web-0", PodVolume: "data", Uploader: "kopia", Source: "b-x7k2p"}
	dm := veleroapi.VolumeRecord{Method: veleroapi.VolumeMethodDataMover, Namespace: "shop", PersistentVolumeClaim: "db", Source: "b-9qz4m"}
	assert.Equal(t, "velero.io/PodVolumeBackup velero/b-x7k2p", Object(fs, "velero"))
	assert.Equal(t, "velero.io/DataUpload velero/b-9qz4m", Object(dm, "velero"))
	assert.Equal(t, "volume data of pod shop/web-0", Describe(fs))
	assert.Equal(t, "claim shop/db", Describe(dm))
	for uploader, want := range map[string]string{"": "kopia", "velero": "kopia", "acme": "data mover acme"} {
		dm.Uploader = uploader
		assert.Equal(t, want, Uploader(dm), uploader)
	}
	fs.Uploader = "restic"
	assert.Equal(t, "restic", Uploader(fs))
}
