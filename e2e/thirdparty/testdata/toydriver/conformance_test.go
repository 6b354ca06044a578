package toydriver_test

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/coffer-backup/coffer/driverkit"
	"github.com/coffer-backup/coffer/driverkit/conformance"

	"example.com/toydriver"
)

// The toy driver, run in-process against a real kube-apiserver and etcd, passes Coffer's
// conformance suite.
func TestConformance(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: export KUBEBUILDER_ASSETS=$(hack/testbin.sh) from the Coffer checkout")
	}
	env := &envtest.Environment{ErrorIfCRDPathMissing: true, CRDDirectoryPaths: []string{
		"../../../../deploy/core-controller/crd", // Coffer's kinds
		"../../../harness/testdata",              // the Shop application kind
		"crd",                                    // the driver's strategy kind
	}}
	cfg, err := env.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	c, err := client.New(cfg, client.Options{Scheme: toydriver.Scheme()})
	require.NoError(t, err)

	var holdBackups, holdRestores atomic.Bool
	stop := start(t, cfg, &holdBackups, &holdRestores)
	t.Cleanup(func() { stop() })
	hold := func(b *atomic.Bool) func(*testing.T) func() {
		return func(*testing.T) func() { b.Store(true); return func() { b.Store(false) } }
	}

	conformance.Run(t, conformance.Config{
		Client:           c,
		StrategyAPIGroup: toydriver.GroupVersion.Group, StrategyKind: toydriver.Kind,
		Namespace: func(t *testing.T) string {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "conformance-"}}
			require.NoError(t, c.Create(ctx, ns))
			return ns.Name
		},
		NewStrategy: func(t *testing.T) (string, map[string]string) {
			s := &toydriver.ConfigMapStrategy{ObjectMeta: metav1.ObjectMeta{GenerateName: "conformance-"}}
			require.NoError(t, c.Create(ctx, s))
			return s.Name, map[string]string{"team": "toys"}
		},
		NewApplication: func(t *testing.T, ns string) corev1.TypedLocalObjectReference {
			shop := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Shop",
				"metadata": map[string]any{"name": "shop", "namespace": ns},
				"spec":     map[string]any{"items": []any{"tea", "cake"}, "owner": ns}}}
			require.NoError(t, c.Create(ctx, shop))
			return corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"}
		},
		Restart: func(t *testing.T) {
			stop()
			stop = start(t, cfg, &holdBackups, &holdRestores)
		},
		Restore: true,
		VerifyRestore: func(t *testing.T, ns string, source, target corev1.TypedLocalObjectReference) {
			shop := func(name string) any {
				u := &unstructured.Unstructured{}
				u.SetAPIVersion("apps.cozystack.io/v1alpha1")
				u.SetKind("Shop")
				require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u))
				return u.Object["spec"]
			}
			assert.Equal(t, shop(source.Name), shop(target.Name), "the target has the source's spec")
		},
		HoldBackups:  hold(&holdBackups),
		HoldRestores: hold(&holdRestores),
		Timeout:      time.Minute,
	})
}

// start runs the driver in a manager of its own and returns a func that stops it.
func start(t *testing.T, cfg *rest.Config, holdBackups, holdRestores *atomic.Bool) (stop func()) {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: toydriver.Scheme(),
		Metrics: metricsserver.Options{BindAddress: "0"},
		// A restart registers the same controllers again in this process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	require.NoError(t, err)
	kit := toydriver.New(mgr.GetClient())
	kit.Driver = &held{Driver: kit.Driver, backups: holdBackups, restores: holdRestores}
	require.NoError(t, kit.SetupWithManager(mgr))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return func() {
		cancel()
		assert.NoError(t, <-done, "the driver's manager")
	}
}

// held keeps the driver's backups or restores in progress while the conformance suite holds them.
type held struct {
	driverkit.Driver[*toydriver.ConfigMapStrategy]
	backups, restores *atomic.Bool
}

const heldFor = 200 * time.Millisecond

func (h *held) Backup(ctx context.Context, run *driverkit.BackupRun[*toydriver.ConfigMapStrategy]) (driverkit.BackupOutcome, error) {
	if h.backups.Load() {
		return driverkit.BackupOutcome{Waiting: "held by the conformance suite", RequeueAfter: heldFor}, nil
	}
	return h.Driver.Backup(ctx, run)
}

func (h *held) Restore(ctx context.Context, run *driverkit.RestoreRun[*toydriver.ConfigMapStrategy]) (driverkit.RestoreOutcome, error) {
	if h.restores.Load() {
		return driverkit.RestoreOutcome{Waiting: "held by the conformance suite", RequeueAfter: heldFor}, nil
	}
	return h.Driver.Restore(ctx, run)
}
