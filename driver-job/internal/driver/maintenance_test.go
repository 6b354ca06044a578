package driver_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-job/internal/names"
)

// chunkedReport is the report of a chunked backup to key: format 4, its repository beside it.
func chunkedReport(ns string) func(key string) string {
	return func(key string) string {
		return `{"uri":"s3://coffer/` + key + `","sizeBytes":4096,"checksum":"` + goodSum + `","metadata":{"format":"4","repository":"s3://coffer/` + ns + `/.coffer/` + ns + `"}}`
	}
}

// backups runs n backups to their Backups through the reconciler, each reporting report(key).
func (f *fixture) backups(n int, report func(key string) string) []*backupsv1.Backup {
	f.t.Helper()
	var out []*backupsv1.Backup
	for i := range n {
		bj := f.backupJob()
		reconcileOnce(f.t, f.backupReconciler(cl), bj)
		var j *batchv1.Job
		for _, job := range f.jobsOf(names.KindBackupJob) {
			if job.Labels[names.LabelRunUID] == string(bj.UID) {
				j = &job
			}
		}
		require.NotNil(f.t, j, "the Job of backup %d", i)
		f.finish(j, 0, report(f.ns+"/"+bj.Name+".tar"), "")
		reconcileOnce(f.t, f.backupReconciler(cl), bj)
		out = append(out, get(f.t, &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: bj.Name, Namespace: f.ns}}))
	}
	return out
}

// deleteThroughCleanup deletes b and runs its cleanup Job to success.
func (f *fixture) deleteThroughCleanup(b *backupsv1.Backup) {
	f.t.Helper()
	require.NoError(f.t, cl.Delete(f.ctx, b))
	r := f.cleanupReconciler()
	reconcileOnce(f.t, r, b)
	var cleanup *batchv1.Job
	for _, j := range f.jobsOf(names.KindBackup) {
		if j.Labels[names.LabelRunUID] == string(b.UID) {
			cleanup = &j
		}
	}
	require.NotNil(f.t, cleanup, "the cleanup Job of %s", b.Name)
	f.finish(cleanup, 0, "", "")
	reconcileOnce(f.t, r, b)
	require.True(f.t, apierrors.IsNotFound(cl.Get(f.ctx, client.ObjectKeyFromObject(b), &backupsv1.Backup{})), "%s is released", b.Name)
}

// The cleanup of a chunked Backup starts a maintenance Job in its namespace (the cleanupTemplate in
// mode maintain, with the chunk key and no age key), one at a time; a finished one is reported on
// the strategy and replaced by the next deletion. A tar strategy's deletions start none.
func TestChunkedDeletionStartsMaintenance(t *testing.T) {
	f := newFixture(t, func(s *jobapi.JobBackupStrategySpec) {
		s.CleanupTemplate = ptr.To(agentTemplate("--mode={{ .Mode }}"))
		s.Artifact = &jobapi.ArtifactOptions{Format: jobapi.ArtifactFormatChunked, Encryption: &jobapi.ArtifactEncryption{SecretName: "backup-keys"}}
	})
	bs := f.backups(3, chunkedReport(f.ns))
	drain(f.rec)

	f.deleteThroughCleanup(bs[0])
	m := f.jobsOf(names.KindMaintenance)
	require.Len(t, m, 1, "a maintenance Job after the cleanup")
	first := m[0]
	require.Empty(t, first.OwnerReferences, "it outlives the Backup whose deletion started it")
	c := first.Spec.Template.Spec.Containers[0]
	require.Equal(t, []string{"--mode=" + jobapi.ModeMaintain}, c.Args)
	e := env(c)
	require.Equal(t, jobapi.ModeMaintain, e[jobapi.EnvMode])
	require.Equal(t, f.ns+"/.coffer/"+f.ns, e[jobapi.EnvRepository], "the deleted Backup's repository")
	var chunkKey *corev1.SecretKeySelector
	for _, v := range c.Env {
		switch v.Name {
		case jobapi.EnvChunkKey:
			chunkKey = v.ValueFrom.SecretKeyRef
		case jobapi.EnvAgeIdentities, jobapi.EnvAgeRecipients:
			t.Errorf("a maintenance Job gets %s: it opens no pack", v.Name)
		}
	}
	require.Equal(t, &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "backup-keys"}, Key: jobapi.SecretKeyChunkKey, Optional: ptr.To(true)}, chunkKey)
	require.Contains(t, strings.Join(drain(f.rec), "\n"), "Normal MaintenanceStarted")

	// While it runs, another deletion starts none.
	f.deleteThroughCleanup(bs[1])
	require.Len(t, f.jobsOf(names.KindMaintenance), 1, "one maintenance at a time per namespace")

	// Once it failed, the next deletion reports it on the strategy and starts a new one.
	f.finish(&first, 1, "files/nightly-x: does not open with this repository's chunk key", batchv1.JobReasonBackoffLimitExceeded)
	drain(f.rec)
	f.deleteThroughCleanup(bs[2])
	evs := strings.Join(drain(f.rec), "\n")
	require.Contains(t, evs, "Warning MaintenanceFailed")
	require.Contains(t, evs, "does not open with this repository's chunk key")
	require.Eventually(t, func() bool {
		m := f.jobsOf(names.KindMaintenance)
		return len(m) == 1 && m[0].UID != first.UID
	}, 30*time.Second, 100*time.Millisecond, "the failed maintenance Job is deleted and a new one started")

	// A Backup whose report names another namespace's repository (the report is written in the
	// tenant's pod) starts no maintenance there.
	second := f.jobsOf(names.KindMaintenance)[0]
	f.finish(&second, 0, `{"repository":"x","deleted":0}`, "")
	b := f.backups(1, func(key string) string {
		return strings.Replace(chunkedReport(f.ns)(key), `"s3://coffer/`+f.ns+`/.coffer/`+f.ns+`"`, `"s3://coffer/kube-system/.coffer/kube-system"`, 1)
	})[0]
	drain(f.rec)
	f.deleteThroughCleanup(b)
	evs = strings.Join(drain(f.rec), "\n")
	require.Contains(t, evs, "Warning MaintenanceRefused")
	require.Contains(t, evs, "not s3://coffer/"+f.ns+"/.coffer/"+f.ns+" beside its artifact")
	require.Empty(t, f.jobsOf(names.KindMaintenance), "the finished one is gone, and none was started")
}

// A Tar strategy's deletions start no maintenance.
func TestTarDeletionStartsNoMaintenance(t *testing.T) {
	f := newFixture(t, func(s *jobapi.JobBackupStrategySpec) { s.CleanupTemplate = ptr.To(agentTemplate("--mode={{ .Mode }}")) })
	f.deleteThroughCleanup(f.backups(1, goodReport)[0])
	require.Empty(t, f.jobsOf(names.KindMaintenance))
}
