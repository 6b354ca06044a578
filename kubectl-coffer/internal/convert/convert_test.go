package convert

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobdriverv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	"github.com/coffer-backup/coffer/apis/strategy"
	velerodriverv1 "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
)

func convertFile(t *testing.T, name string) (Result, [][]byte) {
	t.Helper()
	f, err := os.Open(name)
	require.NoError(t, err)
	defer f.Close()
	res, err := Convert(f)
	require.NoError(t, err)
	var docs [][]byte
	for _, d := range strings.Split(string(res.Out), "---\n") {
		if strings.TrimSpace(d) != "" {
			docs = append(docs, []byte(d))
		}
	}
	return res, docs
}

var app = map[string]any{"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "VMInstance",
	"metadata": map[string]any{"name": "vm1", "namespace": "tenant-a"}}

// Cozystack's VMInstance and VMDisk Velero strategies and their BackupClass (upstream examples,
// testdata/vmi.yaml) become VeleroBackupStrategies, strictly decodable into Coffer's types, whose
// templates render with Coffer's renderer as they did upstream; the class names them.
func TestVeleroStrategiesAndBackupClass(t *testing.T) {
	res, docs := convertFile(t, "testdata/vmi.yaml")
	require.Len(t, docs, 3)
	for i, name := range []string{"vminstance-strategy", "vmdisk-strategy"} {
		s := &velerodriverv1.VeleroBackupStrategy{}
		require.NoError(t, yaml.UnmarshalStrict(docs[i], s), "%s", docs[i])
		assert.Equal(t, "velerodriver.backups.cozystack.io/v1alpha1", s.APIVersion)
		assert.Equal(t, "VeleroBackupStrategy", s.Kind)
		assert.Equal(t, name, s.Name)
		require.NotNil(t, s.Spec.RestoreTemplate)

		var spec map[string]any
		require.NoError(t, strategy.Render(s.Spec.BackupTemplate.Spec, strategy.Context{Application: app,
			Parameters: map[string]string{"backupStorageLocationName": "default"}, Mode: strategy.ModeBackup}, &spec))
		assert.Equal(t, []any{"tenant-a"}, spec["includedNamespaces"])
		assert.Equal(t, "default", spec["storageLocation"])
		assert.Equal(t, true, spec["snapshotMoveData"], "Cozystack's default: CSI snapshots with data movement")
	}
	class := &backupsv1.BackupClass{}
	require.NoError(t, yaml.UnmarshalStrict(docs[2], class))
	require.Len(t, class.Spec.Strategies, 2)
	for _, s := range class.Spec.Strategies {
		require.NotNil(t, s.StrategyRef.APIGroup)
		assert.Equal(t, "velerodriver.backups.cozystack.io", *s.StrategyRef.APIGroup)
		assert.Equal(t, "VeleroBackupStrategy", s.StrategyRef.Kind)
		assert.Equal(t, "default", s.Parameters["backupStorageLocationName"])
	}
	assert.Len(t, res.Notes, 2, "one note per strategy: the restore confinement; %v", res.Notes)
}

// Cozystack's NATS Job strategy (upstream example, testdata/nats.yaml) becomes a JobBackupStrategy
// whose template is both the backup and the restore template, with Cozystack's .Release and
// .Backup fields renamed; the strings that use sprig's default, which Coffer's templates lack, are
// named in the notes rather than silently carried over.
func TestJobStrategy(t *testing.T) {
	res, docs := convertFile(t, "testdata/nats.yaml")
	require.Len(t, docs, 1)
	s := &jobdriverv1.JobBackupStrategy{}
	require.NoError(t, yaml.UnmarshalStrict(docs[0], s), "%s", docs[0])
	assert.Equal(t, "nats-backup", s.Name)
	require.NotNil(t, s.Spec.RestoreTemplate)
	assert.Equal(t, s.Spec.Template, *s.Spec.RestoreTemplate)
	assert.NotContains(t, string(docs[0]), ".Release.")
	env := map[string]string{}
	for _, e := range s.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	assert.Equal(t, "{{ .Application.metadata.name }}.{{ .Application.metadata.namespace }}.svc", env["NATS_HOST"])
	assert.Equal(t, "{{ if .Backup }}{{ .Backup.spec.applicationRef.name }}{{ end }}", env["SRC_RESTORE"])
	var undefined []string
	for _, n := range res.Notes {
		if strings.Contains(n, `function "default" not defined`) {
			undefined = append(undefined, n)
		}
	}
	assert.Len(t, undefined, 2, "the two distinct strings using default: %v", res.Notes)
}

// Documents that are not Cozystack strategies or BackupClasses pass through unchanged; a class
// naming a Cozystack strategy no Coffer driver runs keeps it, with a note.
func TestOtherDocumentsPassThrough(t *testing.T) {
	in := `apiVersion: v1
kind: ConfigMap
metadata: {name: c}
data: {a: "{{ .Release.Name }}"}
---
apiVersion: backups.cozystack.io/v1alpha1
kind: BackupClass
metadata: {name: pg}
spec:
  strategies:
  - application: {apiGroup: apps.cozystack.io, kind: Postgres}
    strategyRef: {apiGroup: strategy.backups.cozystack.io, kind: CNPG, name: cnpg}
`
	res, err := Convert(strings.NewReader(in))
	require.NoError(t, err)
	assert.Contains(t, string(res.Out), `a: '{{ .Release.Name }}'`)
	assert.Contains(t, string(res.Out), "kind: CNPG")
	require.Len(t, res.Notes, 1)
	assert.Contains(t, res.Notes[0], "no Coffer driver runs")
}
