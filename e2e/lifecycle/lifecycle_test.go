// Package lifecycle runs `make demo` (package demo) and asserts the golden lifecycle it walks
// through (package golden) on a cluster of real processes:
// core-controller, driver-velero, driver-job and the verifier, each built from its own module and
// started as a separate process that authenticates as the ServiceAccount deploy/ defines for it
// (API-server impersonation), so the shipped RBAC is what is tested. They cooperate through
// objects only.
package lifecycle

import (
	"bytes"
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/demo"
	"github.com/coffer-backup/coffer/e2e/golden"
	"github.com/coffer-backup/coffer/e2e/harness/components"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
)

// TestGoldenLifecycle walks the demo's lifecycle with the verifier as deploy/managed/verifier runs
// it (its Deployment's arguments: no etcd-snapshot backend) on this cluster, which has no
// control-plane nodes, nor any node: the managed install verifies the Velero backup and the
// Coffer Backup, checksum-only and by full restore, as the default install does (make demo runs
// that one).
func TestGoldenLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := manifests.RepoRoot()
	require.NoError(t, err)
	specs, err := golden.Managed(root)
	require.NoError(t, err)
	require.Contains(t, specs[3].Args, "--etcd-snapshot-dir=", "the managed variant's verifier")
	var out bytes.Buffer
	s, sum, err := demo.Run(ctx, &out, demo.Options{Dir: t.TempDir(), Components: specs})
	if s != nil {
		t.Cleanup(s.Stop)
		for _, c := range s.Components {
			t.Cleanup(func() { components.StopAndCheck(t, c) })
		}
	}
	report := out.String()
	t.Log(report)
	require.NoError(t, err)

	// The demo's report: narrated steps, the table, the samples, the admission policy, every kind.
	for _, gvr := range demo.Kinds {
		assert.Contains(t, report, "# "+gvr.Resource+"."+gvr.Group)
	}
	assert.Regexp(t, `(?m)^Backup\s+shop/shop-minutely-\d+\s+Ready\s+\d+ bytes, sha256:[0-9a-f]{64}$`, report)
	assert.Regexp(t, `(?m)^RestoreJob\s+shop/undo\s+Succeeded\s+4 objects back with identical data$`, report)
	assert.Contains(t, report, "Accepted: BackupVerifyRun ugallu-system/nightly-velero (full-restore into bv-nightly-bvsandbox)")
	assert.Contains(t, report, `spec.sandboxNamespace "prod" must end with -bvsandbox`)
	assert.Regexp(t, `(?m)^tenant-demo\s+vm1-nightly\s+vm1\s+default\s+0 2 \* \* \*`, report, "the sample Plan is listed with its printer columns")

	assert.Equal(t, backupsv1.BackupJobSucceeded, sum.BackupJob.Status.Phase)
	assert.Equal(t, golden.PlanName, sum.BackupJob.Spec.PlanRef.Name, "the BackupJob came from the Plan")
	assert.NotNil(t, sum.Plan.Status.LastScheduleTime)
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, sum.Backup.Status.Artifact.Checksum)
	assert.Positive(t, sum.Backup.Status.Artifact.SizeBytes)
	for _, res := range sum.Results {
		assert.Equal(t, securityv1.SeverityInfo, res.Status.WorstSeverity, "%s", res.Name)
		switch {
		case res.Spec.Mode == securityv1.ModeChecksumOnly:
			assert.Equal(t, sum.Backup.Status.Artifact.Checksum, res.Spec.ComputedChecksum, "the verifier recomputes what the driver recorded")
		case res.Spec.Backend == securityv1.BackendCoffer:
			require.NotEmpty(t, res.Spec.Findings, "%s", res.Name)
			assert.Equal(t, securityv1.CodeRestoreSucceeded, res.Spec.Findings[0].Code, "the Backup's driver restored it into the sandbox")
		default:
			assert.Equal(t, res.Spec.ObjectsExpected, res.Spec.ObjectsRestored)
			assert.Positive(t, res.Spec.ObjectsExpected)
		}
	}
	completed := 0
	for _, e := range sum.Events {
		if e.Spec.Type == securityv1.EventBackupVerifyCompleted {
			completed++
		}
	}
	assert.Equal(t, 4, completed, "one BackupVerifyCompleted event per run: the Velero backup's and the Coffer Backup's, each checksum-only and full-restore")
	assert.True(t, sum.Backup.RestoreVerified(), "the verdict is on the Backup: %v", sum.Backup.Status.Conditions)
	require.NotNil(t, sum.Backup.Status.Verification)
	require.NotNil(t, sum.Backup.Status.Verification.FullRestore)
	assert.Equal(t, backupsv1.VerificationPassed, sum.Backup.Status.Verification.FullRestore.Result)
	require.NotNil(t, sum.Plan.Status.LastRestorableBackup, "the Plan records its restorable point")
	assert.Equal(t, sum.Backup.Name, sum.Plan.Status.LastRestorableBackup.Name)
	assert.Regexp(t, `(?m)^Backup\s+shop/shop-minutely-\d+\s+Verified=True\s+RestoreVerified$`, report)
	assert.Contains(t, report, "Plan "+golden.PlanName+"'s newest Backup proven restorable was taken")
	assert.Equal(t, backupsv1.RestoreJobSucceeded, sum.RestoreJob.Status.Phase)
	assert.Len(t, sum.Restored, 4, "ConfigMaps catalog and payload, Secret db, Deployment web")
	assert.Equal(t, sum.PayloadSum, sum.RestoredSum, "the payload came back byte for byte")

	// Each component's metrics endpoint shows the runs.
	for name, want := range map[string][]string{
		"core-controller": {`coffer_plan_last_schedule_time_seconds{namespace="shop",plan="shop-minutely"}`, `coffer_plan_last_restorable_backup_timestamp_seconds{namespace="shop",plan="shop-minutely"}`},
		"driver-velero":   {`coffer_velero_runs_total{kind="backup",outcome="Succeeded"}`, `coffer_velero_runs_total{kind="restore",outcome="Succeeded"}`},
		"verifier":        {`ugallu_backup_verify_runs_total`},
		"driver-job":      {`controller_runtime_reconcile_total{controller="coffer-driver-job-backupjob"`},
	} {
		body, err := s.Components[name].Metrics()
		require.NoError(t, err, name)
		for _, w := range want {
			assert.Regexp(t, regexp.QuoteMeta(w), body, "%s metrics", name)
		}
	}
}
