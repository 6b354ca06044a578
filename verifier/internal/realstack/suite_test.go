// Package realstack tests the verifier against a real kube-apiserver and etcd, a real Velero
// server and a real S3 store (MinIO) on loopback.
package realstack

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	velerov2 "github.com/vmware-tanzu/velero/pkg/apis/velero/v2alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
	"github.com/coffer-backup/coffer/verifier/internal/backend"
	"github.com/coffer-backup/coffer/verifier/internal/coffercheck"
	"github.com/coffer-backup/coffer/verifier/internal/etcdsnap"
	bvsandbox "github.com/coffer-backup/coffer/verifier/internal/sandbox"
	"github.com/coffer-backup/coffer/verifier/internal/velerocheck"
	"github.com/coffer-backup/coffer/verifier/internal/verifyrun"
)

var (
	cl      client.WithWatch
	stack   *velerostack.Stack
	lc      *cluster.Cluster
	snapDir string
)

func init() {
	utilruntime.Must(velerov1.AddToScheme(cluster.Scheme))
	utilruntime.Must(velerov2.AddToScheme(cluster.Scheme))
}

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	ctx := context.Background()
	// kube-controller-manager deletes namespaces, so sandboxes really go away.
	env, err := velerostack.StartEnvWith(ctx, cluster.Options{ControllerManager: true}, "deploy/verifier/crd", "deploy/verifier/securityevents", "deploy/core-controller/crd")
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the cluster and the Velero stack:", err)
		return 1
	}
	defer env.Stop()
	lc, stack, cl = env.Cluster, env.Stack, env.Client
	if err := installVerifier(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "installing deploy/verifier:", err)
		return 1
	}
	if snapDir, err = os.MkdirTemp("", "etcd-snapshots-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(snapDir)
	return m.Run()
}

// verifierSA is the ServiceAccount deploy/verifier runs the verifier as.
var verifierSA = types.NamespacedName{Namespace: "ugallu-system", Name: "coffer-verifier"}

// installVerifier applies what deploy/verifier ships that a cluster without nodes can take (RBAC,
// the admission policies) and deploy/verifier/velero (the sandbox's resource modifiers, which
// every full-restore's Restore names, and the storage-CA Role) in Velero's namespace.
func installVerifier(ctx context.Context) error {
	root, err := manifests.RepoRoot()
	if err != nil {
		return err
	}
	objs, err := manifests.Render(filepath.Join(root, "deploy", "verifier"))
	if err != nil {
		return err
	}
	take, _ := manifests.Nodeless(objs)
	velero, err := manifests.Render(filepath.Join(root, "deploy", "verifier", "velero"))
	if err != nil {
		return err
	}
	return manifests.Apply(ctx, cl, append(take, velero...))
}

// harness is a reconciler with a fake clock, called directly so that tests control every step.
type harness struct {
	t     testing.TB
	clock *clocktesting.FakeClock
	r     *verifyrun.Reconciler
}

func newHarness(t testing.TB) *harness {
	h := &harness{t: t, clock: clocktesting.NewFakeClock(time.Now())}
	h.r = h.reconciler(cl)
	return h
}

// reconciler is a fresh instance, as after a restart; reader lets tests inject faults.
func (h *harness) reconciler(reader client.Reader) *verifyrun.Reconciler {
	return &verifyrun.Reconciler{
		Client: cl,
		Backends: map[securityv1.Backend]backend.Backend{
			securityv1.BackendVelero: &velerocheck.Checker{Reader: reader, Client: cl, DownloadTimeout: time.Minute,
				Sandbox: &bvsandbox.Maker{Reader: reader, Client: cl, ServiceAccount: verifierSA}},
			securityv1.BackendEtcdSnapshot: &etcdsnap.Backend{Dir: snapDir},
		},
		Clock:     h.clock,
		Recorder:  &events.FakeRecorder{},
		ClusterID: "c-123", ClusterName: "test",
	}
}

// velero is the reconciler's velero backend.
func (h *harness) velero() *velerocheck.Checker {
	return h.r.Backends[securityv1.BackendVelero].(*velerocheck.Checker)
}

// coffer is the reconciler's coffer backend (cofferHarness).
func (h *harness) coffer() *coffercheck.Checker {
	return h.r.Backends[securityv1.BackendCoffer].(*coffercheck.Checker)
}

// step reconciles once, and then the verdict controller, as the verifier's manager runs both.
func (h *harness) step(run *securityv1.BackupVerifyRun) reconcile.Result {
	h.t.Helper()
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(run)}
	res, err := h.r.Reconcile(context.Background(), req)
	require.NoError(h.t, err)
	_, err = (&verifyrun.VerdictReconciler{Client: cl}).Reconcile(context.Background(), req)
	require.NoError(h.t, err)
	require.NoError(h.t, cl.Get(context.Background(), client.ObjectKeyFromObject(run), run))
	return res
}

// finish reconciles until the run is terminal (waiting for Velero between steps).
func (h *harness) finish(run *securityv1.BackupVerifyRun) {
	h.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 300*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		h.step(run)
		return run.Status.Phase.IsTerminal(), nil
	})
	require.NoError(h.t, err, "run %s did not finish; velero log:\n%s", run.Name, stack.VeleroLog())
}

func newRun(t *testing.T, name string, spec securityv1.BackupVerifyRunSpec) *securityv1.BackupVerifyRun {
	t.Helper()
	run := &securityv1.BackupVerifyRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: spec}
	require.NoError(t, cl.Create(context.Background(), run))
	return run
}

func ptr[T any](v T) *T { return &v }

// namespaceWithData creates ns with objects of several kinds.
func namespaceWithData(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": "web"}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: ns}, Data: map[string]string{"mode": "prod"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "flags", Namespace: ns}, Data: map[string]string{"beta": "true"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "token", Namespace: ns}, Data: map[string][]byte{"t": []byte("x")}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: corev1.ServiceSpec{
			Selector: labels, Ports: []corev1.ServicePort{{Port: 80}}}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(0)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web:1"}}}}}},
	} {
		require.NoError(t, cl.Create(ctx, o))
	}
}

// veleroBackup takes a real Velero backup of namespaces and, when record is set, records the
// tarball's checksum on it as driver-velero does.
func veleroBackup(t testing.TB, name string, record bool, namespaces ...string) *velerov1.Backup {
	t.Helper()
	ctx := context.Background()
	vb := &velerov1.Backup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: velerostack.Namespace},
		Spec: velerov1.BackupSpec{IncludedNamespaces: namespaces, StorageLocation: velerostack.BSLName, SnapshotVolumes: ptr(false)}}
	require.NoError(t, cl.Create(ctx, vb))
	err := wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(vb), vb); err != nil {
			return false, err
		}
		return vb.Status.Phase == velerov1.BackupPhaseCompleted, nil
	})
	require.NoError(t, err, "velero backup %s: %s\n%s", name, vb.Status.Phase, stack.VeleroLog())
	if record {
		if vb.Annotations == nil {
			vb.Annotations = map[string]string{}
		}
		vb.Annotations[backupsv1.AnnotationChecksum] = "sha256:" + hex.EncodeToString(bucketSum(t, velerostack.ObjectKey(name)))
		require.NoError(t, cl.Update(ctx, vb))
	}
	return vb
}

func bucketObject(t testing.TB, key string) []byte {
	t.Helper()
	obj, err := stack.S3.GetObject(context.Background(), velerostack.Bucket, key, minio.GetObjectOptions{})
	require.NoError(t, err)
	defer obj.Close()
	b, err := io.ReadAll(obj)
	require.NoError(t, err)
	return b
}

func bucketSum(t testing.TB, key string) []byte {
	s := sha256.Sum256(bucketObject(t, key))
	return s[:]
}

// flipMiddleByte flips one bit of the middle byte of the stack's object key, and puts the object
// back as it was when the test ends.
func flipMiddleByte(t *testing.T, key string) {
	t.Helper()
	orig := bucketObject(t, key)
	flipped := bytes.Clone(orig)
	flipped[len(flipped)/2] ^= 0x01
	putBucketObject(t, key, flipped)
	t.Cleanup(func() { putBucketObject(t, key, orig) })
}

func putBucketObject(t *testing.T, key string, data []byte) {
	t.Helper()
	_, err := stack.S3.PutObject(context.Background(), velerostack.Bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{})
	require.NoError(t, err)
}

// securityEvents lists the SecurityEvents of a run by type.
func securityEvents(t *testing.T, run *securityv1.BackupVerifyRun) map[string][]securityv1.SecurityEvent {
	t.Helper()
	list := &securityv1.SecurityEventList{}
	require.NoError(t, cl.List(context.Background(), list, client.MatchingLabels{securityv1.LabelRunUID: string(run.UID)}))
	out := map[string][]securityv1.SecurityEvent{}
	for _, e := range list.Items {
		out[e.Spec.Type] = append(out[e.Spec.Type], e)
	}
	return out
}

func result(t testing.TB, run *securityv1.BackupVerifyRun) *securityv1.BackupVerifyResult {
	t.Helper()
	res := &securityv1.BackupVerifyResult{}
	require.NoError(t, cl.Get(context.Background(), client.ObjectKey{Namespace: run.Namespace, Name: run.Status.ResultName()}, res))
	return res
}

func codes(fs []securityv1.Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Code)
	}
	return out
}

func uniq(prefix string) string {
	return prefix + "-" + strings.ToLower(fmt.Sprintf("%x", time.Now().UnixNano()%0xffffff))
}

// backupThrough creates a storage location named name (prefix name in the suite's bucket) with
// the given provider config, waits until Velero finds it Available, and backs up a new namespace
// with data through it; it returns the location and the completed backup.
func backupThrough(t *testing.T, name string, config map[string]string, caCert []byte) (*velerov1.BackupStorageLocation, *velerov1.Backup) {
	t.Helper()
	ctx := context.Background()
	bsl := &velerov1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: velerostack.Namespace},
		Spec: velerov1.BackupStorageLocationSpec{Provider: "aws",
			StorageType: velerov1.StorageType{ObjectStorage: &velerov1.ObjectStorageLocation{Bucket: velerostack.Bucket, Prefix: name, CACert: caCert}},
			Config:      config}}
	require.NoError(t, cl.Create(ctx, bsl))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := cl.Get(ctx, client.ObjectKeyFromObject(bsl), bsl)
		return bsl.Status.Phase == velerov1.BackupStorageLocationPhaseAvailable, err
	}), "velero validates location %s: %s\n%s", name, bsl.Status.Message, stack.VeleroLog())

	ns := uniq(name + "ns")
	namespaceWithData(t, ns)
	vb := &velerov1.Backup{ObjectMeta: metav1.ObjectMeta{Name: ns, Namespace: velerostack.Namespace},
		Spec: velerov1.BackupSpec{IncludedNamespaces: []string{ns}, StorageLocation: bsl.Name, SnapshotVolumes: ptr(false)}}
	require.NoError(t, cl.Create(ctx, vb))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := cl.Get(ctx, client.ObjectKeyFromObject(vb), vb)
		return vb.Status.Phase == velerov1.BackupPhaseCompleted, err
	}), "velero backup through location %s: %s\n%s", name, vb.Status.Phase, stack.VeleroLog())
	return bsl, vb
}
