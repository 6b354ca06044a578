package admission

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
)

// TestSampleVeleroTTLOutlastsRetention: the Velero backups of the sample strategy outlive what the
// sample Plan keeps (contract BK-9, RetentionPolicy.Span), or Velero would expire Backups retention
// still counts on, and driver-velero would refuse the Plan's runs (TTLShorterThanRetention).
func TestSampleVeleroTTLOutlastsRetention(t *testing.T) {
	objs, err := manifests.Render(filepath.Join(root, "deploy", "samples"))
	require.NoError(t, err)
	var ttl time.Duration
	var span backupsv1.RetentionSpan
	for _, o := range objs {
		switch o.GetKind() {
		case "VeleroBackupStrategy":
			ttl = duration(t, o, "spec", "backupTemplate", "spec", "ttl")
		case "Plan":
			plan := &backupsv1.Plan{}
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, plan))
			span = plan.Spec.Retention.Span()
		}
	}
	require.Positive(t, ttl)
	require.True(t, span.Bounded, "the sample Plan's retention is bounded by age (%s)", span.Rule)
	assert.Greater(t, ttl, span.Duration, "the Velero ttl (%s) outlasts what the Plan's retention keeps (%s: %s)", ttl, span.Rule, span.Duration)
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
