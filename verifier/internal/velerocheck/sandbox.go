package velerocheck

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
)

// A sandbox is confined and inert before anything is restored into it:
//
//   - the verifier holds no read access outside its sandboxes. In each sandbox it creates, it binds
//     itself (RoleBinding SandboxRole) to the shipped ClusterRole SandboxRole
//     (deploy/verifier/rbac/sandbox_role.yaml: get on every kind, create NetworkPolicies and
//     ResourceQuotas, list what CheckSandboxes lists), which
//     it may bind without holding those rights (RBAC's bind verb, on that ClusterRole only); the
//     admission policy coffer-verifier-confinement (deploy/verifier/policies) lets its
//     ServiceAccount create and delete only labelled -bvsandbox namespaces and create only that
//     binding, to itself, only in them;
//   - the namespace enforces Pod Security "restricted", a NetworkPolicy denies all ingress and
//     egress of its pods, and a ResourceQuota allows zero pods;
//   - no restore into it brings Roles, RoleBindings, ServiceAccounts or NetworkPolicies
//     (NeverInSandbox), and before the diff CheckSandboxes re-checks all of this;
//   - the Restore leaves out Pods and DaemonSets (excludedResources) and applies the resource
//     modifiers of the ConfigMap SandboxModifiers (deploy/verifier/velero, in Velero's
//     namespace): Deployments, StatefulSets, ReplicaSets and ReplicationControllers come back
//     with replicas 0, Jobs and CronJobs suspended. So no restored workload starts a pod, and no
//     production Secret or endpoint is used from a sandbox.
const (
	// SandboxRole names the ClusterRole the verifier binds itself to in each sandbox, and the
	// RoleBinding doing so.
	SandboxRole = "coffer-verifier-sandbox"
	// SandboxNetworkPolicy is the deny-all NetworkPolicy of each sandbox.
	SandboxNetworkPolicy = "coffer-verifier-deny-all"
	// SandboxQuota is the ResourceQuota of zero pods of each sandbox: whatever a restore brings
	// into it, nothing there can start a pod.
	SandboxQuota = "coffer-verifier-no-pods"
	// SandboxModifiers is the ConfigMap of Velero resource modifiers, in the namespace of the
	// Velero backup (and so of the Restore), that makes restored workloads inert.
	SandboxModifiers = "coffer-verifier-sandbox"
)

// PodSecurityLabels are the Pod Security admission labels of every sandbox.
var PodSecurityLabels = map[string]string{
	"pod-security.kubernetes.io/enforce": "restricted",
	"pod-security.kubernetes.io/warn":    "restricted",
	"pod-security.kubernetes.io/audit":   "restricted",
}

// ExcludedFromSandbox are the kinds a verification Restore leaves out, with their Velero resource
// names: a bare Pod would run as soon as it is restored and a DaemonSet has no replica count to
// set to zero. Pods a controller owns are derived state its controller would make again (and, scaled
// to zero, does not). Coffer's run records and Plans and the verifier's own runs and Results are
// left out as driver-velero leaves them out (velerodriver.Excluded): restored into a sandbox, a
// BackupJob or BackupVerifyRun would run again there, and a Plan would fire. The diff counts such
// objects of the backup (details.objectsExcluded) instead of expecting them in the sandbox.
var ExcludedFromSandbox = func() map[schema.GroupKind]string {
	out := veleroapi.Excluded()
	out[schema.GroupKind{Kind: "Pod"}] = "pods"
	out[schema.GroupKind{Group: "apps", Kind: "DaemonSet"}] = "daemonsets.apps"
	maps.Copy(out, NeverInSandbox)
	return out
}()

// NeverInSandbox are the kinds no restore into a sandbox may bring, with their Velero resource
// names: Roles, RoleBindings and ServiceAccounts (a tenant's RoleBinding restored there would open
// the sandbox to the tenant, who could then change what the diff reads), and NetworkPolicies (an
// allow-all one from the backup would void the deny-all). Every sandbox restore leaves them out
// (the velero backend's Restore, ExcludedFromSandbox; the coffer backend's diff expects them absent
// too), and CheckSandboxes finds any that reached a sandbox all the same.
var NeverInSandbox = map[schema.GroupKind]string{
	gkRole:          "roles.rbac.authorization.k8s.io",
	gkRoleBinding:   "rolebindings.rbac.authorization.k8s.io",
	gkSA:            "serviceaccounts",
	gkNetworkPolicy: "networkpolicies.networking.k8s.io",
}

var (
	gkRole          = schema.GroupKind{Group: rbacv1.GroupName, Kind: "Role"}
	gkNetworkPolicy = schema.GroupKind{Group: networkingv1.GroupName, Kind: "NetworkPolicy"}
)

// ScaledToZero are the kinds the resource modifiers restore with spec.replicas 0, with their Velero
// group-resource names.
var ScaledToZero = map[schema.GroupKind]string{
	{Group: "apps", Kind: "Deployment"}:  "deployments.apps",
	{Group: "apps", Kind: "StatefulSet"}: "statefulsets.apps",
	{Group: "apps", Kind: "ReplicaSet"}:  "replicasets.apps",
	{Kind: "ReplicationController"}:      "replicationcontrollers",
}

// Suspended are the kinds the resource modifiers restore with spec.suspend true.
var Suspended = map[schema.GroupKind]string{
	{Group: "batch", Kind: "Job"}:     "jobs.batch",
	{Group: "batch", Kind: "CronJob"}: "cronjobs.batch",
}

// excludedResources is the Restore's excludedResources.
func excludedResources() []string {
	return veleroapi.Resources(ExcludedFromSandbox)
}

// inert reports why a restored object is not inert ("" when it is): a workload the resource
// modifiers should have scaled to zero or suspended. The diff reads every object anyway; a sandbox
// that runs something (the ConfigMap changed, or Velero ignored it) ends the run.
func inert(u *unstructured.Unstructured) string {
	gk := u.GroupVersionKind().GroupKind()
	if _, ok := ScaledToZero[gk]; ok {
		replicas, found, err := unstructured.NestedInt64(u.Object, "spec", "replicas")
		switch {
		case err != nil:
			return "spec.replicas is not a number"
		case !found:
			return "spec.replicas is unset (1)"
		case replicas != 0:
			return fmt.Sprintf("spec.replicas is %d", replicas)
		}
	}
	if _, ok := Suspended[gk]; ok {
		if s, _, _ := unstructured.NestedBool(u.Object, "spec", "suspend"); !s {
			return "spec.suspend is not true"
		}
	}
	return ""
}

// ensureSandbox creates a sandbox labelled with the run's UID and Pod Security "restricted", or
// accepts one that carries the UID, then makes sure it holds the verifier's RoleBinding and the
// deny-all NetworkPolicy. A namespace the verifier did not create for this run is refused (a
// finding), never reused. wait is true while this run's own sandbox from an earlier pass is
// still being deleted (see FullRestore).
func (c *Checker) ensureSandbox(ctx context.Context, run *securityv1.BackupVerifyRun, name string) (wait bool, _ *securityv1.Finding, _ error) {
	ns := &corev1.Namespace{}
	err := c.Reader.Get(ctx, client.ObjectKey{Name: name}, ns)
	switch {
	case err == nil && ns.Labels[securityv1.LabelRunUID] == string(run.UID):
		if !ns.DeletionTimestamp.IsZero() {
			return true, nil, nil
		}
		return false, nil, c.confine(ctx, run, name)
	case err == nil:
		return false, &securityv1.Finding{Code: securityv1.CodeSandboxNotOwned, Severity: securityv1.SeverityCritical, Object: "core/Namespace " + name,
			Message: fmt.Sprintf("sandbox namespace %s already exists and was not created for this run; it is never reused", name)}, nil
	case !apierrors.IsNotFound(err):
		return false, nil, APIError("reading sandbox namespace "+name, err)
	}
	if !strings.HasSuffix(name, securityv1.SandboxSuffix) {
		return false, &securityv1.Finding{Code: securityv1.CodeSandboxNotOwned, Severity: securityv1.SeverityCritical, Object: "core/Namespace " + name,
			Message: fmt.Sprintf("sandbox namespace %s does not end with %s", name, securityv1.SandboxSuffix)}, nil
	}
	labels := map[string]string{securityv1.LabelRunUID: string(run.UID), securityv1.LabelRun: backupsv1.BoundedName(63, run.Name)}
	for k, v := range PodSecurityLabels {
		labels[k] = v
	}
	ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := c.Client.Create(ctx, ns); err != nil {
		// AlreadyExists included: the next pass reads whose it is.
		return false, nil, APIError("creating sandbox namespace "+name, err)
	}
	return false, nil, c.confine(ctx, run, name)
}

// confine binds the verifier to SandboxRole in the sandbox and denies its pods all traffic. Both
// are created once; AlreadyExists is this run's own from an earlier pass (the namespace carries
// the run's UID, so nobody else's objects are in it before the Restore).
func (c *Checker) confine(ctx context.Context, run *securityv1.BackupVerifyRun, ns string) error {
	if c.ServiceAccount.Name == "" || c.ServiceAccount.Namespace == "" {
		return fmt.Errorf("the verifier does not know its own ServiceAccount, which it binds to %s in each sandbox; set --service-account", SandboxRole)
	}
	labels := map[string]string{securityv1.LabelRunUID: string(run.UID)}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: SandboxRole, Namespace: ns, Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: SandboxRole},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind,
			Namespace: c.ServiceAccount.Namespace, Name: c.ServiceAccount.Name}},
	}
	if err := c.Client.Create(ctx, rb); err != nil && !apierrors.IsAlreadyExists(err) {
		return APIError(fmt.Sprintf("binding the verifier to ClusterRole %s in sandbox %s", SandboxRole, ns), err)
	}
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: SandboxNetworkPolicy, Namespace: ns, Labels: labels}, Spec: denyAll()}
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: SandboxQuota, Namespace: ns, Labels: labels}, Spec: noPods()}
	for _, o := range []struct {
		obj  client.Object
		what string
	}{
		{np, "the deny-all NetworkPolicy " + SandboxNetworkPolicy},
		{q, "the ResourceQuota of zero pods " + SandboxQuota},
	} {
		// The binding just created takes effect when the API server's RBAC informers see it: a
		// Forbidden in the first seconds is that delay, not a missing right.
		var last error
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, bindingDelay, true, func(ctx context.Context) (bool, error) {
			last = c.Client.Create(ctx, o.obj.DeepCopyObject().(client.Object))
			switch {
			case last == nil || apierrors.IsAlreadyExists(last):
				last = nil
				return true, nil
			case apierrors.IsForbidden(last):
				return false, nil
			}
			return false, last
		})
		if last == nil && err != nil {
			last = err
		}
		if last != nil {
			return APIError(fmt.Sprintf("creating %s in sandbox %s", o.what, ns), last)
		}
	}
	return nil
}

// denyAll is the spec of a sandbox's NetworkPolicy: every pod, no ingress, no egress.
func denyAll() networkingv1.NetworkPolicySpec {
	return networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
	}
}

// noPods is the spec of a sandbox's ResourceQuota: zero pods.
func noPods() corev1.ResourceQuotaSpec {
	return corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}
}

// CheckSandboxes re-reads each sandbox before the diff reads it: its ResourceQuota of zero pods
// and its deny-all NetworkPolicy present and unchanged, no Role, no RoleBinding but the verifier's
// own (unchanged), no ServiceAccount but the namespace's automatic "default", no NetworkPolicy but
// its own, and no Pod. Each departure is a critical sandbox-tampered finding: the sandbox was not
// confined while the backup was restored and compared, so the diff would say nothing reliable.
// An error is trouble reading the sandbox (retried).
func (c *Checker) CheckSandboxes(ctx context.Context, run *securityv1.BackupVerifyRun, sandboxes []string) ([]securityv1.Finding, error) {
	var out []securityv1.Finding
	for _, ns := range sandboxes {
		bad := func(object, format string, args ...any) {
			out = append(out, securityv1.Finding{Code: securityv1.CodeSandboxTampered, Severity: securityv1.SeverityCritical, Object: object,
				Message: fmt.Sprintf("sandbox %s: ", ns) + fmt.Sprintf(format, args...) + "; the sandbox was not confined, so it is not compared with the backup"})
		}
		get := func(obj client.Object, name string) (bool, error) {
			err := c.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
			switch {
			case apierrors.IsNotFound(err):
				return false, nil
			case err != nil:
				return false, APIError(fmt.Sprintf("reading %T %s in sandbox %s", obj, name, ns), err)
			}
			return obj.GetDeletionTimestamp().IsZero(), nil
		}
		q := &corev1.ResourceQuota{}
		ok, err := get(q, SandboxQuota)
		switch {
		case err != nil:
			return nil, err
		case !ok:
			bad("core/ResourceQuota "+ns+"/"+SandboxQuota, "its ResourceQuota of zero pods %s is gone", SandboxQuota)
		case !apiequality.Semantic.DeepEqual(q.Spec, noPods()):
			bad("core/ResourceQuota "+ns+"/"+SandboxQuota, "its ResourceQuota %s was changed (hard: %v)", SandboxQuota, q.Spec.Hard)
		}
		np := &networkingv1.NetworkPolicy{}
		ok, err = get(np, SandboxNetworkPolicy)
		switch {
		case err != nil:
			return nil, err
		case !ok:
			bad("networking.k8s.io/NetworkPolicy "+ns+"/"+SandboxNetworkPolicy, "its deny-all NetworkPolicy %s is gone", SandboxNetworkPolicy)
		case !apiequality.Semantic.DeepEqual(np.Spec, denyAll()):
			bad("networking.k8s.io/NetworkPolicy "+ns+"/"+SandboxNetworkPolicy, "its deny-all NetworkPolicy %s was changed", SandboxNetworkPolicy)
		}
		lists := []struct {
			list    client.ObjectList
			kind    string
			allowed func(client.Object) bool
		}{
			{&rbacv1.RoleBindingList{}, "rbac.authorization.k8s.io/RoleBinding", func(o client.Object) bool {
				rb := o.(*rbacv1.RoleBinding)
				return rb.Name == SandboxRole && rb.RoleRef == (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: SandboxRole}) &&
					len(rb.Subjects) == 1 && rb.Subjects[0] == rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: c.ServiceAccount.Namespace, Name: c.ServiceAccount.Name}
			}},
			{&rbacv1.RoleList{}, "rbac.authorization.k8s.io/Role", nil},
			{&corev1.ServiceAccountList{}, "core/ServiceAccount", func(o client.Object) bool { return o.GetName() == "default" }},
			{&networkingv1.NetworkPolicyList{}, "networking.k8s.io/NetworkPolicy", func(o client.Object) bool { return o.GetName() == SandboxNetworkPolicy }},
			{&corev1.PodList{}, "core/Pod", nil},
		}
		for _, l := range lists {
			if err := c.Reader.List(ctx, l.list, client.InNamespace(ns)); err != nil {
				return nil, APIError(fmt.Sprintf("listing %s in sandbox %s", l.kind, ns), err)
			}
			items, err := meta.ExtractList(l.list)
			if err != nil {
				return nil, err
			}
			for _, item := range items {
				o := item.(client.Object)
				if l.allowed != nil && l.allowed(o) {
					continue
				}
				object := l.kind + " " + ns + "/" + o.GetName()
				if l.allowed != nil && (o.GetName() == SandboxRole || o.GetName() == SandboxNetworkPolicy) {
					bad(object, "the verifier's own %s %s was changed", l.kind, o.GetName())
					continue
				}
				bad(object, "it holds %s %s, which no sandbox may hold", l.kind, o.GetName())
			}
		}
	}
	return out, nil
}

// bindingDelay bounds how long a new RoleBinding may take to be enforced.
const bindingDelay = 10 * time.Second

// EnsureSandboxes makes the named sandboxes (ensureSandbox: created, or accepted when they carry
// the run's UID, and confined). It reports whether they are all ready; when one is not, either it
// returns the refusal (a sandbox-not-owned finding, critical: a namespace the run does not own),
// which each backend weighs its own way, or it sets out.Done false while an earlier pass's sandbox
// is still being deleted. Other backends restore into them their own way.
func (c *Checker) EnsureSandboxes(ctx context.Context, run *securityv1.BackupVerifyRun, names []string, out *Outcome) (bool, *securityv1.Finding, error) {
	for _, name := range names {
		wait, f, err := c.ensureSandbox(ctx, run, name)
		switch {
		case err != nil:
			return false, nil, err
		case f != nil:
			return false, f, nil
		case wait:
			out.Done = false
			return false, nil, nil
		}
	}
	return true, nil, nil
}
