// Package sandbox makes, re-checks and deletes the sandboxes of full-restore verifications, for
// every backend that restores. A sandbox is a namespace the verifier creates for one run (named
// with securityv1.SandboxSuffix, labelled with the run's UID) and restores the backup under
// verification into, to compare what came back with the backup. A backup's objects are a tenant's
// workloads, Secrets and RBAC: restored as they are, they would start pods, use production Secrets
// and endpoints, and open the namespace to whoever the backup's RoleBindings name, who could then
// change what the diff reads. So a sandbox is confined before anything is restored into it
// (Maker.Ensure), re-checked before the diff reads it (Maker.Recheck: a sandbox that is no longer
// confined is not compared), and deleted with the run (Maker.Cleanup); a namespace the verifier
// did not create for the run is never used, adopted or deleted.
//
// What keeps a restore itself inert is the backend's own: the velero backend's Restore leaves
// kinds out and applies resource modifiers (package velerocheck), the coffer backend asks the
// Backup's driver for an inert restore. Every one of them leaves out NeverInSandbox.
package sandbox

import (
	"context"
	"fmt"
	"maps"
	"slices"
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
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/verifier/internal/backend"
)

// A sandbox is confined and inert before anything is restored into it:
//
//   - the verifier holds no read access outside its sandboxes. In each sandbox it creates, it binds
//     itself (RoleBinding Role) to the shipped ClusterRole Role
//     (deploy/verifier/rbac/sandbox_role.yaml: get on every kind, create NetworkPolicies and
//     ResourceQuotas, list what Check lists), which
//     it may bind without holding those rights (RBAC's bind verb, on that ClusterRole only); the
//     admission policy coffer-verifier-confinement (deploy/verifier/policies) lets its
//     ServiceAccount create and delete only labelled -bvsandbox namespaces and create only that
//     binding, to itself, only in them;
//   - the namespace enforces Pod Security "restricted", a NetworkPolicy denies all ingress and
//     egress of its pods, and a ResourceQuota allows zero pods;
//   - no restore into it brings Roles, RoleBindings, ServiceAccounts or NetworkPolicies
//     (NeverInSandbox), and before the diff Check re-checks all of this (Recheck);
//   - the velero backend's Restore leaves out Pods and DaemonSets (velerocheck's
//     ExcludedFromSandbox) and applies the resource modifiers of the ConfigMap
//     velerocheck.SandboxModifiers (deploy/verifier/velero, in Velero's namespace): Deployments,
//     StatefulSets, ReplicaSets and ReplicationControllers come back with replicas 0, Jobs and
//     CronJobs suspended; the coffer backend's RestoreJob asks the driver for an inert restore. So
//     no restored workload starts a pod, and no production Secret or endpoint is used from a
//     sandbox.
const (
	// Role names the ClusterRole the verifier binds itself to in each sandbox, and the
	// RoleBinding doing so.
	Role = "coffer-verifier-sandbox"
	// NetworkPolicy is the deny-all NetworkPolicy of each sandbox.
	NetworkPolicy = "coffer-verifier-deny-all"
	// Quota is the ResourceQuota of zero pods of each sandbox: whatever a restore brings into it,
	// nothing there can start a pod.
	Quota = "coffer-verifier-no-pods"
)

// PodSecurityLabels are the Pod Security admission labels of every sandbox.
var PodSecurityLabels = map[string]string{
	"pod-security.kubernetes.io/enforce": "restricted",
	"pod-security.kubernetes.io/warn":    "restricted",
	"pod-security.kubernetes.io/audit":   "restricted",
}

// NeverInSandbox are the kinds no restore into a sandbox may bring, with their Velero resource
// names: Roles, RoleBindings and ServiceAccounts (a tenant's RoleBinding restored there would open
// the sandbox to the tenant, who could then change what the diff reads), and NetworkPolicies (an
// allow-all one from the backup would void the deny-all). Every sandbox restore leaves them out
// (the velero backend's Restore, velerocheck.ExcludedFromSandbox; the coffer backend's diff
// expects them absent too), and Check finds any that reached a sandbox all the same.
var NeverInSandbox = map[schema.GroupKind]string{
	{Group: rbacv1.GroupName, Kind: "Role"}:                "roles.rbac.authorization.k8s.io",
	{Group: rbacv1.GroupName, Kind: "RoleBinding"}:         "rolebindings.rbac.authorization.k8s.io",
	{Kind: "ServiceAccount"}:                               "serviceaccounts",
	{Group: networkingv1.GroupName, Kind: "NetworkPolicy"}: "networkpolicies.networking.k8s.io",
}

// Names maps each source namespace of a backup to its sandbox: the run's sandboxNamespace for a
// backup of one namespace, else "<sandbox stem>-<source>-bvsandbox" for each, bounded to 63.
func Names(run *securityv1.BackupVerifyRun, sources []string) map[string]string {
	out := map[string]string{}
	if len(sources) == 1 {
		out[sources[0]] = run.Spec.SandboxNamespace
		return out
	}
	stem := strings.TrimSuffix(run.Spec.SandboxNamespace, securityv1.SandboxSuffix)
	for _, src := range sources {
		out[src] = backupsv1.BoundedName(63-len(securityv1.SandboxSuffix), stem, src) + securityv1.SandboxSuffix
	}
	return out
}

// Maker makes, re-checks and deletes the sandboxes of runs, for every backend that restores.
type Maker struct {
	// Reader reads the API server directly.
	Reader client.Reader
	// Client writes the sandboxes and what confines them.
	Client client.Client
	// ServiceAccount is the verifier's own identity, bound to Role in each sandbox.
	ServiceAccount types.NamespacedName
	// BeforeDiff, when set, is called by Recheck once a restore is over and before the diff reads
	// the sandboxes (source namespace → sandbox). A test hook: tests change what the restore
	// brought back through it.
	BeforeDiff func(ctx context.Context, sandboxes map[string]string)
}

// Ensure makes the named sandboxes (ensureSandbox: created, or accepted when they carry the run's
// UID, and confined). It reports whether they are all ready; when one is not, either it returns
// the refusal (a sandbox-not-owned finding, critical: a namespace the run does not own), which
// each backend weighs its own way, or it sets out.Done false while an earlier pass's sandbox is
// still being deleted. Backends restore into them their own way.
func (m *Maker) Ensure(ctx context.Context, run *securityv1.BackupVerifyRun, names []string, out *backend.Outcome) (ready bool, refused *securityv1.Finding, _ error) {
	quotas := make(map[string]int, len(names))
	for _, name := range names {
		quotas[name] = 0
	}
	return m.EnsureWithPods(ctx, run, quotas, out)
}

// EnsureWithPods is Ensure for sandboxes whose ResourceQuota allows the given number of pods
// (by sandbox): a volume sandbox, where each pod the restore brings runs the verifier's reader
// in place of the backup's containers (velerocheck's volume readers). Everything else confines
// them as any sandbox.
func (m *Maker) EnsureWithPods(ctx context.Context, run *securityv1.BackupVerifyRun, pods map[string]int, out *backend.Outcome) (ready bool, refused *securityv1.Finding, _ error) {
	for _, name := range slices.Sorted(maps.Keys(pods)) {
		wait, f, err := m.ensureSandbox(ctx, run, name, quotaOf(pods[name]))
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

// Refused ends a run whose sandbox the verifier may not use: the backup was not restored, so the
// verification could not be carried out (the run Fails, BackupVerifyFailed) and nothing is said
// of the backup. Nothing was restored into that namespace either; the finding (medium) names it.
func Refused(out *backend.Outcome, f securityv1.Finding) error {
	f.Severity = securityv1.SeverityMedium
	out.Findings = append(out.Findings, f)
	return reconcile.TerminalError(fmt.Errorf("%s: the backup was not restored, and nothing is said of it; delete that namespace or name another sandbox, then create the run again", f.Message))
}

// ensureSandbox creates a sandbox labelled with the run's UID and Pod Security "restricted", or
// accepts one that carries the UID, then makes sure it holds the verifier's RoleBinding, the
// deny-all NetworkPolicy and the ResourceQuota of zero pods. A namespace the verifier did not
// create for this run is refused (a finding), never reused. wait is true while this run's own
// sandbox from an earlier pass, or an earlier run's sandbox of the same name, is still being
// deleted.
func (m *Maker) ensureSandbox(ctx context.Context, run *securityv1.BackupVerifyRun, name string, quota corev1.ResourceQuotaSpec) (wait bool, _ *securityv1.Finding, _ error) {
	ns := &corev1.Namespace{}
	err := m.Reader.Get(ctx, client.ObjectKey{Name: name}, ns)
	switch {
	case err == nil && ns.Labels[securityv1.LabelRunUID] == string(run.UID):
		if !ns.DeletionTimestamp.IsZero() {
			return true, nil, nil
		}
		return false, nil, m.confine(ctx, run, name, quota)
	case err == nil && ns.Labels[securityv1.LabelRunUID] != "" && !ns.DeletionTimestamp.IsZero():
		// An earlier run's sandbox of the same name (a nightly run reusing its name), still
		// being deleted: nothing of it is used, and this run waits until it is gone.
		return true, nil, nil
	case err == nil:
		return false, &securityv1.Finding{Code: securityv1.CodeSandboxNotOwned, Severity: securityv1.SeverityCritical, Object: "core/Namespace " + name,
			Message: fmt.Sprintf("sandbox namespace %s already exists and was not created for this run; it is never reused", name)}, nil
	case !apierrors.IsNotFound(err):
		return false, nil, backend.APIError("reading sandbox namespace "+name, err)
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
	if err := m.Client.Create(ctx, ns); err != nil {
		// AlreadyExists included: the next pass reads whose it is.
		return false, nil, backend.APIError("creating sandbox namespace "+name, err)
	}
	return false, nil, m.confine(ctx, run, name, quota)
}

// confine binds the verifier to Role in the sandbox and denies its pods all traffic and any
// start. Each is created once; AlreadyExists is this run's own from an earlier pass (the namespace
// carries the run's UID, so nobody else's objects are in it before the restore).
func (m *Maker) confine(ctx context.Context, run *securityv1.BackupVerifyRun, ns string, quota corev1.ResourceQuotaSpec) error {
	if m.ServiceAccount.Name == "" || m.ServiceAccount.Namespace == "" {
		return fmt.Errorf("the verifier does not know its own ServiceAccount, which it binds to %s in each sandbox; set --service-account", Role)
	}
	labels := map[string]string{securityv1.LabelRunUID: string(run.UID)}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: Role, Namespace: ns, Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: Role},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind,
			Namespace: m.ServiceAccount.Namespace, Name: m.ServiceAccount.Name}},
	}
	if err := m.Client.Create(ctx, rb); err != nil && !apierrors.IsAlreadyExists(err) {
		return backend.APIError(fmt.Sprintf("binding the verifier to ClusterRole %s in sandbox %s", Role, ns), err)
	}
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: NetworkPolicy, Namespace: ns, Labels: labels}, Spec: denyAll()}
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: Quota, Namespace: ns, Labels: labels}, Spec: quota}
	for _, o := range []struct {
		obj  client.Object
		what string
	}{
		{np, "the deny-all NetworkPolicy " + NetworkPolicy},
		{q, fmt.Sprintf("the ResourceQuota of %s pods %s", quota.Hard.Pods(), Quota)},
	} {
		// The binding just created takes effect when the API server's RBAC informers see it: a
		// Forbidden in the first seconds is that delay, not a missing right.
		var last error
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, bindingDelay, true, func(ctx context.Context) (bool, error) {
			last = m.Client.Create(ctx, o.obj.DeepCopyObject().(client.Object))
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
			return backend.APIError(fmt.Sprintf("creating %s in sandbox %s", o.what, ns), last)
		}
	}
	return nil
}

// bindingDelay bounds how long a new RoleBinding may take to be enforced.
const bindingDelay = 10 * time.Second

// denyAll is the spec of a sandbox's NetworkPolicy: every pod, no ingress, no egress.
func denyAll() networkingv1.NetworkPolicySpec {
	return networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
	}
}

// quotaOf is the spec of a sandbox's ResourceQuota: n pods (zero but in a volume sandbox).
func quotaOf(n int) corev1.ResourceQuotaSpec {
	return corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(int64(n), resource.DecimalSI)}}
}

// Recheck is the last step before a diff reads the sandboxes of a finished restore (source
// namespace → sandbox): the BeforeDiff hook, then Check. It reports whether every sandbox is
// still confined; when one is not, its sandbox-tampered findings are in out and nothing is to be
// compared.
func (m *Maker) Recheck(ctx context.Context, run *securityv1.BackupVerifyRun, mapping map[string]string, out *backend.Outcome) (confined bool, _ error) {
	if m.BeforeDiff != nil {
		m.BeforeDiff(ctx, mapping)
	}
	names := slices.Sorted(maps.Values(mapping))
	tampered, err := m.Check(ctx, run, names)
	if err != nil {
		return false, err
	}
	out.Findings = append(out.Findings, tampered...)
	return len(tampered) == 0, nil
}

// Check re-reads each sandbox before the diff reads it: its ResourceQuota of zero pods and its
// deny-all NetworkPolicy present and unchanged, no Role, no RoleBinding but the verifier's own
// (unchanged), no ServiceAccount but the namespace's automatic "default", no NetworkPolicy but its
// own, and no Pod. Each departure is a critical sandbox-tampered finding: the sandbox was not
// confined while the backup was restored and compared, so the diff would say nothing reliable.
// An error is trouble reading the sandbox (retried).
func (m *Maker) Check(ctx context.Context, run *securityv1.BackupVerifyRun, sandboxes []string) ([]securityv1.Finding, error) {
	pods := make(map[string]int, len(sandboxes))
	for _, ns := range sandboxes {
		pods[ns] = 0
	}
	return m.CheckWithPods(ctx, run, pods, nil)
}

// CheckWithPods is Check for sandboxes made by EnsureWithPods: each one's ResourceQuota must allow
// exactly its number of pods, and a Pod in it is no departure when reader says it is one of the
// verifier's readers.
func (m *Maker) CheckWithPods(ctx context.Context, run *securityv1.BackupVerifyRun, pods map[string]int, reader func(*corev1.Pod) bool) ([]securityv1.Finding, error) {
	var out []securityv1.Finding
	for _, ns := range slices.Sorted(maps.Keys(pods)) {
		bad := func(object, format string, args ...any) {
			out = append(out, securityv1.Finding{Code: securityv1.CodeSandboxTampered, Severity: securityv1.SeverityCritical, Object: object,
				Message: fmt.Sprintf("sandbox %s: ", ns) + fmt.Sprintf(format, args...) + "; the sandbox was not confined, so it is not compared with the backup"})
		}
		get := func(obj client.Object, name string) (bool, error) {
			err := m.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
			switch {
			case apierrors.IsNotFound(err):
				return false, nil
			case err != nil:
				return false, backend.APIError(fmt.Sprintf("reading %T %s in sandbox %s", obj, name, ns), err)
			}
			return obj.GetDeletionTimestamp().IsZero(), nil
		}
		q := &corev1.ResourceQuota{}
		ok, err := get(q, Quota)
		switch {
		case err != nil:
			return nil, err
		case !ok:
			bad("core/ResourceQuota "+ns+"/"+Quota, "its ResourceQuota of %d pods %s is gone", pods[ns], Quota)
		case !apiequality.Semantic.DeepEqual(q.Spec, quotaOf(pods[ns])):
			bad("core/ResourceQuota "+ns+"/"+Quota, "its ResourceQuota %s was changed (hard: %v)", Quota, q.Spec.Hard)
		}
		np := &networkingv1.NetworkPolicy{}
		ok, err = get(np, NetworkPolicy)
		switch {
		case err != nil:
			return nil, err
		case !ok:
			bad("networking.k8s.io/NetworkPolicy "+ns+"/"+NetworkPolicy, "its deny-all NetworkPolicy %s is gone", NetworkPolicy)
		case !apiequality.Semantic.DeepEqual(np.Spec, denyAll()):
			bad("networking.k8s.io/NetworkPolicy "+ns+"/"+NetworkPolicy, "its deny-all NetworkPolicy %s was changed", NetworkPolicy)
		}
		lists := []struct {
			list    client.ObjectList
			kind    string
			allowed func(client.Object) bool
		}{
			{&rbacv1.RoleBindingList{}, "rbac.authorization.k8s.io/RoleBinding", func(o client.Object) bool {
				rb := o.(*rbacv1.RoleBinding)
				return rb.Name == Role && rb.RoleRef == (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: Role}) &&
					len(rb.Subjects) == 1 && rb.Subjects[0] == rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: m.ServiceAccount.Namespace, Name: m.ServiceAccount.Name}
			}},
			{&rbacv1.RoleList{}, "rbac.authorization.k8s.io/Role", nil},
			{&corev1.ServiceAccountList{}, "core/ServiceAccount", func(o client.Object) bool { return o.GetName() == "default" }},
			{&networkingv1.NetworkPolicyList{}, "networking.k8s.io/NetworkPolicy", func(o client.Object) bool { return o.GetName() == NetworkPolicy }},
			{&corev1.PodList{}, "core/Pod", func(o client.Object) bool { return reader != nil && reader(o.(*corev1.Pod)) }},
		}
		for _, l := range lists {
			if err := m.Reader.List(ctx, l.list, client.InNamespace(ns)); err != nil {
				return nil, backend.APIError(fmt.Sprintf("listing %s in sandbox %s", l.kind, ns), err)
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
				if l.allowed != nil && (o.GetName() == Role || o.GetName() == NetworkPolicy) {
					bad(object, "the verifier's own %s %s was changed", l.kind, o.GetName())
					continue
				}
				bad(object, "it holds %s %s, which no sandbox may hold", l.kind, o.GetName())
			}
		}
	}
	return out, nil
}

// Cleanup deletes the -bvsandbox namespaces carrying the run's UID, best-effort: each failure is
// a finding. Nothing else is ever deleted.
func (m *Maker) Cleanup(ctx context.Context, run *securityv1.BackupVerifyRun) []securityv1.Finding {
	var out []securityv1.Finding
	nss := &corev1.NamespaceList{}
	if err := m.Reader.List(ctx, nss, client.MatchingLabels{securityv1.LabelRunUID: string(run.UID)}); err != nil {
		return append(out, securityv1.Finding{Code: securityv1.CodeCleanupFailed, Severity: securityv1.SeverityLow, Message: "listing sandboxes: " + err.Error()})
	}
	for i := range nss.Items {
		ns := &nss.Items[i]
		if !strings.HasSuffix(ns.Name, securityv1.SandboxSuffix) {
			continue
		}
		if err := m.Client.Delete(ctx, ns, client.Preconditions{UID: &ns.UID}); err != nil && !apierrors.IsNotFound(err) {
			out = append(out, securityv1.Finding{Code: securityv1.CodeCleanupFailed, Severity: securityv1.SeverityLow,
				Object: "core/Namespace " + ns.Name, Message: "deleting the sandbox: " + err.Error()})
		}
	}
	return out
}
