//go:build e2e

package jobdriver

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/components"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
	"github.com/coffer-backup/coffer/e2e/harness/node"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

// TestDisasterRecoveryOnARealNode (contract BK-11, BK-12; docs/disaster-recovery.md): cluster A
// (its own etcd, API server and kubelet) backs up an application with driver-job into MinIO and
// is destroyed. Cluster B (a fresh etcd, API server and kubelet; the same MinIO data) installs
// Coffer and a strategy whose catalog points at the bucket: the Backup appears, mapped into
// another namespace, read-only; a RestoreJob restores the data byte for byte on B's node; the
// verifier of B verifies the imported Backup, checksum-only and by full-restore (driver-job's
// verifyTemplate restores into scratch and compares every file with the artifact's manifest); the
// next sync creates nothing new; deleting the imported Backup leaves A's artifact and record in
// the bucket, and the sync brings the Backup back.
func TestDisasterRecoveryOnARealNode(t *testing.T) {
	node.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	root, err := manifests.RepoRoot()
	require.NoError(t, err)
	work := t.TempDir()
	image := agentImageArchive(t, ctx, root, work)

	// Cluster A: one backup of a Shop's files.
	a := startCluster(t, ctx, root, work, image)
	nsA, err := a.n.Cluster.Namespace(ctx, "shop")
	require.NoError(t, err)
	require.NoError(t, a.cl.Create(ctx, a.credentials(nsA)))
	stratA := a.strategy("files")
	require.NoError(t, a.cl.Create(ctx, stratA))
	classA := a.class(t, "files", stratA)
	a.application(t, nsA, "shop")
	original := tree(t, a.dir(nsA, "shop"))
	bj := &backupsv1.BackupJob{ObjectMeta: metav1.ObjectMeta{Name: "shop-before-the-fire", Namespace: nsA},
		Spec: backupsv1.BackupJobSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"}, BackupClassName: classA.Name}}
	require.NoError(t, a.cl.Create(ctx, bj))
	a.wait(t, "A's BackupJob", bj, bj.IsTerminal)
	require.Equal(t, backupsv1.BackupJobSucceeded, bj.Status.Phase, bj.Status.Message)
	backupA := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: bj.Name, Namespace: nsA}}
	a.wait(t, "A's Backup", backupA, func() bool { return backupA.Status.Phase == backupsv1.BackupReady })
	key := nsA + "/shop/" + bj.Name + "-" + string(bj.UID)[:8] + ".tar"

	// Cluster A is gone: its driver, its store's address, its node and control plane.
	components.StopAndCheck(t, a.driver)
	a.s3.Stop()
	require.NoError(t, a.n.Stop())

	// Cluster B, on the same bucket.
	installed := time.Now()
	b := startCluster(t, ctx, root, work, image)
	nsB, err := b.n.Cluster.Namespace(ctx, "shop-recovered")
	require.NoError(t, err)
	require.NoError(t, b.cl.Create(ctx, b.credentials(nsB)))
	b.appDir(t, nsB, "shop")
	require.NoError(t, b.cl.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "catalog-readonly", Namespace: "coffer-system"},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": velerostack.AccessKey, "AWS_SECRET_ACCESS_KEY": velerostack.SecretKey}}))
	stratB := b.strategy("files")
	stratB.Spec.Catalog = &jobapi.CatalogSource{Endpoint: "http://" + b.s3.S3Endpoint, Bucket: bucket, CredentialsSecretName: "catalog-readonly",
		NamespaceMapping: map[string]backupsv1.NamespaceName{nsA: backupsv1.NamespaceName(nsB)}, IntervalSeconds: ptr.To[int32](10),
		Parameters: b.params()} // B's class parameters: B reaches the bucket at another address
	require.NoError(t, b.cl.Create(ctx, stratB))
	b.class(t, "files", stratB)

	imported := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: bj.Name, Namespace: nsB}}
	b.waitFor(t, "the imported Backup", imported, func() bool { return imported.Status.Phase == backupsv1.BackupReady })
	t.Logf("cluster B installed → catalog listed: %s", time.Since(installed).Round(time.Millisecond))
	assert.Equal(t, "true", imported.Labels[backupsv1.LabelImported])
	assert.Equal(t, string(bj.UID), imported.Labels[backupsv1.LabelBackupJobUID], "the record names A's run")
	assert.Equal(t, "http://"+b.s3.S3Endpoint, imported.Spec.DriverMetadata["param.endpoint"], "restores here reach the bucket at B's address")
	assert.Equal(t, *backupA.Status.Artifact, *imported.Status.Artifact, "the record's artifact is A's")
	assert.Equal(t, stratB.Name, imported.Spec.StrategyRef.Name)
	assert.Empty(t, imported.Finalizers, "read-only towards A's data")
	ksA, ksB := imported.Annotations[backupsv1.AnnotationSourceCluster], &corev1.Namespace{}
	require.NoError(t, b.cl.Get(ctx, client.ObjectKey{Name: "kube-system"}, ksB))
	assert.NotEqual(t, string(ksB.UID), ksA, "A and B are two clusters")

	// Restore on B's node, into B's namespace: byte for byte.
	rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: "recover", Namespace: nsB},
		Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: imported.Name}}}
	require.NoError(t, b.cl.Create(ctx, rj))
	b.wait(t, "the RestoreJob on B", rj, rj.IsTerminal)
	require.Equal(t, backupsv1.RestoreJobSucceeded, rj.Status.Phase, rj.Status.Message)
	require.Equal(t, original, tree(t, b.dir(nsB, "shop")), "every file of A's application, identical, on B")

	// B's verifier proves the imported Backup: the artifact A wrote, read from the bucket, has the
	// size and SHA-256 of the record.
	t.Setenv("AWS_ACCESS_KEY_ID", velerostack.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", velerostack.SecretKey)
	verifier, err := components.Launch(root, work, b.n.Cluster.Kubeconfig, components.Spec{Module: "verifier", Binary: "verifier",
		Namespace: "ugallu-system", Args: []string{"--cluster-id=recovery", "--s3-endpoint=http://" + b.s3.S3Endpoint, "--etcd-snapshot-dir=" + t.TempDir()}})
	require.NoError(t, err)
	t.Cleanup(func() { components.StopAndCheck(t, verifier) })
	vr := &securityv1.BackupVerifyRun{ObjectMeta: metav1.ObjectMeta{Name: "verify-imported", Namespace: nsB}, Spec: securityv1.BackupVerifyRunSpec{
		Backend: securityv1.BackendCoffer, BackupRef: securityv1.BackupRef{Name: imported.Name}, Mode: securityv1.ModeChecksumOnly,
		Timeout: &metav1.Duration{Duration: 3 * time.Minute}}}
	require.NoError(t, b.cl.Create(ctx, vr))
	b.waitFor(t, "the verification of the imported Backup", vr, func() bool { return vr.Status.Phase.IsTerminal() })
	require.Equal(t, securityv1.RunSucceeded, vr.Status.Phase, "%+v\nverifier log:\n%s", vr.Status, verifier.Tail())
	b.waitFor(t, "the Verified condition of the imported Backup", imported, func() bool {
		return meta.IsStatusConditionTrue(imported.Status.Conditions, backupsv1.ConditionVerified)
	})

	// And by full-restore: the verifier's inert RestoreJob aimed at its sandbox makes driver-job
	// run the verifyTemplate, which restores into scratch on the node and compares every file
	// with the manifest inside A's artifact (contract RJ-13).
	full := &securityv1.BackupVerifyRun{ObjectMeta: metav1.ObjectMeta{Name: "restore-imported", Namespace: nsB}, Spec: securityv1.BackupVerifyRunSpec{
		Backend: securityv1.BackendCoffer, BackupRef: securityv1.BackupRef{Name: imported.Name}, Mode: securityv1.ModeFullRestore,
		SandboxNamespace: nsB + "-bvsandbox", Timeout: &metav1.Duration{Duration: 3 * time.Minute}}}
	require.NoError(t, b.cl.Create(ctx, full))
	b.waitFor(t, "the full-restore verification of the imported Backup", full, func() bool { return full.Status.Phase.IsTerminal() })
	require.Equal(t, securityv1.RunSucceeded, full.Status.Phase, "%+v\nverifier log:\n%s\ndriver-job log:\n%s", full.Status, verifier.Tail(), b.driver.Tail())
	res := &securityv1.BackupVerifyResult{}
	require.NoError(t, b.cl.Get(ctx, client.ObjectKey{Namespace: nsB, Name: full.Status.ResultName()}, res))
	files := int64(0)
	for _, d := range original {
		if strings.HasPrefix(d, "file ") {
			files++
		}
	}
	assert.Equal(t, fmt.Sprintf("by driver %s: %d item(s) compared with the backup's own record of them", jobapi.Group, files),
		res.Spec.Details["contentDiff"], "every file of the application compared by content")
	b.waitFor(t, "the full-restore verdict on the imported Backup", imported, func() bool {
		c := meta.FindStatusCondition(imported.Status.Conditions, backupsv1.ConditionVerified)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == backupsv1.ReasonRestoreVerified
	})
	assert.Equal(t, original, tree(t, b.dir(nsB, "shop")), "the verification left the application's volume alone")

	// The next sync creates nothing new.
	strat := &jobapi.JobBackupStrategy{ObjectMeta: metav1.ObjectMeta{Name: stratB.Name}}
	b.wait(t, "a second sync", strat, func() bool {
		return strat.Status.Catalog != nil && strat.Status.Catalog.LastSyncTime != nil && strat.Status.Catalog.Created == 0
	})
	assert.Equal(t, int32(1), strat.Status.Catalog.Imported)
	list := &backupsv1.BackupList{}
	require.NoError(t, b.cl.List(ctx, list))
	assert.Len(t, list.Items, 1, "one Backup in B, the imported one")

	// Deleting the imported Backup leaves A's artifact and record; the next sync brings it back.
	require.NoError(t, b.cl.Delete(ctx, imported))
	for _, k := range []string{key, key + jobapi.RecordSuffix} {
		_, err := b.s3.S3.StatObject(ctx, bucket, k, minio.StatObjectOptions{})
		assert.NoError(t, err, "B never deletes A's %s", k)
	}
	back := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: bj.Name, Namespace: nsB}}
	b.waitFor(t, "the Backup imported again", back, func() bool { return back.UID != imported.UID && back.Status.Phase == backupsv1.BackupReady })
}

// waitFor is wait for an object that may not exist yet.
func (e *env) waitFor(t *testing.T, what string, o client.Object, done func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return done(), nil
	})
	require.NoError(t, err, "waiting for %s\ndriver-job log:\n%s", what, e.driver.Tail())
}
