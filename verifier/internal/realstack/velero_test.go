package realstack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
	bvsandbox "github.com/coffer-backup/coffer/verifier/internal/sandbox"
	"github.com/coffer-backup/coffer/verifier/internal/velerocheck"
	"github.com/coffer-backup/coffer/verifier/internal/verifyrun"
)

func veleroRun(t *testing.T, name, backup string, m securityv1.Mode, sandbox string) *securityv1.BackupVerifyRun {
	return newRun(t, name, securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendVelero,
		BackupRef: securityv1.BackupRef{Name: backup, Namespace: velerostack.Namespace}, Mode: m, SandboxNamespace: sandbox,
		Timeout: &metav1.Duration{Duration: 10 * time.Minute}})
}

func TestChecksumOnly(t *testing.T) {
	ns := uniq("cs")
	namespaceWithData(t, ns)
	vb := veleroBackup(t, ns, true, ns)

	t.Run("a sound backup verifies", func(t *testing.T) {
		h := newHarness(t)
		run := veleroRun(t, "cs-ok", vb.Name, securityv1.ModeChecksumOnly, "")
		// One pass starts the run and verifies it (no separate pass, and no 1 ms requeue, between).
		h.step(run)
		require.NotNil(t, run.Status.StartTime)
		assert.Len(t, securityEvents(t, run)[securityv1.EventBackupVerifyStarted], 1)
		h.finish(run)
		assert.Equal(t, securityv1.RunSucceeded, run.Status.Phase, run.Status.Message)
		res := result(t, run)
		assert.Equal(t, res.Spec.RecordedChecksum, res.Spec.ComputedChecksum)
		assert.Equal(t, vb.Annotations["backups.cozystack.io/checksum"], res.Spec.ComputedChecksum)
		assert.Positive(t, res.Spec.SizeBytes)
		assert.Equal(t, securityv1.SeverityInfo, res.Status.WorstSeverity)
		assert.Equal(t, run.UID, res.Spec.RunRef.UID)
		ev := securityEvents(t, run)
		require.Len(t, ev[securityv1.EventBackupVerifyCompleted], 1)
		done := ev[securityv1.EventBackupVerifyCompleted][0]
		assert.Equal(t, securityv1.ClassCompliance, done.Spec.Class)
		assert.Equal(t, "c-123", done.Spec.ClusterIdentity.ClusterID)
		assert.Equal(t, "test", done.Spec.ClusterIdentity.ClusterName)
		assert.Equal(t, run.Name, done.Spec.Signals["run.name"])

		// Terminal runs are never touched again.
		rv := run.ResourceVersion
		h.step(run)
		assert.Equal(t, rv, run.ResourceVersion)
	})

	t.Run("one flipped byte in the stored tarball is a critical mismatch", func(t *testing.T) {
		flipMiddleByte(t, velerostack.ObjectKey(vb.Name))

		h := newHarness(t)
		run := veleroRun(t, "cs-flipped", vb.Name, securityv1.ModeChecksumOnly, "")
		h.finish(run)
		assert.Equal(t, securityv1.RunSucceeded, run.Status.Phase)
		assert.Equal(t, securityv1.SeverityCritical, run.Status.WorstSeverity)
		res := result(t, run)
		assert.Equal(t, securityv1.SeverityCritical, res.Status.WorstSeverity)
		assert.Equal(t, []string{securityv1.CodeChecksumMismatch}, codes(res.Spec.Findings))
		assert.NotEqual(t, res.Spec.RecordedChecksum, res.Spec.ComputedChecksum)
		ev := securityEvents(t, run)
		require.Len(t, ev[securityv1.EventBackupVerifyMismatch], 1)
		assert.Equal(t, securityv1.ClassDetection, ev[securityv1.EventBackupVerifyMismatch][0].Spec.Class)
		assert.Empty(t, ev[securityv1.EventBackupVerifyCompleted])
	})
}

func TestChecksumNotRecorded(t *testing.T) {
	ns := uniq("nr")
	namespaceWithData(t, ns)
	vb := veleroBackup(t, ns, false, ns)
	h := newHarness(t)
	run := veleroRun(t, "cs-unrecorded", vb.Name, securityv1.ModeChecksumOnly, "")
	h.finish(run)
	assert.Equal(t, securityv1.RunSucceeded, run.Status.Phase, "nothing contradicts the backup, but it is reported")
	res := result(t, run)
	assert.Equal(t, []string{securityv1.CodeChecksumNotRecorded}, codes(res.Spec.Findings))
	assert.Equal(t, securityv1.SeverityMedium, res.Status.WorstSeverity)
	assert.Empty(t, res.Spec.RecordedChecksum)
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, res.Spec.ComputedChecksum, "the computed value is in the Result")
}

func TestBackupNotFoundAndCRDMissing(t *testing.T) {
	h := newHarness(t)
	run := veleroRun(t, "cs-missing", "no-such-backup", securityv1.ModeChecksumOnly, "")
	h.finish(run)
	assert.Equal(t, securityv1.RunSucceeded, run.Status.Phase, "as ugallu: a verdict, not a failure")
	assert.Equal(t, securityv1.SeverityHigh, run.Status.WorstSeverity)
	assert.Equal(t, []string{securityv1.CodeVeleroBackupNotFound}, codes(result(t, run).Spec.Findings))
	assert.Len(t, securityEvents(t, run)[securityv1.EventBackupVerifyMismatch], 1, "high flips the event to Detection")

	// A cluster without Velero's CRDs, as the API server reports it.
	noVelero := interceptor.NewClient(cl, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*velerov1.Backup); ok {
			return &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "velero.io", Kind: "Backup"}, SearchedVersions: []string{"v1"}}
		}
		return c.Get(ctx, key, obj, opts...)
	}})
	h2 := newHarness(t)
	h2.r = h2.reconciler(noVelero)
	run2 := veleroRun(t, "cs-nocrd", "any", securityv1.ModeFullRestore, "nocrd-bvsandbox")
	h2.finish(run2)
	assert.Equal(t, securityv1.RunFailed, run2.Status.Phase)
	assert.Equal(t, []string{securityv1.CodeVeleroCRDMissing}, codes(result(t, run2).Spec.Findings))
	err := cl.Get(context.Background(), client.ObjectKey{Name: "nocrd-bvsandbox"}, &corev1.Namespace{})
	assert.True(t, apierrors.IsNotFound(err), "failed fast: no sandbox was created")
}

// inventory lists every ConfigMap, Secret, ServiceAccount, Service and Deployment outside sandboxes.
func inventory(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, list := range []client.ObjectList{&corev1.ConfigMapList{}, &corev1.SecretList{}, &corev1.ServiceAccountList{}, &corev1.ServiceList{}, &appsv1.DeploymentList{}} {
		require.NoError(t, cl.List(context.Background(), list))
		items, _ := meta.ExtractList(list)
		for _, it := range items {
			o := it.(client.Object)
			if len(o.GetNamespace()) > 10 && o.GetNamespace()[len(o.GetNamespace())-10:] == "-bvsandbox" {
				continue
			}
			out = append(out, o.GetObjectKind().GroupVersionKind().Kind+" "+o.GetNamespace()+"/"+o.GetName()+"@"+o.GetResourceVersion())
		}
	}
	sort.Strings(out)
	return out
}

// openToTheTenant adds to ns what would open a sandbox to the tenant if a restore brought it there:
// a RoleBinding granting edit to a user and an allow-all NetworkPolicy (namespaceWithData has a
// ServiceAccount already).
func openToTheTenant(t *testing.T, ns string) {
	t.Helper()
	for _, o := range []client.Object{
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "mallory-edits", Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"}}},
		&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "allow-all", Namespace: ns}, Spec: networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{}}, Egress: []networkingv1.NetworkPolicyEgressRule{{}}}},
	} {
		require.NoError(t, cl.Create(context.Background(), o))
	}
}

// sandboxHolds lists the Roles, RoleBindings, ServiceAccounts, NetworkPolicies and ResourceQuotas
// of a sandbox, as "Kind name".
func sandboxHolds(t *testing.T, sandbox string) []string {
	t.Helper()
	var out []string
	for _, l := range []struct {
		list client.ObjectList
		kind string
	}{{&rbacv1.RoleList{}, "Role"}, {&rbacv1.RoleBindingList{}, "RoleBinding"}, {&corev1.ServiceAccountList{}, "ServiceAccount"},
		{&networkingv1.NetworkPolicyList{}, "NetworkPolicy"}, {&corev1.ResourceQuotaList{}, "ResourceQuota"}} {
		require.NoError(t, cl.List(context.Background(), l.list, client.InNamespace(sandbox)))
		items, err := meta.ExtractList(l.list)
		require.NoError(t, err)
		for _, it := range items {
			out = append(out, l.kind+" "+it.(client.Object).GetName())
		}
	}
	sort.Strings(out)
	return out
}

// TestFullRestore: a full-restore of a namespace that also holds a RoleBinding granting edit to a
// user, a ServiceAccount and an allow-all NetworkPolicy. Before, the Restore brought all three into
// the sandbox (the user could edit it, the NetworkPolicy voided the deny-all) and the sandbox had no
// ResourceQuota. Now none reaches it, it holds the zero-pods quota and the deny-all before the
// Restore and when the diff runs, and the run passes clean, the three counted as left out.
func TestFullRestore(t *testing.T) {
	ns := uniq("fr")
	namespaceWithData(t, ns)
	openToTheTenant(t, ns)
	vb := veleroBackup(t, ns, true, ns)
	before := inventory(t)

	h := newHarness(t)
	sandbox := ns + "-bvsandbox"
	var atDiff []string
	h.velero().Sandbox.BeforeDiff = func(ctx context.Context, sandboxes map[string]string) { atDiff = sandboxHolds(t, sandboxes[ns]) }
	run := veleroRun(t, "fr-ok", vb.Name, securityv1.ModeFullRestore, sandbox)
	res := h.step(run) // Running: the sandbox and the Restore are created in the same pass
	assert.Equal(t, verifyrun.MinPollInterval, res.RequeueAfter, "a run just started polls its Restore soon (at most every 10 s later on)")
	assert.Equal(t, securityv1.ReasonRestoreInProgress, meta.FindStatusCondition(run.Status.Conditions, securityv1.ConditionProgressing).Reason)
	sb := &corev1.Namespace{}
	require.NoError(t, cl.Get(context.Background(), client.ObjectKey{Name: sandbox}, sb))
	assert.Equal(t, string(run.UID), sb.Labels[securityv1.LabelRunUID])
	vr := &velerov1.Restore{}
	require.NoError(t, cl.Get(context.Background(), client.ObjectKey{Namespace: velerostack.Namespace, Name: velerocheck.RestoreName(run)}, vr))
	assert.Equal(t, map[string]string{ns: sandbox}, vr.Spec.NamespaceMapping, "an exact mapping, never a wildcard")
	assert.Equal(t, []string{ns}, vr.Spec.IncludedNamespaces)
	assert.False(t, *vr.Spec.IncludeClusterResources)
	for _, r := range []string{"roles.rbac.authorization.k8s.io", "rolebindings.rbac.authorization.k8s.io", "serviceaccounts", "networkpolicies.networking.k8s.io"} {
		assert.Contains(t, vr.Spec.ExcludedResources, r)
	}
	confined := []string{"NetworkPolicy " + bvsandbox.NetworkPolicy, "ResourceQuota " + bvsandbox.Quota, "RoleBinding " + bvsandbox.Role}
	holds := sandboxHolds(t, sandbox)
	assert.Subset(t, holds, confined, "confined before the Restore")

	h.finish(run)
	r := result(t, run)
	require.Equal(t, securityv1.RunSucceeded, run.Status.Phase, "%s\n%s", run.Status.Message, findingsOf(r.Spec.Findings))
	assert.Equal(t, []string{securityv1.CodeChecksumMatch}, codes(r.Spec.Findings), findingsOf(r.Spec.Findings))
	// Besides them, at most the namespace's own default ServiceAccount (kube-controller-manager's).
	atDiff = slices.DeleteFunc(atDiff, func(s string) bool { return s == "ServiceAccount default" })
	assert.Equal(t, confined, atDiff, "nothing of the tenant's RBAC or NetworkPolicies reached the sandbox")
	excluded, _ := strconv.Atoi(r.Spec.Details[velerocheck.DetailObjectsExcluded])
	assert.GreaterOrEqual(t, excluded, 4, "RoleBinding, NetworkPolicy, ServiceAccounts web and default left out: %v", r.Spec.Details)
	// Six objects of the test, plus what kube-controller-manager adds to a namespace (root CA
	// ConfigMap, default ServiceAccount, the Deployment's ReplicaSet, the Service's EndpointSlice).
	assert.GreaterOrEqual(t, r.Spec.ObjectsExpected, int32(6), "ConfigMaps, Secret, ServiceAccount, Service, Deployment")
	assert.Equal(t, r.Spec.ObjectsExpected, r.Spec.ObjectsRestored, "a clean diff")
	assert.Equal(t, securityv1.SeverityInfo, r.Status.WorstSeverity)
	assert.Equal(t, before, inventory(t), "nothing was created or changed outside the sandbox")
	took, err := strconv.Atoi(r.Spec.Details[securityv1.DetailRestoreSeconds])
	require.NoError(t, err, "the restore's time is measured: %v", r.Spec.Details)
	assert.GreaterOrEqual(t, took, 0)
	assert.Less(t, took, 600, "from the Restore's creation to its completion")

	err = cl.Get(context.Background(), client.ObjectKeyFromObject(vr), vr)
	assert.True(t, apierrors.IsNotFound(err) || !vr.DeletionTimestamp.IsZero(), "the Restore is cleaned up")
	require.NoError(t, client.IgnoreNotFound(cl.Get(context.Background(), client.ObjectKey{Name: sandbox}, sb)))
	assert.True(t, apierrors.IsNotFound(cl.Get(context.Background(), client.ObjectKey{Name: sandbox}, &corev1.Namespace{})) || !sb.DeletionTimestamp.IsZero(),
		"the sandbox is being deleted")

	// Between the Restore and the diff, someone binds a user in the sandbox and deletes its deny-all:
	// the sandbox is no longer confined, which is a critical finding, and nothing is compared.
	t.Run("tampered sandbox", func(t *testing.T) {
		h := newHarness(t)
		sandbox := ns + "-t-bvsandbox"
		h.velero().Sandbox.BeforeDiff = func(ctx context.Context, sandboxes map[string]string) {
			require.NoError(t, cl.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "mallory-edits", Namespace: sandbox},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"}}}))
			require.NoError(t, cl.Delete(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: bvsandbox.NetworkPolicy, Namespace: sandbox}}))
		}
		run := veleroRun(t, "fr-tampered", vb.Name, securityv1.ModeFullRestore, sandbox)
		h.finish(run)
		r := result(t, run)
		assert.Equal(t, securityv1.RunSucceeded, run.Status.Phase)
		assert.Equal(t, securityv1.SeverityCritical, run.Status.WorstSeverity)
		assert.Equal(t, securityv1.ReasonBackupVerifyMismatch, meta.FindStatusCondition(run.Status.Conditions, securityv1.ConditionReady).Reason)
		require.Equal(t, []string{securityv1.CodeSandboxTampered, securityv1.CodeSandboxTampered}, codes(r.Spec.Findings), findingsOf(r.Spec.Findings))
		objects := []string{r.Spec.Findings[0].Object, r.Spec.Findings[1].Object}
		assert.ElementsMatch(t, []string{"rbac.authorization.k8s.io/RoleBinding " + sandbox + "/mallory-edits",
			"networking.k8s.io/NetworkPolicy " + sandbox + "/" + bvsandbox.NetworkPolicy}, objects, findingsOf(r.Spec.Findings))
		for _, f := range r.Spec.Findings {
			assert.Equal(t, securityv1.SeverityCritical, f.Severity)
		}
		assert.Empty(t, r.Spec.Details[velerocheck.DetailObjectsCompared], "a sandbox that is not confined is not compared")
		err := cl.Get(context.Background(), client.ObjectKey{Name: sandbox}, sb)
		assert.True(t, apierrors.IsNotFound(err) || !sb.DeletionTimestamp.IsZero(), "the sandbox is cleaned up")
	})
}

func TestFullRestoreOfSeveralNamespaces(t *testing.T) {
	a, b := uniq("ma"), uniq("mb")
	namespaceWithData(t, a)
	namespaceWithData(t, b)
	vb := veleroBackup(t, "multi-"+a, true, a, b)
	h := newHarness(t)
	run := veleroRun(t, "fr-multi", vb.Name, securityv1.ModeFullRestore, "multi-bvsandbox")
	h.step(run)
	vr := &velerov1.Restore{}
	require.NoError(t, cl.Get(context.Background(), client.ObjectKey{Namespace: velerostack.Namespace, Name: velerocheck.RestoreName(run)}, vr))
	want := bvsandbox.Names(run, []string{a, b})
	assert.Equal(t, want, vr.Spec.NamespaceMapping, "each source namespace maps to its own sandbox")
	for src, dst := range want {
		assert.NotEqual(t, src, dst)
		assert.Regexp(t, `-bvsandbox$`, dst)
	}
	h.finish(run)
	assert.Equal(t, securityv1.RunSucceeded, run.Status.Phase, run.Status.Message)
	r := result(t, run)
	assert.GreaterOrEqual(t, r.Spec.ObjectsExpected, int32(12))
	assert.Equal(t, r.Spec.ObjectsExpected, r.Spec.ObjectsRestored)
}

// TestObjectRemovedMidDiff removes one restored object from the sandbox as the diff reaches it.
func TestObjectRemovedMidDiff(t *testing.T) {
	ns := uniq("md")
	namespaceWithData(t, ns)
	vb := veleroBackup(t, ns, true, ns)
	sandbox := ns + "-bvsandbox"
	h := newHarness(t)
	reader, deleted := deletingOnFirstRead(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: sandbox, Name: "flags"}})
	h.r = h.reconciler(reader)
	run := veleroRun(t, "fr-middiff", vb.Name, securityv1.ModeFullRestore, sandbox)
	h.finish(run)
	assert.True(t, deleted["flags"])
	assert.Equal(t, securityv1.RunSucceeded, run.Status.Phase)
	r := result(t, run)
	require.Equal(t, []string{securityv1.CodeObjectMissing}, codes(r.Spec.Findings))
	assert.Equal(t, "core/ConfigMap "+sandbox+"/flags", r.Spec.Findings[0].Object)
	assert.Equal(t, r.Spec.ObjectsExpected-1, r.Spec.ObjectsRestored)
}

// TestOwnedObjectLeftToItsController: the Service's EndpointSlice is restored with an
// ownerReference to the source Service's UID, so in the sandbox the garbage collector deletes it
// and the EndpointSlice controller makes a new one under another name. The test deletes the
// restored slice just before the diff reads it (as the collector would) and the diff counts it as
// restored through its controller, the restored Service. A ConfigMap deleted the same way has no
// controller and is still reported missing.
func TestOwnedObjectLeftToItsController(t *testing.T) {
	ns := uniq("ow")
	namespaceWithData(t, ns)
	slices := &discoveryv1.EndpointSliceList{}
	require.NoError(t, wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := cl.List(ctx, slices, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: "web"})
		return err == nil && len(slices.Items) == 1, err
	}), "kube-controller-manager makes the Service's EndpointSlice")
	slice := slices.Items[0].Name
	vb := veleroBackup(t, ns, true, ns)
	sandbox := ns + "-bvsandbox"
	h := newHarness(t)
	reader, deleted := deletingOnFirstRead(t,
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: sandbox, Name: slice}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: sandbox, Name: "flags"}})
	h.r = h.reconciler(reader)
	run := veleroRun(t, "fr-owned", vb.Name, securityv1.ModeFullRestore, sandbox)
	h.finish(run)
	require.True(t, deleted[slice] && deleted["flags"])
	r := result(t, run)
	require.Equal(t, []string{securityv1.CodeObjectMissing}, codes(r.Spec.Findings), "only the ConfigMap: %v", r.Spec.Findings)
	assert.Equal(t, "core/ConfigMap "+sandbox+"/flags", r.Spec.Findings[0].Object)
	// At least the EndpointSlice; the ReplicaSet too when the collector deleted it first.
	left, err := strconv.Atoi(r.Spec.Details["objectsLeftToControllers"])
	require.NoError(t, err, "details: %v", r.Spec.Details)
	assert.GreaterOrEqual(t, left, 1)
	assert.Equal(t, r.Spec.ObjectsExpected-1, r.Spec.ObjectsRestored)
}

// deletingOnFirstRead is a reader that deletes each of objs (as the garbage collector or a user
// would) just before it is first read, and records by name what it deleted.
func deletingOnFirstRead(t *testing.T, objs ...client.Object) (client.Reader, map[string]bool) {
	deleted := map[string]bool{}
	return interceptor.NewClient(cl, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		for _, o := range objs {
			if client.ObjectKeyFromObject(o) == key && !deleted[key.Name] {
				deleted[key.Name] = true
				require.NoError(t, client.IgnoreNotFound(c.Delete(ctx, o)))
			}
		}
		return c.Get(ctx, key, obj, opts...)
	}}), deleted
}

// TestResumeAfterKill kills the verifier while its Restore is in flight; a new instance observes the
// existing Restore and finishes with exactly one Result and one terminal SecurityEvent.
func TestResumeAfterKill(t *testing.T) {
	ns := uniq("rk")
	namespaceWithData(t, ns)
	vb := veleroBackup(t, ns, true, ns)
	h := newHarness(t)
	run := veleroRun(t, "fr-resume", vb.Name, securityv1.ModeFullRestore, ns+"-bvsandbox")
	h.step(run) // starts, creates the sandbox and the Restore, then "dies"
	h.r = h.reconciler(cl)
	h.finish(run)
	assert.Equal(t, securityv1.RunSucceeded, run.Status.Phase, run.Status.Message)
	list := &securityv1.BackupVerifyResultList{}
	require.NoError(t, cl.List(context.Background(), list, client.InNamespace(run.Namespace), client.MatchingLabels{securityv1.LabelRun: run.Name}))
	assert.Len(t, list.Items, 1, "exactly one Result")
	ev := securityEvents(t, run)
	assert.Len(t, ev[securityv1.EventBackupVerifyStarted], 1)
	assert.Len(t, ev[securityv1.EventBackupVerifyCompleted], 1)
	assert.Len(t, ev, 2, "one start, one terminal event")
}

// TestCrashAfterCleanup kills the verifier after it cleaned up its sandbox and Restore but before
// it wrote the Result: the verdict is lost with the process. The next instance meets its own
// sandbox and Restore being deleted, waits for them to go, restores again, and records one Result
// with the backup's true verdict (not a sandbox-not-owned failure of a good backup).
func TestCrashAfterCleanup(t *testing.T) {
	ns := uniq("ca")
	namespaceWithData(t, ns)
	vb := veleroBackup(t, ns, true, ns)
	sandbox := ns + "-bvsandbox"
	h := newHarness(t)
	crashed := false
	dying := h.reconciler(cl)
	dying.Client = interceptor.NewClient(cl, interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if _, ok := obj.(*securityv1.BackupVerifyResult); ok && !crashed {
			crashed = true
			return errors.New("killed before the Result was written")
		}
		return c.Create(ctx, obj, opts...)
	}})
	h.r = dying
	run := veleroRun(t, "fr-crash-cleanup", vb.Name, securityv1.ModeFullRestore, sandbox)
	key := client.ObjectKeyFromObject(run)
	durations, runs := sampleCount(t, "ugallu_backup_verify_full_restore_duration_seconds"), sampleCount(t, "ugallu_backup_verify_runs_total")
	require.NoError(t, wait.PollUntilContextTimeout(context.Background(), 300*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := dying.Reconcile(ctx, reconcile.Request{NamespacedName: key})
		if crashed {
			return true, nil
		}
		return false, err
	}), "velero log:\n%s", stack.VeleroLog())
	sb := &corev1.Namespace{}
	err := cl.Get(context.Background(), client.ObjectKey{Name: sandbox}, sb)
	require.True(t, apierrors.IsNotFound(err) || !sb.DeletionTimestamp.IsZero(), "the crash came after the sandbox's deletion began")
	require.NoError(t, cl.Get(context.Background(), key, run))
	require.Equal(t, securityv1.RunRunning, run.Status.Phase)

	h.r = h.reconciler(cl) // the restarted verifier
	h.finish(run)
	assert.Equal(t, securityv1.RunSucceeded, run.Status.Phase, run.Status.Message)
	r := result(t, run)
	assert.GreaterOrEqual(t, r.Spec.ObjectsExpected, int32(6))
	assert.Equal(t, r.Spec.ObjectsExpected, r.Spec.ObjectsRestored, "the second restore was diffed, not a sandbox on its way out")
	list := &securityv1.BackupVerifyResultList{}
	require.NoError(t, cl.List(context.Background(), list, client.InNamespace(run.Namespace), client.MatchingLabels{securityv1.LabelRun: run.Name}))
	assert.Len(t, list.Items, 1, "exactly one Result")
	ev := securityEvents(t, run)
	assert.Len(t, ev[securityv1.EventBackupVerifyCompleted], 1)
	assert.Len(t, ev, 2, "one start, one terminal event")
	// Two passes executed the restore (the first died before its Result), one run ended: each
	// metric is observed once, at the status write that ended the run.
	assert.Equal(t, durations+1, sampleCount(t, "ugallu_backup_verify_full_restore_duration_seconds"), "full_restore_duration_seconds observed once")
	assert.Equal(t, runs+1, sampleCount(t, "ugallu_backup_verify_runs_total"), "runs_total counted once")
	err = cl.Get(context.Background(), client.ObjectKey{Name: sandbox}, sb)
	assert.True(t, apierrors.IsNotFound(err) || !sb.DeletionTimestamp.IsZero(), "the second sandbox is cleaned up too")
}

// TestTimeout: a full-restore whose deadline passes while Velero restores ends Failed (timeout),
// and leaks nothing. Velero goes on restoring after its Restore is deleted and re-creates a deleted
// sandbox from the backup's copy of the source namespace (no run label, no confinement, the
// source's Secrets); so the sandbox and the Restore are kept, confined, until the Restore ended,
// and the sweeper deletes them then. Velero is frozen mid-restore (SIGSTOP) while the deadline
// passes, so the restore is in flight at the run's end whatever the machine's speed; at no moment
// does a namespace of the sandbox's name exist without the run's label.
func TestTimeout(t *testing.T) {
	ctx := context.Background()
	ns := uniq("to")
	namespaceWithData(t, ns)
	for i := range 60 { // enough items that Velero is caught mid-restore
		require.NoError(t, cl.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bulk-%02d", i), Namespace: ns}}))
	}
	vb := veleroBackup(t, ns, true, ns)
	sandbox := ns + "-bvsandbox"
	h := newHarness(t)
	run := veleroRun(t, "fr-timeout", vb.Name, securityv1.ModeFullRestore, sandbox)

	// Watch the sandbox's name for the whole test (the run's UID read once: the run is re-read by
	// every step).
	watchCtx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	unlabelled := make(chan string, 1)
	runUID := string(run.UID)
	go func() {
		_ = wait.PollUntilContextCancel(watchCtx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			got := &corev1.Namespace{}
			if err := cl.Get(ctx, client.ObjectKey{Name: sandbox}, got); err == nil && got.Labels[securityv1.LabelRunUID] != runUID {
				unlabelled <- fmt.Sprintf("namespace %s (labels %v, deleting %v)", sandbox, got.Labels, !got.DeletionTimestamp.IsZero())
				return true, nil
			}
			return false, nil
		})
	}()

	h.step(run) // the sandbox and the Restore are made
	restoreKey := client.ObjectKey{Namespace: velerostack.Namespace, Name: velerocheck.RestoreName(run)}
	vr := &velerov1.Restore{}
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := cl.Get(ctx, restoreKey, vr)
		return err == nil && vr.Status.Phase == velerov1.RestorePhaseInProgress, client.IgnoreNotFound(err)
	}), "Velero starts the restore")
	require.NoError(t, stack.PauseVelero())
	paused := true
	defer func() {
		if paused {
			_ = stack.ResumeVelero()
		}
	}()

	h.clock.Step(16 * time.Minute)
	h.finish(run)
	assert.Equal(t, securityv1.RunFailed, run.Status.Phase)
	found := codes(result(t, run).Spec.Findings)
	assert.Contains(t, found, securityv1.CodeTimeout)
	// A verification that did not happen says nothing about the backup: the run could not be
	// carried out (BackupVerifyFailed, Anomaly), not a Mismatch.
	assertVerifyFailed(t, run)
	require.Contains(t, found, securityv1.CodeCleanupDeferred, "Velero was restoring at the deadline")
	sb := &corev1.Namespace{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Name: sandbox}, sb), "the sandbox is kept while Velero restores")
	assert.True(t, sb.DeletionTimestamp.IsZero())
	require.NoError(t, cl.Get(ctx, restoreKey, vr), "and its Restore")

	sweeper := &bvsandbox.Sweeper{Reader: cl, Runs: cl, Client: cl, Clock: clocktesting.NewFakeClock(time.Now().Add(time.Hour)), Hold: h.velero().RestoreHold}
	n, err := sweeper.Sweep(ctx)
	require.NoError(t, err)
	assert.Zero(t, n, "nothing is swept while the Restore runs")

	require.NoError(t, stack.ResumeVelero())
	paused = false
	require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		if _, err := sweeper.Sweep(ctx); err != nil {
			return false, err
		}
		err := cl.Get(ctx, client.ObjectKey{Name: sandbox}, sb)
		return apierrors.IsNotFound(err) || err == nil && !sb.DeletionTimestamp.IsZero(), client.IgnoreNotFound(err)
	}), "the sweeper deletes the sandbox once the Restore ended")
	err = cl.Get(ctx, restoreKey, vr)
	assert.True(t, apierrors.IsNotFound(err) || err == nil && !vr.DeletionTimestamp.IsZero(), "the Restore is deleted: %v", err)
	stopWatching()
	select {
	case what := <-unlabelled:
		t.Errorf("a sandbox without the run's label appeared: %s", what)
	default:
	}
}

func TestPreexistingSandboxIsRefused(t *testing.T) {
	ns := uniq("px")
	namespaceWithData(t, ns)
	vb := veleroBackup(t, ns, true, ns)
	sandbox := ns + "-bvsandbox"
	require.NoError(t, cl.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sandbox}}))
	h := newHarness(t)
	run := veleroRun(t, "fr-taken", vb.Name, securityv1.ModeFullRestore, sandbox)
	h.finish(run)
	assert.Equal(t, securityv1.RunFailed, run.Status.Phase)
	assert.Equal(t, []string{securityv1.CodeSandboxNotOwned}, codes(result(t, run).Spec.Findings))
	ns2 := &corev1.Namespace{}
	require.NoError(t, cl.Get(context.Background(), client.ObjectKey{Name: sandbox}, ns2))
	assert.True(t, ns2.DeletionTimestamp.IsZero(), "a namespace the verifier did not create is never deleted")
	err := cl.Get(context.Background(), client.ObjectKey{Namespace: velerostack.Namespace, Name: velerocheck.RestoreName(run)}, &velerov1.Restore{})
	assert.True(t, apierrors.IsNotFound(err), "no Restore was created")
}

// TestEtcdSnapshot saves a real snapshot of the test cluster's etcd with etcdctl.
func TestEtcdSnapshot(t *testing.T) {
	assets, err := cluster.AssetsDir()
	require.NoError(t, err)
	snap := filepath.Join(snapDir, "snap.db")
	out, err := exec.Command(filepath.Join(assets, "etcdctl"), "--endpoints="+lc.EtcdURL, "snapshot", "save", snap).CombinedOutput()
	require.NoError(t, err, "%s", out)
	data, err := os.ReadFile(snap)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(snapDir, "truncated.db"), data[:len(data)-1000], 0o600))
	flipped := append([]byte(nil), data...)
	flipped[len(flipped)/3] ^= 0xff
	require.NoError(t, os.WriteFile(filepath.Join(snapDir, "flipped.db"), flipped, 0o600))

	tests := []struct {
		ref   string
		phase securityv1.RunPhase
		code  string
	}{
		{"snap.db", securityv1.RunSucceeded, securityv1.CodeChecksumMatch},
		{"truncated.db", securityv1.RunSucceeded, securityv1.CodeEtcdSnapshotCorrupt},
		{"flipped.db", securityv1.RunSucceeded, securityv1.CodeEtcdSnapshotCorrupt},
		{"../../etc/passwd", securityv1.RunFailed, securityv1.CodeEtcdSnapshotRefInvalid},
		{"missing.db", securityv1.RunFailed, securityv1.CodeEtcdSnapshotNotFound},
	}
	for i, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			h := newHarness(t)
			run := newRun(t, "etcd-"+string(rune('a'+i)), securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendEtcdSnapshot, BackupRef: securityv1.BackupRef{Name: tt.ref}})
			h.finish(run)
			assert.Equal(t, tt.phase, run.Status.Phase, run.Status.Message)
			r := result(t, run)
			assert.Contains(t, codes(r.Spec.Findings), tt.code)
			// As ugallu: a snapshot that is not there (or a ref outside the directory) is a run
			// that could not be carried out, BackupVerifyFailed; a corrupt one a Mismatch.
			want := securityv1.EventBackupVerifyCompleted
			switch {
			case tt.phase == securityv1.RunFailed:
				want = securityv1.EventBackupVerifyFailed
			case tt.code == securityv1.CodeEtcdSnapshotCorrupt:
				want = securityv1.EventBackupVerifyMismatch
			}
			assert.Len(t, securityEvents(t, run)[want], 1, "one %s event", want)
			if tt.ref == "snap.db" {
				assert.NotEmpty(t, r.Spec.Details["revision"])
				assert.NotEmpty(t, r.Spec.Details["totalKeys"])
				assert.NotEmpty(t, r.Spec.Details["hash"])
				assert.Equal(t, int64(len(data)), r.Spec.SizeBytes)
			}
		})
	}
}

// TestReusedSandboxNameWaitsForTheEarlierRun: the spec's nightly example reuses one sandbox name
// every night. A run meeting the previous night's sandbox (labelled with that run's UID) still
// being deleted waits for it to go, then verifies: no sandbox-not-owned finding about a good
// backup.
func TestReusedSandboxNameWaitsForTheEarlierRun(t *testing.T) {
	ctx := context.Background()
	ns := uniq("re")
	namespaceWithData(t, ns)
	vb := veleroBackup(t, ns, true, ns)
	sandbox := ns + "-bvsandbox"
	const hold = "coffer.test/hold"

	// Last night's sandbox, on its way out; its deletion takes as long as this test wants.
	sb := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sandbox, Finalizers: []string{hold},
		Labels: map[string]string{securityv1.LabelRunUID: "6c1f3e2a-0000-4000-8000-000000000001", securityv1.LabelRun: "fr-night-1"}}}
	require.NoError(t, cl.Create(ctx, sb))
	require.NoError(t, cl.Delete(ctx, sb))

	h := newHarness(t)
	run := veleroRun(t, "fr-night-2", vb.Name, securityv1.ModeFullRestore, sandbox)
	for range 3 {
		h.step(run)
	}
	assert.Equal(t, securityv1.RunRunning, run.Status.Phase, "waiting, not failed: %s", run.Status.Message)
	assert.Empty(t, run.Status.ResultName())

	// Released: the namespace controller deletes it (on its own time, which under load may be
	// long: waited for here, so that the verification's own bound starts once it is gone).
	require.NoError(t, cl.Patch(ctx, sb, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := cl.Get(ctx, client.ObjectKey{Name: sandbox}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}), "last night's sandbox is deleted")
	h.finish(run)
	assert.Equal(t, securityv1.RunSucceeded, run.Status.Phase, run.Status.Message)
	for _, f := range result(t, run).Spec.Findings {
		assert.NotEqual(t, securityv1.CodeSandboxNotOwned, f.Code, f.Message)
	}
}

// TestStorageLocationOfTheRun: a run may say where the backup is expected (backupRef.storageLocation,
// ugallu's field); a backup found there verifies, one stored elsewhere is not verified and the run
// fails saying where it is, with no finding about the backup.
func TestStorageLocationOfTheRun(t *testing.T) {
	ns := uniq("sl")
	namespaceWithData(t, ns)
	vb := veleroBackup(t, ns, true, ns)
	for _, tt := range []struct {
		location string
		phase    securityv1.RunPhase
	}{
		{vb.Spec.StorageLocation, securityv1.RunSucceeded},
		{"elsewhere", securityv1.RunFailed},
	} {
		h := newHarness(t)
		run := newRun(t, "sl-"+tt.location, securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendVelero,
			BackupRef: securityv1.BackupRef{Name: vb.Name, Namespace: velerostack.Namespace, StorageLocation: tt.location}, Mode: securityv1.ModeChecksumOnly})
		h.finish(run)
		require.Equal(t, tt.phase, run.Status.Phase, run.Status.Message)
		if tt.phase == securityv1.RunFailed {
			assert.Equal(t, securityv1.ReasonBackupVerifyFailed, meta.FindStatusCondition(run.Status.Conditions, securityv1.ConditionReady).Reason)
			assert.Contains(t, run.Status.Message, `is stored in location "`+vb.Spec.StorageLocation+`", not in "elsewhere"`)
			assert.Empty(t, result(t, run).Spec.Findings, "nothing is said of the backup")
		}
	}
}
