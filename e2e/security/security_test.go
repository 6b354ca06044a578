// Package security keeps docs/security.md equal to the RBAC Coffer ships: every rule of every
// ClusterRole and Role that deploy/<component> renders is a row of the document's tables, with the
// code that calls it, and the document lists nothing that is not shipped (TestDocMatchesShippedRBAC,
// no cluster needed); and a real API server, given that RBAC, answers every question about it as the
// document does (TestServiceAccountsHoldExactlyTheDocumentedRights).
package security

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/coffer-backup/coffer/e2e/harness/manifests"
)

// Doc is the document, relative to the checkout root.
const Doc = "docs/security.md"

// Header is the header row of every table of Doc that lists grants; other tables are ignored.
var Header = []string{"component", "role", "apiGroup", "resource", "verbs", "why"}

// NonResourceURLs is the apiGroup cell of a row that grants a non-resource URL (a rule's
// nonResourceURLs, such as /metrics); the row's resource cell is the URL.
const NonResourceURLs = "nonResourceURLs"

// key is one resource of one API group, or one non-resource URL (group NonResourceURLs), granted
// by one role of one component. role is "ClusterRole <name>" or "Role <namespace>/<name>"; group
// is "core" for the empty group.
type key struct{ component, role, group, resource string }

// grants maps each key to its verbs, sorted.
type grants map[key][]string

func (k key) row(verbs []string) string {
	return fmt.Sprintf("| %s | %s | %s | %s | %s |", k.component, k.role, k.group, k.resource, strings.Join(verbs, ", "))
}

// Separate lists, per component, the Kustomize trees that deploy/<component> does not include and
// that are applied on their own: deploy/verifier/velero goes into Velero's namespace once Velero is
// installed.
var Separate = map[string][]string{"verifier": {"deploy/verifier/velero"}}

// Trees are a component's Kustomize trees, relative to the checkout root.
func Trees(component string) []string {
	return append([]string{filepath.Join("deploy", component)}, Separate[component]...)
}

// withNames is the resource cell of a rule restricted to resourceNames:
// "<resource> (resourceNames: <name>, ...)".
func withNames(resource string, names []string) string {
	if len(names) == 0 {
		return resource
	}
	return resource + " (resourceNames: " + strings.Join(slices.Sorted(slices.Values(names)), ", ") + ")"
}

// SplitNames returns the resource and the resourceNames of a resource cell.
func SplitNames(cell string) (resource string, names []string) {
	resource, rest, ok := strings.Cut(cell, " (resourceNames: ")
	if !ok || !strings.HasSuffix(rest, ")") {
		return cell, nil
	}
	for _, n := range strings.Split(strings.TrimSuffix(rest, ")"), ",") {
		names = append(names, strings.TrimSpace(n))
	}
	return resource, names
}

// shipped flattens the rules of the ClusterRoles and Roles of a component's trees into grants.
func shipped(t *testing.T, root string) grants {
	t.Helper()
	out := grants{}
	for _, c := range manifests.Components {
		var objs []*unstructured.Unstructured
		for _, dir := range Trees(c) {
			tree, err := manifests.Render(filepath.Join(root, dir))
			require.NoError(t, err)
			objs = append(objs, tree...)
		}
		roles := 0
		for _, o := range objs {
			role, rules, ok := rulesOf(t, o)
			if !ok {
				continue
			}
			roles++
			for _, r := range rules {
				for _, u := range r.NonResourceURLs {
					k := key{c, role, NonResourceURLs, u}
					out[k] = union(out[k], r.Verbs)
				}
				for _, g := range r.APIGroups {
					if g == "" {
						g = "core"
					}
					for _, res := range r.Resources {
						k := key{c, role, g, withNames(res, r.ResourceNames)}
						out[k] = union(out[k], r.Verbs)
					}
				}
			}
		}
		require.Positive(t, roles, "deploy/%s ships no ClusterRole or Role", c)
	}
	return out
}

// rulesOf returns the name and rules of a ClusterRole or Role.
func rulesOf(t *testing.T, o *unstructured.Unstructured) (string, []rbacv1.PolicyRule, bool) {
	t.Helper()
	switch o.GetKind() {
	case "ClusterRole":
		cr := &rbacv1.ClusterRole{}
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, cr))
		if cr.AggregationRule != nil {
			t.Errorf("ClusterRole %s aggregates other roles: its rules are filled in by the API server, so %s cannot list them from deploy/", cr.Name, Doc)
		}
		return "ClusterRole " + cr.Name, cr.Rules, true
	case "Role":
		r := &rbacv1.Role{}
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, r))
		return "Role " + r.Namespace + "/" + r.Name, r.Rules, true
	}
	return "", nil, false
}

func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, v := range b {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}

// documented parses the grant tables of the document: after a header row equal to Header (and its
// separator row), every row up to the first line that is not a table row is a grant. Backticks
// are dropped from every cell but why; verbs are comma-separated. A key listed twice, a row of the
// wrong width or a row without a reason is an error.
func documented(t *testing.T, path string) grants {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	out := grants{}
	inTable, tables := false, 0
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") {
			inTable = false
			continue
		}
		cells := split(line)
		switch {
		case slices.Equal(cells, Header):
			inTable = true
			tables++
			continue
		case !inTable || isSeparator(cells):
			continue
		}
		if len(cells) != len(Header) {
			t.Errorf("%s:%d: a grant row has %d cells, not %d (%s): %s", path, n, len(cells), len(Header), strings.Join(Header, ", "), line)
			continue
		}
		k := key{cells[0], cells[1], cells[2], cells[3]}
		if cells[5] == "" {
			t.Errorf("%s:%d: %s %s %s of %s: say why (the code that calls it)", path, n, k.role, k.group, k.resource, k.component)
		}
		if _, dup := out[k]; dup {
			t.Errorf("%s:%d: %s %s %s of %s is listed twice", path, n, k.role, k.group, k.resource, k.component)
		}
		var verbs []string
		for _, v := range strings.Split(cells[4], ",") {
			if v = strings.TrimSpace(v); v != "" {
				verbs = append(verbs, v)
			}
		}
		out[k] = union(nil, verbs)
	}
	require.NoError(t, sc.Err())
	require.Positive(t, tables, "%s has no table with the header | %s |", path, strings.Join(Header, " | "))
	return out
}

// split returns a table row's cells, trimmed, with backticks dropped from all cells but the last.
func split(line string) []string {
	cells := strings.Split(strings.Trim(line, "|"), "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
		if i < len(cells)-1 {
			cells[i] = strings.ReplaceAll(cells[i], "`", "")
		}
	}
	return cells
}

func isSeparator(cells []string) bool {
	for _, c := range cells {
		if strings.Trim(c, "-: ") != "" {
			return false
		}
	}
	return true
}

// TestDocMatchesShippedRBAC: every (component, role, API group, resource, verbs) that
// deploy/<component> grants is a row of docs/security.md, and every row there is granted.
func TestDocMatchesShippedRBAC(t *testing.T) {
	root, err := manifests.RepoRoot()
	require.NoError(t, err)
	ship := shipped(t, root)
	doc := documented(t, filepath.Join(root, Doc))
	require.NotEmpty(t, ship)

	var missing, extra []string
	for k, verbs := range ship {
		if d, ok := doc[k]; !ok || !slices.Equal(d, verbs) {
			missing = append(missing, k.row(verbs))
		}
	}
	for k, verbs := range doc {
		if s, ok := ship[k]; !ok || !slices.Equal(s, verbs) {
			extra = append(extra, k.row(verbs))
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("deploy/ grants these (component | role | apiGroup | resource | verbs), and %s does not list them so: add each row with the code that calls it, or remove the verb:\n%s",
			Doc, strings.Join(missing, "\n"))
	}
	if len(extra) > 0 {
		t.Errorf("%s lists these, and deploy/ does not grant them so:\n%s", Doc, strings.Join(extra, "\n"))
	}
}

// TestDocParser: the parser reads grant tables only, and reports rows it cannot read.
func TestDocParser(t *testing.T) {
	path := filepath.Join(t.TempDir(), "security.md")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join([]string{
		"| role | what |",
		"|---|---|",
		"| ignored | not a grant table |",
		"",
		"| component | role | apiGroup | resource | verbs | why |",
		"|---|---|---|---|---|---|",
		"| core-controller | ClusterRole coffer-core-controller | `backups.cozystack.io` | `plans/status` | patch | `Status().Patch` |",
		"| verifier | ClusterRole coffer-verifier | `*` | `*` | get | the sandbox diff |",
		"| core-controller | ClusterRole coffer-metrics-reader | nonResourceURLs | `/metrics` | get | Prometheus scrapes |",
		"| verifier | ClusterRole coffer-verifier | `rbac.authorization.k8s.io` | `clusterroles` (resourceNames: `coffer-verifier-sandbox`) | bind | the sandbox binding |",
		"",
		"| ignored | after the table |",
	}, "\n")), 0o600))
	want := grants{}
	want[key{"core-controller", "ClusterRole coffer-core-controller", "backups.cozystack.io", "plans/status"}] = []string{"patch"}
	want[key{"verifier", "ClusterRole coffer-verifier", "*", "*"}] = []string{"get"}
	want[key{"core-controller", "ClusterRole coffer-metrics-reader", NonResourceURLs, "/metrics"}] = []string{"get"}
	named := withNames("clusterroles", []string{"coffer-verifier-sandbox"})
	want[key{"verifier", "ClusterRole coffer-verifier", "rbac.authorization.k8s.io", named}] = []string{"bind"}
	require.Equal(t, want, documented(t, path))
	res, names := SplitNames(named)
	require.Equal(t, "clusterroles", res)
	require.Equal(t, []string{"coffer-verifier-sandbox"}, names)
	res, names = SplitNames("plans/status")
	require.Equal(t, "plans/status", res)
	require.Empty(t, names)
}
