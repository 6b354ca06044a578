package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
)

// scaleKind (COFFER_BENCH_SCALE_KIND) is the strategy kind of BenchmarkScale's Backups:
//   - "job": driver-job's. A JobBackupStrategy exists; each Backup is as the driver leaves a good
//     one (its label, finalizer and bucket, an artifact in its run's bucket, the ArtifactAvailable
//     its last check wrote), so driver-job caches every Backup and finds nothing to do at start
//     (no check is due: a Backup's first is a period after its creation).
//   - "velero": driver-velero's. A VeleroBackupStrategy exists; each Backup is as the driver
//     leaves a good one, and its velero.io Backup exists, Completed, as the driver leaves it (its
//     run, record and checksum annotations, labelled settled): the driver caches none of them,
//     and its check of a Backup whose artifact was seen present makes no request.
//   - unset: a third party's, which no component of the bench runs.
var scaleKind = os.Getenv("COFFER_BENCH_SCALE_KIND")

var (
	toyStrategy    = corev1.TypedLocalObjectReference{APIGroup: ptr("toy.example.com"), Kind: "ToyBackupStrategy", Name: "nightly"}
	jobStrategy    = corev1.TypedLocalObjectReference{APIGroup: ptr(jobapi.Group), Kind: jobapi.Kind, Name: "nightly"}
	veleroStrategy = corev1.TypedLocalObjectReference{APIGroup: ptr(veleroapi.Group), Kind: veleroapi.Kind, Name: "nightly"}
)

// scaleBucket is the bucket of the bench's artifacts (driver-job's class parameter "bucket").
const scaleBucket = "coffer"

// What the drivers put on their Backups: the managed-by label and the finalizer.
const (
	jobDriver, jobFinalizer       = "coffer-driver-job", "jobdriver.backups.cozystack.io/cleanup"
	veleroDriver, veleroFinalizer = "coffer-driver-velero", "velerodriver.backups.cozystack.io/artifact"
	veleroRunAnnotation           = "velerodriver.backups.cozystack.io/run"
	veleroSettled                 = "velerodriver.backups.cozystack.io/settled"
)

// scaleStrategy is the strategy the bench's Backups name.
func scaleStrategy() corev1.TypedLocalObjectReference {
	switch scaleKind {
	case "job":
		return jobStrategy
	case "velero":
		return veleroStrategy
	}
	return toyStrategy
}

// asDriverLeavesIt makes Backup i (a third party's, as scaleBackup makes it) one of scaleKind's
// driver as that driver leaves a good one.
func asDriverLeavesIt(i int, b *backupsv1.Backup) *backupsv1.Backup {
	for k := range b.Status.Conditions {
		b.Status.Conditions[k].ObservedGeneration = 1 // as the driver stamps them
	}
	available := &b.Status.Conditions[1]
	switch scaleKind {
	case "job":
		b.Labels[backupsv1.LabelManagedBy], b.Finalizers = jobDriver, []string{jobFinalizer}
		b.Spec.StrategyRef = jobStrategy
		b.Spec.DriverMetadata = map[string]string{"param.bucket": scaleBucket, jobapi.MetadataPrefix + "job": b.Name}
		available.Reason = backupsv1.ReasonArtifactPresent
		available.Message = fmt.Sprintf("Check Job %s found the artifact %s (%d bytes)", b.Name, b.Status.Artifact.URI, b.Status.Artifact.SizeBytes)
	case "velero":
		b.Labels[backupsv1.LabelManagedBy], b.Finalizers = veleroDriver, []string{veleroFinalizer}
		b.Spec.StrategyRef = veleroStrategy
		vb := backupsv1.BoundedName(backupsv1.MaxGeneratedNameLength, b.Namespace, b.Name, fmt.Sprintf("%08x", i))
		b.Spec.DriverMetadata = map[string]string{veleroapi.MetaBackupName: vb, veleroapi.MetaNamespace: veleroapi.DefaultVeleroNamespace,
			veleroapi.MetaStorageLocation: "default"}
		available.Reason = backupsv1.ReasonArtifactPresent
		available.Message = fmt.Sprintf("Velero backup %s/%s is stored in location default", veleroapi.DefaultVeleroNamespace, vb)
	}
	return b
}

// createScaleKind creates what scaleKind's Backups need besides themselves, once they exist: the
// strategy, and for "velero" the Velero namespace and each Backup's velero.io Backup.
func createScaleKind(ctx context.Context, cl client.Client) error {
	switch scaleKind {
	case "job":
		return cl.Create(ctx, &jobapi.JobBackupStrategy{ObjectMeta: metav1.ObjectMeta{Name: jobStrategy.Name}, Spec: jobapi.JobBackupStrategySpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "coffer-agent"}}}},
		}})
	case "velero":
	default:
		return nil
	}
	if err := cl.Create(ctx, &veleroapi.VeleroBackupStrategy{ObjectMeta: metav1.ObjectMeta{Name: veleroStrategy.Name}, Spec: veleroapi.VeleroBackupStrategySpec{
		BackupTemplate: veleroapi.VeleroTemplate{Spec: k8sruntime.RawExtension{Raw: []byte(`{"snapshotVolumes": false}`)}},
	}}); err != nil {
		return err
	}
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: veleroapi.DefaultVeleroNamespace}}); client.IgnoreAlreadyExists(err) != nil {
		return err
	}
	// Page by page over the Backups, 32 requests at a time.
	cont := ""
	for {
		list := &backupsv1.BackupList{}
		if err := cl.List(ctx, list, client.Limit(500), client.Continue(cont)); err != nil {
			return err
		}
		if err := cluster.Parallel(len(list.Items), 32, func(k int) error {
			// Velero's CRDs have no status subresource: the status is created with it.
			vb, status := veleroBackupOf(&list.Items[k])
			vb.Object["status"] = status
			return cl.Create(ctx, vb)
		}); err != nil {
			return err
		}
		if cont = list.Continue; cont == "" {
			return nil
		}
	}
}

// veleroBackupOf is the velero.io Backup behind a Backup of driver-velero, as the driver leaves it
// (labels of its run, and settled; its run, record and checksum annotations; the namespace it holds), and its
// status, Completed, which is created with it.
func veleroBackupOf(b *backupsv1.Backup) (*unstructured.Unstructured, map[string]any) {
	record, err := backupsv1.NewArtifactRecord(b, backupsv1.SourceCluster{ID: "00000000-0000-4000-8000-000000000001", Name: "coffer-scale"})
	if err != nil {
		panic(err)
	}
	text, err := json.Marshal(record)
	if err != nil {
		panic(err)
	}
	vb := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "velero.io/v1", "kind": "Backup",
		"metadata": map[string]any{
			"name": b.Spec.DriverMetadata[veleroapi.MetaBackupName], "namespace": veleroapi.DefaultVeleroNamespace,
			"labels": map[string]any{backupsv1.LabelBackupJob: b.Name, backupsv1.LabelBackupJobNamespace: b.Namespace,
				backupsv1.LabelBackupJobUID: b.Labels[backupsv1.LabelBackupJobUID], backupsv1.LabelManagedBy: veleroDriver, veleroSettled: "true"},
			"annotations": map[string]any{veleroRunAnnotation: b.Namespace + "/" + b.Name,
				veleroapi.AnnotationRecord: string(text), backupsv1.AnnotationChecksum: b.Status.Artifact.Checksum},
		},
		"spec": map[string]any{"includedNamespaces": []any{b.Namespace}, "storageLocation": "default", "snapshotVolumes": false, "ttl": "720h0m0s",
			"excludedResources": []any{"backups.backups.cozystack.io", "backupjobs.backups.cozystack.io", "restorejobs.backups.cozystack.io"}},
	}}
	taken := b.Spec.TakenAt.UTC().Format(time.RFC3339)
	return vb, map[string]any{"phase": "Completed", "version": int64(1), "formatVersion": "1.1.0", "startTimestamp": taken, "completionTimestamp": taken,
		"expiration": b.Spec.TakenAt.Add(720 * time.Hour).UTC().Format(time.RFC3339), "progress": map[string]any{"totalItems": int64(42), "itemsBackedUp": int64(42)}}
}
