package admission

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/coffer-backup/coffer/e2e/harness/manifests"
)

// TestSampleVeleroTTLOutlastsRetention: the Velero backups of the sample strategy outlive what the
// sample Plan keeps (contract BK-9), or Velero would expire Backups retention still counts on.
func TestSampleVeleroTTLOutlastsRetention(t *testing.T) {
	objs, err := manifests.Render(filepath.Join(root, "deploy", "samples"))
	require.NoError(t, err)
	var ttl, maxAge time.Duration
	for _, o := range objs {
		switch o.GetKind() {
		case "VeleroBackupStrategy":
			ttl = duration(t, o, "spec", "backupTemplate", "spec", "ttl")
		case "Plan":
			// maxAge bounds what the keep rules keep, whatever they say.
			maxAge = duration(t, o, "spec", "retention", "maxAge")
		}
	}
	require.Positive(t, ttl)
	require.Positive(t, maxAge)
	assert.Greater(t, ttl, maxAge, "the Velero ttl (%s) outlasts the Plan's maxAge (%s)", ttl, maxAge)
}

func duration(t *testing.T, o *unstructured.Unstructured, fields ...string) time.Duration {
	t.Helper()
	s, found, err := unstructured.NestedString(o.Object, fields...)
	require.NoError(t, err)
	require.True(t, found, "%s %s has %v", o.GetKind(), o.GetName(), fields)
	d, err := time.ParseDuration(s)
	require.NoError(t, err)
	return d
}
