// Package volumes lists what Velero recorded of a backup's volume data: its PodVolumeBackups
// (file-system backup) and DataUploads (CSI snapshots moved to the storage location). driver-velero
// records the list on the Backup it makes; the verifier reads the data it names.
package volumes

import (
	"cmp"
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	velerov2 "github.com/vmware-tanzu/velero/pkg/apis/velero/v2alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
)

// ListError is an error listing one kind of Velero's volume records; Err is the API server's.
type ListError struct {
	// What says which list failed ("listing the PodVolumeBackups of Velero backup b").
	What string
	Err  error
}

func (e *ListError) Error() string { return e.What + ": " + e.Err.Error() }
func (e *ListError) Unwrap() error { return e.Err }

// Records lists the volume data of Velero backup vb, through r: one record per PodVolumeBackup and
// per DataUpload Velero labelled with vb's UID (velero.io/backup-uid, which Velero sets again on the
// records a storage sync brings back), in vb's namespace. A kind whose CRD is not installed (a
// Velero without data movement) has no records. Records are sorted by namespace, pod, pod volume,
// claim and record name; an error is a *ListError.
func Records(ctx context.Context, r client.Reader, vb *velerov1.Backup) ([]veleroapi.VolumeRecord, error) {
	sel := client.MatchingLabels{velerov1.BackupUIDLabel: string(vb.UID)}
	list := func(l client.ObjectList, kind string) error {
		if err := r.List(ctx, l, client.InNamespace(vb.Namespace), sel); err != nil && !meta.IsNoMatchError(err) {
			return &ListError{What: fmt.Sprintf("listing the %s of Velero backup %s/%s", kind, vb.Namespace, vb.Name), Err: err}
		}
		return nil
	}
	var out []veleroapi.VolumeRecord
	pvbs := &velerov1.PodVolumeBackupList{}
	if err := list(pvbs, "PodVolumeBackups"); err != nil {
		return nil, err
	}
	for _, p := range pvbs.Items {
		out = append(out, veleroapi.VolumeRecord{
			Method: veleroapi.VolumeMethodFileSystem, Namespace: p.Spec.Pod.Namespace, Pod: p.Spec.Pod.Name, PodVolume: p.Spec.Volume,
			PersistentVolumeClaimUID: p.Spec.Tags["pvc-uid"], Uploader: p.Spec.UploaderType, StorageLocation: p.Spec.BackupStorageLocation, Repository: p.Spec.RepoIdentifier,
			SnapshotID: p.Status.SnapshotID, Bytes: p.Status.Progress.TotalBytes, Phase: string(p.Status.Phase), Source: p.Name,
		})
	}
	dus := &velerov2.DataUploadList{}
	if err := list(dus, "DataUploads"); err != nil {
		return nil, err
	}
	for _, u := range dus.Items {
		out = append(out, veleroapi.VolumeRecord{
			Method: veleroapi.VolumeMethodDataMover, Namespace: u.Spec.SourceNamespace, PersistentVolumeClaim: u.Spec.SourcePVC,
			Uploader: u.Spec.DataMover, StorageLocation: u.Spec.BackupStorageLocation, SnapshotID: u.Status.SnapshotID, Bytes: u.Status.Progress.TotalBytes,
			Phase: string(u.Status.Phase), Source: u.Name, PersistentVolumeClaimUID: u.Labels[velerov1.PVCUIDLabel],
		})
	}
	slices.SortFunc(out, func(a, b veleroapi.VolumeRecord) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.PodVolume, b.PodVolume),
			cmp.Compare(a.PersistentVolumeClaim, b.PersistentVolumeClaim), cmp.Compare(a.Source, b.Source))
	})
	return out, nil
}

// Object names the Velero object that recorded volume v, as findings and events name objects
// ("velero.io/PodVolumeBackup velero/b-x7k2p"); veleroNamespace is where Velero keeps it.
func Object(v veleroapi.VolumeRecord, veleroNamespace string) string {
	kind := "PodVolumeBackup"
	if v.Method == veleroapi.VolumeMethodDataMover {
		kind = "DataUpload"
	}
	return "velero.io/" + kind + " " + veleroNamespace + "/" + v.Source
}

// Describe names volume v as a person would: "volume data of pod shop/web-0" or "claim shop/db".
func Describe(v veleroapi.VolumeRecord) string {
	if v.Method == veleroapi.VolumeMethodDataMover {
		return fmt.Sprintf("claim %s/%s", v.Namespace, v.PersistentVolumeClaim)
	}
	return fmt.Sprintf("volume %s of pod %s/%s", v.PodVolume, v.Namespace, v.Pod)
}

// Uploader is what wrote volume v's data: "kopia" for file-system backups with kopia and for
// Velero's built-in data mover (a DataUpload of data mover "" or "velero"); otherwise what Velero
// recorded ("restic", "data mover <name>").
func Uploader(v veleroapi.VolumeRecord) string {
	if v.Method == veleroapi.VolumeMethodDataMover {
		if v.Uploader == "" || v.Uploader == "velero" {
			return "kopia"
		}
		return "data mover " + v.Uploader
	}
	return v.Uploader
}

// RepositoryPrefix is the key prefix of the kopia repository in which Velero keeps the volume data
// of namespace ns, under a storage location with prefix locationPrefix (Velero's unified
// repository layout: <prefix>/kopia/<namespace>/); with ns empty, the prefix of them all.
func RepositoryPrefix(locationPrefix, ns string) string {
	return path.Join(strings.Trim(locationPrefix, "/"), "kopia", ns) + "/"
}

// ReadPolicy is the S3 policy (IAM or a MinIO user's) of an identity that may read the kopia
// repositories of a storage location in bucket with prefix locationPrefix and do nothing else:
// list keys under RepositoryPrefix and get those objects. It can neither write nor delete, nor
// read the location's backups (their tarballs, which the verifier reads through Velero).
func ReadPolicy(bucket, locationPrefix string) string {
	root := RepositoryPrefix(locationPrefix, "")
	return fmt.Sprintf(`{
  "Version": "2012-10-17",
  "Statement": [
    {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": ["arn:aws:s3:::%[1]s"], "Condition": {"StringLike": {"s3:prefix": ["%[2]s*"]}}},
    {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": ["arn:aws:s3:::%[1]s/%[2]s*"]}
  ]
}`, bucket, root)
}
