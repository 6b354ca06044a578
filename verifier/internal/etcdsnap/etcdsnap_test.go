package etcdsnap

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
)

func TestResolveRefusesEscapes(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret.db"), []byte("x"), 0o600))
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret.db"), filepath.Join(dir, "link.db")))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "daily"), 0o700))
	tests := []struct {
		ref string
		ok  bool
	}{
		{"snap.db", true},
		{"daily/snap.db", true},
		{"daily/../snap.db", true},
		{"../snap.db", false},
		{"daily/../../snap.db", false},
		{"/etc/passwd", false},
		{"", false},
		{"link.db", false},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			_, err := Resolve(dir, tt.ref)
			assert.Equal(t, tt.ok, err == nil, "%v", err)
		})
	}
	rep := Verify(dir, "link.db")
	require.Len(t, rep.Findings, 1)
	assert.Equal(t, securityv1.CodeEtcdSnapshotRefInvalid, rep.Findings[0].Code)
	assert.Equal(t, securityv1.SeverityCritical, rep.Findings[0].Severity)
	assert.Empty(t, rep.Checksum, "nothing was opened")
}

func TestSidecar(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "s.db")
	require.NoError(t, os.WriteFile(p, []byte("content"), 0o600))
	sum := sha256.Sum256([]byte("content"))
	_, found, err := sidecar(p)
	require.NoError(t, err)
	assert.False(t, found)
	require.NoError(t, os.WriteFile(p+".sha256", []byte(hex.EncodeToString(sum[:])+"  s.db\n"), 0o600))
	got, found, err := sidecar(p)
	require.NoError(t, err)
	assert.True(t, found)
	assert.Equal(t, hex.EncodeToString(sum[:]), got)
	require.NoError(t, os.WriteFile(p+".sha256", []byte("nonsense\n"), 0o600))
	_, _, err = sidecar(p)
	assert.Error(t, err)
}

func TestNotASnapshot(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "junk.db"), make([]byte, 512*4+32), 0o600))
	rep := Verify(dir, "junk.db")
	assert.Contains(t, codesOf(rep.Findings), securityv1.CodeEtcdSnapshotCorrupt)
	assert.Equal(t, securityv1.SeverityCritical, securityv1.WorstSeverity(rep.Findings))
}

func codesOf(fs []securityv1.Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Code)
	}
	return out
}
