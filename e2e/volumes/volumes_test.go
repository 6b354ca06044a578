//go:build e2e

// Package volumes backs up PersistentVolumes' data on a real node (kubelet, containerd), with
// volumes from a real dynamic provisioner (Rancher's local-path-provisioner, e2e/harness/localpath).
// Through driver-velero, Velero's node agent runs as a DaemonSet of the Velero image (built from
// the pinned module) beside a Velero server process and MinIO on the node's IP, and backs up a
// pod's volume by file-system backup; the Backup records the volume, the verifier (as its
// ServiceAccount) reads every file of the volume's snapshot from Velero's repository and finds one
// flipped byte in it, and a RestoreJob brings the claim and every file back. A claim of a CSI
// driver with snapshots (e2e/harness/csidir) goes the way of Cozystack's default strategy: a CSI
// snapshot whose data Velero's data mover copies to the repository. Through driver-job, the sample
// strategy backs up a provisioned claim and restores it into a new one. It needs root (see
// e2e/harness/node) and is part of `make e2e`: go test -tags e2e ./volumes/.
package volumes

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/components"
	"github.com/coffer-backup/coffer/e2e/harness/csidir"
	"github.com/coffer-backup/coffer/e2e/harness/images"
	"github.com/coffer-backup/coffer/e2e/harness/localpath"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
	"github.com/coffer-backup/coffer/e2e/harness/node"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
	"github.com/coffer-backup/coffer/velerokit/volumes"
)

// env is the suite's node, with its provisioner, Velero (server, node agent) and Coffer's
// core-controller, driver-velero and driver-job.
type env struct {
	ctx   context.Context
	cl    client.Client
	n     *node.Node
	stack *velerostack.Stack
	csi   *csidir.CSI
	// verifierDeployed says deployVerifier has run.
	verifierDeployed bool
}

func TestVolumesOnARealNode(t *testing.T) {
	node.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	e := start(t, ctx)
	t.Run("driver-velero: file-system backup of a provisioned volume, recorded, restored byte for byte", e.velero)
	t.Run("driver-velero: CSI snapshot moved to the storage location, recorded, checked, restored byte for byte", e.veleroDataMover)
	t.Run("driver-job: a provisioned claim backed up and restored byte for byte", e.jobDriver)
	t.Run("driver-job: a CSI claim backed up from a snapshot's clone and restored byte for byte", e.jobDriverSnapshotFirst)
}

// start starts the suite's env: the node (with the images of Velero, its restore helper, the
// provisioner's helper, coffer-agent and the verifier), the provisioner, Velero with its node
// agent, Coffer's CRDs and controllers, and the sample strategies with volumes.
func start(t testing.TB, ctx context.Context) *env {
	assets, err := velerostack.Assets()
	require.NoError(t, err)
	work := t.TempDir()
	root, err := manifests.RepoRoot()
	require.NoError(t, err)
	var archives []string
	for _, i := range []struct{ bin, name string }{{"velero", velerostack.Image}, {"velero-restore-helper", velerostack.RestoreHelperImage}} {
		img, err := images.Build(ctx, images.Options{Binary: filepath.Join(assets, i.bin), Name: i.name, Path: "/" + i.bin, User: "0:0",
			Out: filepath.Join(work, i.bin+".oci.tar")})
		require.NoError(t, err)
		archives = append(archives, img.Archive)
	}
	helper, err := localpath.HelperImageArchive(ctx, work)
	require.NoError(t, err)
	agent, err := images.Agent(ctx, root, work)
	require.NoError(t, err)
	// The verifier runs as deploy/verifier ships it (read-only root, its /tmp emptyDir): its image.
	verifierBin := filepath.Join(work, "verifier")
	require.NoError(t, images.BuildBinary(ctx, filepath.Join(root, "verifier"), "./cmd/verifier", verifierBin))
	verifier, err := images.Build(ctx, images.Options{Binary: verifierBin, Name: "coffer/verifier:dev", Out: filepath.Join(work, "verifier.oci.tar")})
	require.NoError(t, err)
	n, err := node.Start(ctx, node.Options{Images: append(archives, helper, agent.Archive, verifier.Archive), ServeToPods: true, Logf: t.Logf,
		CRDDirectoryPaths: []string{filepath.Join(root, "e2e", "harness", "testdata"), csidir.CRDDirectory(root)}, LogDir: os.Getenv("COFFER_NODE_LOGS")})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node diagnostics:\n%s", n.Diagnostics())
		}
		assert.NoError(t, n.Stop())
	})
	cl, err := client.New(n.Cluster.Config, client.Options{Scheme: cluster.Scheme})
	require.NoError(t, err)
	prov, err := localpath.Start(ctx, cl, filepath.Join(assets, "local-path-provisioner"), n.Cluster.Kubeconfig, filepath.Join(work, "storage"))
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("local-path-provisioner:\n%s", prov.Log())
		}
		prov.Stop()
	})
	csiAssets, err := csidir.Assets()
	require.NoError(t, err)
	csi, err := csidir.Start(ctx, cl, csiAssets, n.Cluster.Kubeconfig, csidir.Node{Name: n.Name, KubeletRoot: n.KubeletRoot(), Dir: filepath.Join(n.Dir, "csi")})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("CSI driver and controllers:\n%s", csi.Log())
		}
		csi.Stop()
	})
	stack, err := velerostack.StartOn(ctx, n.Cluster, n.IP, "EnableCSI")
	require.NoError(t, err)
	t.Cleanup(stack.Stop)
	api, err := url.Parse(n.Cluster.Config.Host)
	require.NoError(t, err)
	require.NoError(t, stack.InstallNodeAgent(ctx, velerostack.NodeAgent{KubeletRoot: n.KubeletRoot(), APIHost: api.Hostname(), APIPort: api.Port()}))

	require.NoError(t, manifests.InstallNodeless(ctx, cl, root))
	for _, module := range []string{"core-controller", "driver-velero", "driver-job"} {
		c, err := components.Launch(root, work, n.Cluster.Kubeconfig, components.Spec{Module: module, Binary: module, Namespace: "coffer-system"})
		require.NoError(t, err)
		t.Cleanup(func() { components.StopAndCheck(t, c) })
	}
	// The shipped sample strategies.
	samples, err := manifests.Render(filepath.Join(root, "deploy", "samples"))
	require.NoError(t, err)
	for _, o := range samples {
		if o.GetKind() == "VeleroBackupStrategy" && (o.GetName() == "namespace-with-volumes" || o.GetName() == "namespace-with-volume-snapshots") || o.GetKind() == "JobBackupStrategy" && o.GetName() == "volume-tar" {
			require.NoError(t, cl.Create(ctx, o))
		}
	}
	return &env{ctx: ctx, cl: cl, n: n, stack: stack, csi: csi}
}

// application creates a Shop whose pod mounts claim (of StorageClass class, empty for the default)
// and fills the volume with random and compressible files; it returns the volume's directory and
// its tree.
func (e *env) application(t *testing.T, ns, name, claim, class string) (dir string, want map[string]string, size int64) {
	require.NoError(t, e.cl.Create(e.ctx, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Shop",
		"metadata": map[string]any{"name": name, "namespace": ns}}}))
	shop(t, e.ctx, e.cl, ns, name, claim, class)
	dir = e.volumeDir(t, ns, claim)
	files := map[string][]byte{"catalog.txt": []byte("tea\ncoffee\n"), "orders/2031/03.csv": []byte("id,qty\n1,2\n"), "orders/empty.csv": nil}
	blob := make([]byte, 4<<20)
	_, _ = rand.Read(blob)
	files["media/blob.bin"] = blob
	files["logs/app.log"] = bytes.Repeat([]byte("GET /orders 200 12ms\n"), 1<<15)
	for p, b := range files {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, p), b, 0o644))
		size += int64(len(b))
	}
	return dir, tree(t, dir), size
}

// backup runs a BackupJob of app with class and returns its Backup, Ready.
func (e *env) backup(t *testing.T, ns, name, class string, app corev1.TypedLocalObjectReference) *backupsv1.Backup {
	job := &backupsv1.BackupJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: backupsv1.BackupJobSpec{ApplicationRef: app, BackupClassName: class}}
	require.NoError(t, e.cl.Create(e.ctx, job))
	ended(t, e.ctx, e.cl, job, func() bool {
		return job.Status.Phase == backupsv1.BackupJobSucceeded || job.Status.Phase == backupsv1.BackupJobFailed
	})
	require.Equal(t, backupsv1.BackupJobSucceeded, job.Status.Phase, job.Status.Message)
	require.NotNil(t, job.Status.BackupRef)
	backup := &backupsv1.Backup{}
	require.NoError(t, e.cl.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: job.Status.BackupRef.Name}, backup))
	require.Equal(t, backupsv1.BackupReady, backup.Status.Phase)
	return backup
}

// shopClass creates BackupClass name, which backs up Shops with the strategy of group, kind and
// name and parameters params.
func (e *env) shopClass(t *testing.T, name, group, kind, strategy string, params map[string]string) {
	require.NoError(t, e.cl.Create(e.ctx, &backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: backupsv1.BackupClassSpec{
		Strategies: []backupsv1.BackupClassStrategy{{Application: backupsv1.ApplicationSelector{Kind: "Shop"},
			StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr.To(group), Kind: kind, Name: strategy},
			Parameters:  params}}}}))
}

// backupOfOneVolume runs a BackupJob of app with class and returns its Backup, Ready, and the one
// volume it records, moved by method, of namespace ns.
func (e *env) backupOfOneVolume(t *testing.T, ns, name, class string, app corev1.TypedLocalObjectReference, method string) (*backupsv1.Backup, veleroapi.VolumeRecord) {
	t.Helper()
	backup := e.backup(t, ns, name, class, app)
	data, ok, err := veleroapi.VolumeDataOf(backup.Status.UnderlyingResources)
	require.NoError(t, err)
	require.True(t, ok, "the Backup records its volume data: %s", backup.Status.UnderlyingResources)
	require.Len(t, data.Volumes, 1)
	v := data.Volumes[0]
	assert.Equal(t, method, v.Method)
	assert.Equal(t, ns, v.Namespace)
	return backup, v
}

// fileCount is how many regular files a tree (of tree) holds.
func fileCount(tree map[string]string) int64 {
	var n int64
	for _, sum := range tree {
		if sum != "dir" {
			n++
		}
	}
	return n
}

// restore runs a RestoreJob of backup and returns it, ended.
func (e *env) restore(t *testing.T, ns, name string, backup *backupsv1.Backup) *backupsv1.RestoreJob {
	rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: backup.Name}}}
	require.NoError(t, e.cl.Create(e.ctx, rj))
	ended(t, e.ctx, e.cl, rj, func() bool {
		return rj.Status.Phase == backupsv1.RestoreJobSucceeded || rj.Status.Phase == backupsv1.RestoreJobFailed
	})
	return rj
}

// lose deletes the application's pod and claim, and waits until the provisioner has removed the
// volume's data.
func (e *env) lose(t *testing.T, ns, pod, claim, dir string) {
	require.NoError(t, e.cl.Delete(e.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: ns}}, client.GracePeriodSeconds(0)))
	require.NoError(t, e.cl.Delete(e.ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: ns}}))
	require.NoError(t, wait.PollUntilContextTimeout(e.ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := os.Stat(dir)
		return os.IsNotExist(err), nil
	}), "the volume's directory is gone")
}

func (e *env) namespace(t testing.TB, prefix string) string {
	ns, err := e.n.Cluster.Namespace(e.ctx, prefix)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			dump(t, e.cl, ns)
		}
	})
	return ns
}

func (e *env) velero(t *testing.T) {
	ctx, cl := e.ctx, e.cl
	e.shopClass(t, "velero-volumes", veleroapi.Group, veleroapi.Kind, "namespace-with-volumes", map[string]string{"backupStorageLocationName": velerostack.BSLName})
	ns := e.namespace(t, "shop")
	app := corev1.TypedLocalObjectReference{APIGroup: ptr.To("apps.cozystack.io"), Kind: "Shop", Name: "shop"}
	dir, want, size := e.application(t, ns, "shop", "data", "")
	// A file only its owner reads, as a database keeps its data: the owner is the user the
	// application's container runs as (not its pod's), so the verifier's reader, which runs as
	// that user, reads it.
	private := filepath.Join(dir, "db", "private.dat")
	require.NoError(t, os.MkdirAll(filepath.Dir(private), 0o700))
	require.NoError(t, os.WriteFile(private, []byte("card numbers\n"), 0o600))
	for _, p := range []string{filepath.Dir(private), private} {
		require.NoError(t, os.Chown(p, shopUser, shopUser))
	}
	want, size = tree(t, dir), size+int64(len("card numbers\n"))
	// A pod of the application that runs as root (no volume): in a volume sandbox, restricted, its
	// reader runs as 65532.
	require.NoError(t, cl.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "shop-admin", Namespace: ns}, Spec: corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](0)},
		Containers:      []corev1.Container{{Name: "admin", Image: images.PauseName, ImagePullPolicy: corev1.PullNever}}}}))
	running(t, ctx, cl, ns, "shop-admin")
	// One whose container, not its pod, runs as root: its reader runs as 65532 too.
	require.NoError(t, cl.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "shop-ops", Namespace: ns}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "ops", Image: images.PauseName, ImagePullPolicy: corev1.PullNever,
			SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](0)}}}}}))
	running(t, ctx, cl, ns, "shop-ops")

	// A backup: the Backup records the volume's data.
	backup, v := e.backupOfOneVolume(t, ns, "shop-1", "velero-volumes", app, veleroapi.VolumeMethodFileSystem)
	assert.Equal(t, "shop", v.Pod)
	assert.Equal(t, "data", v.PodVolume)
	assert.Equal(t, "kopia", v.Uploader)
	assert.Equal(t, "Completed", v.Phase)
	assert.NotEmpty(t, v.SnapshotID)
	assert.Equal(t, velerostack.BSLName, v.StorageLocation)
	assert.Equal(t, size, v.Bytes, "the uploader counted every byte of the files")
	pvc := &corev1.PersistentVolumeClaim{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "data"}, pvc))
	assert.Equal(t, string(pvc.UID), v.PersistentVolumeClaimUID)

	// The verifier reads the volume's data from the repository Velero's node agent wrote.
	files := fileCount(want)
	e.verifyVolumeData(t, ns, backup, v, files, size)
	e.fullRestore(t, ns, backup.Spec.DriverMetadata[veleroapi.MetaBackupName], files)

	// The volume is lost: the pods and the claim are deleted, the provisioner removes the data.
	others := []string{"shop-admin", "shop-ops"}
	for _, name := range others {
		require.NoError(t, cl.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}, client.GracePeriodSeconds(0)))
	}
	e.lose(t, ns, "shop", "data", dir)
	for _, name := range others {
		require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
			return apierrors.IsNotFound(cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.Pod{})), nil
		}), "pod %s is gone", name)
	}

	// Without the resource modifier that unbinds restored claims, the restore of a Backup with
	// volume data fails at once, saying what to create; nothing is restored.
	unconfigured := e.restore(t, ns, "shop-unconfigured", backup)
	require.Equal(t, backupsv1.RestoreJobFailed, unconfigured.Status.Phase)
	assert.Equal(t, "ClaimsModifierMissing", meta.FindStatusCondition(unconfigured.Status.Conditions, backupsv1.ConditionReady).Reason)
	assert.Contains(t, unconfigured.Status.Message, "create ConfigMap "+veleroapi.RestoreClaimsModifier+" in namespace "+velerostack.Namespace)
	assert.True(t, apierrors.IsNotFound(cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "data"}, &corev1.PersistentVolumeClaim{})), "nothing was restored")

	// With it (docs/driver-velero.md), a RestoreJob brings the claim, the pod and every file back.
	require.NoError(t, cl.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: veleroapi.RestoreClaimsModifier, Namespace: velerostack.Namespace},
		Data: map[string]string{veleroapi.RestoreClaimsModifierKey: veleroapi.RestoreClaimsModifierRules}}))
	rj := e.restore(t, ns, "shop-1", backup)
	require.Equal(t, backupsv1.RestoreJobSucceeded, rj.Status.Phase, rj.Status.Message)
	running(t, ctx, cl, ns, "shop")
	for _, name := range others {
		running(t, ctx, cl, ns, name)
	}
	got := tree(t, e.volumeDir(t, ns, "data"))
	for p := range got {
		if p == ".velero" || strings.HasPrefix(p, ".velero/") {
			delete(got, p) // the marker Velero's restore leaves for its init container
		}
	}
	assert.Equal(t, want, got, "every file is back byte for byte")
	// The coffer backend's full-restore (the driver's RestoreJob beside the verifier's volume
	// Restore) is proven once, on the data mover's Backup (veleroDataMover): its volume phase is
	// the velero backend's, which fullRestore proved here on file-system data.
}

// verifyVolumeData runs the verifier as deploy/verifier ships it (its Deployment on the node, with
// deploy/verifier/velero applied and its own read-only store identity) on Backup b: checksum-only
// reads every file of the volume's kopia snapshot from the repository Velero wrote; with one byte
// flipped in one of the repository's packs, the same verification is a critical finding naming the
// volume.
func (e *env) verifyVolumeData(t *testing.T, ns string, b *backupsv1.Backup, v veleroapi.VolumeRecord, files, size int64) {
	ctx := e.ctx
	e.deployVerifier(t)
	verify := func(name string) *securityv1.BackupVerifyResult {
		_, res := e.verifyRun(t, ns, name, securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendCoffer, BackupRef: securityv1.BackupRef{Name: b.Name},
			Mode: securityv1.ModeChecksumOnly})
		return res
	}
	codes := func(res *securityv1.BackupVerifyResult) []string {
		var out []string
		for _, f := range res.Spec.Findings {
			out = append(out, f.Code)
		}
		return out
	}

	res := verify("volume-data")
	assert.ElementsMatch(t, []string{securityv1.CodeChecksumMatch, securityv1.CodeVolumeDataMatch}, codes(res), "%+v", res.Spec.Findings)
	assert.Equal(t, "1", res.Spec.Details["volumeSnapshotsRead"])
	assert.Equal(t, strconv.FormatInt(files, 10), res.Spec.Details["volumeFilesRead"])
	assert.Equal(t, strconv.FormatInt(size, 10), res.Spec.Details["volumeBytesRead"])

	// One byte flipped in the middle of the repository's largest pack.
	prefix := velerostack.Prefix + "/kopia/" + ns + "/p"
	var key string
	var largest int64
	for o := range e.stack.S3.ListObjects(ctx, velerostack.Bucket, minio.ListObjectsOptions{Prefix: prefix}) {
		require.NoError(t, o.Err)
		if o.Size > largest {
			key, largest = o.Key, o.Size
		}
	}
	require.NotEmpty(t, key, "Velero's repository for %s holds packs under %s", ns, prefix)
	obj, err := e.stack.S3.GetObject(ctx, velerostack.Bucket, key, minio.GetObjectOptions{})
	require.NoError(t, err)
	orig, err := io.ReadAll(obj)
	obj.Close()
	require.NoError(t, err)
	put := func(data []byte) {
		_, err := e.stack.S3.PutObject(ctx, velerostack.Bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{})
		require.NoError(t, err)
	}
	flipped := bytes.Clone(orig)
	flipped[len(flipped)/2] ^= 0x01
	put(flipped)
	res = verify("volume-data-flipped")
	put(orig)
	assert.Equal(t, securityv1.SeverityCritical, res.Status.WorstSeverity)
	var corrupt *securityv1.Finding
	for i, f := range res.Spec.Findings {
		if f.Code == securityv1.CodeVolumeDataCorrupt {
			corrupt = &res.Spec.Findings[i]
		}
	}
	require.NotNil(t, corrupt, "%+v", res.Spec.Findings)
	assert.Equal(t, securityv1.SeverityCritical, corrupt.Severity)
	if v.Method == veleroapi.VolumeMethodDataMover {
		assert.Equal(t, "velero.io/DataUpload "+velerostack.Namespace+"/"+v.Source, corrupt.Object)
		assert.Contains(t, corrupt.Message, "claim "+ns+"/"+v.PersistentVolumeClaim)
	} else {
		assert.Contains(t, corrupt.Object, "velero.io/PodVolumeBackup "+velerostack.Namespace+"/")
		assert.Contains(t, corrupt.Message, "volume "+v.PodVolume+" of pod "+ns+"/"+v.Pod)
	}
	assert.Contains(t, corrupt.Message, v.SnapshotID)

	// The pack put back, the snapshot reads whole again (and the verifier remembers its record,
	// which the full-restores that follow in the same verifier compare with).
	res = verify("volume-data-again")
	assert.ElementsMatch(t, []string{securityv1.CodeChecksumMatch, securityv1.CodeVolumeDataMatch}, codes(res), "%+v", res.Spec.Findings)
	assert.Equal(t, "1", res.Spec.Details["volumeSnapshotsRead"])
}

// veleroDataMover backs up a claim of the node's CSI driver as Cozystack's default strategy does
// (a CSI snapshot whose data Velero's data mover copies to the storage location): the Backup
// records the claim's data, checksum-only reads every file of it from the repository and finds
// one flipped byte, Velero leaves no snapshot behind, a full-restore verification restores the
// claim into a volume sandbox and compares every file, and once the claim and its volume are
// deleted a RestoreJob provisions a new one with every file back.
func (e *env) veleroDataMover(t *testing.T) {
	ctx, cl := e.ctx, e.cl
	e.shopClass(t, "velero-snapshots", veleroapi.Group, veleroapi.Kind, "namespace-with-volume-snapshots", map[string]string{"backupStorageLocationName": velerostack.BSLName})
	ns := e.namespace(t, "mart")
	app := corev1.TypedLocalObjectReference{APIGroup: ptr.To("apps.cozystack.io"), Kind: "Shop", Name: "mart"}
	dir, _, size := e.application(t, ns, "mart", "data", csidir.StorageClass)
	// The volume is the application's user's, with a file only that user reads: restored by the
	// data mover, no pod of the application brings its user back, so the verifier's reader runs as
	// the volume's owner in the repository's record of it.
	private := filepath.Join(dir, "db", "private.dat")
	require.NoError(t, os.MkdirAll(filepath.Dir(private), 0o700))
	require.NoError(t, os.WriteFile(private, []byte("card numbers\n"), 0o600))
	for _, p := range []string{dir, filepath.Dir(private), private} {
		require.NoError(t, os.Chown(p, shopUser, shopUser))
	}
	want, size := tree(t, dir), size+int64(len("card numbers\n"))

	backup, v := e.backupOfOneVolume(t, ns, "mart-1", "velero-snapshots", app, veleroapi.VolumeMethodDataMover)
	assert.Equal(t, "data", v.PersistentVolumeClaim)
	pvc := &corev1.PersistentVolumeClaim{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "data"}, pvc))
	assert.Equal(t, string(pvc.UID), v.PersistentVolumeClaimUID, "the claim backed up, not one of its name")
	assert.Equal(t, "Completed", v.Phase)
	assert.NotEmpty(t, v.SnapshotID)
	assert.NotEmpty(t, v.Source, "the DataUpload")
	assert.Equal(t, velerostack.BSLName, v.StorageLocation)
	assert.Equal(t, size, v.Bytes, "the data mover counted every byte of the files")
	// The snapshot was the data mover's source only: Velero deleted it, and the driver its copy.
	require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		snaps := &unstructured.UnstructuredList{}
		snaps.SetAPIVersion("snapshot.storage.k8s.io/v1")
		snaps.SetKind("VolumeSnapshotContentList")
		if err := cl.List(ctx, snaps); err != nil {
			return false, err
		}
		return len(snaps.Items) == 0, nil
	}), "no VolumeSnapshotContent is left")

	files := fileCount(want)
	e.verifyVolumeData(t, ns, backup, v, files, size)
	// Full-restore: the data mover restores the claim into a volume sandbox, where the verifier's
	// reader (as the volume's owner) reads every file, compared with the repository's record.
	e.cofferFullRestore(t, ns, backup, files)
	e.changedInTheSandbox(t, ns, backup)

	// The claim is lost with its volume; the restore provisions a new one and fills it.
	e.lose(t, ns, "mart", "data", dir)
	rj := e.restore(t, ns, "mart-1", backup)
	require.Equal(t, backupsv1.RestoreJobSucceeded, rj.Status.Phase, rj.Status.Message)
	running(t, ctx, cl, ns, "mart")
	assert.Equal(t, want, tree(t, e.volumeDir(t, ns, "data")), "every file is back byte for byte")
}

// changedInTheSandbox: a file of the restored claim changed in its volume sandbox after the data
// mover restored it and before the verifier's reader read it is a critical finding naming the
// claim. The verifier is stopped (its Deployment scaled to zero) from the volume Restore's start
// until the file is changed, so the order is the test's, not the machine's; started again, it
// takes the run up where it was.
func (e *env) changedInTheSandbox(t *testing.T, ns string, b *backupsv1.Backup) {
	ctx, cl := e.ctx, e.cl
	restores := e.watchRestores(t)
	_, res := e.verifyRun(t, ns, "changed-in-the-sandbox", securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendVelero,
		BackupRef: securityv1.BackupRef{Name: b.Spec.DriverMetadata[veleroapi.MetaBackupName], Namespace: velerostack.Namespace},
		Mode:      securityv1.ModeFullRestore, SandboxNamespace: "mart-changed" + securityv1.SandboxSuffix}, func(run *securityv1.BackupVerifyRun) {
		restores.awaitVolumeRestore(t, ctx, run)
		e.scaleVerifier(t, 0)
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
			return nestedString(restores.volumeRestoreOf(run), "status", "phase") == "Completed", nil
		}), "the data mover restored the claim")
		sandboxes := &corev1.NamespaceList{}
		require.NoError(t, cl.List(ctx, sandboxes, client.MatchingLabels{securityv1.LabelRunUID: string(run.UID)}))
		var sb string
		for _, n := range sandboxes.Items {
			if strings.Contains(n.Name, "-v-") {
				sb = n.Name
			}
		}
		require.NotEmpty(t, sb, "the run's volume sandbox")
		// Same size, other bytes: only the content's hash tells.
		require.NoError(t, os.WriteFile(filepath.Join(e.volumeDir(t, sb, "data"), "catalog.txt"), []byte("TEA\nCOFFEE\n"), 0o644))
		e.scaleVerifier(t, 1)
	})
	var changed *securityv1.Finding
	for i, f := range res.Spec.Findings {
		// The repository reads clean; what was restored does not match it.
		assert.False(t, f.Code == securityv1.CodeVolumeDataMatch && strings.Contains(f.Message, "restored into the volume sandboxes"), "%+v", f)
		if f.Code == securityv1.CodeVolumeDataRestoreMismatch {
			changed = &res.Spec.Findings[i]
		}
	}
	require.NotNil(t, changed, "the changed file is a finding: %+v", res.Spec.Findings)
	assert.Equal(t, securityv1.SeverityCritical, changed.Severity)
	assert.Contains(t, changed.Message, "claim "+ns+"/data restored otherwise than the repository holds it")
}

// scaleVerifier sets the replicas of the verifier's Deployment and waits until that many run.
func (e *env) scaleVerifier(t *testing.T, replicas int32) {
	ctx, cl := e.ctx, e.cl
	key := client.ObjectKey{Namespace: "ugallu-system", Name: "coffer-verifier"}
	d := &appsv1.Deployment{}
	require.NoError(t, cl.Get(ctx, key, d))
	d.Spec.Replicas = &replicas
	require.NoError(t, cl.Update(ctx, d))
	if replicas > 0 {
		require.NoError(t, manifests.WaitRolledOut(ctx, cl, key, 3*time.Minute))
		return
	}
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods := &corev1.PodList{}
		err := cl.List(ctx, pods, client.InNamespace(key.Namespace), client.MatchingLabels{"app.kubernetes.io/name": "coffer-verifier"})
		return err == nil && len(pods.Items) == 0, err
	}), "the verifier stopped")
}

// deployVerifier runs the verifier as deploy/verifier ships it (its Deployment on the node, with
// deploy/verifier/velero applied and its own read-only store identity), and waits for it.
func (e *env) deployVerifier(t testing.TB) {
	if e.verifierDeployed {
		return
	}
	ctx, cl := e.ctx, e.cl
	root, err := manifests.RepoRoot()
	require.NoError(t, err)
	objs, err := manifests.Render(filepath.Join(root, "deploy", "verifier", "velero"))
	require.NoError(t, err)
	require.NoError(t, manifests.Apply(ctx, cl, objs))
	// The verifier's own store identity, as docs/verifier.md says to make it: read-only, limited
	// to the location's kopia repositories.
	creds, err := e.stack.SessionCredentials(volumes.ReadPolicy(velerostack.Bucket, velerostack.Prefix))
	require.NoError(t, err)
	require.NoError(t, cl.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "coffer-verifier-storage", Namespace: velerostack.Namespace},
		StringData: map[string]string{"cloud": velerostack.CredentialsFile(creds)}}))
	api, err := url.Parse(e.n.Cluster.Config.Host)
	require.NoError(t, err)
	deploy, _, err := manifests.Overlay(root, t.TempDir(), "verifier", api.Hostname(), api.Port())
	require.NoError(t, err)
	require.NoError(t, manifests.Apply(ctx, cl, deploy))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the verifier's log:\n%s", podLogs(t, e.n, "ugallu-system"))
		}
	})
	require.NoError(t, manifests.WaitRolledOut(ctx, cl, client.ObjectKey{Namespace: "ugallu-system", Name: "coffer-verifier"}, 3*time.Minute))
	e.verifierDeployed = true
}

// fullRestore runs a full-restore verification of Velero backup name (the verifier's velero
// backend, as deploy/verifier ships it, already running): the objects are restored into a sandbox
// and compared, then the pod and claim are restored into a volume sandbox whose pod runs the
// verifier's reader in place of the application, Velero's node agent writes the volume's data,
// and every file restored is compared with the repository's record of it. The verifier is killed
// (SIGKILL, as the OOM killer would) once the run's volume Restore exists: the restarted verifier
// takes the run up where it was, and the run's work is done exactly once: each of its two Restores
// created once, one Result, one start and one terminal SecurityEvent, and a restore time that is
// the sum of both Restores' own.
func (e *env) fullRestore(t *testing.T, ns, name string, files int64) {
	ctx, cl := e.ctx, e.cl
	restores := e.watchRestores(t)
	var killed *corev1.Pod
	run, res := e.verifyRun(t, ns, "full-restore", securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendVelero,
		BackupRef: securityv1.BackupRef{Name: name, Namespace: velerostack.Namespace}, Mode: securityv1.ModeFullRestore,
		SandboxNamespace: "shop-verify" + securityv1.SandboxSuffix}, func(run *securityv1.BackupVerifyRun) {
		restores.awaitVolumeRestore(t, ctx, run)
		killed = e.killVerifier(t)
	})
	var restored *securityv1.Finding
	for i, f := range res.Spec.Findings {
		assert.NotEqual(t, securityv1.SeverityCritical, f.Severity, "%+v", f)
		// Every pod was restored (the root one's reader as 65532) and every file read.
		assert.NotContains(t, []string{securityv1.CodeRestorePartiallyFailed, securityv1.CodeVolumeDataNotRead}, f.Code, "%+v", f)
		if f.Code == securityv1.CodeVolumeDataMatch && strings.Contains(f.Message, "restored into the volume sandboxes") {
			restored = &res.Spec.Findings[i]
		}
	}
	require.NotNil(t, restored, "the volume's data was restored and compared: %+v", res.Spec.Findings)
	assert.Contains(t, restored.Message, fmt.Sprintf("all %d file(s) identical", files))
	assert.Equal(t, "1", res.Spec.Details["volumesRestored"])
	assert.Equal(t, strconv.FormatInt(files, 10), res.Spec.Details["volumeFilesCompared"])
	// The restarted verifier remembers no earlier read of the snapshot: it read it again.
	assert.Equal(t, "1", res.Spec.Details["volumeSnapshotsRead"])
	assert.Empty(t, res.Spec.Details["volumeRecordsRemembered"])
	e.sandboxesGone(t, run)

	// The kill was a crash the verifier survived in place: its container restarted once.
	p := &corev1.Pod{}
	require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(killed), p))
	require.Len(t, p.Status.ContainerStatuses, 1)
	assert.Equal(t, killed.Status.ContainerStatuses[0].RestartCount+1, p.Status.ContainerStatuses[0].RestartCount, "the verifier was killed once")
	// Exactly once: two Restores (objects, volume data), each created once and deleted at the end.
	made := restores.of(run)
	require.Len(t, made, 2, "one Restore of the objects, one of the volume data, neither made twice: %v", slices.Collect(maps.Keys(made)))
	var spans [][2]time.Time
	for _, r := range made {
		assert.True(t, restores.isDeleted(r), "Restore %s deleted with the run", r.GetName())
		done, err := time.Parse(time.RFC3339, nestedString(r, "status", "completionTimestamp"))
		require.NoError(t, err, "Restore %s completed", r.GetName())
		spans = append(spans, [2]time.Time{r.GetCreationTimestamp().Time, done})
	}
	// The two Restores ran at once (the volume data's started with the objects'): the restore
	// time is that of their union.
	slices.SortFunc(spans, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
	require.Len(t, spans, 2)
	union := spans[0][1].Sub(spans[0][0]) + max(0, spans[1][1].Sub(maxTime(spans[0][1], spans[1][0])))
	assert.Equal(t, strconv.FormatInt(int64(union.Seconds()), 10), res.Spec.Details[securityv1.DetailRestoreSeconds], "the restore time covers objects and data")
	results := &securityv1.BackupVerifyResultList{}
	require.NoError(t, cl.List(ctx, results, client.InNamespace(ns), client.MatchingLabels{securityv1.LabelRun: run.Name}))
	assert.Len(t, results.Items, 1, "exactly one Result")
	events := &securityv1.SecurityEventList{}
	require.NoError(t, cl.List(ctx, events, client.MatchingLabels{securityv1.LabelRunUID: string(run.UID)}))
	byType := map[string]int{}
	for _, ev := range events.Items {
		byType[ev.Spec.Type]++
	}
	assert.Equal(t, map[string]int{securityv1.EventBackupVerifyStarted: 1, securityv1.EventBackupVerifyCompleted: 1}, byType, "one start, one terminal event")
}

// sandboxesGone waits until the sandboxes of run are deleted, as they are once it ended.
func (e *env) sandboxesGone(t testing.TB, run *securityv1.BackupVerifyRun) {
	require.NoError(t, wait.PollUntilContextTimeout(e.ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list := &corev1.NamespaceList{}
		if err := e.cl.List(ctx, list, client.MatchingLabels{securityv1.LabelRunUID: string(run.UID)}); err != nil {
			return false, err
		}
		return len(list.Items) == 0, nil
	}), "the run's sandboxes are deleted")
}

// cofferFullRestore verifies Backup b by full-restore through the coffer backend, as a Plan's
// verification does: driver-velero restores the objects into the sandbox (a RestoreJob), the
// verifier restores the volume data into a volume sandbox where its reader runs and compares every
// file with the repository; the Backup is Verified by a restore that covers its data.
func (e *env) cofferFullRestore(t *testing.T, ns string, b *backupsv1.Backup, files int64) {
	restores := e.watchRestores(t)
	downloads := e.watchVelero(t, schema.GroupVersionResource{Group: "velero.io", Version: "v2alpha1", Resource: "datadownloads"})
	sandbox := "shop-coffer" + securityv1.SandboxSuffix
	run, res := e.verifyRun(t, ns, "coffer-full-restore", securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendCoffer,
		BackupRef: securityv1.BackupRef{Name: b.Name}, Mode: securityv1.ModeFullRestore, SandboxNamespace: sandbox})
	// The data was moved once, into the volume sandbox where the reader compared it: the driver's
	// restore of the objects into the sandbox (volumeData "false") moved none.
	moved := downloads.targets(run.CreationTimestamp)
	t.Logf("coffer-backend full-restore: %s from the run's creation to its completion (API server's clock); DataDownloads by target namespace: %v",
		run.Status.CompletionTime.Sub(run.CreationTimestamp.Time), moved)
	assert.Zero(t, moved[sandbox], "DataDownloads into the object sandbox: %v", moved)
	assert.Len(t, moved, 1, "one DataDownload, into the volume sandbox: %v", moved)
	for target, n := range moved {
		assert.Equal(t, 1, n, target)
		assert.NotEqual(t, sandbox, target)
	}
	var match *securityv1.Finding
	for i, f := range res.Spec.Findings {
		assert.False(t, f.Severity.AtLeast(securityv1.SeverityMedium), "%+v", f)
		assert.NotEqual(t, securityv1.CodeVolumeDataNotVerified, f.Code, "%+v", f)
		if f.Code == securityv1.CodeVolumeDataMatch {
			match = &res.Spec.Findings[i]
		}
		if f.Code == securityv1.CodeRestoreSucceeded {
			assert.Contains(t, f.Message, fmt.Sprintf("1 volume(s) restored into a volume sandbox and compared with the repository file by file (%d file(s))", files))
		}
	}
	require.NotNil(t, match, "the volume's data was restored and compared: %+v", res.Spec.Findings)
	assert.Contains(t, match.Message, fmt.Sprintf("all %d file(s) identical", files))
	assert.Equal(t, "1", res.Spec.Details["volumesRestored"])
	// The restored files were compared with the snapshot's record as the last checksum-only
	// (verifyVolumeData's, the same verifier) read it whole: the snapshot was not read again.
	assert.Equal(t, "1", res.Spec.Details["volumeRecordsRemembered"])
	assert.Empty(t, res.Spec.Details["volumeSnapshotsRead"])
	// The verdict of the full-restore is on the Backup (Verified stays False: the newest checksum
	// verdict, of the flipped byte, failed), with the restore time of objects and data.
	var fr *backupsv1.VerificationVerdict
	require.NoError(t, wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		verified := &backupsv1.Backup{}
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(b), verified); err != nil {
			return false, err
		}
		if v := verified.Status.Verification; v != nil && v.FullRestore != nil && v.FullRestore.ResultRef != nil && v.FullRestore.ResultRef.Name == run.Status.ResultName() {
			fr = v.FullRestore
		}
		return fr != nil, nil
	}), "the full-restore's verdict is written on the Backup")
	assert.Equal(t, backupsv1.VerificationPassed, fr.Result, fr.Message)
	require.NotNil(t, fr.RestoreDuration)
	assert.Equal(t, res.Spec.Details[securityv1.DetailRestoreSeconds], strconv.FormatInt(int64(fr.RestoreDuration.Seconds()), 10))
	e.sandboxesGone(t, run)
	// The verifier's own volume Restore ended with the run (the driver's Restore is the driver's).
	require.NoError(t, wait.PollUntilContextTimeout(e.ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
		vr := restores.volumeRestoreOf(run)
		return vr != nil && restores.isDeleted(vr), nil
	}), "the run's volume Restore was made and deleted")
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// killVerifier SIGKILLs the verifier's container and returns its pod as it was just before.
func (e *env) killVerifier(t *testing.T) *corev1.Pod {
	pods := &corev1.PodList{}
	require.NoError(t, e.cl.List(e.ctx, pods, client.InNamespace("ugallu-system"), client.MatchingLabels{"app.kubernetes.io/name": "coffer-verifier"}))
	require.Len(t, pods.Items, 1)
	p := &pods.Items[0]
	require.Len(t, p.Status.ContainerStatuses, 1)
	require.NotNil(t, p.Status.ContainerStatuses[0].State.Running, "the verifier runs")
	require.NoError(t, e.n.KillContainer(p.Status.ContainerStatuses[0].ContainerID))
	t.Logf("killed the verifier's container in pod %s", p.Name)
	return p
}

// restoreWatch records every Velero Restore (or another object of Velero's, watchVelero) of
// Velero's namespace as last seen, by UID, from a watch started before the run: a Restore made
// twice shows as two UIDs.
type restoreWatch struct {
	mu      sync.Mutex
	seen    map[types.UID]*unstructured.Unstructured
	deleted map[types.UID]bool
}

func (e *env) watchRestores(t testing.TB) *restoreWatch {
	return e.watchVelero(t, schema.GroupVersionResource{Group: "velero.io", Version: "v1", Resource: "restores"})
}

// watchVelero watches the objects of resource in Velero's namespace.
func (e *env) watchVelero(t testing.TB, resource schema.GroupVersionResource) *restoreWatch {
	dyn, err := dynamic.NewForConfig(e.n.Cluster.Config)
	require.NoError(t, err)
	w, err := dyn.Resource(resource).Namespace(velerostack.Namespace).
		Watch(e.ctx, metav1.ListOptions{})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	rw := &restoreWatch{seen: map[types.UID]*unstructured.Unstructured{}, deleted: map[types.UID]bool{}}
	go func() {
		for ev := range w.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			rw.mu.Lock()
			rw.seen[u.GetUID()] = u
			if ev.Type == watch.Deleted {
				rw.deleted[u.GetUID()] = true
			}
			rw.mu.Unlock()
		}
	}()
	return rw
}

// isDeleted tells whether Restore r was seen deleted.
func (rw *restoreWatch) isDeleted(r *unstructured.Unstructured) bool {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return rw.deleted[r.GetUID()]
}

// targets counts the DataDownloads seen (a watch of them) created at or after since, by the
// namespace of the claim each restores into.
func (rw *restoreWatch) targets(since metav1.Time) map[string]int {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	out := map[string]int{}
	for _, dd := range rw.seen {
		if c := dd.GetCreationTimestamp(); !c.Before(&since) {
			out[nestedString(dd, "spec", "targetVolume", "namespace")]++
		}
	}
	return out
}

// of returns the Restores of run, by UID.
func (rw *restoreWatch) of(run *securityv1.BackupVerifyRun) map[types.UID]*unstructured.Unstructured {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	out := map[types.UID]*unstructured.Unstructured{}
	for uid, r := range rw.seen {
		if r.GetLabels()[securityv1.LabelRunUID] == string(run.UID) {
			out[uid] = r
		}
	}
	return out
}

// awaitVolumeRestore waits until run's volume Restore exists.
func (rw *restoreWatch) awaitVolumeRestore(t testing.TB, ctx context.Context, run *securityv1.BackupVerifyRun) {
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		return rw.volumeRestoreOf(run) != nil, nil
	}), "the run's volume Restore was created")
}

// volumeRestoreOf returns run's Restore of volume data (the one with the volume readers' resource
// modifiers), or nil.
func (rw *restoreWatch) volumeRestoreOf(run *securityv1.BackupVerifyRun) *unstructured.Unstructured {
	for _, r := range rw.of(run) {
		if nestedString(r, "spec", "resourceModifier", "name") == "coffer-verifier-volume-readers" {
			return r
		}
	}
	return nil
}

func nestedString(u *unstructured.Unstructured, fields ...string) string {
	s, _, _ := unstructured.NestedString(u.Object, fields...)
	return s
}

// verifyRun runs a BackupVerifyRun of spec (timeout 5 minutes) in namespace ns and returns it,
// Succeeded, with its Result; during, when given, is called once the run exists.
func (e *env) verifyRun(t testing.TB, ns, name string, spec securityv1.BackupVerifyRunSpec, during ...func(*securityv1.BackupVerifyRun)) (*securityv1.BackupVerifyRun, *securityv1.BackupVerifyResult) {
	ctx, cl := e.ctx, e.cl
	spec.Timeout = &metav1.Duration{Duration: 5 * time.Minute}
	run := &securityv1.BackupVerifyRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
	require.NoError(t, cl.Create(ctx, run))
	for _, f := range during {
		f(run)
	}
	ended(t, ctx, cl, run, func() bool { return run.Status.Phase.IsTerminal() })
	require.Equal(t, securityv1.RunSucceeded, run.Status.Phase, "%+v", run.Status)
	res := &securityv1.BackupVerifyResult{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: run.Status.ResultName()}, res))
	return run, res
}

// jobDriver: the sample JobBackupStrategy (volume-tar) backs up the claim <application>-data,
// provisioned like any user's, and restores it into a new claim of the same name.
func (e *env) jobDriver(t *testing.T) {
	ctx, cl := e.ctx, e.cl
	const bucket = "coffer-job" // beside Velero's
	require.NoError(t, e.stack.S3.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}))
	e.shopClass(t, "job-volumes", jobapi.Group, jobapi.Kind, "volume-tar", map[string]string{"endpoint": e.stack.S3URL(), "bucket": bucket, "credentialsSecret": "coffer-s3"})
	ns := e.namespace(t, "cart")
	require.NoError(t, cl.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "coffer-s3", Namespace: ns},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": velerostack.AccessKey, "AWS_SECRET_ACCESS_KEY": velerostack.SecretKey}}))
	app := corev1.TypedLocalObjectReference{APIGroup: ptr.To("apps.cozystack.io"), Kind: "Shop", Name: "cart"}
	dir, want, size := e.application(t, ns, "cart", "cart-data", "")

	backup := e.backup(t, ns, "cart-1", "job-volumes", app)
	assert.Greater(t, backup.Status.Artifact.SizeBytes, int64(0))
	t.Logf("Backup %s: %s, %d bytes of %d in the volume", backup.Name, backup.Status.Artifact.URI, backup.Status.Artifact.SizeBytes, size)

	// The volume is lost; the application gets a new, empty claim, which the restore fills. The
	// backup's Job goes first, as its ttlSecondsAfterFinished would make it go: Kubernetes keeps a
	// claim that any scheduled pod names, finished or not (docs/driver-job.md).
	require.NoError(t, cl.DeleteAllOf(ctx, &batchv1.Job{}, client.InNamespace(ns), client.PropagationPolicy(metav1.DeletePropagationBackground)))
	e.lose(t, ns, "cart", "cart-data", dir)
	claim(t, ctx, cl, ns, "cart-data", "")
	rj := e.restore(t, ns, "cart-1", backup)
	require.Equal(t, backupsv1.RestoreJobSucceeded, rj.Status.Phase, rj.Status.Message)
	assert.Equal(t, want, tree(t, e.volumeDir(t, ns, "cart-data")), "every file is back byte for byte")
}

// jobDriverSnapshotFirst backs up a claim of the node's CSI driver with the sample strategy
// volume-tar made snapshot-first (spec.volumeSnapshot): the backup Job reads a clone of a CSI
// snapshot of the claim, which the driver deletes with the snapshot once the Job has ended; the
// claim is lost and a new one restored byte for byte.
func (e *env) jobDriverSnapshotFirst(t *testing.T) {
	ctx, cl := e.ctx, e.cl
	const bucket = "coffer-job-snapshots"
	require.NoError(t, e.stack.S3.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}))
	root, err := manifests.RepoRoot()
	require.NoError(t, err)
	samples, err := manifests.Render(filepath.Join(root, "deploy", "samples"))
	require.NoError(t, err)
	var strategy *unstructured.Unstructured
	for _, o := range samples {
		if o.GetKind() == "JobBackupStrategy" && o.GetName() == "volume-tar" {
			strategy = o.DeepCopy()
		}
	}
	require.NotNil(t, strategy)
	strategy.SetName("volume-tar-snapshot-first")
	require.NoError(t, unstructured.SetNestedMap(strategy.Object, map[string]any{"volumeSnapshotClassName": csidir.SnapshotClass}, "spec", "volumeSnapshot"))
	require.NoError(t, cl.Create(ctx, strategy))
	e.shopClass(t, "job-snapshots", jobapi.Group, jobapi.Kind, strategy.GetName(), map[string]string{"endpoint": e.stack.S3URL(), "bucket": bucket, "credentialsSecret": "coffer-s3"})
	ns := e.namespace(t, "deli")
	require.NoError(t, cl.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "coffer-s3", Namespace: ns},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": velerostack.AccessKey, "AWS_SECRET_ACCESS_KEY": velerostack.SecretKey}}))
	app := corev1.TypedLocalObjectReference{APIGroup: ptr.To("apps.cozystack.io"), Kind: "Shop", Name: "deli"}
	dir, want, _ := e.application(t, ns, "deli", "deli-data", csidir.StorageClass)

	backup := e.backup(t, ns, "deli-1", "job-snapshots", app)
	jobs := &batchv1.JobList{}
	require.NoError(t, cl.List(ctx, jobs, client.InNamespace(ns)))
	require.Len(t, jobs.Items, 1)
	var mounted []string
	for _, v := range jobs.Items[0].Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			mounted = append(mounted, v.PersistentVolumeClaim.ClaimName)
			assert.True(t, v.PersistentVolumeClaim.ReadOnly, "the clone is mounted read-only")
		}
	}
	require.Len(t, mounted, 1)
	assert.NotEqual(t, "deli-data", mounted[0], "the Job read a clone, not the application's claim")
	// The snapshot is gone once the Job has ended, and the clone with the Job.
	require.NoError(t, cl.DeleteAllOf(ctx, &batchv1.Job{}, client.InNamespace(ns), client.PropagationPolicy(metav1.DeletePropagationBackground)))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		snaps := &unstructured.UnstructuredList{}
		snaps.SetAPIVersion("snapshot.storage.k8s.io/v1")
		snaps.SetKind("VolumeSnapshotList")
		if err := cl.List(ctx, snaps, client.InNamespace(ns)); err != nil {
			return false, err
		}
		err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: mounted[0]}, &corev1.PersistentVolumeClaim{})
		return len(snaps.Items) == 0 && apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}), "the snapshot and the clone are deleted")
	t.Logf("Backup %s: %s, %d bytes", backup.Name, backup.Status.Artifact.URI, backup.Status.Artifact.SizeBytes)

	e.lose(t, ns, "deli", "deli-data", dir)
	claim(t, ctx, cl, ns, "deli-data", csidir.StorageClass)
	rj := e.restore(t, ns, "deli-1", backup)
	require.Equal(t, backupsv1.RestoreJobSucceeded, rj.Status.Phase, rj.Status.Message)
	assert.Equal(t, want, tree(t, e.volumeDir(t, ns, "deli-data")), "every file is back byte for byte")
}

// shopUser is the user the application's container runs as; its pod says podUser, which the
// container's own overrides (as a chart that sets both has it).
const (
	shopUser = 1001
	podUser  = 1000
)

// shop creates a claim of StorageClass class (empty for the default) and a pod that mounts it, its
// container running as shopUser, and waits until the pod runs (the claim is then bound).
func shop(t testing.TB, ctx context.Context, cl client.Client, ns, name, claimName, class string) {
	claim(t, ctx, cl, ns, claimName, class)
	require.NoError(t, cl.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](podUser)},
		Containers: []corev1.Container{{Name: "shop", Image: images.PauseName, ImagePullPolicy: corev1.PullNever,
			SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](shopUser)},
			VolumeMounts:    []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
		Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName}}}},
	}}))
	running(t, ctx, cl, ns, name)
}

// claim creates a claim of 256 MiB of StorageClass class (empty for the default).
func claim(t testing.TB, ctx context.Context, cl client.Client, ns, name, class string) {
	var sc *string
	if class != "" {
		sc = &class
	}
	require.NoError(t, cl.Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: sc,
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("256Mi")}}}}))
}

// dump logs what Velero and the namespace hold, for a failed test.
func dump(t testing.TB, cl client.Client, ns string) {
	for _, l := range []struct{ apiVersion, kind, ns string }{
		{"velero.io/v1", "RestoreList", velerostack.Namespace}, {"velero.io/v1", "PodVolumeRestoreList", velerostack.Namespace},
		{"velero.io/v1", "PodVolumeBackupList", velerostack.Namespace}, {"v1", "PodList", ns}, {"v1", "PodList", velerostack.Namespace},
		{"v1", "PersistentVolumeClaimList", ns}, {"backups.cozystack.io/v1alpha1", "RestoreJobList", ns},
	} {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion(l.apiVersion)
		list.SetKind(l.kind)
		if err := cl.List(context.Background(), list, client.InNamespace(l.ns)); err != nil {
			t.Logf("%s: %v", l.kind, err)
			continue
		}
		for _, o := range list.Items {
			t.Logf("%s %s/%s: spec %v\nstatus %v", l.kind, o.GetNamespace(), o.GetName(), o.Object["spec"], o.Object["status"])
		}
	}
}

// ended waits until done says o (re-read each second) has ended.
func ended(t testing.TB, ctx context.Context, cl client.Client, o client.Object, done func() bool) {
	t.Helper()
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			return false, err
		}
		return done(), nil
	}), "%T %s ended", o, o.GetName())
}

func running(t testing.TB, ctx context.Context, cl client.Client, ns, name string) {
	t.Helper()
	p := &corev1.Pod{}
	require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return p.Status.Phase == corev1.PodRunning, nil
	}), "pod %s/%s runs: %v", ns, name, p.Status)
}

// volumeDir is the directory on the node that holds claim's volume (a local volume's path, or
// the CSI driver's directory of the volume).
func (e *env) volumeDir(t testing.TB, ns, claim string) string {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{}
	require.NoError(t, e.cl.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: claim}, pvc))
	require.NotEmpty(t, pvc.Spec.VolumeName, "the claim is bound")
	pv := &corev1.PersistentVolume{}
	require.NoError(t, e.cl.Get(e.ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv))
	if pv.Spec.CSI != nil {
		require.Equal(t, csidir.Driver, pv.Spec.CSI.Driver)
		return filepath.Join(e.csi.Volumes, pv.Spec.CSI.VolumeHandle)
	}
	require.NotNil(t, pv.Spec.Local, "a local volume")
	return pv.Spec.Local.Path
}

// tree maps every regular file under dir to its SHA-256, and every directory to "dir".
func tree(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.IsDir():
			out[rel] = "dir"
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			out[rel] = hex.EncodeToString(sum[:])
		default:
			out[rel] = d.Type().String()
		}
		return nil
	}))
	return out
}

// podLogs returns the logs of every container of every pod in namespace ns, for a failed test.
func podLogs(t testing.TB, n *node.Node, ns string) string {
	cs, err := kubernetes.NewForConfig(n.Cluster.Config)
	if err != nil {
		return err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		for _, c := range p.Spec.Containers {
			raw, err := cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, TailLines: ptr.To[int64](200)}).DoRaw(ctx)
			if err != nil {
				raw = []byte(err.Error())
			}
			fmt.Fprintf(&b, "--- %s/%s:\n%s\n", p.Name, c.Name, raw)
		}
	}
	return b.String()
}
