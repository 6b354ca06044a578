package admission

import (
	"context"
	"fmt"
	"strings"
	"testing"

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
	optionsRule := fmt.Sprintf("options: keys must be 1-%d characters and values at most %d characters", optKey, optVal)
	metaRule := fmt.Sprintf("driverMetadata: keys must be 1-%d characters and values at most %d characters", parKey, parVal)
	paramsRule := fmt.Sprintf("parameters: keys must be 1-%d characters and values at most %d characters", parKey, parVal)
	tests := []struct {
		name string
		obj  map[string]any
		want []string
	}{
		{"restore: largest options accepted", restore(sizedMap(opts, optKey, optVal)), nil},
		{"restore: an option value too long", restore(sizedMap(1, 8, optVal+1)), []string{optionsRule}},
		{"restore: an option key too long", restore(sizedMap(1, optKey+1, 4)), []string{optionsRule}},
		{"restore: an empty option key", restore(map[string]any{"": "x"}), []string{optionsRule}},
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
