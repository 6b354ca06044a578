package manifests

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestComponentsRender is `kubectl kustomize deploy/<component>` for each component: every tree
// renders and ships what a component needs, and nothing of the Prometheus Operator's (a bare
// cluster lacks its CRDs); deploy/monitoring/<component> adds its ServiceMonitor and PrometheusRule.
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
				"Role", "RoleBinding", "Deployment", "Service"} {
				assert.Positive(t, kinds[k], "deploy/%s ships a %s", c, k)
			}
			for _, o := range objs {
				assert.NotEqual(t, "monitoring.coreos.com", o.GroupVersionKind().Group,
					"deploy/%s ships %s %s: monitoring objects belong in deploy/%s/monitoring", c, o.GetKind(), o.GetName(), c)
			}
			assert.Equal(t, "Namespace", objs[0].GetKind(), "namespaces come first")
			if c == "verifier" {
				// The sandbox-suffix policy on runs, and the confinement of the verifier itself.
				assert.Equal(t, 2, kinds["ValidatingAdmissionPolicy"])
				assert.Equal(t, 2, kinds["ValidatingAdmissionPolicyBinding"])
			}

			with, err := Render(filepath.Join(root, "deploy", "monitoring", c))
			require.NoError(t, err)
			mon := map[string]int{}
			for _, o := range with {
				mon[o.GetKind()]++
			}
			assert.Equal(t, 1, mon["ServiceMonitor"], "deploy/monitoring/%s adds a ServiceMonitor", c)
			assert.Equal(t, 1, mon["PrometheusRule"], "deploy/monitoring/%s adds a PrometheusRule", c)
			assert.Equal(t, kinds["Role"]+1, mon["Role"], "deploy/monitoring/%s adds Prometheus's discovery Role", c)
			assert.Equal(t, kinds["RoleBinding"]+1, mon["RoleBinding"], "deploy/monitoring/%s adds Prometheus's discovery RoleBinding", c)
			assert.Len(t, with, len(objs)+4, "deploy/monitoring/%s is deploy/%s, its two monitoring objects and Prometheus's discovery RBAC", c, c)
		})
	}
}

// The managed verifier's arguments, as a harness-run process takes them: the Deployment's own,
// its environment references resolved, the harness's flags left out.
func TestDeploymentArgs(t *testing.T) {
	root, err := RepoRoot()
	require.NoError(t, err)
	env := map[string]string{"CLUSTER_ID": "c-1", "CLUSTER_NAME": "local", "POD_NAMESPACE": "ugallu-system"}
	args, err := DeploymentArgs(filepath.Join(root, "deploy", "managed", "verifier"), env)
	require.NoError(t, err)
	assert.Contains(t, args, "--etcd-snapshot-dir=")
	assert.Contains(t, args, "--cluster-id=c-1")
	assert.Contains(t, args, "--checksum-trust-namespace=ugallu-system")
	for _, a := range args {
		assert.NotContains(t, a, "$(")
		assert.NotContains(t, a, "--leader-elect")
		assert.NotContains(t, a, "-bind-address")
	}
	delete(env, "POD_NAMESPACE")
	_, err = DeploymentArgs(filepath.Join(root, "deploy", "managed", "verifier"), env)
	assert.ErrorContains(t, err, "POD_NAMESPACE")
}
