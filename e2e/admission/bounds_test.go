package admission

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// sizedMap is a map of n entries whose keys are keyLen and values valLen characters long.
func sizedMap(n, keyLen, valLen int) map[string]any {
	m := map[string]any{}
	for i := range n {
		k := fmt.Sprintf("k%0*d", keyLen-1, i)
		m[k] = strings.Repeat("v", valLen)
	}
	return m
}

// TestSizeBounds: every free-form field a tenant (or a driver, from a tenant's input) writes in
// backups.cozystack.io has a size bound the real API server enforces, with the CEL cost of the
// rules accepted when the CRDs were installed; the largest objects the bounds admit are accepted.
func TestSizeBounds(t *testing.T) {
	restore := func(options map[string]any) map[string]any {
		return map[string]any{"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "RestoreJob", "metadata": map[string]any{"generateName": "rj-"},
			"spec": map[string]any{"backupRef": map[string]any{"name": "nightly"}, "options": options}}
	}
	job := func(planRef string) map[string]any {
		return map[string]any{"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "BackupJob", "metadata": map[string]any{"generateName": "j-"},
			"spec": map[string]any{"applicationRef": map[string]any{"kind": "VirtualMachine", "name": "vm1"}, "backupClassName": "default",
				"planRef": map[string]any{"name": planRef}}}
	}
	backup := func(planRef string, meta map[string]any) map[string]any {
		return map[string]any{"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "Backup", "metadata": map[string]any{"generateName": "b-"},
			"spec": map[string]any{"applicationRef": map[string]any{"kind": "VirtualMachine", "name": "vm1"},
				"strategyRef": map[string]any{"apiGroup": "velerodriver.backups.cozystack.io", "kind": "VeleroBackupStrategy", "name": "s"},
				"takenAt":     "2026-04-29T02:00:00Z", "planRef": map[string]any{"name": planRef}, "driverMetadata": meta}}
	}
	class := func(params map[string]any) map[string]any {
		return map[string]any{"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "BackupClass", "metadata": map[string]any{"generateName": "c-"},
			"spec": map[string]any{"strategies": []any{map[string]any{"application": map[string]any{"kind": "VirtualMachine"},
				"strategyRef": map[string]any{"apiGroup": "velerodriver.backups.cozystack.io", "kind": "VeleroBackupStrategy", "name": "s"},
				"parameters":  params}}}}
	}
	const (
		opts, optKey, optVal = backupsv1.MaxOptions, backupsv1.MaxOptionKeyLength, backupsv1.MaxOptionValueLength
		pars, parKey, parVal = backupsv1.MaxParameters, backupsv1.MaxParameterKeyLength, backupsv1.MaxParameterValueLength
	)
	keyRule := fmt.Sprintf("options: keys must be 1-%d characters", optKey)
	valueRule := fmt.Sprintf("options: each value must be a string of at most %d characters, a boolean or a number", optVal)
	metaRule := fmt.Sprintf("driverMetadata: keys must be 1-%d characters and values at most %d characters", parKey, parVal)
	paramsRule := fmt.Sprintf("parameters: keys must be 1-%d characters and values at most %d characters", parKey, parVal)
	tests := []struct {
		name string
		obj  map[string]any
		want []string
	}{
		{"restore: largest options accepted", restore(sizedMap(opts, optKey, optVal)), nil},
		{"restore: an option value too long", restore(sizedMap(1, 8, optVal+1)), []string{valueRule}},
		{"restore: an option key too long", restore(sizedMap(1, optKey+1, 4)), []string{keyRule}},
		{"restore: an empty option key", restore(map[string]any{"": "x"}), []string{keyRule}},
		// Cozystack's RestoreJobs write booleans and numbers (failIfTargetExists: true,
		// restoreTimeoutSeconds: 600); nested objects and lists are no options.
		{"restore: booleans and numbers accepted", restore(map[string]any{"failIfTargetExists": true, "restoreTimeoutSeconds": int64(600), "ratio": 0.5}), nil},
		{"restore: an object value", restore(map[string]any{"x": map[string]any{"a": strings.Repeat("v", 4096)}}), []string{valueRule}},
		{"restore: a list value", restore(map[string]any{"x": []any{"a"}}), []string{valueRule}},
		{"restore: targetNamespace not a string", restore(map[string]any{"targetNamespace": true}), []string{"options.targetNamespace must be a namespace name"}},
		{"restore: restoreRBAC a boolean", restore(map[string]any{"restoreRBAC": true}), []string{`spec.options.restoreRBAC must be "true" or "false"`}},
		{"restore: inert a boolean", restore(map[string]any{"inert": true}), []string{`spec.options.inert must be "true" or "false"`}},
		{"restore: too many options", restore(sizedMap(opts+1, 8, 4)), []string{"spec.options: Too many"}},
		{"job: longest planRef accepted", job(strings.Repeat("p", 253)), nil},
		{"job: planRef too long", job(strings.Repeat("p", 254)), []string{"planRef.name must be at most 253 characters"}},
		{"backup: largest driverMetadata accepted", backup("p", sizedMap(pars, parKey, parVal)), nil},
		{"backup: driverMetadata value too long", backup("p", sizedMap(1, 8, parVal+1)), []string{metaRule}},
		{"backup: planRef too long", backup(strings.Repeat("p", 254), nil), []string{"planRef.name must be at most 253 characters"}},
		{"class: largest parameters accepted", class(sizedMap(pars, parKey, parVal)), nil},
		{"class: parameter value too long", class(sizedMap(1, 8, parVal+1)), []string{paramsRule}},
		{"class: parameter key too long", class(sizedMap(1, parKey+1, 4)), []string{paramsRule}},
	}
	ns := namespace(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := &unstructured.Unstructured{Object: tt.obj}
			if obj.GetKind() != "BackupClass" {
				obj.SetNamespace(ns)
			}
			expectRejection(t, cl.Create(context.Background(), obj), tt.want)
		})
	}

	// A run records its class's parameters in its status: the largest a class admits fit there,
	// and no larger.
	t.Run("job status: class parameters as large as a class admits", func(t *testing.T) {
		ctx := context.Background()
		j := &unstructured.Unstructured{Object: job("p")}
		j.SetNamespace(ns)
		require.NoError(t, cl.Create(ctx, j))
		strategy := func(params map[string]any) map[string]any {
			return map[string]any{"backupClassName": "default", "parameters": params,
				"strategyRef": map[string]any{"apiGroup": "velerodriver.backups.cozystack.io", "kind": "VeleroBackupStrategy", "name": "s"}}
		}
		require.NoError(t, unstructured.SetNestedField(j.Object, strategy(sizedMap(pars, parKey, parVal)), "status", "strategy"))
		require.NoError(t, cl.Status().Update(ctx, j))
		require.NoError(t, unstructured.SetNestedField(j.Object, strategy(sizedMap(1, 8, parVal+1)), "status", "strategy"))
		expectRejection(t, cl.Status().Update(ctx, j), []string{paramsRule})
	})
}

// TestRestoreOptionsImmutable: a RestoreJob's options cannot change after its creation (the
// policies that admitted its targetNamespace and restoreRBAC judged them once); its metadata can.
func TestRestoreOptionsImmutable(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	rj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "RestoreJob",
		"metadata": map[string]any{"generateName": "rj-", "namespace": ns},
		"spec":     map[string]any{"backupRef": map[string]any{"name": "nightly"}, "options": map[string]any{"failIfTargetExists": true}}}}
	require.NoError(t, cl.Create(ctx, rj))
	for name, opts := range map[string]any{
		"targetNamespace added": map[string]any{"failIfTargetExists": true, "targetNamespace": "elsewhere"},
		"a value changed":       map[string]any{"failIfTargetExists": false},
		"options removed":       nil,
	} {
		changed := rj.DeepCopy()
		if opts == nil {
			unstructured.RemoveNestedField(changed.Object, "spec", "options")
		} else {
			require.NoError(t, unstructured.SetNestedField(changed.Object, opts, "spec", "options"))
		}
		err := cl.Update(ctx, changed)
		require.Error(t, err, name)
		assert.True(t, strings.Contains(err.Error(), "spec.options is immutable") || strings.Contains(err.Error(), "spec is immutable"), "%s: %v", name, err)
	}
	labelled := rj.DeepCopy()
	labelled.SetLabels(map[string]string{"team": "a"})
	assert.NoError(t, cl.Update(ctx, labelled), "metadata stays writable")
}
