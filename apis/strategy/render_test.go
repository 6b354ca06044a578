package strategy

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type target struct {
	IncludedNamespaces []string          `json:"includedNamespaces,omitempty"`
	StorageLocation    string            `json:"storageLocation,omitempty"`
	Labels             map[string]string `json:"labels,omitempty"`
	TTL                string            `json:"ttl,omitempty"`
	Snapshot           *bool             `json:"snapshotVolumes,omitempty"`
}

func TestRender(t *testing.T) {
	ctx := Context{
		Application: map[string]any{
			"metadata": map[string]any{"name": "vm1", "namespace": "tenant-a"},
			"spec":     map[string]any{"size": "10Gi"},
		},
		Parameters: map[string]string{"backupStorageLocationName": "default"},
		Mode:       ModeBackup,
	}
	tests := []struct {
		name    string
		in      map[string]any
		want    target
		wantErr string
	}{
		{
			name: "renders every string, map keys and list items included",
			in: map[string]any{
				"includedNamespaces": []any{"{{ .Application.metadata.namespace }}"},
				"storageLocation":    "{{ .Parameters.backupStorageLocationName }}",
				"labels":             map[string]any{"app-{{ .Application.metadata.name }}": "{{ .Mode }}"},
				"snapshotVolumes":    false,
			},
			want: target{IncludedNamespaces: []string{"tenant-a"}, StorageLocation: "default",
				Labels: map[string]string{"app-vm1": "backup"}, Snapshot: new(bool)},
		},
		{
			name: "plain strings pass through",
			in:   map[string]any{"ttl": "720h0m0s"},
			want: target{TTL: "720h0m0s"},
		},
		{
			name:    "missing parameter fails",
			in:      map[string]any{"storageLocation": "{{ .Parameters.nope }}"},
			wantErr: `$.storageLocation`,
		},
		{
			name:    "missing application field fails",
			in:      map[string]any{"ttl": "{{ .Application.spec.ttl }}"},
			wantErr: `map has no entry for key "ttl"`,
		},
		{
			name:    "backup is absent on a backup render",
			in:      map[string]any{"ttl": "{{ .Backup.metadata.name }}"},
			wantErr: `$.ttl`,
		},
		{
			name:    "parse error fails",
			in:      map[string]any{"ttl": "{{ .Parameters.x "},
			wantErr: `$.ttl`,
		},
		{
			name:    "unknown field after render fails",
			in:      map[string]any{"unknownField": "x"},
			wantErr: `unknown field "unknownField"`,
		},
		{
			name:    "two keys rendering to one fails",
			in:      map[string]any{"labels": map[string]any{"a": "1", "{{ \"a\" }}": "2"}},
			wantErr: "already set",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := target{TTL: "untouched"}
			err := Render(tt.in, ctx, &out)
			if tt.wantErr != "" {
				require.Error(t, err)
				var rerr *Error
				assert.True(t, errors.As(err, &rerr))
				assert.Contains(t, err.Error(), tt.wantErr)
				assert.Equal(t, target{TTL: "untouched"}, out, "out is untouched on error")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, out)
		})
	}
}

func TestRenderRestoreSeesBackup(t *testing.T) {
	ctx := Context{
		Mode:   ModeRestore,
		Backup: map[string]any{"spec": map[string]any{"driverMetadata": map[string]any{"veleroBackup": "nightly-1"}}},
	}
	var out target
	require.NoError(t, Render(map[string]any{"ttl": "{{ .Backup.spec.driverMetadata.veleroBackup }}-{{ .Mode }}"}, ctx, &out))
	assert.Equal(t, "nightly-1-restore", out.TTL)
}

func TestRenderNeverLeavesTemplateSyntax(t *testing.T) {
	var out target
	err := Render(map[string]any{"ttl": "{{ .Parameters.missing }}", "storageLocation": "{{ .Mode }}"}, Context{Mode: ModeBackup}, &out)
	require.Error(t, err)
	assert.Empty(t, out.StorageLocation, "no half-rendered output escapes")
}
