// Package realstack tests the Velero driver against a real kube-apiserver, a real Velero server and
// a real S3 store (MinIO) on loopback.
package realstack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	velerov2 "github.com/vmware-tanzu/velero/pkg/apis/velero/v2alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/internal/driver"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

// Namespaces the running manager serves; the other tests call reconcilers directly elsewhere.
const (
	managedNS = "shop"
	targetNS  = "shop-copy"
)

var (
	cl    client.WithWatch
	stack *velerostack.Stack
	c     *cluster.Cluster
	sch   = cluster.Scheme
)

func init() {
	utilruntime.Must(velerov1.AddToScheme(sch))
	utilruntime.Must(velerov2.AddToScheme(sch)) // the driver lists DataUploads
	utilruntime.Must(veleroapi.AddToScheme(sch))
}

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env, err := velerostack.StartEnv(ctx, "deploy/core-controller/crd", "deploy/driver-velero/crd", "e2e/harness/testdata")
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the cluster and the Velero stack:", err)
		return 1
	}
	defer env.Stop()
	c, stack, cl = env.Cluster, env.Stack, env.Client
	// The restore-target admission policy: restores into targetNS are run only once it is bound.
	root, err := manifests.RepoRoot()
	if err == nil {
		var policies []*unstructured.Unstructured
		if policies, err = manifests.Render(filepath.Join(root, "deploy", "core-controller", "policies")); err == nil {
			err = manifests.Apply(ctx, cl, policies)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "installing the restore-target policy:", err)
		return 1
	}
	for _, ns := range []string{managedNS, targetNS} {
		if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{
		Scheme:  sch,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cacheOptions(managedNS, targetNS, velerostack.Namespace),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rec := events.NewFakeRecorder(1000)
	go func() {
		for e := range rec.Events {
			managerEvents.Lock()
			managerEvents.seen = append(managerEvents.seen, e)
			managerEvents.Unlock()
		}
	}()
	// The running driver settles the Velero backups it completed (they leave its cache) and
	// watches them apart; the reconcilers the tests drive by hand settle none.
	watcher, err := client.NewWithWatch(c.Config, client.Options{Scheme: sch})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	running = &driver.Driver{Client: mgr.GetClient(), Cache: mgr.GetCache(), Live: mgr.GetAPIReader(), Watcher: watcher, Recorder: rec, HTTP: http.DefaultClient, DownloadTimeout: time.Minute}
	kit := driver.New(running)
	kit.ArtifactConfirmDelay = artifactConfirmDelay
	if err := kit.SetupWithManager(mgr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() { _ = mgr.Start(ctx) }()
	if err := fixtures(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "creating fixtures:", err)
		return 1
	}
	code := m.Run()
	cancel() // stop the manager's watches first, or the API server waits for them on shutdown
	if code != 0 {
		fmt.Fprintln(os.Stderr, "velero server log (tail):\n"+stack.VeleroLog())
	}
	return code
}

// running is the driver the manager runs.
var running *driver.Driver

// managerEvents are the events the running manager's driver emitted ("<type> <reason> <message>").
var managerEvents struct {
	sync.Mutex
	seen []string
}

// emitted reports whether the running manager's driver emitted an event with reason whose message
// contains what.
func emitted(reason, what string) bool { return has(eventsAbout(what), reason, what) }

// eventsAbout are the events of the running manager's driver whose message contains what.
func eventsAbout(what string) []string {
	managerEvents.Lock()
	defer managerEvents.Unlock()
	var out []string
	for _, e := range managerEvents.seen {
		if strings.Contains(e, what) {
			out = append(out, e)
		}
	}
	return out
}

// newKit is the driver on client c, as a restarted process would run it.
// cacheOptions are the driver's own (its Backups trimmed, driver.CacheOptions), over namespaces.
func cacheOptions(namespaces ...string) cache.Options {
	o := driver.CacheOptions()
	o.DefaultNamespaces = map[string]cache.Config{}
	for _, ns := range namespaces {
		o.DefaultNamespaces[ns] = cache.Config{}
	}
	return o
}

func newKit(c client.Client, rec events.EventRecorder) *driver.Kit {
	if rec == nil {
		rec = &events.FakeRecorder{} // discards
	}
	kit := driver.New(&driver.Driver{Client: c, Recorder: rec, HTTP: http.DefaultClient, DownloadTimeout: time.Minute})
	kit.ArtifactConfirmDelay = artifactConfirmDelay
	return kit
}

// artifactConfirmDelay is the kit's wait before an absence counts, shortened for the tests (the
// stack's Velero syncs its storage every 10 seconds).
const artifactConfirmDelay = 15 * time.Second

func newBackupJobReconciler(c client.Client, rec events.EventRecorder) reconcile.Reconciler {
	return newKit(c, rec).BackupJobReconciler()
}

func ptr[T any](v T) *T { return &v }

// fixtures: a strategy, a broken strategy, a class mapping Shop to the Velero driver and Other to
// another driver.
func fixtures(ctx context.Context) error {
	objs := []client.Object{
		&veleroapi.VeleroBackupStrategy{ObjectMeta: metav1.ObjectMeta{Name: "namespace"}, Spec: veleroapi.VeleroBackupStrategySpec{
			VeleroNamespace: velerostack.Namespace,
			BackupTemplate: veleroapi.VeleroTemplate{Spec: k8sruntime.RawExtension{Raw: []byte(`{
				"includedNamespaces": ["{{ .Application.metadata.namespace }}"],
				"storageLocation": "{{ .Parameters.backupStorageLocationName }}",
				"snapshotVolumes": false, "ttl": "24h0m0s"}`)}},
		}},
		&veleroapi.VeleroBackupStrategy{ObjectMeta: metav1.ObjectMeta{Name: "broken"}, Spec: veleroapi.VeleroBackupStrategySpec{
			BackupTemplate: veleroapi.VeleroTemplate{Spec: k8sruntime.RawExtension{Raw: []byte(`{"includedNamespaces": ["{{ .Parameters.nope }}"]}`)}},
		}},
		&backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: "velero"}, Spec: backupsv1.BackupClassSpec{Strategies: []backupsv1.BackupClassStrategy{
			{Application: backupsv1.ApplicationSelector{Kind: "Shop"}, Parameters: map[string]string{"backupStorageLocationName": velerostack.BSLName},
				StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr(veleroapi.Group), Kind: veleroapi.Kind, Name: "namespace"}},
			{Application: backupsv1.ApplicationSelector{Kind: "Other"},
				StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr("jobdriver.backups.cozystack.io"), Kind: "JobBackupStrategy", Name: "x"}},
		}}},
		&backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: "broken"}, Spec: backupsv1.BackupClassSpec{Strategies: []backupsv1.BackupClassStrategy{
			{Application: backupsv1.ApplicationSelector{Kind: "Shop"},
				StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr(veleroapi.Group), Kind: veleroapi.Kind, Name: "broken"}},
		}}},
	}
	for _, o := range objs {
		if err := cl.Create(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

// shop creates a Shop application and returns it.
func shop(t *testing.T, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("apps.cozystack.io/v1alpha1")
	u.SetKind("Shop")
	u.SetNamespace(ns)
	u.SetName(name)
	u.Object["spec"] = map[string]any{"size": "small"}
	if err := cl.Create(context.Background(), u); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return u
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v\nvelero log tail:\n%s", what, err, stack.VeleroLog())
	}
}

// bucketSHA256 hashes an object of the bucket directly.
func bucketSHA256(t *testing.T, key string) (string, int64) {
	t.Helper()
	obj, err := stack.S3.GetObject(context.Background(), velerostack.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	h := sha256.New()
	n, err := io.Copy(h, obj)
	if err != nil {
		t.Fatal(err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), n
}
