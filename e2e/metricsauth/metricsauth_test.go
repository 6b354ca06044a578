// Package metricsauth proves on a real API server that the components' metrics endpoints answer
// only whom deploy/ lets in. Each component, built from its own module and run as a process under
// its shipped RBAC (API-server impersonation of its ServiceAccount), serves /metrics over HTTPS
// with a self-signed certificate and asks the API server about every scrape (TokenReview,
// SubjectAccessReview): no token gets 401, the token of a ServiceAccount that coffer-metrics-reader
// is not bound to gets 403, and the token of the ServiceAccount the shipped ClusterRoleBinding
// names (Prometheus's) gets 200 and the Prometheus text.
package metricsauth

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/coffer-backup/coffer/e2e/golden"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/components"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

// readerBinding is the name of the shipped ClusterRole that may get /metrics and of the
// ClusterRoleBinding that gives it to Prometheus.
const readerBinding = "coffer-metrics-reader"

func TestMetricsAnswerOnlyTheMetricsReader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := manifests.RepoRoot()
	require.NoError(t, err)
	c, err := cluster.Start(ctx, cluster.Options{CRDDirectoryPaths: []string{filepath.Join(root, "e2e", "harness", "testdata")}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop() })
	cl, err := client.New(c.Config, client.Options{Scheme: cluster.Scheme})
	require.NoError(t, err)
	require.NoError(t, manifests.InstallNodeless(ctx, cl, root))
	// driver-velero and the verifier watch Velero's kinds.
	assets, err := velerostack.Assets()
	require.NoError(t, err)
	require.NoError(t, velerostack.InstallCRDs(ctx, cl, filepath.Join(assets, "velero")))

	reader := shippedReader(t, root)
	require.Equal(t, types.NamespacedName{Namespace: components.MetricsReaderNamespace, Name: components.MetricsReaderName}, reader,
		"the harness scrapes as the ServiceAccount that deploy/ binds to coffer-metrics-reader")
	readerToken, err := components.ServiceAccountToken(ctx, c.Kubeconfig, reader.Namespace, reader.Name)
	require.NoError(t, err)
	stranger := types.NamespacedName{Namespace: "metricsauth", Name: "not-a-scraper"}
	strangerToken, err := components.ServiceAccountToken(ctx, c.Kubeconfig, stranger.Namespace, stranger.Name)
	require.NoError(t, err)

	bin := t.TempDir()
	for _, spec := range golden.Default(t.TempDir()) {
		t.Run(spec.Binary, func(t *testing.T) {
			comp, err := components.Launch(root, bin, c.Kubeconfig, spec)
			require.NoError(t, err)
			t.Cleanup(func() { components.StopAndCheck(t, comp) })
			require.True(t, strings.HasPrefix(comp.MetricsURL, "https://"), comp.MetricsURL)

			// Prometheus's token: 200 once the component serves and leads (its controllers'
			// series appear when they start).
			var (
				code      int
				body      string
				scrapeErr error
			)
			err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
				if comp.Exited() {
					t.Fatalf("%s exited:\n%s", spec.Binary, comp.Tail())
				}
				code, body, scrapeErr = components.Scrape(comp.MetricsURL, readerToken)
				return scrapeErr == nil && code == http.StatusOK && strings.Contains(body, "controller_runtime_reconcile_total"), nil
			})
			require.NoError(t, err, "scraping as %s: %d %v\n%s", reader, code, scrapeErr, body)
			assert.Contains(t, body, "# TYPE controller_runtime_reconcile_total counter")
			got, err := comp.Metrics()
			require.NoError(t, err, "Component.Metrics scrapes as the metrics reader")
			assert.Contains(t, got, "controller_runtime_reconcile_total")

			// No token: 401.
			code, body, err = components.Scrape(comp.MetricsURL, "")
			require.NoError(t, err)
			assert.Equal(t, http.StatusUnauthorized, code, body)
			assert.NotContains(t, body, "controller_runtime")
			// A token the API server did not issue: 401.
			code, body, err = components.Scrape(comp.MetricsURL, "not-a-token")
			require.NoError(t, err)
			assert.Equal(t, http.StatusUnauthorized, code, body)
			assert.NotContains(t, body, "controller_runtime")

			// A ServiceAccount the API server knows, not bound to coffer-metrics-reader: 403.
			code, body, err = components.Scrape(comp.MetricsURL, strangerToken)
			require.NoError(t, err)
			assert.Equal(t, http.StatusForbidden, code, body)
			assert.Contains(t, body, "Authorization denied for user system:serviceaccount:"+stranger.Namespace+":"+stranger.Name)

			// Plain HTTP is not served on the port.
			resp, err := http.Get("http://" + strings.TrimPrefix(comp.MetricsURL, "https://"))
			require.NoError(t, err)
			_ = resp.Body.Close()
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "plain HTTP to the HTTPS port")
		})
	}
}

// shippedReader returns the one ServiceAccount that deploy/ binds to coffer-metrics-reader.
func shippedReader(t *testing.T, root string) types.NamespacedName {
	t.Helper()
	var found []types.NamespacedName
	for _, comp := range manifests.Components {
		objs, err := manifests.Render(filepath.Join(root, "deploy", comp))
		require.NoError(t, err)
		for _, o := range objs {
			if o.GetKind() != "ClusterRoleBinding" || o.GetName() != readerBinding {
				continue
			}
			b := &rbacv1.ClusterRoleBinding{}
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, b))
			require.Equal(t, readerBinding, b.RoleRef.Name, "the binding's role")
			for _, s := range b.Subjects {
				require.Equal(t, rbacv1.ServiceAccountKind, s.Kind)
				found = append(found, types.NamespacedName{Namespace: s.Namespace, Name: s.Name})
			}
		}
	}
	require.Len(t, found, 1, "deploy/ binds coffer-metrics-reader to one ServiceAccount, Prometheus's")
	return found[0]
}

// TestPrometheusMayDiscoverTheComponents: kube-prometheus's Prometheus (monitoring/prometheus-k8s)
// may discover targets only in default, kube-system and monitoring; what deploy/monitoring ships
// lets it list and watch services, endpoints, endpoint slices and pods in every component's
// namespace, and nowhere else (SubjectAccessReviews on the real API server).
func TestPrometheusMayDiscoverTheComponents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, err := manifests.RepoRoot()
	require.NoError(t, err)
	c, err := cluster.Start(ctx, cluster.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop() })
	cl, err := client.New(c.Config, client.Options{Scheme: cluster.Scheme})
	require.NoError(t, err)
	namespaces := map[string]bool{}
	for _, comp := range manifests.Components {
		objs, err := manifests.Render(filepath.Join(root, "deploy", "monitoring", comp))
		require.NoError(t, err)
		var rbac []*unstructured.Unstructured
		for _, o := range objs {
			switch o.GetKind() {
			case "Namespace", "Role", "RoleBinding":
				rbac = append(rbac, o)
			}
			if o.GetKind() == "Deployment" {
				namespaces[o.GetNamespace()] = true
			}
		}
		require.NoError(t, manifests.Apply(ctx, cl, rbac))
	}
	require.NotEmpty(t, namespaces)
	prometheus := "system:serviceaccount:monitoring:prometheus-k8s"
	allowed := func(ns, group, resource, verb string) bool {
		t.Helper()
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: prometheus,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:monitoring", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Group: group, Resource: resource, Verb: verb}}}
		require.NoError(t, cl.Create(ctx, sar))
		return sar.Status.Allowed
	}
	for ns := range namespaces {
		for _, r := range []struct{ group, resource string }{{"", "services"}, {"", "endpoints"}, {"", "pods"}, {"discovery.k8s.io", "endpointslices"}} {
			for _, verb := range []string{"list", "watch"} {
				// RBAC objects take effect when the authorizer's informers see them.
				require.Eventually(t, func() bool { return allowed(ns, r.group, r.resource, verb) }, time.Minute, 200*time.Millisecond,
					"%s may %s %s in %s", prometheus, verb, r.resource, ns)
			}
		}
		assert.False(t, allowed(ns, "", "secrets", "list"), "nothing beyond discovery in %s", ns)
	}
	assert.False(t, allowed("tenant-a", "", "pods", "list"), "no discovery outside the components' namespaces")
}
