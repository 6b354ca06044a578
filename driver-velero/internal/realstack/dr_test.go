package realstack

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/internal/driver"
	"github.com/coffer-backup/coffer/driver-velero/internal/names"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

// recoveredNS is where cluster B imports and restores the Backups of managedNS.
const recoveredNS = "recovered"

// TestDisasterRecovery: this suite's cluster (A) backs up a shop with the Velero driver; a fresh
// cluster B (its own etcd and API server) runs Velero on the same bucket, read-only, and the
// driver with a catalog. Velero syncs the backup into B, its record comes with it, and the catalog
// imports it as a Coffer Backup of B (mapped into another namespace), whose checksum is the
// tarball's; a RestoreJob in B restores the shop byte for byte; syncing again creates nothing; B
// never deletes the tarball. Once the backup is gone from storage, B's Velero drops it and the
// catalog removes the imported Backup.
func TestDisasterRecovery(t *testing.T) {
	ctx := context.Background()
	shop(t, managedNS, "shop")
	ledger := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dr-ledger", Namespace: managedNS, Labels: map[string]string{"app": "shop"}},
		Data: map[string]string{"orders": "1,2,3"}, BinaryData: map[string][]byte{"blob": {0, 255, 7, 1}}}
	require.NoError(t, cl.Create(ctx, ledger))
	t.Cleanup(func() { _ = cl.Delete(context.Background(), ledger) })

	// Cluster A backs up; the Velero backup carries the Backup's record.
	job := backupJob(managedNS, "dr-1", "velero", "Shop")
	require.NoError(t, cl.Create(ctx, job))
	waitJob(t, job)
	require.Equal(t, backupsv1.BackupJobSucceeded, job.Status.Phase, job.Status.Message)
	a := &backupsv1.Backup{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: managedNS, Name: "dr-1"}, a))
	vbName := a.Spec.DriverMetadata[names.MetaBackupName]
	vb := &velerov1.Backup{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: velerostack.Namespace, Name: vbName}, vb))
	record, err := backupsv1.ParseRecordTemplate([]byte(vb.Annotations[veleroapi.AnnotationRecord]))
	require.NoError(t, err, "the Velero backup carries the record of its Backup")
	kubeSystem := &corev1.Namespace{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Name: "kube-system"}, kubeSystem))
	assert.Equal(t, string(kubeSystem.UID), record.SourceCluster.ID)
	assert.Equal(t, a.Spec.ApplicationRef, record.Spec.ApplicationRef)
	tarball := velerostack.ObjectKey(vbName)
	sumBefore, _ := bucketSHA256(t, tarball)

	start := time.Now()
	// Cluster A is lost; B starts fresh, with Velero on the same bucket (read-only).
	root, err := manifests.RepoRoot()
	require.NoError(t, err)
	b, err := cluster.Start(ctx, cluster.Options{CRDDirectoryPaths: []string{
		filepath.Join(root, "deploy/core-controller/crd"), filepath.Join(root, "deploy/driver-velero/crd"), filepath.Join(root, "e2e/harness/testdata")}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Stop() })
	require.NoError(t, stack.MoveTo(ctx, b, true))
	t.Logf("cluster B up, its Velero on the bucket (read-only): %s", time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := stack.MoveTo(context.Background(), c, false); err != nil {
			t.Errorf("moving Velero back to the suite's cluster: %v", err)
		}
	})
	clB, err := client.New(b.Config, client.Options{Scheme: sch})
	require.NoError(t, err)
	require.NoError(t, clB.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: recoveredNS}}))
	strat := &veleroapi.VeleroBackupStrategy{ObjectMeta: metav1.ObjectMeta{Name: "namespace"}, Spec: veleroapi.VeleroBackupStrategySpec{
		VeleroNamespace: velerostack.Namespace,
		BackupTemplate:  veleroapi.VeleroTemplate{Spec: k8sruntime.RawExtension{Raw: []byte(`{"snapshotVolumes": false}`)}},
		Catalog:         &veleroapi.VeleroCatalog{NamespaceMapping: map[string]backupsv1.NamespaceName{managedNS: recoveredNS}},
	}}
	require.NoError(t, clB.Create(ctx, strat))

	runCtx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	mgr, err := ctrl.NewManager(b.Config, ctrl.Options{
		Scheme:     sch,
		Logger:     logr.Discard(),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr(true)}, // the suite's manager runs the same controllers
		Cache:      cacheOptions(recoveredNS, velerostack.Namespace),
	})
	require.NoError(t, err)
	require.NoError(t, driver.Setup(mgr, &driver.Driver{Recorder: &events.FakeRecorder{}, HTTP: http.DefaultClient, DownloadTimeout: time.Minute}, "recovery"))
	go func() { _ = mgr.Start(runCtx) }()

	waitFor(t, "Velero's sync of the backup into cluster B", 3*time.Minute, func(ctx context.Context) (bool, error) {
		err := clB.Get(ctx, client.ObjectKey{Namespace: velerostack.Namespace, Name: vbName}, &velerov1.Backup{})
		return err == nil, client.IgnoreNotFound(err)
	})
	t.Logf("Velero synced the backup into B: %s after B started", time.Since(start).Round(time.Millisecond))
	// The catalog appears: the Backup, imported with the tarball's checksum, measured anew.
	imported := &backupsv1.Backup{}
	waitFor(t, "the imported Backup in cluster B", 3*time.Minute, func(ctx context.Context) (bool, error) {
		err := clB.Get(ctx, client.ObjectKey{Namespace: recoveredNS, Name: "dr-1"}, imported)
		return err == nil && imported.Status.Phase == backupsv1.BackupReady, client.IgnoreNotFound(err)
	})
	t.Logf("Backup imported: %s after B started", time.Since(start).Round(time.Millisecond))
	assert.True(t, imported.Imported())
	assert.True(t, imported.ReadOnly(), "an imported Backup is read-only until adopted")
	assert.Empty(t, imported.Finalizers, "deleting it never deletes the artifact")
	assert.Equal(t, record.SourceCluster.ID, imported.Annotations[backupsv1.AnnotationSourceCluster])
	assert.Empty(t, imported.Annotations[backupsv1.AnnotationSourceUID], "the record is written before the source's Backup exists")
	require.NotNil(t, imported.Status.Artifact)
	assert.Equal(t, *a.Status.Artifact, *imported.Status.Artifact, "B measures the same tarball A did")
	assert.Equal(t, "namespace", imported.Spec.StrategyRef.Name)
	assert.Equal(t, vbName, imported.Spec.DriverMetadata[names.MetaBackupName])
	assert.Equal(t, managedNS, imported.Spec.DriverMetadata[names.MetaSourceNamespace])
	assert.Equal(t, a.Spec.ApplicationRef, imported.Spec.ApplicationRef)
	assert.Equal(t, a.Spec.TakenAt.Unix(), imported.Spec.TakenAt.Unix())
	assert.Equal(t, a.Labels[backupsv1.LabelBackupJobUID], imported.Labels[backupsv1.LabelBackupJobUID])

	waitFor(t, "the strategy's catalog status", time.Minute, func(ctx context.Context) (bool, error) {
		err := clB.Get(ctx, client.ObjectKeyFromObject(strat), strat)
		return err == nil && meta.IsStatusConditionTrue(strat.Status.Conditions, backupsv1.ConditionCatalogSynced) && strat.Status.Catalog != nil && strat.Status.Catalog.Imported >= 1, err
	})

	// A restore in B, into the namespace the Backup was imported into, brings back every byte.
	rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: "recover", Namespace: recoveredNS},
		Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: "dr-1"}}}
	require.NoError(t, clB.Create(ctx, rj))
	waitFor(t, "the restore in cluster B", 3*time.Minute, func(ctx context.Context) (bool, error) {
		return rj.IsTerminal(), clB.Get(ctx, client.ObjectKeyFromObject(rj), rj)
	})
	require.Equal(t, backupsv1.RestoreJobSucceeded, rj.Status.Phase, rj.Status.Message)
	got := &corev1.ConfigMap{}
	require.NoError(t, clB.Get(ctx, client.ObjectKey{Namespace: recoveredNS, Name: "dr-ledger"}, got), "restore: %s %+v\nvelero log:\n%s", rj.Status.Message, rj.Status.Items, stack.VeleroLog())
	assert.Equal(t, ledger.Data, got.Data)
	assert.Equal(t, ledger.BinaryData, got.BinaryData)

	t.Logf("restored in B: %s after B started", time.Since(start).Round(time.Millisecond))
	// Syncing again creates nothing.
	count := func() int {
		list := &backupsv1.BackupList{}
		require.NoError(t, clB.List(ctx, list, client.InNamespace(recoveredNS)))
		return len(list.Items)
	}
	n := count()
	d := &driver.Driver{Client: clB, Recorder: &events.FakeRecorder{}, HTTP: http.DefaultClient, DownloadTimeout: time.Minute}
	driver.New(d)
	_, err = (&driver.Catalog{Driver: d, Clock: clock.RealClock{}}).Reconcile(ctx, requestFor(strat))
	require.NoError(t, err)
	require.NoError(t, clB.Get(ctx, client.ObjectKeyFromObject(strat), strat))
	assert.Zero(t, strat.Status.Catalog.Created, "a second sync imports nothing new")
	assert.Equal(t, n, count())

	// B never deleted A's tarball.
	sumAfter, _ := bucketSHA256(t, tarball)
	assert.Equal(t, sumBefore, sumAfter)

	// The backup is deleted from storage (by A, say): B's Velero drops it, and the catalog removes
	// its imported Backup.
	prefix := strings.TrimSuffix(tarball, vbName+".tar.gz")
	for o := range stack.S3.ListObjects(ctx, velerostack.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		require.NoError(t, o.Err)
		require.NoError(t, stack.S3.RemoveObject(ctx, velerostack.Bucket, o.Key, minio.RemoveObjectOptions{}))
	}
	waitFor(t, "the imported Backup to be removed", 2*time.Minute, func(ctx context.Context) (bool, error) {
		err := clB.Get(ctx, client.ObjectKeyFromObject(imported), &backupsv1.Backup{})
		return client.IgnoreNotFound(err) == nil && err != nil, nil
	})
}
