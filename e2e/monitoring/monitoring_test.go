// Package monitoring tests the monitoring Coffer ships, no cluster needed: every alert of every
// PrometheusRule under deploy/ passes `promtool check rules` and is unit-tested by `promtool test
// rules` with series that must fire it and series that must not (TestPrometheusRules); and every
// metric that the alerts and the Grafana dashboard (deploy/grafana/coffer.json) query is one a
// component exports (TestQueriesUseExportedMetrics).
package monitoring

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/coffer-backup/coffer/driverkit"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
)

// AssetsEnv names the variable holding the directory of promtool (hack/testbin.sh --prometheus).
const AssetsEnv = "COFFER_PROMETHEUS_ASSETS"

// monitoringGroup is the Prometheus Operator's API group (ServiceMonitor, PrometheusRule).
const monitoringGroup = "monitoring.coreos.com"

// promtool returns the path of promtool, or fails the test saying how to build it.
func promtool(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(AssetsEnv)
	require.NotEmpty(t, dir, "%s is not set: run the tests through `make test`, or export %s=$(hack/testbin.sh --prometheus)", AssetsEnv, AssetsEnv)
	bin := filepath.Join(dir, "promtool")
	_, err := os.Stat(bin)
	require.NoError(t, err, "%s=%s lacks promtool: run `hack/testbin.sh --prometheus`", AssetsEnv, dir)
	return bin
}

// rule is one rule of a PrometheusRule's groups.
type rule struct {
	Alert  string `json:"alert"`
	Record string `json:"record"`
	Expr   string `json:"expr"`
}

type ruleGroups struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []rule `json:"rules"`
	} `json:"groups"`
}

// monitoring renders deploy/monitoring/<comp>, the overlay that adds the component's monitoring
// objects, and returns the objects of the Prometheus Operator's group.
func monitoring(t *testing.T, root, comp string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := manifests.Render(filepath.Join(root, "deploy", "monitoring", comp))
	require.NoError(t, err)
	var mon []*unstructured.Unstructured
	for _, o := range objs {
		if o.GroupVersionKind().Group == monitoringGroup {
			mon = append(mon, o)
		}
	}
	return mon
}

// prometheusRule returns the rule groups of the one PrometheusRule among objs, as a rule file.
func prometheusRule(t *testing.T, objs []*unstructured.Unstructured) ([]byte, ruleGroups) {
	t.Helper()
	var found *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "PrometheusRule" {
			require.Nil(t, found, "more than one PrometheusRule")
			found = o
		}
	}
	require.NotNil(t, found, "no PrometheusRule")
	spec, ok := found.Object["spec"]
	require.True(t, ok, "PrometheusRule %s has no spec", found.GetName())
	raw, err := yaml.Marshal(spec)
	require.NoError(t, err)
	var groups ruleGroups
	require.NoError(t, yaml.Unmarshal(raw, &groups))
	return raw, groups
}

// ruleTests is what TestPrometheusRules reads of a promtool test file.
type ruleTests struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		AlertRuleTest []struct {
			Alertname string           `json:"alertname"`
			ExpAlerts []map[string]any `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

func TestPrometheusRules(t *testing.T) {
	root, err := manifests.RepoRoot()
	require.NoError(t, err)
	bin := promtool(t)
	out, err := exec.Command(bin, "--version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Logf("%s", bytes.SplitN(out, []byte("\n"), 2)[0])

	for _, comp := range manifests.Components {
		t.Run(comp, func(t *testing.T) {
			rules, groups := prometheusRule(t, monitoring(t, root, comp))
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644))
			out, err := exec.Command(bin, "check", "rules", filepath.Join(dir, "rules.yaml")).CombinedOutput()
			require.NoError(t, err, "promtool check rules on the PrometheusRule of deploy/%s/monitoring:\n%s", comp, out)

			tests, err := filepath.Glob(filepath.Join(root, "deploy", comp, "monitoring", "tests", "*.yaml"))
			require.NoError(t, err)
			require.NotEmpty(t, tests, "deploy/%s/monitoring/tests has no promtool test file", comp)
			fires, quiet := map[string]bool{}, map[string]bool{}
			var args []string
			for _, f := range tests {
				raw, err := os.ReadFile(f)
				require.NoError(t, err)
				var rt ruleTests
				require.NoError(t, yaml.Unmarshal(raw, &rt), f)
				require.Equal(t, []string{"rules.yaml"}, rt.RuleFiles, "%s: the test reads the rules from rules.yaml, written from the PrometheusRule", f)
				for _, tc := range rt.Tests {
					for _, a := range tc.AlertRuleTest {
						if len(a.ExpAlerts) > 0 {
							fires[a.Alertname] = true
						} else {
							quiet[a.Alertname] = true
						}
					}
				}
				dst := filepath.Join(dir, filepath.Base(f))
				require.NoError(t, os.WriteFile(dst, raw, 0o644))
				args = append(args, dst)
			}
			out, err = exec.Command(bin, append([]string{"test", "rules"}, args...)...).CombinedOutput()
			require.NoError(t, err, "promtool test rules (deploy/%s/monitoring/tests):\n%s", comp, out)

			// Every alert is tested both ways: series that fire it, and an evaluation at which
			// nothing may fire (promtool fails on any alert that is not expected).
			n := 0
			for _, g := range groups.Groups {
				for _, r := range g.Rules {
					if r.Alert == "" {
						continue
					}
					n++
					assert.True(t, fires[r.Alert], "no test of deploy/%s/monitoring/tests expects %s to fire", comp, r.Alert)
					assert.True(t, quiet[r.Alert], "no test of deploy/%s/monitoring/tests expects %s not to fire (exp_alerts: [])", comp, r.Alert)
				}
			}
			assert.Positive(t, n, "the PrometheusRule of deploy/%s has no alert", comp)
		})
	}
}

// TestMonitoringOverlays: deploy/<component> has no object of the Prometheus Operator (a bare
// cluster lacks their CRDs) and keeps its metrics Service; deploy/monitoring/<component> adds the
// ServiceMonitor, the PrometheusRule and the Role and RoleBinding that let Prometheus discover its
// targets, and changes nothing else.
func TestMonitoringOverlays(t *testing.T) {
	root, err := manifests.RepoRoot()
	require.NoError(t, err)
	for _, comp := range manifests.Components {
		t.Run(comp, func(t *testing.T) {
			base, err := manifests.Render(filepath.Join(root, "deploy", comp))
			require.NoError(t, err)
			with, err := manifests.Render(filepath.Join(root, "deploy", "monitoring", comp))
			require.NoError(t, err)
			key := func(o *unstructured.Unstructured) string {
				return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
			}
			var baseKeys, services []string
			for _, o := range base {
				assert.NotEqual(t, monitoringGroup, o.GroupVersionKind().Group, "deploy/%s ships %s: it belongs in deploy/%s/monitoring", comp, key(o), comp)
				baseKeys = append(baseKeys, key(o))
				if o.GetKind() == "Service" {
					services = append(services, o.GetName())
				}
			}
			assert.Contains(t, services, "coffer-"+comp+"-metrics", "deploy/%s keeps its metrics Service", comp)
			var added []string
			for _, o := range with {
				if !slices.Contains(baseKeys, key(o)) {
					added = append(added, o.GetKind())
				}
			}
			sort.Strings(added)
			assert.Equal(t, []string{"PrometheusRule", "Role", "RoleBinding", "ServiceMonitor"}, added)
			assert.Len(t, with, len(base)+4)

			for _, o := range with {
				if o.GetKind() != "ServiceMonitor" {
					continue
				}
				eps, _, err := unstructured.NestedSlice(o.Object, "spec", "endpoints")
				require.NoError(t, err)
				require.NotEmpty(t, eps)
				for _, e := range eps {
					honor, _, _ := unstructured.NestedBool(e.(map[string]any), "honorLabels")
					// Core's per-Plan series carry the Plan's namespace; the others' series carry none.
					assert.Equal(t, comp == "core-controller", honor, "ServiceMonitor %s: honorLabels", o.GetName())
				}
			}
		})
	}
}

// metricName finds the names of Coffer's metrics in a PromQL expression.
var metricName = regexp.MustCompile(`\b(?:coffer|ugallu)_[a-zA-Z0-9_]+\b`)

// TestQueriesUseExportedMetrics: every metric that an alert or a panel of the dashboard queries
// is one a component exports.
func TestQueriesUseExportedMetrics(t *testing.T) {
	root, err := manifests.RepoRoot()
	require.NoError(t, err)
	exported := exportedMetrics(t, root)
	t.Logf("the components export %d metrics of Coffer's", len(exported))

	check := func(where, expr string) {
		for _, m := range metricName.FindAllString(expr, -1) {
			assert.True(t, exported[m], "%s queries %s, which no component exports", where, m)
		}
	}
	for _, comp := range manifests.Components {
		_, groups := prometheusRule(t, monitoring(t, root, comp))
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				check("alert "+r.Alert+" of deploy/"+comp, r.Expr)
			}
		}
	}

	raw, err := os.ReadFile(filepath.Join(root, "deploy", "grafana", "coffer.json"))
	require.NoError(t, err)
	var dashboard struct {
		Title  string  `json:"title"`
		Panels []panel `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dashboard))
	require.NotEmpty(t, dashboard.Panels)
	exprs := 0
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				require.NotEmpty(t, tg.Expr, "panel %q has a query without expr", p.Title)
				require.NotEmpty(t, metricName.FindAllString(tg.Expr, -1), "panel %q queries no metric of Coffer's: %s", p.Title, tg.Expr)
				check("panel "+strconv.Quote(p.Title), tg.Expr)
				exprs++
			}
			walk(p.Panels)
		}
	}
	walk(dashboard.Panels)
	assert.Positive(t, exprs)
}

type panel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// exportedMetrics returns the names of the series Coffer's components export: the drivers'
// from driverkit.NewMetrics registered on a test registry with each driver's prefix; core's and
// the verifier's, whose metrics live in internal packages that this module may not import, from
// their definitions (prometheus.NewDesc and the Name of prometheus.*Opts). Histograms add
// _bucket, _sum and _count.
func exportedMetrics(t *testing.T, root string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	add := func(name, typ string) {
		names[name] = true
		if typ == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[name+s] = true
			}
		}
	}

	newMetrics := regexp.MustCompile(`driverkit\.NewMetrics\("([a-z_]+)"`)
	for _, drv := range []string{"driver-velero", "driver-job"} {
		files, err := filepath.Glob(filepath.Join(root, drv, "internal", "driver", "*.go"))
		require.NoError(t, err)
		var prefix string
		for _, f := range files {
			src, err := os.ReadFile(f)
			require.NoError(t, err)
			if m := newMetrics.FindSubmatch(src); m != nil {
				prefix = string(m[1])
			}
		}
		require.NotEmpty(t, prefix, "%s calls driverkit.NewMetrics nowhere in internal/driver", drv)
		reg := prometheus.NewRegistry()
		m := driverkit.NewMetrics(prefix, drv, reg)
		m.Runs.WithLabelValues("backup", "Succeeded").Inc()
		m.Duration.WithLabelValues("backup", "Succeeded").Observe(1)
		families, err := reg.Gather()
		require.NoError(t, err)
		for _, f := range families {
			add(f.GetName(), strings.ToLower(f.GetType().String()))
		}
	}

	for _, dir := range []string{"core-controller/internal/metrics", "verifier/internal/metrics"} {
		files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		require.NoError(t, err)
		fset := token.NewFileSet()
		n := 0
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(fset, f, nil, 0)
			require.NoError(t, err)
			ast.Inspect(file, func(node ast.Node) bool {
				switch x := node.(type) {
				case *ast.CallExpr:
					if sel, ok := x.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "NewDesc" && len(x.Args) > 0 {
						if name, ok := stringLit(x.Args[0]); ok {
							// Core's descriptors are of gauges and counters.
							add(name, "gauge")
							n++
						}
					}
				case *ast.CompositeLit:
					sel, ok := x.Type.(*ast.SelectorExpr)
					if !ok || !strings.HasSuffix(sel.Sel.Name, "Opts") {
						return true
					}
					typ := strings.ToLower(strings.TrimSuffix(sel.Sel.Name, "Opts"))
					for _, el := range x.Elts {
						kv, ok := el.(*ast.KeyValueExpr)
						if !ok {
							continue
						}
						if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Name" {
							if name, ok := stringLit(kv.Value); ok {
								add(name, typ)
								n++
							}
						}
					}
				}
				return true
			})
		}
		require.Positive(t, n, "found no metric definition in %s", dir)
	}
	return names
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}
