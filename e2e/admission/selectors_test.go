package admission

import (
	"context"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestBackupFieldSelectors lists Backups by the selectable fields of the Backup CRD: the Plan that
// made them, and the kind and name of their application.
func TestBackupFieldSelectors(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	for _, doc := range []string{
		`{metadata: {name: vm1-a}, spec: {applicationRef: {kind: VirtualMachine, name: vm1}, planRef: {name: nightly}}}`,
		`{metadata: {name: vm1-b}, spec: {applicationRef: {kind: VirtualMachine, name: vm1}, planRef: {name: weekly}}}`,
		`{metadata: {name: vm2-a}, spec: {applicationRef: {kind: VirtualMachine, name: vm2}, planRef: {name: nightly}}}`,
		`{metadata: {name: bucket-vm1}, spec: {applicationRef: {kind: Bucket, name: vm1}}}`,
	} {
		b := mustObject(doc)
		b.SetAPIVersion("backups.cozystack.io/v1alpha1")
		b.SetKind("Backup")
		b.SetNamespace(ns)
		require.NoError(t, unstructured.SetNestedMap(b.Object, map[string]any{"apiGroup": "velerodriver.backups.cozystack.io", "kind": "VeleroBackupStrategy", "name": "s"}, "spec", "strategyRef"))
		require.NoError(t, unstructured.SetNestedField(b.Object, "2026-04-29T02:00:00Z", "spec", "takenAt"))
		require.NoError(t, cl.Create(ctx, b))
	}
	list := func(fields client.MatchingFields) []string { return listNames(t, "Backup", ns, fields) }
	assert.Equal(t, []string{"vm1-a", "vm1-b"}, list(client.MatchingFields{"spec.applicationRef.kind": "VirtualMachine", "spec.applicationRef.name": "vm1"}))
	assert.Equal(t, []string{"bucket-vm1", "vm1-a", "vm1-b"}, list(client.MatchingFields{"spec.applicationRef.name": "vm1"}))
	assert.Equal(t, []string{"bucket-vm1"}, list(client.MatchingFields{"spec.applicationRef.kind": "Bucket"}))
	assert.Equal(t, []string{"vm1-a", "vm2-a"}, list(client.MatchingFields{"spec.planRef.name": "nightly"}))
	assert.Empty(t, list(client.MatchingFields{"spec.applicationRef.name": "vm3"}))
}

// TestApplicationFieldSelectors lists Plans, BackupJobs and Backups by their application's API
// group, kind and name, as Cozystack's API lets its users do.
func TestApplicationFieldSelectors(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	specs := map[string]string{
		"Plan":      `{backupClassName: default, schedule: {type: cron, cron: "0 2 * * *"}}`,
		"BackupJob": `{backupClassName: default}`,
		"Backup":    `{strategyRef: {apiGroup: velerodriver.backups.cozystack.io, kind: VeleroBackupStrategy, name: s}, takenAt: "2026-04-29T02:00:00Z"}`,
	}
	apps := map[string]string{
		"vm1":       `{apiGroup: apps.cozystack.io, kind: VirtualMachine, name: vm1}`,
		"vm2":       `{apiGroup: apps.cozystack.io, kind: VirtualMachine, name: vm2}`,
		"bucket":    `{apiGroup: apps.cozystack.io, kind: Bucket, name: vm1}`,
		"other-vm1": `{apiGroup: other.example.com, kind: VirtualMachine, name: vm1}`,
	}
	for kind, spec := range specs {
		t.Run(kind, func(t *testing.T) {
			for name, app := range apps {
				o := mustObject(spec)
				obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "backups.cozystack.io/v1alpha1", "kind": kind,
					"metadata": map[string]any{"name": name, "namespace": ns}, "spec": o.Object}}
				require.NoError(t, unstructured.SetNestedMap(obj.Object, mustObject(app).Object, "spec", "applicationRef"))
				require.NoError(t, cl.Create(ctx, obj))
			}
			list := func(fields client.MatchingFields) []string { return listNames(t, kind, ns, fields) }
			assert.Equal(t, []string{"vm1"}, list(client.MatchingFields{"spec.applicationRef.apiGroup": "apps.cozystack.io", "spec.applicationRef.kind": "VirtualMachine", "spec.applicationRef.name": "vm1"}))
			assert.Equal(t, []string{"bucket", "other-vm1", "vm1"}, list(client.MatchingFields{"spec.applicationRef.name": "vm1"}))
			assert.Equal(t, []string{"other-vm1"}, list(client.MatchingFields{"spec.applicationRef.apiGroup": "other.example.com"}))
			assert.Equal(t, []string{"bucket"}, list(client.MatchingFields{"spec.applicationRef.kind": "Bucket"}))
		})
	}
}

// listNames lists the objects of a backups.cozystack.io kind in ns that match fields, by name.
func listNames(t *testing.T, kind, ns string, fields client.MatchingFields) []string {
	t.Helper()
	l := &unstructured.UnstructuredList{}
	l.SetAPIVersion("backups.cozystack.io/v1alpha1")
	l.SetKind(kind + "List")
	require.NoError(t, cl.List(context.Background(), l, client.InNamespace(ns), fields))
	var names []string
	for _, o := range l.Items {
		names = append(names, o.GetName())
	}
	sort.Strings(names)
	return names
}
