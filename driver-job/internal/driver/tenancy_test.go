package driver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-job/internal/driver"
	"github.com/coffer-backup/coffer/driver-job/internal/names"
)

// tenant is a client acting as a user who holds the built-in role edit in the fixture's namespace
// (API-server impersonation). No controller manager runs here to aggregate edit, so the binding
// also names the bootstrap role that aggregation merges into it.
func (f *fixture) tenant(user string) client.Client {
	f.t.Helper()
	for _, role := range []string{"edit", "system:aggregate-to-edit"} {
		require.NoError(f.t, cl.Create(f.ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "tenant-", Namespace: f.ns},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		}))
	}
	c := rest.CopyConfig(restConfig)
	c.Impersonate = rest.ImpersonationConfig{UserName: user}
	u, err := client.New(c, client.Options{Scheme: sch})
	require.NoError(f.t, err)
	return u
}

// forgedPod is what a tenant makes of the Job's pods: her own pod, owned by her ConfigMap (so the
// Job controller ignores it), carrying the Job's controller-uid label, named to sort after the
// Job's own pod; the test plays the kubelet, and it succeeds with the report she chose.
func (f *fixture) forgedPod(tenant client.Client, j *batchv1.Job, report string) {
	f.t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "mine-", Namespace: f.ns}}
	require.NoError(f.t, tenant.Create(f.ctx, cm))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: j.Name + "-y", Namespace: f.ns,
		Labels:          map[string]string{batchv1.ControllerUidLabel: string(j.UID), batchv1.JobNameLabel: j.Name},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID, Controller: ptr.To(true)}}},
		Spec: *j.Spec.Template.Spec.DeepCopy()}
	f.podEnds(tenant, pod, 0, report)
}

func reportOf(uri string) string {
	return `{"uri":"` + uri + `","sizeBytes":4096,"checksum":"` + goodSum + `"}`
}

// A tenant's pod that carries the Job's controller-uid label is not the Job's: its report is
// never read. With the Job's own pod there, the Backup records that pod's artifact; without it,
// the run fails as one whose pods are gone, and no Backup names the forged artifact.
func TestBackupIgnoresPodsTheJobDoesNotControl(t *testing.T) {
	const forged = "s3://tenant-b-private/tenant-b/db/nightly.tar"
	t.Run("beside the Job's pod", func(t *testing.T) {
		f := newFixture(t, nil)
		tenant := f.tenant("tenant-a")
		bj := f.backupJob()
		reconcileOnce(t, f.backupReconciler(cl), bj)
		j := f.onlyJob()
		genuine := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: j.Name + "-x", Namespace: f.ns,
			Labels: map[string]string{batchv1.ControllerUidLabel: string(j.UID), batchv1.JobNameLabel: j.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: j.Name, UID: j.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
			Spec: *j.Spec.Template.Spec.DeepCopy()}
		f.podEnds(cl, genuine, 0, goodReport(f.ns+"/web/nightly.tar"))
		f.forgedPod(tenant, j, reportOf(forged))
		f.jobEnds(j, 0, "")
		reconcileOnce(t, f.backupReconciler(cl), bj)

		require.Equal(t, backupsv1.BackupJobSucceeded, get(t, bj).Status.Phase)
		b := get(t, &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: bj.Name, Namespace: f.ns}})
		require.Equal(t, "s3://coffer/"+f.ns+"/web/nightly.tar", b.Status.Artifact.URI, "the Job's pod's report, not the tenant's")
	})
	t.Run("alone", func(t *testing.T) {
		f := newFixture(t, nil)
		tenant := f.tenant("tenant-a")
		bj := f.backupJob()
		reconcileOnce(t, f.backupReconciler(cl), bj)
		j := f.onlyJob()
		f.forgedPod(tenant, j, reportOf("s3://coffer/"+f.ns+"/forged.tar"))
		f.jobEnds(j, 0, "")
		reconcileOnce(t, f.backupReconciler(cl), bj)

		bj = get(t, bj)
		require.Equal(t, backupsv1.BackupJobFailed, bj.Status.Phase)
		require.Equal(t, backupsv1.ReasonArtifactReportInvalid, readyCondition(bj.Status.Conditions).Reason)
		require.Contains(t, bj.Status.Message, "no pod of Job "+j.Name+" is left to read")
		require.True(t, apierrors.IsNotFound(cl.Get(f.ctx, client.ObjectKeyFromObject(bj), &backupsv1.Backup{})), "no Backup")
	})
}

// The Job's own pod reporting an artifact outside the run (another bucket, another namespace's
// prefix, or a URI that reads as the run's only to a lenient parser) fails the run with
// ArtifactOutsideRun; no Backup records it.
func TestBackupRefusesAnArtifactOutsideTheRun(t *testing.T) {
	for name, uri := range map[string]func(ns string) string{
		"another bucket":           func(ns string) string { return "s3://tenant-b-private/" + ns + "/web/nightly.tar" },
		"another namespace":        func(string) string { return "s3://coffer/tenant-b/web/nightly.tar" },
		"the bucket's root":        func(string) string { return "s3://coffer/nightly.tar" },
		"the namespace as a file":  func(ns string) string { return "s3://coffer/" + ns },
		"climbing out":             func(ns string) string { return "s3://coffer/" + ns + "/../tenant-b/nightly.tar" },
		"percent-encoded climb":    func(ns string) string { return "s3://coffer/" + ns + "%2F..%2Ftenant-b/nightly.tar" },
		"double slash":             func(ns string) string { return "s3://coffer//" + ns + "/nightly.tar" },
		"a user before the bucket": func(ns string) string { return "s3://tenant-b-private@coffer/" + ns + "/nightly.tar" },
		"another scheme":           func(ns string) string { return "https://coffer/" + ns + "/nightly.tar" },
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, nil)
			bj := f.backupJob()
			reconcileOnce(t, f.backupReconciler(cl), bj)
			f.finish(f.onlyJob(), 0, reportOf(uri(f.ns)), "")
			reconcileOnce(t, f.backupReconciler(cl), bj)
			bj = get(t, bj)
			require.Equal(t, backupsv1.BackupJobFailed, bj.Status.Phase)
			require.Equal(t, driver.ReasonArtifactOutsideRun, readyCondition(bj.Status.Conditions).Reason, bj.Status.Message)
			require.Contains(t, bj.Status.Message, "outside the run")
			require.True(t, apierrors.IsNotFound(cl.Get(f.ctx, client.ObjectKeyFromObject(bj), &backupsv1.Backup{})), "no Backup")
		})
	}
	t.Run("no bucket parameter", func(t *testing.T) {
		f := newFixture(t, func(s *jobapi.JobBackupStrategySpec) { s.Template = agentTemplate("--dir=/data") })
		f.class.Spec.Strategies[0].Parameters = map[string]string{"endpoint": "http://10.0.0.1:9000"}
		require.NoError(t, cl.Update(f.ctx, f.class))
		bj := f.backupJob()
		reconcileOnce(t, f.backupReconciler(cl), bj)
		f.finish(f.onlyJob(), 0, goodReport(f.ns+"/nightly.tar"), "")
		reconcileOnce(t, f.backupReconciler(cl), bj)
		bj = get(t, bj)
		require.Equal(t, driver.ReasonArtifactOutsideRun, readyCondition(bj.Status.Conditions).Reason)
		require.Contains(t, bj.Status.Message, `give the class the parameter "bucket"`)
	})
}

// A Backup naming another tenant's object (recorded before the driver checked reports) is never
// acted on: a restore fails ArtifactOutsideRun without a Job, a check marks it
// ArtifactAvailable=False and starts no Job, and its deletion keeps the artifact rather than run a
// cleanup Job on it.
func TestABackupOutsideItsScopeIsNotRestoredCheckedOrCleanedUp(t *testing.T) {
	f := newCheckFixture(t, nil)
	b := f.readyBackup("planted", nil)
	b.Status.Artifact.URI = "s3://tenant-b-private/tenant-b/db/nightly.tar"
	require.NoError(t, cl.Status().Update(f.ctx, b))
	past := f.clock.Now().Add(-driver.DefaultCheckPeriod)
	f.setNextCheck(b, past)

	rj := f.restoreJob(b, nil)
	reconcileOnce(t, f.restoreReconciler(), rj)
	rj = get(t, rj)
	require.Equal(t, backupsv1.RestoreJobFailed, rj.Status.Phase)
	require.Equal(t, driver.ReasonArtifactOutsideRun, readyCondition(rj.Status.Conditions).Reason, rj.Status.Message)
	require.Contains(t, rj.Status.Message, "not in the run's bucket coffer")
	require.Empty(t, f.jobsOf(names.KindRestoreJob))

	d := f.checker(2)
	require.False(t, d.Unremarkable(cached(t, b)), "a look marks it: it is queued when the cache starts")
	f.startDueChecks(d)
	require.Empty(t, f.jobsOf(names.KindBackupCheck), "no check Job looks at another's object")
	// An absence is confirmed by a second look some minutes later (driverkit); so is this.
	reconcileOnce(t, f.backupReconcilerOf(d), b)
	f.clock.Step(10 * time.Minute)
	reconcileOnce(t, f.backupReconcilerOf(d), b)
	require.Empty(t, f.jobsOf(names.KindBackupCheck))
	avail := meta.FindStatusCondition(get(t, b).Status.Conditions, backupsv1.ConditionArtifactAvailable)
	require.Equal(t, metav1.ConditionFalse, avail.Status, "%+v", avail)
	require.Equal(t, driver.ReasonArtifactOutsideRun, avail.Reason)

	addFinalizer(t, b)
	require.NoError(t, cl.Delete(f.ctx, b))
	reconcileOnce(t, f.cleanupReconciler(), b)
	require.Empty(t, f.jobsOf(names.KindBackup), "no cleanup Job deletes another's object")
	require.True(t, apierrors.IsNotFound(cl.Get(f.ctx, client.ObjectKeyFromObject(b), &backupsv1.Backup{})), "released, the artifact kept")
	require.Contains(t, strings.Join(drain(f.rec), "\n"), driver.ReasonArtifactOutsideRun)
}

// addFinalizer puts the cleanup finalizer on a Backup, as the kit does for a strategy with a
// cleanupTemplate.
func addFinalizer(t *testing.T, b *backupsv1.Backup) {
	t.Helper()
	b = get(t, b)
	orig := b.DeepCopy()
	b.Finalizers = append(b.Finalizers, names.Finalizer)
	require.NoError(t, cl.Patch(context.Background(), b, client.MergeFrom(orig)))
}
