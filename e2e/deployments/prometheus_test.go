//go:build e2e

package deployments

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/components"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
)

// prometheusAssetsEnv names the directory of the prometheus binary (hack/testbin.sh --prometheus).
const prometheusAssetsEnv = "COFFER_PROMETHEUS_ASSETS"

// scrapeJob is a ServiceMonitor's first endpoint, as the Prometheus Operator turns it into a
// scrape job (role endpoints, the operator's default): the Service's namespace and labels, the
// endpoint's port name, path, scheme and TLS, and Prometheus's own token as the bearer token.
type scrapeJob struct {
	name, namespace, port, path, scheme string
	labels                              map[string]string
	insecure                            bool
}

func serviceMonitorJob(t *testing.T, sm *unstructured.Unstructured) scrapeJob {
	t.Helper()
	labels, _, err := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	require.NoError(t, err)
	eps, _, err := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	require.NoError(t, err)
	require.Len(t, eps, 1, "ServiceMonitor %s: one endpoint", sm.GetName())
	ep := eps[0].(map[string]any)
	j := scrapeJob{name: "serviceMonitor/" + sm.GetNamespace() + "/" + sm.GetName() + "/0", namespace: sm.GetNamespace(), labels: labels,
		port: fmt.Sprint(ep["port"]), path: fmt.Sprint(ep["path"]), scheme: fmt.Sprint(ep["scheme"])}
	if tc, ok := ep["tlsConfig"].(map[string]any); ok {
		j.insecure, _ = tc["insecureSkipVerify"].(bool)
	}
	require.NotEmpty(t, j.labels, "ServiceMonitor %s selects its Service by labels", sm.GetName())
	return j
}

// prometheusConfig is the configuration of a Prometheus that discovers the jobs' targets through
// the API server as monitoring/prometheus-k8s (tokenFile) and scrapes them with the same token.
func prometheusConfig(api, caFile, tokenFile string, jobs []scrapeJob) ([]byte, error) {
	var scrape []map[string]any
	for _, j := range jobs {
		relabel := []map[string]any{}
		for k, v := range j.labels {
			relabel = append(relabel, map[string]any{"source_labels": []string{"__meta_kubernetes_service_label_" + sanitize(k)}, "regex": v, "action": "keep"})
		}
		relabel = append(relabel, map[string]any{"source_labels": []string{"__meta_kubernetes_endpoint_port_name"}, "regex": j.port, "action": "keep"})
		scrape = append(scrape, map[string]any{
			"job_name": j.name, "scrape_interval": "2s", "scrape_timeout": "2s", "metrics_path": j.path, "scheme": j.scheme,
			"tls_config":    map[string]any{"insecure_skip_verify": j.insecure},
			"authorization": map[string]any{"credentials_file": tokenFile},
			"kubernetes_sd_configs": []map[string]any{{"role": "endpoints", "api_server": api,
				"tls_config": map[string]any{"ca_file": caFile}, "authorization": map[string]any{"credentials_file": tokenFile},
				"namespaces": map[string]any{"names": []string{j.namespace}}}},
			"relabel_configs": relabel,
		})
	}
	return yaml.Marshal(map[string]any{"global": map[string]any{"scrape_interval": "2s"}, "scrape_configs": scrape})
}

// sanitize is Prometheus's label name sanitization of Kubernetes label keys.
func sanitize(k string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, k)
}

type targets struct {
	Data struct {
		ActiveTargets []struct {
			ScrapePool string `json:"scrapePool"`
			ScrapeURL  string `json:"scrapeUrl"`
			Health     string `json:"health"`
			LastError  string `json:"lastError"`
		} `json:"activeTargets"`
	} `json:"data"`
}

// prometheusDiscovers runs a real Prometheus (Kubernetes service discovery) as kube-prometheus's
// ServiceAccount monitoring/prometheus-k8s, with kube-prometheus's own RBAC for it (test data) and
// the scrape jobs the Prometheus Operator makes of the shipped ServiceMonitors. Before the
// discovery Roles of deploy/<component>/monitoring exist, the API server refuses it the
// components' namespaces; once they do, it finds every replica of every component through its
// Service's endpoints and scrapes it over HTTPS with its token (coffer-metrics-reader).
func (e *env) prometheusDiscovers(t *testing.T, token string) {
	dir := os.Getenv(prometheusAssetsEnv)
	require.NotEmpty(t, dir, "%s is not set: run the suite through `make e2e`, or export %s=$(hack/testbin.sh --prometheus)", prometheusAssetsEnv, prometheusAssetsEnv)
	bin := filepath.Join(dir, "prometheus")
	_, err := os.Stat(bin)
	require.NoError(t, err, "%s lacks prometheus: run `hack/testbin.sh --prometheus`", dir)
	root, err := manifests.RepoRoot()
	require.NoError(t, err)

	kp, err := manifests.Render(filepath.Join(root, "e2e", "deployments", "testdata", "kube-prometheus"))
	require.NoError(t, err)
	require.NoError(t, manifests.Apply(e.ctx, e.cl, kp))

	var jobs []scrapeJob
	var discovery []*unstructured.Unstructured
	replicas := map[string]int32{}
	for i, comp := range manifests.Components {
		objs, err := manifests.Render(filepath.Join(root, "deploy", "monitoring", comp))
		require.NoError(t, err)
		for _, o := range objs {
			switch {
			case o.GetKind() == "ServiceMonitor":
				j := serviceMonitorJob(t, o)
				jobs = append(jobs, j)
				replicas[j.name] = e.comps[i].replicas
			case (o.GetKind() == "Role" || o.GetKind() == "RoleBinding") && o.GetName() == "coffer-prometheus-discovery":
				discovery = append(discovery, o)
			}
		}
	}
	require.Len(t, jobs, len(manifests.Components), "a ServiceMonitor per component")
	require.NotEmpty(t, discovery)

	work := t.TempDir()
	tokenFile, caFile, cfgFile := filepath.Join(work, "token"), filepath.Join(work, "ca.crt"), filepath.Join(work, "prometheus.yml")
	require.NoError(t, os.WriteFile(tokenFile, []byte(token), 0o600))
	ca := e.n.Cluster.Config.CAData
	if len(ca) == 0 && e.n.Cluster.Config.CAFile != "" {
		ca, err = os.ReadFile(e.n.Cluster.Config.CAFile)
		require.NoError(t, err)
	}
	require.NotEmpty(t, ca, "the API server's CA")
	require.NoError(t, os.WriteFile(caFile, ca, 0o600))
	cfg, err := prometheusConfig(e.n.Cluster.Config.Host, caFile, tokenFile, jobs)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(cfgFile, cfg, 0o600))
	port, err := cluster.FreePort()
	require.NoError(t, err)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	var log components.SyncBuffer
	cmd := exec.Command(bin, "--config.file="+cfgFile, "--web.listen-address="+addr, "--storage.tsdb.path="+filepath.Join(work, "data"))
	cmd.Stdout, cmd.Stderr = &log, &log
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	// Without deploy/'s discovery Roles, kube-prometheus's own Roles leave the components'
	// namespaces to it forbidden.
	e.poll(t, "Prometheus to be refused the components' namespaces", time.Minute, func() (bool, error) {
		l := log.String()
		return strings.Contains(l, "forbidden") && strings.Contains(l, "prometheus-k8s") && strings.Contains(l, "cannot list resource") &&
			strings.Contains(l, "ugallu-system"), nil
	})
	if t.Failed() {
		t.Logf("prometheus log (tail):\n%s", tailOf(log.String(), 6000))
		return
	}

	require.NoError(t, manifests.Apply(e.ctx, e.cl, discovery))
	var last targets
	e.poll(t, "Prometheus to discover and scrape every component", 2*time.Minute, func() (bool, error) {
		resp, err := http.Get("http://" + addr + "/api/v1/targets?state=active")
		if err != nil {
			return false, nil
		}
		defer func() { _ = resp.Body.Close() }()
		last = targets{}
		if err := json.NewDecoder(resp.Body).Decode(&last); err != nil {
			return false, nil
		}
		up := map[string]int32{}
		for _, tg := range last.Data.ActiveTargets {
			if tg.Health == "up" {
				up[tg.ScrapePool]++
			}
		}
		for _, j := range jobs {
			if up[j.name] != replicas[j.name] {
				return false, nil
			}
		}
		return true, nil
	})
	if t.Failed() {
		t.Logf("targets: %+v\nprometheus log (tail):\n%s", last.Data.ActiveTargets, tailOf(log.String(), 6000))
		return
	}
	t.Logf("Prometheus, as monitoring/prometheus-k8s with kube-prometheus's RBAC and deploy/'s discovery Roles, discovered and scraped %d targets of %d ServiceMonitors", len(last.Data.ActiveTargets), len(jobs))
}
