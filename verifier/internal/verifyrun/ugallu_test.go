// The contract with ugallu (ninsun-labs/ugallu @ e4974a3e): its CRDs, kept in testdata/ugallu
// with their origin, served by a second API server as a cluster running ugallu serves them.
package verifyrun

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
	"github.com/coffer-backup/coffer/verifier/internal/backend"
)

// ugalluCluster starts an API server with ugallu's three CRDs (BackupVerifyRun,
// BackupVerifyResult, SecurityEvent) and the namespace ns.
func ugalluCluster(t *testing.T, ctx context.Context, ns string) client.Client {
	t.Helper()
	u, err := cluster.Start(ctx, cluster.Options{CRDDirectoryPaths: []string{"testdata/ugallu"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = u.Stop() })
	uc, err := client.New(u.Config, client.Options{Scheme: cluster.Scheme})
	require.NoError(t, err)
	require.NoError(t, uc.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	return uc
}

// asUgallu copies obj (a typed Coffer object) into the ugallu cluster as unstructured, spec and
// all, so that ugallu's schema (not Coffer's Go types) judges it; its status goes through the
// status subresource. It returns what ugallu's API server stored.
func asUgallu(t *testing.T, ctx context.Context, uc client.Client, obj client.Object) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	require.NoError(t, err)
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": securityv1.GroupVersion.String(),
		"kind": obj.GetObjectKind().GroupVersionKind().Kind, "spec": m["spec"],
		"metadata": map[string]any{"name": obj.GetName(), "namespace": obj.GetNamespace(), "labels": obj.GetLabels()}}}
	if u.GetNamespace() == "" {
		unstructured.RemoveNestedField(u.Object, "metadata", "namespace")
	}
	require.NoError(t, uc.Create(ctx, u), "ugallu's CRD validates Coffer's %s %s", u.GetKind(), obj.GetName())
	if st, ok := m["status"].(map[string]any); ok && len(st) > 0 {
		u.Object["status"] = st
		require.NoError(t, uc.Status().Update(ctx, u), "ugallu's CRD validates the status of Coffer's %s %s", u.GetKind(), obj.GetName())
	}
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(u.GroupVersionKind())
	require.NoError(t, uc.Get(ctx, client.ObjectKeyFromObject(u), got))
	return got
}

func typed(obj client.Object, kind string) client.Object {
	obj.GetObjectKind().SetGroupVersionKind(securityv1.GroupVersion.WithKind(kind))
	return obj
}

// TestWritesAreValidUgalluObjects: what the verifier writes for a run (its status, its Result, its
// Started and Mismatch SecurityEvents) is valid under ugallu's own CRDs, and carries what
// ugallu's consumers read: resultRef.name, derivedFromRun, the hex checksum, every finding's
// detail, and the events' shape and signals as ugallu's backup-verify writes them.
func TestWritesAreValidUgalluObjects(t *testing.T) {
	s := &scripted{steps: []step{{out: backend.Outcome{Done: true, ComputedChecksum: "sha256:" + strings.Repeat("ab", 32), SizeBytes: 7,
		Findings: []securityv1.Finding{{Code: securityv1.CodeChecksumMismatch, Severity: securityv1.SeverityCritical, Message: "the stored tarball differs"}}}}}}
	l := newLifecycle(t, map[securityv1.Backend]backend.Backend{securityv1.BackendVelero: checksumOnly{s}})
	l.r.Version = "v1.2.3"
	run := l.run(securityv1.BackendVelero, securityv1.ModeChecksumOnly)
	l.step(run)
	require.Equal(t, securityv1.RunSucceeded, run.Status.Phase, run.Status.Message)
	uc := ugalluCluster(t, l.ctx, run.Namespace)

	// The run, its status included: resultRef is an object, and an unset timeout is 15m.
	assert.Equal(t, "15m0s", run.Spec.Timeout.Duration.String(), "the CRD defaults the timeout as ugallu's does")
	urun := asUgallu(t, l.ctx, uc, typed(run, "BackupVerifyRun"))
	name, _, _ := unstructured.NestedString(urun.Object, "status", "resultRef", "name")
	assert.Equal(t, run.Name+"-result", name, "{.status.resultRef.name}, named as ugallu names it")
	phase, _, _ := unstructured.NestedString(urun.Object, "status", "phase")
	assert.Equal(t, "Succeeded", phase)

	// The Result.
	res := l.result(run)
	ures := asUgallu(t, l.ctx, uc, typed(res, "BackupVerifyResult"))
	name, _, _ = unstructured.NestedString(ures.Object, "spec", "derivedFromRun", "name")
	assert.Equal(t, run.Name, name)
	sum, _, _ := unstructured.NestedString(ures.Object, "spec", "checksum")
	assert.Equal(t, strings.Repeat("ab", 32), sum)
	findings, _, _ := unstructured.NestedSlice(ures.Object, "spec", "findings")
	require.Len(t, findings, 1)
	assert.Equal(t, "the stored tarball differs", findings[0].(map[string]any)["detail"])
	assert.Equal(t, "checksum-mismatch", findings[0].(map[string]any)["code"])
	worst, _, _ := unstructured.NestedString(ures.Object, "status", "worstSeverity")
	assert.Equal(t, "critical", worst)

	// The SecurityEvents.
	list := &securityv1.SecurityEventList{}
	require.NoError(t, cl.List(l.ctx, list, client.MatchingLabels{securityv1.LabelRunUID: string(run.UID)}))
	byType := map[string]*unstructured.Unstructured{}
	for i := range list.Items {
		se := &list.Items[i]
		byType[se.Spec.Type] = asUgallu(t, l.ctx, uc, typed(se, "SecurityEvent"))
	}
	require.Len(t, byType, 2, "Started and Mismatch")
	str := func(u *unstructured.Unstructured, path ...string) string {
		v, _, _ := unstructured.NestedString(u.Object, path...)
		return v
	}
	started, mm := byType[securityv1.EventBackupVerifyStarted], byType[securityv1.EventBackupVerifyMismatch]
	require.NotNil(t, started)
	require.NotNil(t, mm)
	for _, tt := range []struct {
		u               *unstructured.Unstructured
		class, severity string
	}{{started, "Compliance", "info"}, {mm, "Detection", "critical"}} {
		assert.Equal(t, tt.class, str(tt.u, "spec", "class"))
		assert.Equal(t, tt.severity, str(tt.u, "spec", "severity"))
		assert.Equal(t, "Cluster", str(tt.u, "spec", "subject", "kind"))
		assert.Equal(t, "cluster", str(tt.u, "spec", "subject", "name"))
		assert.Equal(t, run.Namespace, str(tt.u, "spec", "subject", "namespace"))
		unresolved, _, _ := unstructured.NestedBool(tt.u.Object, "spec", "subject", "unresolved")
		assert.True(t, unresolved)
		assert.Equal(t, "ugallu-backup-verify", str(tt.u, "spec", "source", "name"))
		assert.Equal(t, "v1.2.3", str(tt.u, "spec", "source", "version"))
		assert.Equal(t, "c-1", str(tt.u, "spec", "clusterIdentity", "clusterID"))
		assert.NotEmpty(t, str(tt.u, "spec", "detectedAt"))
		assert.Equal(t, string(run.UID), str(tt.u, "spec", "correlationID"), "one run's events share a correlation")
		signals, _, _ := unstructured.NestedStringMap(tt.u.Object, "spec", "signals")
		for k, want := range map[string]string{"run.namespace": run.Namespace, "run.name": run.Name, "backup.backend": "velero",
			"backup.mode": "checksum-only", "backup.refName": "nightly"} {
			assert.Equal(t, want, signals[k], "signal %s", k)
		}
	}
	signals, _, _ := unstructured.NestedStringMap(mm.Object, "spec", "signals")
	assert.Equal(t, "1", signals["findings.count"])
	assert.Equal(t, securityv1.CodeChecksumMismatch, signals["findings.first.code"])
	parents, _, _ := unstructured.NestedSlice(mm.Object, "spec", "parents")
	require.Len(t, parents, 1)
	assert.Equal(t, started.GetName(), parents[0].(map[string]any)["name"], "the terminal event follows from the Started one")
}

// ugalluEvent is a SecurityEvent as ugallu writes it (its emitter's shape; the subject of another
// ugallu operator's event, a Pod with its snapshot), and the status its attestor patches in.
func ugalluEvent(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "security.ugallu.io/v1alpha1", "kind": "SecurityEvent",
		"metadata": map[string]any{"name": name, "labels": map[string]any{
			"ugallu.io/correlation-id": "5f0c2d7e9a1b3c4d5e6f708192a3b4c5", "app.kubernetes.io/managed-by": "ugallu-audit-detection"}},
		"spec": map[string]any{
			"class": "Detection", "type": "PrivilegedPodCreated", "severity": "high",
			"clusterIdentity": map[string]any{"clusterName": "prod-eu", "clusterID": "c-42"},
			"source":          map[string]any{"apiVersion": "security.ugallu.io/v1alpha1", "kind": "ugallu-audit-detection", "name": "ugallu-audit-detection", "version": "v0.0.1-alpha.1"},
			"subject": map[string]any{"kind": "Pod", "name": "miner", "namespace": "tenant-a", "uid": "0d5c3a8e-0000-4000-8000-000000000001",
				"labels": map[string]any{"app": "miner"},
				"pod":    map[string]any{"nodeName": "node-1", "serviceAccountName": "default", "hostPID": true}},
			"detectedAt":    "2026-11-30T10:00:00Z",
			"signals":       map[string]any{"audit.verb": "create"},
			"evidence":      []any{map[string]any{"mediaType": "application/vnd.in-toto+json", "url": "s3://worm/x", "sha256": "ab", "size": int64(12)}},
			"parents":       []any{map[string]any{"apiVersion": "security.ugallu.io/v1alpha1", "kind": "SecurityEvent", "name": "se-00aa"}},
			"correlationID": "5f0c2d7e9a1b3c4d5e6f708192a3b4c5",
			"traceparent":   "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		}}}
}

// attest patches an event's status as ugallu's attestor does (a merge patch of /status).
func attest(ctx context.Context, c client.Client, name string) error {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(securityv1.GroupVersion.WithKind("SecurityEvent"))
	u.SetName(name)
	patch := []byte(`{"status":{"phase":"Attested","attestationDigest":"sha256:` + strings.Repeat("cd", 32) +
		`","attestationBundleRef":{"apiVersion":"security.ugallu.io/v1alpha1","kind":"AttestationBundle","name":"att-se-` + name + `","uid":"0d5c3a8e-0000-4000-8000-000000000002"}}}`)
	return c.Status().Patch(ctx, u, client.RawPatch("application/merge-patch+json", patch))
}

// TestCofferCRDTakesUgallusEvents: Coffer's SecurityEvent CRD (deploy/verifier/securityevents)
// stores an event ugallu wrote, whole (its subject snapshot included), and takes the attestor's
// status patch; a Coffer event is attested the same way, and its spec stays immutable.
func TestCofferCRDTakesUgallusEvents(t *testing.T) {
	ctx := context.Background()
	ev := ugalluEvent("se-0123456789abcdef")
	require.NoError(t, cl.Create(ctx, ev.DeepCopy()), "Coffer's CRD takes ugallu's event")
	t.Cleanup(func() { _ = cl.Delete(ctx, ev) })
	require.NoError(t, attest(ctx, cl, ev.GetName()), "the attestor's status patch")

	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(ev.GroupVersionKind())
	require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(ev), got))
	assert.Equal(t, ev.Object["spec"], got.Object["spec"], "stored whole, nothing pruned")
	phase, _, _ := unstructured.NestedString(got.Object, "status", "phase")
	assert.Equal(t, "Attested", phase)
	digest, _, _ := unstructured.NestedString(got.Object, "status", "attestationDigest")
	assert.Equal(t, "sha256:"+strings.Repeat("cd", 32), digest)

	// A Coffer event: attested alike, the typed status reads it back, and its spec is immutable.
	s := &scripted{steps: []step{{out: backend.Outcome{Done: true}}}}
	l := newLifecycle(t, map[securityv1.Backend]backend.Backend{securityv1.BackendVelero: checksumOnly{s}})
	run := l.run(securityv1.BackendVelero, securityv1.ModeChecksumOnly)
	l.step(run)
	name := EventName(run, securityv1.EventBackupVerifyCompleted)
	require.NoError(t, attest(ctx, cl, name))
	se := &securityv1.SecurityEvent{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Name: name}, se))
	assert.Equal(t, securityv1.EventPhase("Attested"), se.Status.Phase)
	require.NotNil(t, se.Status.AttestationBundleRef)
	assert.Equal(t, "att-se-"+name, se.Status.AttestationBundleRef.Name)
	se.Spec.Severity = securityv1.SeverityLow
	assert.Error(t, cl.Update(ctx, se), "spec is immutable")
}

// TestApplyingCofferOverUgalluChangesNothingUgalluWrote: on a cluster that runs ugallu, applying
// deploy/verifier (everything but its workloads) leaves ugallu's SecurityEvent CRD as it was (the
// CRD is not in deploy/verifier), and every object ugallu wrote (an attested event, a run, a
// Result) reads back unchanged under the CRDs Coffer applied.
func TestApplyingCofferOverUgalluChangesNothingUgalluWrote(t *testing.T) {
	ctx := context.Background()
	uc := ugalluCluster(t, ctx, "ugallu-system")
	ev := ugalluEvent("se-fedcba9876543210")
	require.NoError(t, uc.Create(ctx, ev.DeepCopy()))
	require.NoError(t, attest(ctx, uc, ev.GetName()))
	run := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "security.ugallu.io/v1alpha1", "kind": "BackupVerifyRun",
		"metadata": map[string]any{"name": "nightly", "namespace": "ugallu-system"},
		"spec": map[string]any{"backend": "velero", "backupRef": map[string]any{"name": "daily-20261130", "namespace": "velero"},
			"mode": "checksum-only", "timeout": "15m"}}}
	require.NoError(t, uc.Create(ctx, run))
	run.Object["status"] = map[string]any{"phase": "Succeeded", "startTime": "2026-11-30T10:00:00Z", "completionTime": "2026-11-30T10:00:05Z",
		"resultRef": map[string]any{"name": "nightly-result"}}
	require.NoError(t, uc.Status().Update(ctx, run))
	res := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "security.ugallu.io/v1alpha1", "kind": "BackupVerifyResult",
		"metadata": map[string]any{"name": "nightly-result", "namespace": "ugallu-system"},
		"spec": map[string]any{"derivedFromRun": map[string]any{"name": "nightly"}, "backend": "velero", "mode": "checksum-only",
			"restoredObjectCount": int64(42),
			"findings":            []any{map[string]any{"code": "velero-bsl-missing", "severity": "high", "detail": "BSL default missing"}}}}}
	require.NoError(t, uc.Create(ctx, res))
	res.Object["status"] = map[string]any{"worstSeverity": "high"}
	require.NoError(t, uc.Status().Update(ctx, res))

	read := func(u *unstructured.Unstructured) map[string]any {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(u.GroupVersionKind())
		require.NoError(t, uc.Get(ctx, client.ObjectKeyFromObject(u), got))
		return map[string]any{"spec": got.Object["spec"], "status": got.Object["status"]}
	}
	crd := func() *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
		require.NoError(t, uc.Get(ctx, client.ObjectKey{Name: "securityevents.security.ugallu.io"}, u))
		return u
	}
	seCRD := crd()
	before := map[string]map[string]any{"event": read(ev), "run": read(run), "result": read(res)}

	root, err := manifests.RepoRoot()
	require.NoError(t, err)
	objs, err := manifests.Render(root + "/deploy/verifier")
	require.NoError(t, err)
	take, _ := manifests.Nodeless(objs)
	for _, o := range take {
		assert.NotEqual(t, "securityevents.security.ugallu.io", o.GetName(), "deploy/verifier ships no SecurityEvent CRD")
	}
	require.NoError(t, manifests.Apply(ctx, uc, take))

	after := crd()
	assert.Equal(t, seCRD.GetResourceVersion(), after.GetResourceVersion(), "ugallu's SecurityEvent CRD is not touched")
	assert.Equal(t, seCRD.Object["spec"], after.Object["spec"])
	assert.Equal(t, before, map[string]map[string]any{"event": read(ev), "run": read(run), "result": read(res)},
		"what ugallu wrote reads back unchanged")
	// And ugallu's attestor and operator can still write: a status update of its run passes
	// Coffer's CRD.
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(run.GroupVersionKind())
	require.NoError(t, uc.Get(ctx, client.ObjectKeyFromObject(run), got))
	require.NoError(t, unstructured.SetNestedField(got.Object, "2026-11-30T10:00:06Z", "status", "completionTime"))
	assert.NoError(t, uc.Status().Update(ctx, got), "ugallu's status write under Coffer's run CRD")
}
