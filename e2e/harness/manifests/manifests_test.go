package manifests

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestComponentsRender is `kubectl kustomize deploy/<component>` for each component: every tree
// renders and ships what a component needs.
func TestComponentsRender(t *testing.T) {
	root, err := RepoRoot()
	require.NoError(t, err)
	for _, c := range Components {
		t.Run(c, func(t *testing.T) {
			objs, err := Render(filepath.Join(root, "deploy", c))
			require.NoError(t, err)
			kinds := map[string]int{}
			for _, o := range objs {
				kinds[o.GetKind()]++
			}
			for _, k := range []string{"CustomResourceDefinition", "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
				"Role", "RoleBinding", "Deployment", "Service", "ServiceMonitor"} {
				assert.Positive(t, kinds[k], "deploy/%s ships a %s", c, k)
			}
			assert.Equal(t, "Namespace", objs[0].GetKind(), "namespaces come first")
			if c == "verifier" {
				// The sandbox-suffix policy on runs, and the confinement of the verifier itself.
				assert.Equal(t, 2, kinds["ValidatingAdmissionPolicy"])
				assert.Equal(t, 2, kinds["ValidatingAdmissionPolicyBinding"])
			}
			if c == "core-controller" {
				assert.Equal(t, 1, kinds["PrometheusRule"])
			}
		})
	}
}
