package conformance_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/driverkit/conformance"
	"github.com/coffer-backup/coffer/e2e/harness/components"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

// driver-velero, built from its module and run as a process under its shipped RBAC, against a real
// Velero server and MinIO.
func TestDriverVeleroConforms(t *testing.T) {
	ctx := context.Background()
	root, err := manifests.RepoRoot()
	require.NoError(t, err)
	env, err := velerostack.StartEnv(ctx, "e2e/harness/testdata")
	require.NoError(t, err)
	t.Cleanup(env.Stop)
	require.NoError(t, manifests.InstallNodeless(ctx, env.Client, root))
	driver, err := components.Launch(root, t.TempDir(), env.Cluster.Kubeconfig,
		components.Spec{Module: "driver-velero", Binary: "driver-velero", Namespace: "coffer-system"})
	require.NoError(t, err)
	t.Cleanup(func() { components.StopAndCheck(t, driver) })

	conformance.Run(t, conformance.Config{
		Client:           env.Client,
		StrategyAPIGroup: veleroapi.Group, StrategyKind: veleroapi.Kind,
		Namespace: func(t *testing.T) string {
			ns, err := env.Cluster.Namespace(ctx, "conformance")
			require.NoError(t, err)
			return ns
		},
		NewStrategy: func(t *testing.T) (string, map[string]string) {
			s := &veleroapi.VeleroBackupStrategy{ObjectMeta: metav1.ObjectMeta{GenerateName: "conformance-"}, Spec: veleroapi.VeleroBackupStrategySpec{
				BackupTemplate: veleroapi.VeleroTemplate{Spec: runtime.RawExtension{Raw: []byte(`{"includedNamespaces": ["{{ .Application.metadata.namespace }}"], "snapshotVolumes": false}`)}},
			}}
			require.NoError(t, env.Client.Create(ctx, s))
			return s.Name, map[string]string{"backupStorageLocationName": velerostack.BSLName}
		},
		NewApplication: func(t *testing.T, ns string) corev1.TypedLocalObjectReference {
			shop := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Shop",
				"metadata": map[string]any{"name": "shop", "namespace": ns}}}
			require.NoError(t, env.Client.Create(ctx, shop))
			require.NoError(t, env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "catalog", Namespace: ns}, Data: map[string]string{"items": "tea"}}))
			return corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"}
		},
		Restart: func(t *testing.T) {
			driver.Kill()
			require.NoError(t, driver.Restart())
		},
		Restore: true,
		// A Velero backup restores as the application it was taken of (contract RJ-11).
		RestoreSameApplicationOnly: true,
		Timeout:                    4 * time.Minute,
	})
}
