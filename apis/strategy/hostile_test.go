package strategy

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// hostileValues are application fields a tenant controls, written to break out of the string they
// are rendered into: YAML, JSON, template syntax and control characters.
var hostileValues = []string{
	"x\nincludedNamespaces:\n- kube-system",
	`x", "includedNamespaces": ["kube-system"], "storageLocation": "evil`,
	`{{ .Parameters.secret }}`,
	`{{ printf "%s" "kube-system" }}`,
	"x\x00\"}]}",
	`}}{{`,
}

// TestHostileApplicationFieldsStayStrings renders a Velero-like spec and a pod template whose
// strings take tenant-controlled application fields: whatever the value, the rendered object has
// exactly the fields the template wrote, and the value lands verbatim in the one string that names
// it (template syntax inside a value is never evaluated).
func TestHostileApplicationFieldsStayStrings(t *testing.T) {
	for _, v := range hostileValues {
		ctx := Context{
			Application: map[string]any{"metadata": map[string]any{"name": v, "namespace": "tenant-a"}, "spec": map[string]any{"note": v}},
			Parameters:  map[string]string{"secret": "s3cr3t", "loc": "default"},
			Mode:        ModeBackup,
		}
		var spec target
		require.NoError(t, Render(map[string]any{
			"includedNamespaces": []any{"{{ .Application.metadata.namespace }}"},
			"storageLocation":    "{{ .Parameters.loc }}",
			"labels":             map[string]any{"app": "{{ .Application.metadata.name }}", "note": "n-{{ .Application.spec.note }}"},
		}, ctx, &spec), "value %q", v)
		assert.Equal(t, target{
			IncludedNamespaces: []string{"tenant-a"},
			StorageLocation:    "default",
			Labels:             map[string]string{"app": v, "note": "n-" + v},
		}, spec, "value %q", v)

		var pod corev1.PodTemplateSpec
		require.NoError(t, Render(corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "agent", Image: "agent:v1",
			Args: []string{"--app={{ .Application.metadata.name }}"},
			Env:  []corev1.EnvVar{{Name: "NOTE", Value: "{{ .Application.spec.note }}"}},
		}}}}, ctx, &pod), "value %q", v)
		want := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "agent", Image: "agent:v1", Args: []string{"--app=" + v}, Env: []corev1.EnvVar{{Name: "NOTE", Value: v}},
		}}}}
		assert.Equal(t, want, pod, "value %q: no field added or changed", v)
		assert.NotContains(t, pod.String(), "s3cr3t", "template syntax in a value is not evaluated")
	}
}
