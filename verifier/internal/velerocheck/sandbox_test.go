package velerocheck

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/coffer-backup/coffer/verifier/internal/contentdiff"
)

// modifiers mirrors the part of Velero's resource-modifier format (v1) the sandbox uses.
type modifiers struct {
	Version string `json:"version"`
	Rules   []struct {
		Conditions struct {
			GroupResource string `json:"groupResource"`
		} `json:"conditions"`
		MergePatches []struct {
			PatchData string `json:"patchData"`
		} `json:"mergePatches"`
	} `json:"resourceModifierRules"`
}

// TestShippedModifiersMakeEveryWorkloadInert: the ConfigMap deploy/verifier/velero ships is the one
// the Restore names, holds one key (Velero refuses more), and patches exactly the kinds the diff
// expects scaled to zero or suspended, each with the patch the diff checks for.
func TestShippedModifiersMakeEveryWorkloadInert(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "verifier", "velero", "resource_modifiers.yaml"))
	require.NoError(t, err)
	cm := &corev1.ConfigMap{}
	require.NoError(t, utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096).Decode(cm))
	assert.Equal(t, SandboxModifiers, cm.Name)
	assert.Equal(t, "velero", cm.Namespace)
	require.Len(t, cm.Data, 1, "Velero reads a resource-modifier ConfigMap of exactly one key")
	var m modifiers
	for _, v := range cm.Data {
		require.NoError(t, utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(v)), 4096).Decode(&m))
	}
	assert.Equal(t, "v1", m.Version)

	want := map[string]string{}
	for _, r := range ScaledToZero {
		want[r] = `{"spec":{"replicas":0}}`
	}
	for _, r := range Suspended {
		want[r] = `{"spec":{"suspend":true}}`
	}
	got := map[string]string{}
	for _, r := range m.Rules {
		require.Len(t, r.MergePatches, 1, "%s", r.Conditions.GroupResource)
		var patch any
		require.NoError(t, json.Unmarshal([]byte(r.MergePatches[0].PatchData), &patch))
		canonical, err := json.Marshal(patch)
		require.NoError(t, err)
		got[r.Conditions.GroupResource] = string(canonical)
	}
	assert.Equal(t, want, got)
	for gk, r := range ExcludedFromSandbox {
		assert.NotContains(t, got, r, "%s is left out of the restore, not patched", gk)
	}
	assert.Equal(t, []string{"backupjobs.backups.cozystack.io", "backups.backups.cozystack.io", "backupverifyresults.security.ugallu.io", "backupverifyruns.security.ugallu.io",
		"daemonsets.apps", "networkpolicies.networking.k8s.io", "plans.backups.cozystack.io", "pods", "restorejobs.backups.cozystack.io",
		"rolebindings.rbac.authorization.k8s.io", "roles.rbac.authorization.k8s.io", "serviceaccounts"}, excludedResources(),
		"a sandbox runs nothing and is open to nobody: no bare Pod, no DaemonSet, no run record, Plan or verification run restored to run again, no RBAC, ServiceAccount or NetworkPolicy")
}

// TestDiffIgnoresWhatTheModifiersSet: the content diff leaves out exactly the fields the resource
// modifiers set (contentdiff.InertFields): replicas of ScaledToZero, suspend of Suspended.
func TestDiffIgnoresWhatTheModifiersSet(t *testing.T) {
	want := map[schema.GroupKind]string{}
	for gk := range ScaledToZero {
		want[gk] = "replicas"
	}
	for gk := range Suspended {
		want[gk] = "suspend"
	}
	assert.Equal(t, want, contentdiff.InertFields)
}

func TestInert(t *testing.T) {
	obj := func(gk schema.GroupKind, spec map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
		u.SetGroupVersionKind(gk.WithVersion("v1"))
		return u
	}
	deploy := schema.GroupKind{Group: "apps", Kind: "Deployment"}
	job := schema.GroupKind{Group: "batch", Kind: "CronJob"}
	for _, tt := range []struct {
		name string
		u    *unstructured.Unstructured
		why  string
	}{
		{"scaled to zero", obj(deploy, map[string]any{"replicas": int64(0)}), ""},
		{"replicas left", obj(deploy, map[string]any{"replicas": int64(2)}), "spec.replicas is 2"},
		{"replicas unset", obj(deploy, map[string]any{}), "spec.replicas is unset (1)"},
		{"suspended", obj(job, map[string]any{"suspend": true}), ""},
		{"not suspended", obj(job, map[string]any{"suspend": false}), "spec.suspend is not true"},
		{"other kinds", obj(schema.GroupKind{Kind: "ConfigMap"}, nil), ""},
	} {
		t.Run(tt.name, func(t *testing.T) { assert.Equal(t, tt.why, inert(tt.u)) })
	}
}
