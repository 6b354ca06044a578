package demo

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coffer-backup/coffer/e2e/manifests"
)

// TestDemo runs what `make demo` runs, on a real control plane with kube-controller-manager, and
// checks its report: every kind served and listed, the samples present, the sandbox policy live.
func TestDemo(t *testing.T) {
	ctx := context.Background()
	root, err := manifests.RepoRoot()
	require.NoError(t, err)
	var out bytes.Buffer
	c, err := Start(ctx, root, &out)
	require.NoError(t, err, out.String())
	t.Cleanup(func() {
		assert.NoError(t, c.Stop())
		_ = os.RemoveAll(c.Dir)
	})
	require.NoError(t, PrintKinds(ctx, c.Config, &out))
	report := out.String()
	t.Log(report)
	for _, gvr := range Kinds {
		assert.Contains(t, report, "# "+gvr.Resource+"."+gvr.Group)
	}
	assert.Contains(t, report, "Accepted: BackupVerifyRun ugallu-system/nightly-velero (full-restore into bv-nightly-bvsandbox)")
	assert.Contains(t, report, `spec.sandboxNamespace "prod" must end with -bvsandbox`)
	assert.Regexp(t, `(?m)^tenant-demo\s+vm1-nightly\s+vm1\s+default\s+0 2 \* \* \*`, report, "the Plan is listed with its printer columns")
	assert.Regexp(t, `(?m)^ugallu-system\s+nightly-velero\s+velero\s+full-restore`, report)
	assert.Regexp(t, `(?m)^default\s+`, report, "the cluster-scoped BackupClass is listed")
}
