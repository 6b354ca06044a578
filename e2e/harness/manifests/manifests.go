// Package manifests renders the Kustomize trees under deploy/ and applies them to a cluster, so
// tests and the demo install exactly what Coffer ships.
package manifests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Components are the four Coffer components, each with a Kustomize tree under deploy/.
var Components = []string{"core-controller", "driver-velero", "driver-job", "verifier"}

// Extras are trees a component ships apart, for clusters that lack what they provide: ugallu's
// SecurityEvent CRD (deploy/verifier/securityevents), which a cluster running ugallu already has.
// The harness installs them, as a cluster without ugallu would.
var Extras = map[string][]string{"verifier": {"securityevents"}}

// CRDDirs are the directories holding the CRDs of the named components under root: each
// deploy/<component>/crd and its extras.
func CRDDirs(root string, comps ...string) []string {
	var dirs []string
	for _, c := range comps {
		dirs = append(dirs, filepath.Join(root, "deploy", c, "crd"))
		for _, x := range Extras[c] {
			dirs = append(dirs, filepath.Join(root, "deploy", c, x))
		}
	}
	return dirs
}

// RepoRoot finds the checkout root (the directory holding go.work) from the working directory up.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.work above the working directory: run from the Coffer checkout")
		}
		dir = parent
	}
}

// Render runs kustomize build on dir and returns its objects in apply order (namespaces and CRDs
// first, as `kubectl kustomize` orders them).
func Render(dir string) ([]*unstructured.Unstructured, error) {
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionLegacy
	k := krusty.MakeKustomizer(opts)
	res, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range res.Resources() {
		raw, err := r.MarshalJSON()
		if err != nil {
			return nil, err
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(raw); err != nil {
			return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

// Apply server-side-applies objs in order as field manager "coffer-e2e". CustomResourceDefinitions
// are waited for until Established, so later objects of their kinds can be applied.
func Apply(ctx context.Context, c client.Client, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		obj := o.DeepCopy()
		obj.SetResourceVersion("")
		if err := c.Patch(ctx, obj, client.Apply, client.FieldOwner("coffer-e2e"), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", obj.GetKind(), client.ObjectKeyFromObject(obj), err)
		}
		if obj.GetKind() == "CustomResourceDefinition" {
			if err := waitEstablished(ctx, c, obj.GetName()); err != nil {
				return err
			}
		}
	}
	for _, o := range objs {
		if o.GetKind() == "ValidatingAdmissionPolicy" {
			if _, ok, _ := unstructured.NestedMap(o.Object, "spec", "paramKind"); ok {
				if err := waitParamsSynced(ctx, c); err != nil {
					return fmt.Errorf("waiting for policy %s to read its params: %w", o.GetName(), err)
				}
			}
		}
	}
	return nil
}

// waitParamsSynced waits until the API server has synced the params of the policies that take
// BackupClasses as params (coffer-backupclass-namespaces): until then it refuses every request
// they match ("not yet synced to use for admission"). It asks with a BackupJob created as a
// server-side dry run. A probe admitted may also mean the binding is not in effect yet (its
// params are then synced after, refusing meanwhile), so it waits for paramsSettled admitted
// probes in a row.
func waitParamsSynced(ctx context.Context, c client.Client) error {
	const paramsSettled = 30 // 3 s
	admitted := 0
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		probe := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "BackupJob",
			"metadata": map[string]any{"generateName": "params-probe-", "namespace": "default"},
			"spec": map[string]any{"applicationRef": map[string]any{"apiGroup": "apps.cozystack.io", "kind": "Probe", "name": "probe"},
				"backupClassName": "params-probe"},
		}}
		err := c.Create(ctx, probe, client.DryRunAll)
		if admitted++; err != nil && strings.Contains(err.Error(), "not yet synced") {
			admitted = 0
		}
		return admitted >= paramsSettled, nil
	})
}

func waitEstablished(ctx context.Context, c client.Client, name string) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		crd := &unstructured.Unstructured{}
		crd.SetAPIVersion("apiextensions.k8s.io/v1")
		crd.SetKind("CustomResourceDefinition")
		if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, raw := range conds {
			cond, _ := raw.(map[string]any)
			if cond["type"] == "Established" && cond["status"] == "True" {
				// Refresh discovery-backed REST mappings lazily on the next call.
				if m, ok := c.RESTMapper().(meta.ResettableRESTMapper); ok {
					m.Reset()
				}
				return true, nil
			}
		}
		return false, nil
	})
}

// nodeless are the kinds of deploy/ that a control plane without nodes can take: everything but
// the workloads (Deployments). (The monitoring objects, whose CRDs a bare cluster lacks, are not in
// deploy/<component> but in the optional deploy/monitoring/<component>.)
var nodeless = map[string]bool{
	"CustomResourceDefinition": true, "Namespace": true, "ServiceAccount": true, "Service": true,
	"ClusterRole": true, "ClusterRoleBinding": true, "Role": true, "RoleBinding": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
}

// InstallNodeless applies, for every component, what deploy/<component> and its Extras ship apart
// from its workloads: the CRDs, namespaces, RBAC, admission policies and metrics Service.
func InstallNodeless(ctx context.Context, c client.Client, root string) error {
	for _, comp := range Components {
		for _, tree := range append([]string{comp}, prefixed(comp, Extras[comp])...) {
			objs, err := Render(filepath.Join(root, "deploy", tree))
			if err != nil {
				return err
			}
			take, _ := Nodeless(objs)
			if err := Apply(ctx, c, take); err != nil {
				return fmt.Errorf("installing deploy/%s: %w", tree, err)
			}
		}
	}
	return nil
}

func prefixed(dir string, names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, filepath.Join(dir, n))
	}
	return out
}

// Nodeless splits rendered objects into those a control plane without nodes can take and the
// kind/name of the others.
func Nodeless(objs []*unstructured.Unstructured) (take []*unstructured.Unstructured, skipped []string) {
	for _, o := range objs {
		if nodeless[o.GetKind()] {
			take = append(take, o)
		} else {
			skipped = append(skipped, o.GetKind()+"/"+o.GetName())
		}
	}
	return take, skipped
}

// harnessFlags are the flags a harness-run component gets from the harness (components.Restart),
// not from its Deployment: the API server's address, leader election's namespace and the local
// ports.
var harnessFlags = []string{"--kubeconfig", "--leader-elect", "--leader-election-namespace", "--metrics-bind-address", "--health-probe-bind-address"}

// DeploymentArgs renders the Kustomize tree dir and returns the arguments of the first container
// of its one Deployment, as a process run by the harness takes them: the $(VAR) references
// replaced from env (a variable env lacks is an error), the flags the harness sets left out.
func DeploymentArgs(dir string, env map[string]string) ([]string, error) {
	objs, err := Render(dir)
	if err != nil {
		return nil, err
	}
	var args []any
	found := 0
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		found++
		containers, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if err != nil || len(containers) == 0 {
			return nil, fmt.Errorf("%s: Deployment %s has no containers (%v)", dir, o.GetName(), err)
		}
		c, _ := containers[0].(map[string]any)
		args, _ = c["args"].([]any)
	}
	if found != 1 {
		return nil, fmt.Errorf("%s renders %d Deployments, not one", dir, found)
	}
	var out []string
	for _, a := range args {
		s, ok := a.(string)
		if !ok {
			return nil, fmt.Errorf("%s: argument %v is not a string", dir, a)
		}
		name, _, _ := strings.Cut(s, "=")
		if slices.Contains(harnessFlags, name) {
			continue
		}
		for {
			i := strings.Index(s, "$(")
			if i < 0 {
				break
			}
			j := strings.Index(s[i:], ")")
			if j < 0 {
				return nil, fmt.Errorf("%s: unterminated reference in %q", dir, s)
			}
			v, ok := env[s[i+2:i+j]]
			if !ok {
				return nil, fmt.Errorf("%s: argument %q names %s, which the caller gave no value", dir, s, s[i+2:i+j])
			}
			s = s[:i] + v + s[i+j+1:]
		}
		out = append(out, s)
	}
	return out, nil
}

// overlayTemplate is the e2e overlay of deploy/<component>: the images are those the test
// built and imported (same names as deploy/ ships, never pulled), and the containers find the
// apiserver on the node's IP instead of the kubernetes Service's ClusterIP, which no kube-proxy
// routes here. Nothing else changes; checkOverlay proves it against the plain render.
const overlayTemplate = `# e2e overlay of deploy/%[1]s: imagePullPolicy Never, and where the apiserver is.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %[2]s
patches:
- target:
    group: apps
    version: v1
    kind: Deployment
  patch: |-
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: any
    spec:
      template:
        spec:
          containers:
          - name: manager
            imagePullPolicy: Never
            env:
            - name: KUBERNETES_SERVICE_HOST
              value: "%[3]s"
            - name: KUBERNETES_SERVICE_PORT
              value: "%[4]s"
`

// OverlayEnv are the variables the overlay sets.
var OverlayEnv = map[string]bool{"KUBERNETES_SERVICE_HOST": true, "KUBERNETES_SERVICE_PORT": true}

// Overlay writes the e2e overlay of deploy/<comp> into dir and renders it; it returns the
// overlay's text too. The overlay runs the images a test built and imported into a real node (the
// names deploy/ ships, never pulled), with the API server at host:port, the node's address.
func Overlay(root, dir, comp, host, port string) ([]*unstructured.Unstructured, string, error) {
	od := filepath.Join(dir, "overlay-"+comp)
	if err := os.MkdirAll(od, 0o755); err != nil {
		return nil, "", err
	}
	base, err := filepath.Rel(od, filepath.Join(root, "deploy", comp))
	if err != nil {
		return nil, "", err
	}
	text := fmt.Sprintf(overlayTemplate, comp, base, host, port)
	if err := os.WriteFile(filepath.Join(od, "kustomization.yaml"), []byte(text), 0o644); err != nil {
		return nil, "", err
	}
	objs, err := Render(od)
	return objs, text, err
}

// RolledOut tells whether a Deployment has rolled out, and if not, why: its current generation
// observed, every replica updated, Ready and Available, and the Available condition true.
func RolledOut(d *appsv1.Deployment) (bool, string) {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	if s.ObservedGeneration < d.Generation {
		return false, "generation not observed"
	}
	if s.Replicas != want || s.UpdatedReplicas != want || s.ReadyReplicas != want || s.AvailableReplicas != want {
		return false, fmt.Sprintf("replicas %d/%d, updated %d, ready %d, available %d", s.Replicas, want, s.UpdatedReplicas, s.ReadyReplicas, s.AvailableReplicas)
	}
	for _, c := range s.Conditions {
		if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue {
			return true, ""
		}
	}
	return false, "no Available=True condition"
}

// WaitRolledOut waits until Deployment key has rolled out (RolledOut); its error says why not.
func WaitRolledOut(ctx context.Context, c client.Client, key client.ObjectKey, timeout time.Duration) error {
	why := ""
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		d := &appsv1.Deployment{}
		if err := c.Get(ctx, key, d); err != nil {
			return false, err
		}
		ok, w := RolledOut(d)
		why = w
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("deployment %s has not rolled out (%s): %w", key, why, err)
	}
	return nil
}
