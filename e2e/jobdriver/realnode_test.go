//go:build e2e

// Package jobdriver proves the Job driver on a real node: real batch/v1 Jobs, scheduled by
// kube-scheduler, run by kubelet and containerd, execute coffer-agent (our image, built from its
// static binary) against MinIO; driver-job runs as a process under its shipped RBAC. Besides the
// lifecycle and the conformance suite, a namespace holding a Backup is deleted: it goes at once,
// the cleanup Job it can no longer hold is not needed, and the artifact is kept and said so in an
// ArtifactKept warning that outlives the namespace (contract BK-7). Last, driver-job and
// core-controller (also a process) are SIGKILLed at seeded random moments (COFFER_CHAOS_SEED
// reproduces a schedule) while a Plan fires every minute with keepLast retention, ad-hoc backups
// run, Backups are restored into other applications and deleted: every run must end Succeeded
// within its deadline with one Job, and retention, cleanups and restores must come out exact;
// meanwhile the verifier, reading driver-job's artifacts from MinIO, verifies every Backup of the
// Plan checksum-only by a BackupVerifyPolicy. `kubectl coffer describe` of the failed restore shows
// the agent's pod log, read through the kubelet. It needs root (see e2e/harness/node) and is part of `make e2e`.
package jobdriver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	"github.com/coffer-backup/coffer/driverkit/conformance"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/components"
	"github.com/coffer-backup/coffer/e2e/harness/images"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
	"github.com/coffer-backup/coffer/e2e/harness/node"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

const (
	agentImage = images.AgentName
	bucket     = "coffer"
	agentUID   = 65532
)

type env struct {
	t      *testing.T
	ctx    context.Context
	cl     client.Client
	s3     *velerostack.Stack
	data   string // host directory holding one directory per application: <data>/<ns>/<app>
	driver *components.Component
	n      *node.Node
	// root is the repository, work the directory the components' binaries are built into.
	root, work string
}

func TestJobDriverOnARealNode(t *testing.T) {
	node.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	e := start(t, ctx)

	t.Run("backup, loss, restore, corrupted artifact, deletion", e.lifecycle)
	t.Run("compressed and encrypted: byte for byte, wrong key refused, key rotation", e.sealed)
	t.Run("a namespace holding a Backup is deleted: it goes, the artifact is kept and said so", e.namespaceDeleted)
	t.Run("conformance", func(t *testing.T) {
		conformance.Run(t, conformance.Config{
			Client:           e.cl,
			StrategyAPIGroup: jobapi.Group, StrategyKind: jobapi.Kind,
			Namespace: func(t *testing.T) string {
				ns, err := e.n.Cluster.Namespace(ctx, "conformance")
				require.NoError(t, err)
				require.NoError(t, e.cl.Create(ctx, e.credentials(ns)))
				return ns
			},
			NewStrategy: func(t *testing.T) (string, map[string]string) {
				s := e.strategy("")
				require.NoError(t, e.cl.Create(ctx, s))
				return s.Name, e.params()
			},
			NewApplication: func(t *testing.T, ns string) corev1.TypedLocalObjectReference {
				e.application(t, ns, "shop")
				e.appDir(t, ns, "shop-restored") // the target's volume exists, as a PVC would
				return corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"}
			},
			Restart: func(t *testing.T) {
				e.driver.Kill()
				require.NoError(t, e.driver.Restart())
			},
			Restore: true,
			VerifyRestore: func(t *testing.T, ns string, source, target corev1.TypedLocalObjectReference) {
				assert.Equal(t, tree(t, e.dir(ns, source.Name)), tree(t, e.dir(ns, target.Name)), "the target holds the source's files")
			},
		})
	})
	t.Run("kill -9 of driver-job and core-controller amid a Plan, restores and deletions", e.chaos)
}

func start(t *testing.T, ctx context.Context) *env {
	root, err := manifests.RepoRoot()
	require.NoError(t, err)
	work := t.TempDir()
	return startCluster(t, ctx, root, work, agentImageArchive(t, ctx, root, work))
}

// agentImageArchive builds coffer-agent and its image into work, and returns the image archive.
func agentImageArchive(t *testing.T, ctx context.Context, root, work string) string {
	img, err := images.Agent(ctx, root, work)
	require.NoError(t, err)
	return img.Archive
}

// startCluster starts a node (its own etcd, API server and kubelet) with the agent's image, a
// MinIO on the node's IP serving the data in work/minio, Coffer's CRDs and RBAC, and driver-job.
// A second cluster started on the same work finds the first one's bucket and volumes there.
func startCluster(t *testing.T, ctx context.Context, root, work, image string) *env {
	n, err := node.Start(ctx, node.Options{Images: []string{image}, Logf: t.Logf,
		CRDDirectoryPaths: []string{filepath.Join(root, "e2e", "harness", "testdata")}, LogDir: os.Getenv("COFFER_NODE_LOGS")})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node diagnostics:\n%s", n.Diagnostics())
		}
		assert.NoError(t, n.Stop())
	})
	s3, err := velerostack.StartMinIOOn(ctx, filepath.Join(work, "minio"), n.IP)
	require.NoError(t, err)
	t.Cleanup(s3.Stop)
	if err := s3.S3.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil && minio.ToErrorResponse(err).Code != "BucketAlreadyOwnedByYou" {
		require.NoError(t, err)
	}

	cl, err := client.New(n.Cluster.Config, client.Options{Scheme: cluster.Scheme})
	require.NoError(t, err)
	require.NoError(t, manifests.InstallNodeless(ctx, cl, root))
	driver, err := components.Launch(root, work, n.Cluster.Kubeconfig,
		components.Spec{Module: "driver-job", Binary: "driver-job", Namespace: "coffer-system"})
	require.NoError(t, err)
	t.Cleanup(func() { components.StopAndCheck(t, driver) })

	data := filepath.Join(work, "volumes")
	require.NoError(t, os.MkdirAll(data, 0o755))
	return &env{t: t, ctx: ctx, cl: cl, s3: s3, data: data, driver: driver, n: n, root: root, work: work}
}

func (e *env) params() map[string]string {
	return map[string]string{"endpoint": "http://" + e.s3.S3Endpoint, "bucket": bucket, "credentialsSecret": "coffer-s3"}
}

func (e *env) credentials(ns string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "coffer-s3", Namespace: ns},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": velerostack.AccessKey, "AWS_SECRET_ACCESS_KEY": velerostack.SecretKey}}
}

func agentContainer(args ...string) corev1.Container {
	return corev1.Container{Name: "agent", Image: agentImage, ImagePullPolicy: corev1.PullNever, Args: args,
		EnvFrom:      []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "{{ .Parameters.credentialsSecret }}"}}}},
		VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}
}

// strategy is the sample strategy of deploy/samples with a hostPath volume (this node has no
// storage provisioner): <data>/<namespace>/<application name>, and a verifyTemplate.
func (e *env) strategy(name string) *jobapi.JobBackupStrategy {
	pod := func(args ...string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext:              &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](agentUID), RunAsGroup: ptr.To[int64](agentUID)},
			Containers:                   []corev1.Container{agentContainer(args...)},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: e.data + "/{{ .Application.metadata.namespace }}/{{ .Application.metadata.name }}",
				Type: ptr.To(corev1.HostPathDirectory)}}}},
		}}
	}
	// The verify pod restores into scratch (an emptyDir in the volume's place), never the
	// application's volume.
	verify := pod("--dir=/data", "--endpoint={{ .Parameters.endpoint }}")
	verify.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	s := &jobapi.JobBackupStrategy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: jobapi.JobBackupStrategySpec{
		Template: pod("--dir=/data", "--endpoint={{ .Parameters.endpoint }}", "--bucket={{ .Parameters.bucket }}",
			"--prefix={{ .Application.metadata.namespace }}/{{ .Application.metadata.name }}"),
		CleanupTemplate:       ptr.To(pod("--endpoint={{ .Parameters.endpoint }}")),
		VerifyTemplate:        &verify,
		ActiveDeadlineSeconds: ptr.To[int64](300),
	}}
	if name == "" {
		s.GenerateName = "files-tar-"
	}
	return s
}

// class creates a BackupClass that backs up Shops with strat.
func (e *env) class(t *testing.T, name string, strat *jobapi.JobBackupStrategy) *backupsv1.BackupClass {
	class := &backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: backupsv1.BackupClassSpec{Strategies: []backupsv1.BackupClassStrategy{{
		Application: backupsv1.ApplicationSelector{Kind: "Shop"},
		StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr.To(jobapi.Group), Kind: jobapi.Kind, Name: strat.Name},
		Parameters:  e.params(),
	}}}}
	require.NoError(t, e.cl.Create(e.ctx, class))
	return class
}

func (e *env) dir(ns, app string) string { return filepath.Join(e.data, ns, app) }

// appDir creates an application's volume directory, owned by the agent's user.
func (e *env) appDir(t *testing.T, ns, app string) string {
	d := e.dir(ns, app)
	require.NoError(t, os.MkdirAll(d, 0o755))
	require.NoError(t, os.Chown(d, agentUID, agentUID))
	return d
}

// application creates a Shop and its volume with files of known content.
func (e *env) application(t *testing.T, ns, name string) {
	shop := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Shop",
		"metadata": map[string]any{"name": name, "namespace": ns}}}
	require.NoError(t, e.cl.Create(e.ctx, shop))
	d := e.appDir(t, ns, name)
	blob := make([]byte, 3<<20)
	r := rand.New(rand.NewPCG(1, uint64(len(ns))))
	for i := range blob {
		blob[i] = byte(r.Uint32())
	}
	files := map[string][]byte{
		"catalog.txt":           []byte("tea\ncoffee\ncocoa\n"),
		"orders/2031/03.csv":    []byte("id,qty\n1,2\n2,5\n"),
		"orders/2031/empty.csv": nil,
		"media/blob.bin":        blob,
	}
	for p, b := range files {
		full := filepath.Join(d, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, b, 0o640))
	}
	require.NoError(t, os.Symlink("catalog.txt", filepath.Join(d, "current")))
	require.NoError(t, filepath.WalkDir(d, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, agentUID, agentUID)
	}))
}

// tree describes a directory: every entry's type, mode and content hash or link target.
func tree(t *testing.T, dir string) map[string]string {
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			out[rel] = "link " + target
			return err
		case d.IsDir():
			out[rel] = fmt.Sprintf("dir %v", info.Mode())
		default:
			b, err := os.ReadFile(p)
			sum := sha256.Sum256(b)
			out[rel] = fmt.Sprintf("file %v %s", info.Mode(), hex.EncodeToString(sum[:]))
			return err
		}
		return nil
	}))
	return out
}

func (e *env) wait(t *testing.T, what string, o client.Object, done func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			return false, err
		}
		return done(), nil
	})
	require.NoError(t, err, "waiting for %s\ndriver-job log:\n%s", what, e.driver.Tail())
}

func (e *env) lifecycle(t *testing.T) {
	ctx := e.ctx
	ns, err := e.n.Cluster.Namespace(ctx, "files")
	require.NoError(t, err)
	require.NoError(t, e.cl.Create(ctx, e.credentials(ns)))
	strat := e.strategy("files-tar")
	require.NoError(t, e.cl.Create(ctx, strat))
	class := e.class(t, "files", strat)
	e.application(t, ns, "shop")
	dir := e.dir(ns, "shop")
	original := tree(t, dir)

	// Backup: a real Job runs coffer-agent, which streams the directory to MinIO and reports.
	bj := &backupsv1.BackupJob{ObjectMeta: metav1.ObjectMeta{Name: "files-1", Namespace: ns},
		Spec: backupsv1.BackupJobSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"}, BackupClassName: class.Name}}
	began := time.Now()
	require.NoError(t, e.cl.Create(ctx, bj))
	e.wait(t, "the BackupJob", bj, bj.IsTerminal)
	require.Equal(t, backupsv1.BackupJobSucceeded, bj.Status.Phase, bj.Status.Message)
	t.Logf("BackupJob created → Succeeded: %s", time.Since(began).Round(time.Millisecond))
	b := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: bj.Name, Namespace: ns}}
	e.wait(t, "the Backup", b, func() bool { return b.Status.Phase == backupsv1.BackupReady })
	key := fmt.Sprintf("%s/shop/%s-%s.tar", ns, bj.Name, string(bj.UID)[:8])
	require.Equal(t, "s3://"+bucket+"/"+key, b.Status.Artifact.URI)
	obj, err := e.s3.S3.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	require.NoError(t, err)
	stored, err := io.ReadAll(obj)
	require.NoError(t, err)
	stored256 := sha256.Sum256(stored)
	require.Equal(t, "sha256:"+hex.EncodeToString(stored256[:]), b.Status.Artifact.Checksum, "the Backup's checksum is the stored object's")
	require.Equal(t, int64(len(stored)), b.Status.Artifact.SizeBytes)
	require.Equal(t, []string{"jobdriver.backups.cozystack.io/cleanup"}, b.Finalizers)

	// Beside the artifact, its record (BK-11): this Backup, taken in this cluster.
	robj, err := e.s3.S3.GetObject(ctx, bucket, key+jobapi.RecordSuffix, minio.GetObjectOptions{})
	require.NoError(t, err)
	rdata, err := io.ReadAll(robj)
	require.NoError(t, err)
	record, err := backupsv1.ParseArtifactRecord(rdata)
	require.NoError(t, err, "%s", rdata)
	ks := &corev1.Namespace{}
	require.NoError(t, e.cl.Get(ctx, client.ObjectKey{Name: "kube-system"}, ks))
	assert.Equal(t, string(ks.UID), record.SourceCluster.ID)
	assert.Equal(t, *b.Status.Artifact, record.Artifact)
	assert.Equal(t, b.Spec.ApplicationRef, record.Spec.ApplicationRef)
	assert.Equal(t, b.Spec.StrategyRef, record.Spec.StrategyRef)
	assert.Equal(t, b.Spec.DriverMetadata, record.Spec.DriverMetadata)
	assert.Equal(t, []string{ns, b.Name}, []string{record.Namespace, record.Name})

	// Data lost, then restored byte for byte.
	wipe(t, dir)
	rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: "undo", Namespace: ns},
		Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: b.Name}}}
	require.NoError(t, e.cl.Create(ctx, rj))
	e.wait(t, "the RestoreJob", rj, rj.IsTerminal)
	require.Equal(t, backupsv1.RestoreJobSucceeded, rj.Status.Phase, rj.Status.Message)
	require.Equal(t, original, tree(t, dir), "every file back, identical")

	// A corrupted artifact (one bit flipped, same size): the restore Job fails without writing.
	corrupt := bytes.Clone(stored)
	corrupt[len(corrupt)/2] ^= 0x01
	_, err = e.s3.S3.PutObject(ctx, bucket, key, bytes.NewReader(corrupt), int64(len(corrupt)), minio.PutObjectOptions{})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "catalog.txt"), []byte("edited after the backup\n"), 0o640))
	before := tree(t, dir)
	bad := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: "from-corrupted", Namespace: ns},
		Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: b.Name}}}
	require.NoError(t, e.cl.Create(ctx, bad))
	e.wait(t, "the restore of a corrupted artifact", bad, bad.IsTerminal)
	require.Equal(t, backupsv1.RestoreJobFailed, bad.Status.Phase)
	assert.Contains(t, bad.Status.Message, "checksum", "the pod's own words reach the RestoreJob")
	require.Equal(t, before, tree(t, dir), "nothing was written")
	e.describeShowsPodLog(t, bad)

	// Deleting the Backup runs the cleanup Job, which deletes the object.
	require.NoError(t, e.cl.Delete(ctx, b))
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := e.cl.Get(ctx, client.ObjectKeyFromObject(b), b)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	require.NoError(t, err, "the Backup is released after the cleanup Job\n%s", e.driver.Tail())
	_, err = e.s3.S3.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
	require.Error(t, err)
	assert.Equal(t, "NoSuchKey", minio.ToErrorResponse(err).Code, "the artifact is gone")
}

// describeShowsPodLog runs `kubectl coffer describe` of a failed RestoreJob: it names the
// driver's Job and its pod and shows the tail of the pod's log, read through the kubelet.
func (e *env) describeShowsPodLog(t *testing.T, rj *backupsv1.RestoreJob) {
	bin, err := components.Build(e.root, "kubectl-coffer", "kubectl-coffer", e.work)
	require.NoError(t, err)
	jobs := &batchv1.JobList{}
	require.NoError(t, e.cl.List(e.ctx, jobs, client.InNamespace(rj.Namespace), client.MatchingLabels{"jobdriver.backups.cozystack.io/run-uid": string(rj.UID)}))
	require.Len(t, jobs.Items, 1, "the restore ran one Job")
	pods := &corev1.PodList{}
	require.NoError(t, e.cl.List(e.ctx, pods, client.InNamespace(rj.Namespace), client.MatchingLabels{batchv1.ControllerUidLabel: string(jobs.Items[0].UID)}))
	require.Len(t, pods.Items, 1, "the restore's Job ran one pod")
	cs, err := kubernetes.NewForConfig(e.n.Cluster.Config)
	require.NoError(t, err)
	raw, err := cs.CoreV1().Pods(rj.Namespace).GetLogs(pods.Items[0].Name, &corev1.PodLogOptions{}).DoRaw(e.ctx)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	require.NotEmpty(t, last, "the agent logged why it refused")

	cmd := exec.CommandContext(e.ctx, bin, "--kubeconfig="+e.n.Cluster.Kubeconfig, "describe", "rj/"+rj.Name, "-n", rj.Namespace)
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Logf("$ kubectl coffer describe rj/%s -n %s\n%s", rj.Name, rj.Namespace, out)
	assert.Contains(t, string(out), pods.Items[0].Name, "describe names the restore's pod")
	assert.NotContains(t, string(out), "log unavailable")
	assert.Contains(t, string(out), last, "describe shows the pod's log")
}

// namespaceDeleted deletes a namespace that holds a Ready Backup (with the cleanup finalizer). Its
// cleanup Job cannot be created in a namespace being deleted, so the driver releases the Backup
// and leaves the artifact in storage, saying so in the log and in an ArtifactKept Warning event
// that outlives the namespace (contract BK-7): the namespace never hangs on the finalizer.
func (e *env) namespaceDeleted(t *testing.T) {
	ctx := e.ctx
	ns, err := e.n.Cluster.Namespace(ctx, "doomed")
	require.NoError(t, err)
	require.NoError(t, e.cl.Create(ctx, e.credentials(ns)))
	strat := e.strategy("")
	require.NoError(t, e.cl.Create(ctx, strat))
	class := e.class(t, ns, strat)
	e.application(t, ns, "shop")
	bj := &backupsv1.BackupJob{ObjectMeta: metav1.ObjectMeta{Name: "before-deletion", Namespace: ns},
		Spec: backupsv1.BackupJobSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"}, BackupClassName: class.Name}}
	require.NoError(t, e.cl.Create(ctx, bj))
	e.wait(t, "the BackupJob", bj, bj.IsTerminal)
	require.Equal(t, backupsv1.BackupJobSucceeded, bj.Status.Phase, bj.Status.Message)
	b := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: bj.Name, Namespace: ns}}
	e.wait(t, "the Backup", b, func() bool { return b.Status.Phase == backupsv1.BackupReady })
	require.Equal(t, []string{"jobdriver.backups.cozystack.io/cleanup"}, b.Finalizers)
	uri := b.Status.Artifact.URI
	key := strings.TrimPrefix(uri, "s3://"+bucket+"/")

	start := time.Now()
	require.NoError(t, e.cl.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	const bound = 2 * time.Minute
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, bound, true, func(ctx context.Context) (bool, error) {
		err := e.cl.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	require.NoError(t, err, "the namespace is deleted within %s, its Backup's finalizer released\n%s", bound, e.driver.Tail())
	t.Logf("namespace %s gone %s after its deletion", ns, time.Since(start).Round(100*time.Millisecond))

	_, err = e.s3.S3.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
	assert.NoError(t, err, "the artifact is left in storage")
	assert.Contains(t, e.driver.Log.String(), "artifact kept", "the driver's log says the artifact was kept")
	var kept []string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list := &eventsv1.EventList{}
		if err := e.cl.List(ctx, list); err != nil {
			return false, err
		}
		kept = nil
		for _, ev := range list.Items {
			if ev.Reason == "ArtifactKept" && ev.Type == corev1.EventTypeWarning && strings.Contains(ev.Note, uri) {
				kept = append(kept, ev.Namespace+": "+ev.Note)
			}
		}
		return len(kept) > 0, nil
	})
	assert.NoError(t, err, "an ArtifactKept Warning event naming %s outlives the namespace", uri)
	t.Logf("ArtifactKept: %v", kept)
}
