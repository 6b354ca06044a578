package security

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authzv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
)

// verbs are the resource verbs the matrix asks about.
var verbs = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "bind", "escalate", "impersonate"}

// probes are resources no component should reach unless docs/security.md says so: the matrix asks
// about them besides every resource the document names.
var probes = []gr{
	{"core", "secrets"}, {"core", "configmaps"}, {"core", "pods"}, {"core", "pods/exec"}, {"core", "namespaces"},
	{"core", "serviceaccounts"}, {"core", "serviceaccounts/token"}, {"core", "persistentvolumeclaims"}, {"core", "nodes"},
	{"apps", "deployments"}, {"apps", "daemonsets"}, {"batch", "jobs"}, {"batch", "cronjobs"},
	{"rbac.authorization.k8s.io", "roles"}, {"rbac.authorization.k8s.io", "rolebindings"},
	{"rbac.authorization.k8s.io", "clusterroles"}, {"rbac.authorization.k8s.io", "clusterrolebindings"},
	{"coordination.k8s.io", "leases"}, {"admissionregistration.k8s.io", "validatingadmissionpolicies"},
	{"apiextensions.k8s.io", "customresourcedefinitions"}, {"velero.io", "backups"}, {"velero.io", "restores"},
	{"backups.cozystack.io", "backupclasses"}, {"backups.cozystack.io", "backups"}, {"security.ugallu.io", "securityevents"},
}

// gr is an API group ("core" for the empty one) and a resource, "<resource>/<subresource>" for a
// subresource; or NonResourceURLs and a URL path.
type gr struct{ group, resource string }

// subject is who holds a role in the matrix: a component's ServiceAccount, or a test user bound to
// one of the roles for people.
type subject struct {
	component, user string
	groups          []string
}

// binding gives a role to a subject in a namespace ("" for cluster-wide).
type binding struct {
	role, namespace string
	subject         subject
}

// TestServiceAccountsHoldExactlyTheDocumentedRights installs the RBAC deploy/ ships on a real API
// server and asks it (SubjectAccessReview) every verb on every resource docs/security.md names,
// plus a list of resources no component should reach (Secrets, Pods, RBAC, Namespaces, ...),
// cluster-wide and in kube-system and the components' namespaces. The answer must equal the
// document: each component's ServiceAccount may do exactly what its rows say, where its bindings
// say. The roles for people (not bound by Coffer) are bound here to a test user in one namespace,
// as a cluster administrator would, and checked the same way.
func TestServiceAccountsHoldExactlyTheDocumentedRights(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, err := manifests.RepoRoot()
	require.NoError(t, err)
	doc := documented(t, filepath.Join(root, Doc))

	c, err := cluster.Start(ctx, cluster.Options{})
	require.NoError(t, err, "the matrix needs a real API server (KUBEBUILDER_ASSETS)")
	t.Cleanup(func() { _ = c.Stop() })
	cl, err := client.New(c.Config, client.Options{})
	require.NoError(t, err)

	const peopleNS = "tenant-probe"
	var rbac []*unstructured.Unstructured
	var bindings []binding
	people := map[string]bool{}
	// Trees applied on their own (deploy/verifier/velero) go into Velero's namespace.
	rbac = append(rbac, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "velero"}}})
	for _, comp := range manifests.Components {
		for _, tree := range Trees(comp) {
			objs, err := manifests.Render(filepath.Join(root, tree))
			require.NoError(t, err)
			for _, o := range objs {
				switch o.GetKind() {
				case "Namespace", "ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding":
					rbac = append(rbac, o)
				}
				bindings = append(bindings, bindingsOf(t, comp, o)...)
			}
		}
	}
	bound := map[string]bool{}
	for _, b := range bindings {
		bound[b.role] = true
	}
	for k := range doc {
		if !bound[k.role] && strings.HasPrefix(k.role, "ClusterRole ") {
			people[k.role] = true
		}
	}
	rbac = append(rbac, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": peopleNS}}})
	for role := range people {
		name := strings.TrimPrefix(role, "ClusterRole ")
		user := "probe-" + name
		rb := &rbacv1.RoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: peopleNS},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		}
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(rb)
		require.NoError(t, err)
		rbac = append(rbac, &unstructured.Unstructured{Object: u})
		var component string
		for k := range doc {
			if k.role == role {
				component = k.component
			}
		}
		bindings = append(bindings, binding{role: role, namespace: peopleNS, subject: subject{component: component, user: user, groups: []string{"system:authenticated"}}})
	}
	require.NoError(t, manifests.Apply(ctx, cl, rbac))

	// The resources and namespaces asked about.
	universe := map[gr]bool{}
	for _, p := range probes {
		universe[p] = true
	}
	namespaces := map[string]bool{"": true, "kube-system": true, peopleNS: true}
	for k := range doc {
		if k.group != "*" && k.resource != "*" {
			universe[gr{k.group, k.resource}] = true
		}
		if ns, _, ok := strings.Cut(strings.TrimPrefix(k.role, "Role "), "/"); ok && strings.HasPrefix(k.role, "Role ") {
			namespaces[ns] = true
		}
	}

	subjects := map[string]subject{}
	for _, b := range bindings {
		subjects[b.subject.user] = b.subject
	}
	type question struct {
		s             subject
		ns, verb      string
		res           gr
		want          bool
		documentedWhy string
	}
	var qs []question
	for _, s := range subjects {
		for ns := range namespaces {
			for res := range universe {
				for _, v := range verbs {
					want, why := expected(doc, bindings, s, ns, res, v)
					qs = append(qs, question{s: s, ns: ns, verb: v, res: res, want: want, documentedWhy: why})
				}
			}
		}
	}

	// RBAC objects take effect through the API server's informers: wait until one granted
	// question is answered yes.
	for _, q := range qs {
		if q.want {
			require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				return allowed(ctx, cl, q.s, q.ns, q.res, q.verb)
			}), "the API server never granted %s %s %s/%s in %q", q.s.user, q.verb, q.res.group, q.res.resource, q.ns)
			break
		}
	}

	var (
		mu      sync.Mutex
		wrong   []string
		granted int
	)
	work := make(chan question)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for q := range work {
				got, err := allowed(ctx, cl, q.s, q.ns, q.res, q.verb)
				mu.Lock()
				switch {
				case err != nil:
					wrong = append(wrong, fmt.Sprintf("%s: asking %s %s/%s in %q: %v", q.s.user, q.verb, q.res.group, q.res.resource, q.ns, err))
				case got != q.want:
					scope := q.ns
					if scope == "" {
						scope = "all namespaces"
					}
					what := "holds it, and " + Doc + " does not grant it there"
					if q.want {
						what = "lacks it, and " + Doc + " grants it (" + q.documentedWhy + ")"
					}
					wrong = append(wrong, fmt.Sprintf("%s (%s): %s %s/%s in %s: %s", q.s.user, q.s.component, q.verb, q.res.group, q.res.resource, scope, what))
				case got:
					granted++
				}
				mu.Unlock()
			}
		}()
	}
	for _, q := range qs {
		work <- q
	}
	close(work)
	wg.Wait()
	sort.Strings(wrong)
	if len(wrong) > 0 {
		t.Fatalf("the shipped RBAC, as the API server enforces it, differs from %s:\n%s", Doc, strings.Join(wrong, "\n"))
	}
	t.Logf("%d questions to the API server (%d subjects, %d resources, %d namespace scopes, %d verbs): %d granted, as documented",
		len(qs), len(subjects), len(universe), len(namespaces), len(verbs), granted)
	require.Positive(t, granted)
}

// bindingsOf returns the bindings o (a ClusterRoleBinding or RoleBinding of comp) makes to
// ServiceAccounts.
func bindingsOf(t *testing.T, comp string, o *unstructured.Unstructured) []binding {
	t.Helper()
	var subjects []rbacv1.Subject
	var ref rbacv1.RoleRef
	namespace := ""
	switch o.GetKind() {
	case "ClusterRoleBinding":
		b := &rbacv1.ClusterRoleBinding{}
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, b))
		subjects, ref = b.Subjects, b.RoleRef
	case "RoleBinding":
		b := &rbacv1.RoleBinding{}
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, b))
		subjects, ref, namespace = b.Subjects, b.RoleRef, b.Namespace
	default:
		return nil
	}
	role := "ClusterRole " + ref.Name
	if ref.Kind == "Role" {
		role = "Role " + namespace + "/" + ref.Name
	}
	var out []binding
	for _, s := range subjects {
		if s.Kind != rbacv1.ServiceAccountKind {
			continue
		}
		out = append(out, binding{role: role, namespace: namespace, subject: subject{
			component: comp,
			user:      "system:serviceaccount:" + s.Namespace + ":" + s.Name,
			groups:    []string{"system:serviceaccounts", "system:serviceaccounts:" + s.Namespace, "system:authenticated"},
		}})
	}
	return out
}

// expected says whether the document grants s verb on res in ns (all namespaces if ""), and the
// row's reason.
func expected(doc grants, bindings []binding, s subject, ns string, res gr, verb string) (bool, string) {
	for _, b := range bindings {
		if b.subject.user != s.user || (b.namespace != "" && b.namespace != ns) {
			continue
		}
		for k, vs := range doc {
			if k.role != b.role || !slices.Contains(vs, verb) {
				continue
			}
			if matches(k, res) {
				return true, k.role + " " + k.group + " " + k.resource
			}
		}
	}
	return false, ""
}

// matches tells whether a row grants res: the same group and resource, where `*` stands for any
// group or resource but never for a non-resource URL (as in RBAC). A row without resourceNames
// grants the resource's every name; a row with them grants those names only.
func matches(k key, res gr) bool {
	if (k.group == NonResourceURLs) != (res.group == NonResourceURLs) {
		return false
	}
	if k.group != res.group && k.group != "*" {
		return false
	}
	if k.resource == "*" || k.resource == res.resource {
		return true
	}
	resource, names := SplitNames(res.resource)
	granted, grantedNames := SplitNames(k.resource)
	if granted != resource || len(names) == 0 {
		return false
	}
	for _, n := range names {
		if len(grantedNames) > 0 && !slices.Contains(grantedNames, n) {
			return false
		}
	}
	return true
}

// allowed asks the API server whether s may verb res in ns (a non-resource URL is not namespaced:
// ns is not asked about).
func allowed(ctx context.Context, c client.Client, s subject, ns string, res gr, verb string) (bool, error) {
	spec := authzv1.SubjectAccessReviewSpec{User: s.user, Groups: s.groups}
	if res.group == NonResourceURLs {
		spec.NonResourceAttributes = &authzv1.NonResourceAttributes{Path: res.resource, Verb: verb}
	} else {
		group := res.group
		if group == "core" {
			group = ""
		}
		// A row restricted to resourceNames is asked about its (first) name.
		resource, names := SplitNames(res.resource)
		resource, sub, _ := strings.Cut(resource, "/")
		spec.ResourceAttributes = &authzv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: resource, Subresource: sub}
		if len(names) > 0 {
			spec.ResourceAttributes.Name = names[0]
		}
	}
	sar := &authzv1.SubjectAccessReview{Spec: spec}
	if err := c.Create(ctx, sar); err != nil {
		return false, err
	}
	return sar.Status.Allowed, nil
}
