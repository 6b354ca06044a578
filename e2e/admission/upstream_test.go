package admission

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// TestUpstreamManifestsAccepted applies, as their users write them, the manifests of the systems
// the specs describe, kept in testdata/upstream with their origin: Cozystack's backup examples
// (BackupClasses, Plans, BackupJobs, RestoreJobs with typed options: booleans, RFC3339 strings,
// an empty options) and the BackupVerifyRuns of ugallu's backup-verify smoke test. Each is
// accepted and stored unchanged: every field it sets reads back equal (the CRDs' defaults may
// add fields, never change one).
func TestUpstreamManifestsAccepted(t *testing.T) {
	ctx := context.Background()
	files, err := filepath.Glob("testdata/upstream/*/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	seen := map[string]int{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		for i, doc := range strings.Split(string(raw), "\n---\n") {
			in := map[string]any{}
			require.NoError(t, yaml.Unmarshal([]byte(doc), &in), "%s #%d", f, i)
			if len(in) == 0 || in["kind"] == nil {
				continue
			}
			obj := &unstructured.Unstructured{Object: in}
			name := filepath.Base(f) + " " + obj.GetKind() + " " + obj.GetName()
			t.Run(name, func(t *testing.T) {
				ns := obj.GetNamespace()
				if ns == "" && obj.GetKind() != "BackupClass" {
					ns = "upstream-" + strings.ToLower(obj.GetKind())
					obj.SetNamespace(ns)
				}
				if ns != "" {
					ensureNamespace(ctx, t, ns)
				}
				created := obj.DeepCopy()
				require.NoError(t, cl.Create(ctx, created), "%s", doc)
				t.Cleanup(func() { _ = cl.Delete(context.Background(), created) })
				got := &unstructured.Unstructured{}
				got.SetGroupVersionKind(obj.GroupVersionKind())
				require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(obj), got))
				assertSubset(t, in["spec"], got.Object["spec"], "spec")
				seen[obj.GetKind()]++
			})
		}
	}
	for _, kind := range []string{"BackupClass", "Plan", "BackupJob", "RestoreJob", "BackupVerifyRun"} {
		assert.Positive(t, seen[kind], "an upstream %s was applied", kind)
	}
}

func ensureNamespace(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name}}}
	if err := cl.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
}

// assertSubset asserts that every field of want is in got, equal.
func assertSubset(t *testing.T, want, got any, path string) {
	t.Helper()
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !assert.True(t, ok, "%s: stored %T, applied an object", path, got) {
			return
		}
		for k, v := range w {
			assertSubset(t, v, g[k], path+"."+k)
		}
	case []any:
		g, ok := got.([]any)
		if !assert.True(t, ok, "%s: stored %T, applied a list", path, got) || !assert.Len(t, g, len(w), path) {
			return
		}
		for i := range w {
			assertSubset(t, w[i], g[i], path)
		}
	case nil:
		// options: with only a comment is null, and dropped
	default:
		assert.EqualValues(t, w, got, path)
	}
}
