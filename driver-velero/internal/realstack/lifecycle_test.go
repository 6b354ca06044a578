package realstack

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/internal/names"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

func data(ns string) []client.Object {
	labels := map[string]string{"app": "shop"}
	return []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "catalog", Namespace: ns, Labels: labels}, Data: map[string]string{"items": "tea,coffee,cocoa", "currency": "EUR"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "prices", Namespace: ns, Labels: labels}, BinaryData: map[string][]byte{"blob": {0, 1, 2, 3, 254, 255}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db-password", Namespace: ns, Labels: labels}, Data: map[string][]byte{"password": []byte("s3cr3t!")}},
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, Labels: labels},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr(int32(0)),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "shop:1.2.3", Args: []string{"--port=8080"}}}}},
			},
		},
	}
}

// content is what must survive a backup and restore, byte for byte.
func content(t *testing.T, ns string) map[string]any {
	t.Helper()
	ctx := context.Background()
	out := map[string]any{}
	for _, name := range []string{"catalog", "prices"} {
		cm := &corev1.ConfigMap{}
		require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cm))
		out["cm/"+name] = []any{cm.Data, cm.BinaryData, cm.Labels["app"]}
	}
	sec := &corev1.Secret{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "db-password"}, sec))
	out["secret"] = sec.Data
	dep := &appsv1.Deployment{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, dep))
	out["deployment"] = []any{dep.Spec.Template.Spec.Containers[0].Image, dep.Spec.Template.Spec.Containers[0].Args, *dep.Spec.Replicas}
	return out
}

func backupJob(ns, name, class, kind string) *backupsv1.BackupJob {
	return &backupsv1.BackupJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       backupsv1.BackupJobSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: kind, Name: "shop"}, BackupClassName: class},
	}
}

// succeededRun backs up the Shop of managedNS with a velero BackupJob named name and waits for it
// to succeed; it returns the run and where its Velero backup is.
func succeededRun(t *testing.T, name string) (*backupsv1.BackupJob, client.ObjectKey) {
	t.Helper()
	shop(t, managedNS, "shop")
	job := backupJob(managedNS, name, "velero", "Shop")
	require.NoError(t, cl.Create(context.Background(), job))
	waitJob(t, job)
	require.Equal(t, backupsv1.BackupJobSucceeded, job.Status.Phase, job.Status.Message)
	return job, client.ObjectKey{Namespace: velerostack.Namespace, Name: names.VeleroBackup(job)}
}

func waitJob(t *testing.T, j *backupsv1.BackupJob) {
	waitFor(t, "BackupJob "+j.Name+" to finish", 3*time.Minute, func(ctx context.Context) (bool, error) {
		return j.IsTerminal(), cl.Get(ctx, client.ObjectKeyFromObject(j), j)
	})
}

// rbacObjects are a namespace's Roles, RoleBindings and ServiceAccounts: the application's own
// ServiceAccount and Role, and a RoleBinding granting admin to a user, as an administrator's grant
// (or one an administrator since revoked) would.
func rbacObjects(ns string) []client.Object {
	return []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "shop-web", Namespace: ns}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "shop-reader", Namespace: ns},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "shop-reader", Namespace: ns},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "shop-web", Namespace: ns}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "shop-reader"}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "shop-admins", Namespace: ns},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"}},
	}
}

// rbacPresent lists which of rbacObjects(ns) exist.
func rbacPresent(t *testing.T, ns string) []string {
	t.Helper()
	var out []string
	for _, o := range rbacObjects(ns) {
		err := cl.Get(context.Background(), client.ObjectKeyFromObject(o), o)
		if err == nil {
			out = append(out, fmt.Sprintf("%T %s", o, o.GetName()))
			continue
		}
		require.True(t, apierrors.IsNotFound(err), "%v", err)
	}
	return out
}

// TestBackupDeleteRestore is the golden path on the real stack: back up a namespace, check the
// artifact against the bucket, delete the objects, restore them, compare every byte. The
// namespace's Roles, RoleBindings and ServiceAccounts come back only with restoreRBAC.
func TestBackupDeleteRestore(t *testing.T) {
	ctx := context.Background()
	shop(t, managedNS, "shop")
	for _, o := range append(data(managedNS), rbacObjects(managedNS)...) {
		require.NoError(t, cl.Create(ctx, o))
	}
	before := content(t, managedNS)
	allRBAC := rbacPresent(t, managedNS)
	require.Len(t, allRBAC, len(rbacObjects(managedNS)))

	job := backupJob(managedNS, "nightly-1", "velero", "Shop")
	require.NoError(t, cl.Create(ctx, job))
	waitJob(t, job)
	require.Equal(t, backupsv1.BackupJobSucceeded, job.Status.Phase, job.Status.Message)
	require.NotNil(t, job.Status.StartedAt)
	require.NotNil(t, job.Status.CompletedAt)
	require.Equal(t, "nightly-1", job.Status.BackupRef.Name)

	b := &backupsv1.Backup{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: managedNS, Name: "nightly-1"}, b))
	assert.Empty(t, b.OwnerReferences, "a Backup outlives its BackupJob")
	assert.Equal(t, backupsv1.BackupReady, b.Status.Phase)
	assert.True(t, b.IsGood())
	assert.Equal(t, "velerodriver.backups.cozystack.io", *b.Spec.StrategyRef.APIGroup)
	assert.Equal(t, "apps.cozystack.io", *b.Spec.ApplicationRef.APIGroup)
	vbName := b.Spec.DriverMetadata[names.MetaBackupName]
	require.NotEmpty(t, vbName)
	assert.Equal(t, velerostack.Namespace, b.Spec.DriverMetadata[names.MetaNamespace])
	assert.Equal(t, velerostack.BSLName, b.Spec.DriverMetadata[names.MetaStorageLocation])

	sum, size := bucketSHA256(t, velerostack.ObjectKey(vbName))
	require.NotNil(t, b.Status.Artifact)
	assert.Equal(t, sum, b.Status.Artifact.Checksum, "the checksum is that of the tarball in the bucket")
	assert.Equal(t, size, b.Status.Artifact.SizeBytes)
	assert.Equal(t, "s3://"+velerostack.Bucket+"/"+velerostack.ObjectKey(vbName), b.Status.Artifact.URI)
	vb := &velerov1.Backup{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: velerostack.Namespace, Name: vbName}, vb))
	assert.Equal(t, sum, vb.Annotations[backupsv1.AnnotationChecksum], "recorded on the Velero Backup too")
	assert.Equal(t, string(job.UID), vb.Labels[backupsv1.LabelBackupJobUID])
	assert.Equal(t, b.Spec.TakenAt.Unix(), vb.Status.StartTimestamp.Unix())

	for _, o := range append(data(managedNS), rbacObjects(managedNS)...) {
		require.NoError(t, cl.Delete(ctx, o))
	}
	rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: "undo", Namespace: managedNS},
		Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: "nightly-1"}}}
	require.NoError(t, cl.Create(ctx, rj))
	waitFor(t, "the restore", 3*time.Minute, func(ctx context.Context) (bool, error) {
		return rj.IsTerminal(), cl.Get(ctx, client.ObjectKeyFromObject(rj), rj)
	})
	require.Equal(t, backupsv1.RestoreJobSucceeded, rj.Status.Phase, rj.Status.Message)
	assert.Equal(t, before, content(t, managedNS), "every object is back with identical data")
	if assert.NotNil(t, rj.Status.Items, "the restore counts its items") {
		assert.GreaterOrEqual(t, rj.Status.Items.Restored, int64(len(data(managedNS))), "at least the deleted objects were restored")
		assert.Zero(t, rj.Status.Items.Failed)
	}
	assert.Empty(t, rbacPresent(t, managedNS), "without restoreRBAC no Role, RoleBinding or ServiceAccount is restored")
	assert.Contains(t, meta.FindStatusCondition(rj.Status.Conditions, backupsv1.ConditionReady).Message,
		"Roles, RoleBindings and ServiceAccounts left out: set spec.options.restoreRBAC", "the restore says what it left out")
	undoRestore := &velerov1.Restore{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: velerostack.Namespace, Name: names.VeleroRestore(rj)}, undoRestore))
	assert.Subset(t, undoRestore.Spec.ExcludedResources, []string{"roles.rbac.authorization.k8s.io", "rolebindings.rbac.authorization.k8s.io", "serviceaccounts"})

	t.Run("with restoreRBAC the Roles, RoleBindings and ServiceAccounts come back", func(t *testing.T) {
		rbac := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: "undo-rbac", Namespace: managedNS},
			Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: "nightly-1"},
				Options: backupsv1.StringOptions(map[string]string{backupsv1.OptionRestoreRBAC: "true"})}}
		require.NoError(t, cl.Create(ctx, rbac))
		waitFor(t, "the restore with RBAC", 3*time.Minute, func(ctx context.Context) (bool, error) {
			return rbac.IsTerminal(), cl.Get(ctx, client.ObjectKeyFromObject(rbac), rbac)
		})
		require.Equal(t, backupsv1.RestoreJobSucceeded, rbac.Status.Phase, rbac.Status.Message)
		assert.Equal(t, allRBAC, rbacPresent(t, managedNS))
		binding := &rbacv1.RoleBinding{}
		require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: managedNS, Name: "shop-reader"}, binding))
		assert.Equal(t, rbacObjects(managedNS)[2].(*rbacv1.RoleBinding).Subjects, binding.Subjects)
		assert.Contains(t, meta.FindStatusCondition(rbac.Status.Conditions, backupsv1.ConditionReady).Message,
			"Roles, RoleBindings and ServiceAccounts restored as requested (spec.options.restoreRBAC")
		assert.Equal(t, before, content(t, managedNS))
	})

	t.Run("an in-place restore over objects that all exist says it restored nothing", func(t *testing.T) {
		redo := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: "redo", Namespace: managedNS},
			Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: "nightly-1"}}}
		require.NoError(t, cl.Create(ctx, redo))
		waitFor(t, "the second restore", 3*time.Minute, func(ctx context.Context) (bool, error) {
			return redo.IsTerminal(), cl.Get(ctx, client.ObjectKeyFromObject(redo), redo)
		})
		require.Equal(t, backupsv1.RestoreJobSucceeded, redo.Status.Phase, redo.Status.Message)
		require.NotNil(t, redo.Status.Items)
		assert.Zero(t, redo.Status.Items.Restored, "every item already existed")
		assert.Positive(t, redo.Status.Items.Skipped)
		assert.Contains(t, meta.FindStatusCondition(redo.Status.Conditions, backupsv1.ConditionReady).Message, "nothing was restored")
	})

	t.Run("restore into another namespace maps exactly and writes nothing elsewhere", func(t *testing.T) {
		rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: "copy", Namespace: managedNS},
			Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: "nightly-1"},
				Options: backupsv1.StringOptions(map[string]string{"targetNamespace": targetNS})}}
		sourceVersions := versions(t, managedNS)
		require.NoError(t, cl.Create(ctx, rj))
		waitFor(t, "the restore into "+targetNS, 3*time.Minute, func(ctx context.Context) (bool, error) {
			return rj.IsTerminal(), cl.Get(ctx, client.ObjectKeyFromObject(rj), rj)
		})
		require.Equal(t, backupsv1.RestoreJobSucceeded, rj.Status.Phase, rj.Status.Message)
		assert.Equal(t, before, content(t, targetNS))
		assert.Empty(t, rbacPresent(t, targetNS), "no RBAC object is restored into another namespace without restoreRBAC")
		assert.Equal(t, sourceVersions, versions(t, managedNS), "the source namespace is untouched")
		vr := &velerov1.Restore{}
		require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: velerostack.Namespace, Name: names.VeleroRestore(rj)}, vr))
		assert.Equal(t, map[string]string{managedNS: targetNS}, vr.Spec.NamespaceMapping)
		assert.Equal(t, []string{managedNS}, vr.Spec.IncludedNamespaces)
		assert.False(t, *vr.Spec.IncludeClusterResources)
		// Everything the restore wrote carries its name; all of it is in the target namespace.
		for _, list := range []client.ObjectList{&corev1.ConfigMapList{}, &corev1.SecretList{}, &appsv1.DeploymentList{}} {
			require.NoError(t, cl.List(ctx, list, client.MatchingLabels{velerov1.RestoreNameLabel: vr.Name}))
			items, _ := meta.ExtractList(list)
			assert.NotEmpty(t, items)
			for _, it := range items {
				assert.Equal(t, targetNS, it.(client.Object).GetNamespace(), "restored object outside the target")
			}
		}

		again := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: "copy-again", Namespace: managedNS},
			Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: "nightly-1"},
				Options: backupsv1.StringOptions(map[string]string{"targetNamespace": targetNS})}}
		shop(t, targetNS, "shop")
		require.NoError(t, cl.Create(ctx, again))
		waitFor(t, "the refused restore", time.Minute, func(ctx context.Context) (bool, error) {
			return again.IsTerminal(), cl.Get(ctx, client.ObjectKeyFromObject(again), again)
		})
		assert.Equal(t, backupsv1.RestoreJobFailed, again.Status.Phase)
		assert.Contains(t, again.Status.Message, "namespace "+targetNS+" already holds Shop shop")
	})

	t.Run("a restore into another application is refused before anything is created", func(t *testing.T) {
		sourceVersions := versions(t, managedNS)
		for name, target := range map[string]corev1.TypedLocalObjectReference{
			"other-name":  {Kind: "Shop", Name: "shop-2"},
			"other-kind":  {Kind: "Store", Name: "shop"},
			"other-group": {APIGroup: ptr("shops.example.com"), Kind: "Shop", Name: "shop"},
		} {
			rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: managedNS},
				Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: "nightly-1"}, TargetApplicationRef: &target}}
			require.NoError(t, cl.Create(ctx, rj))
			waitFor(t, "the refused restore "+name, time.Minute, func(ctx context.Context) (bool, error) {
				return rj.IsTerminal(), cl.Get(ctx, client.ObjectKeyFromObject(rj), rj)
			})
			require.Equal(t, backupsv1.RestoreJobFailed, rj.Status.Phase, name)
			ready := meta.FindStatusCondition(rj.Status.Conditions, backupsv1.ConditionReady)
			require.NotNil(t, ready)
			assert.Equal(t, backupsv1.ReasonTargetApplicationUnsupported, ready.Reason, name)
			assert.Contains(t, rj.Status.Message, "restores a Backup only into the application it was taken of (Shop shop)", name)
			assert.Contains(t, rj.Status.Message, "create a RestoreJob without targetApplicationRef", name)
			err := cl.Get(ctx, client.ObjectKey{Namespace: velerostack.Namespace, Name: names.VeleroRestore(rj)}, &velerov1.Restore{})
			assert.True(t, apierrors.IsNotFound(err), "%s: no Velero restore was created: %v", name, err)
		}
		assert.Equal(t, sourceVersions, versions(t, managedNS), "nothing was restored")

		// Naming the Backup's own application, its group spelled out, is an in-place restore.
		same := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: "same-application", Namespace: managedNS},
			Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: "nightly-1"},
				TargetApplicationRef: &corev1.TypedLocalObjectReference{APIGroup: ptr("apps.cozystack.io"), Kind: "Shop", Name: "shop"}}}
		require.NoError(t, cl.Create(ctx, same))
		waitFor(t, "the restore into the same application", 3*time.Minute, func(ctx context.Context) (bool, error) {
			return same.IsTerminal(), cl.Get(ctx, client.ObjectKeyFromObject(same), same)
		})
		require.Equal(t, backupsv1.RestoreJobSucceeded, same.Status.Phase, same.Status.Message)
	})

	t.Run("deleting the Backup deletes the Velero backup and its data", func(t *testing.T) {
		require.NoError(t, cl.Delete(ctx, b))
		waitFor(t, "the Backup to be released", 3*time.Minute, func(ctx context.Context) (bool, error) {
			err := cl.Get(ctx, client.ObjectKeyFromObject(b), &backupsv1.Backup{})
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
		err := cl.Get(ctx, client.ObjectKey{Namespace: velerostack.Namespace, Name: vbName}, &velerov1.Backup{})
		assert.True(t, apierrors.IsNotFound(err), "the Velero Backup is gone: %v", err)
		_, err = stack.S3.StatObject(ctx, velerostack.Bucket, velerostack.ObjectKey(vbName), minio.StatObjectOptions{})
		assert.Equal(t, "NoSuchKey", minio.ToErrorResponse(err).Code, "the tarball is gone from the bucket")
		// Released on its own request's completion, not after waiting for storage to sync.
		assert.True(t, emitted("ArtifactDeleted", vbName+" and its data are deleted"),
			"the release says the driver deleted it; the driver said:\n%s", strings.Join(eventsAbout(vbName), "\n"))
	})
}

func versions(t *testing.T, ns string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, list := range []client.ObjectList{&corev1.ConfigMapList{}, &corev1.SecretList{}, &appsv1.DeploymentList{}} {
		require.NoError(t, cl.List(context.Background(), list, client.InNamespace(ns)))
		items, _ := meta.ExtractList(list)
		for _, it := range items {
			o := it.(client.Object)
			out[o.GetName()] = o.GetResourceVersion()
		}
	}
	return out
}

func TestTemplateFailureCreatesNothing(t *testing.T) {
	ctx := context.Background()
	shop(t, managedNS, "shop")
	job := backupJob(managedNS, "broken-1", "broken", "Shop")
	require.NoError(t, cl.Create(ctx, job))
	waitJob(t, job)
	assert.Equal(t, backupsv1.BackupJobFailed, job.Status.Phase)
	ready := meta.FindStatusCondition(job.Status.Conditions, backupsv1.ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, backupsv1.ReasonTemplateRenderFailed, ready.Reason)
	assert.Contains(t, job.Status.Message, `map has no entry for key "nope"`)
	err := cl.Get(ctx, client.ObjectKey{Namespace: velerostack.Namespace, Name: names.VeleroBackup(job)}, &velerov1.Backup{})
	assert.True(t, apierrors.IsNotFound(err), "no Velero Backup was created")
}

func TestMissingApplicationFails(t *testing.T) {
	ctx := context.Background()
	job := backupJob(managedNS, "ghost-1", "velero", "Shop")
	job.Spec.ApplicationRef.Name = "ghost"
	require.NoError(t, cl.Create(ctx, job))
	waitJob(t, job)
	assert.Equal(t, backupsv1.BackupJobFailed, job.Status.Phase)
	assert.Equal(t, backupsv1.ReasonApplicationNotFound, meta.FindStatusCondition(job.Status.Conditions, backupsv1.ConditionReady).Reason)
	assert.Contains(t, job.Status.Message, "Shop "+managedNS+"/ghost not found")
}

func TestForeignJobsAreUntouched(t *testing.T) {
	ctx := context.Background()
	for _, j := range []*backupsv1.BackupJob{
		backupJob(managedNS, "other-driver", "velero", "Other"),    // resolves to the Job driver
		backupJob(managedNS, "no-class", "missing", "Shop"),        // resolves to nothing
		backupJob(managedNS, "no-strategy", "velero", "Unmatched"), // the class has no strategy for it
	} {
		require.NoError(t, cl.Create(ctx, j))
		// Call the reconciler directly: the outcome does not depend on timing.
		r := newBackupJobReconciler(cl, nil)
		_, err := r.Reconcile(ctx, requestFor(j))
		require.NoError(t, err)
		require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(j), j))
		assert.Empty(t, j.Status.Phase, j.Name)
		assert.Empty(t, j.Status.Conditions, j.Name)
	}
}

// TestRunClaimedByAnotherDriverIsUntouched: a run the Job driver claimed stays its own after the
// class was switched to Velero while the run was in flight.
func TestRunClaimedByAnotherDriverIsUntouched(t *testing.T) {
	ctx := context.Background()
	ns := "claimed-" + strings.ToLower(time.Now().Format("150405")) // not served by the running manager
	require.NoError(t, cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	shop(t, ns, "shop")
	j := backupJob(ns, "claimed-elsewhere", "velero", "Shop")
	require.NoError(t, cl.Create(ctx, j))
	j.MarkRunning(metav1.Now(), "coffer-driver-job")
	require.NoError(t, cl.Status().Update(ctx, j))
	_, err := newBackupJobReconciler(cl, nil).Reconcile(ctx, requestFor(j))
	require.NoError(t, err)
	rv := j.ResourceVersion
	require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(j), j))
	assert.Equal(t, rv, j.ResourceVersion)
	list := &velerov1.BackupList{}
	require.NoError(t, cl.List(ctx, list, client.InNamespace(velerostack.Namespace), client.MatchingLabels{backupsv1.LabelBackupJobUID: string(j.UID)}))
	assert.Empty(t, list.Items, "no Velero Backup for a run another driver claimed")
}

// TestAdoptionAfterCrash crashes the driver right after it created the Velero Backup; a new
// instance adopts the Velero Backup and finishes with exactly one.
func TestAdoptionAfterCrash(t *testing.T) {
	ctx := context.Background()
	ns := "crash-" + strings.ToLower(time.Now().Format("150405"))
	require.NoError(t, cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	shop(t, ns, "shop")
	require.NoError(t, cl.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns}, Data: map[string]string{"k": "v"}}))
	job := backupJob(ns, "crashy", "velero", "Shop")
	require.NoError(t, cl.Create(ctx, job))

	crash := errors.New("killed right after creating the Velero Backup")
	r := newBackupJobReconciler(crashAfterCreate(crash, func(o client.Object) bool { _, ok := o.(*velerov1.Backup); return ok }), nil)
	_, err := r.Reconcile(ctx, requestFor(job))
	require.ErrorIs(t, err, crash)
	require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(job), job))
	assert.Equal(t, backupsv1.BackupJobRunning, job.Status.Phase, "claimed before the Velero Backup was created")

	r = newBackupJobReconciler(cl, nil) // restart
	waitFor(t, "the adopted run to finish", 3*time.Minute, func(ctx context.Context) (bool, error) {
		if _, err := r.Reconcile(ctx, requestFor(job)); err != nil {
			return false, err
		}
		return job.IsTerminal(), cl.Get(ctx, client.ObjectKeyFromObject(job), job)
	})
	require.Equal(t, backupsv1.BackupJobSucceeded, job.Status.Phase, job.Status.Message)
	list := &velerov1.BackupList{}
	require.NoError(t, cl.List(ctx, list, client.InNamespace(velerostack.Namespace), client.MatchingLabels{backupsv1.LabelBackupJobUID: string(job.UID)}))
	assert.Len(t, list.Items, 1, "exactly one Velero Backup for the run")
	assert.Subset(t, list.Items[0].Spec.ExcludedResources, []string{"backups.backups.cozystack.io", "backupjobs.backups.cozystack.io"},
		"Coffer's run records are never in a Velero backup")

	// A copy of the Backup (as a restore of its namespace into a sandbox would make one: finalizer
	// and driverMetadata kept) never deletes the original's artifact when it is deleted.
	orig := &backupsv1.Backup{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: job.Name}, orig))
	sandbox := ns + "-bvsandbox"
	require.NoError(t, cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sandbox}}))
	cp := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: orig.Name, Namespace: sandbox, Finalizers: orig.Finalizers}, Spec: orig.Spec}
	require.NoError(t, cl.Create(ctx, cp))
	require.NoError(t, cl.Delete(ctx, cp))
	br := newKit(cl, events.NewFakeRecorder(10)).BackupReconciler()
	_, err = br.Reconcile(ctx, requestFor(cp))
	require.NoError(t, err)
	assert.True(t, apierrors.IsNotFound(cl.Get(ctx, client.ObjectKeyFromObject(cp), cp)), "the copy is released")
	dbrs := &velerov1.DeleteBackupRequestList{}
	require.NoError(t, cl.List(ctx, dbrs, client.InNamespace(velerostack.Namespace)))
	for _, d := range dbrs.Items {
		assert.NotEqual(t, list.Items[0].Name, d.Spec.BackupName, "the copy asked Velero to delete the original's backup")
	}
	require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(&list.Items[0]), &velerov1.Backup{}), "the original's Velero backup is still there")
}

// TestArtifactExpiredOutsideCoffer removes the Velero backup the way its TTL does (a
// DeleteBackupRequest from Velero's own GC): the Backup stays, marked ArtifactAvailable=False.
func TestArtifactExpiredOutsideCoffer(t *testing.T) {
	ctx := context.Background()
	job, vbKey := succeededRun(t, "expiring-1")
	require.NoError(t, cl.Create(ctx, &velerov1.DeleteBackupRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "ttl-expired", Namespace: vbKey.Namespace},
		Spec:       velerov1.DeleteBackupRequestSpec{BackupName: vbKey.Name},
	}))
	b := &backupsv1.Backup{}
	waitFor(t, "the Backup to show its artifact gone", 3*time.Minute, func(ctx context.Context) (bool, error) {
		if err := cl.Get(ctx, client.ObjectKey{Namespace: managedNS, Name: job.Name}, b); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionArtifactAvailable)
		return c != nil && c.Status == metav1.ConditionFalse, nil
	})
	assert.Equal(t, backupsv1.ReasonArtifactMissing, meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionArtifactAvailable).Reason)
	assert.False(t, b.IsGood(), "a Backup without its artifact is never the last good one")

	require.NoError(t, cl.Delete(ctx, b))
	waitFor(t, "the Backup to be released", time.Minute, func(ctx context.Context) (bool, error) {
		err := cl.Get(ctx, client.ObjectKeyFromObject(b), &backupsv1.Backup{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

// TestVeleroValidationFailure points a run at a storage location that does not exist: Velero
// rejects the backup (FailedValidation) and the BackupJob fails with Velero's reason.
func TestVeleroValidationFailure(t *testing.T) {
	ctx := context.Background()
	shop(t, managedNS, "shop")
	class := &backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: "nowhere"}, Spec: backupsv1.BackupClassSpec{Strategies: []backupsv1.BackupClassStrategy{
		{Application: backupsv1.ApplicationSelector{Kind: "Shop"}, Parameters: map[string]string{"backupStorageLocationName": "nowhere"},
			StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr("velerodriver.backups.cozystack.io"), Kind: "VeleroBackupStrategy", Name: "namespace"}},
	}}}
	require.NoError(t, cl.Create(ctx, class))
	job := backupJob(managedNS, "nowhere-1", "nowhere", "Shop")
	require.NoError(t, cl.Create(ctx, job))
	waitJob(t, job)
	assert.Equal(t, backupsv1.BackupJobFailed, job.Status.Phase)
	assert.Contains(t, job.Status.Message, "failed validation")
	assert.Contains(t, job.Status.Message, "nowhere")
	err := cl.Get(ctx, client.ObjectKey{Namespace: managedNS, Name: job.Name}, &backupsv1.Backup{})
	assert.True(t, apierrors.IsNotFound(err), "no Backup for a failed run")
}
