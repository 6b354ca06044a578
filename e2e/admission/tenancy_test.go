package admission

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
)

// as returns a client acting as user (API-server impersonation), with the core and security kinds.
func as(t *testing.T, user string) client.Client {
	t.Helper()
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: user}
	sch := cl.Scheme()
	require.NoError(t, backupsv1.AddToScheme(sch))
	require.NoError(t, securityv1.AddToScheme(sch))
	u, err := client.New(c, client.Options{Scheme: sch})
	require.NoError(t, err)
	return u
}

// bindTenant gives user the shipped coffer-tenant role in ns, as `admin`/`edit` aggregation would.
func bindTenant(t *testing.T, user, ns string) {
	t.Helper()
	require.NoError(t, cl.Create(context.Background(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "coffer-tenant-", Namespace: ns},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "coffer-tenant"},
	}))
}

func restoreJob(ns, target string) *backupsv1.RestoreJob {
	rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{GenerateName: "restore-", Namespace: ns},
		Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: "nightly"}}}
	if target != "" {
		rj.Spec.Options = map[string]string{backupsv1.OptionTargetNamespace: target}
	}
	return rj
}

// TestTenantRestoreTargets attacks the restore-target boundary as tenants on the real API server:
// a tenant may restore into its own namespace only; a user allowed in two namespaces restores
// across them.
func TestTenantRestoreTargets(t *testing.T) {
	ctx := context.Background()
	a, b := namespace(t), namespace(t)
	bindTenant(t, "tenant-a", a)
	bindTenant(t, "tenant-b", b)
	bindTenant(t, "ops", a)
	bindTenant(t, "ops", b)
	tenantA, ops := as(t, "tenant-a"), as(t, "ops")

	// Policies and bindings take effect asynchronously: wait until the attack is refused.
	var err error
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		rj := restoreJob(a, b)
		if err = tenantA.Create(ctx, rj); err == nil {
			return false, cl.Delete(ctx, rj)
		}
		return true, nil
	}), "the restore-target policy never refused tenant-a")
	assertRefused(t, err, "tenant-a", b)

	t.Run("tenant-a cannot restore into kube-system", func(t *testing.T) {
		assertRefused(t, tenantA.Create(ctx, restoreJob(a, "kube-system")), "tenant-a", "kube-system")
	})
	t.Run("tenant-a cannot create a RestoreJob in tenant-b's namespace either", func(t *testing.T) {
		err := tenantA.Create(ctx, restoreJob(b, ""))
		assert.True(t, apierrors.IsForbidden(err), "RBAC refuses it: %v", err)
	})
	t.Run("tenant-a restores into its own namespace, named or not", func(t *testing.T) {
		require.NoError(t, tenantA.Create(ctx, restoreJob(a, "")))
		require.NoError(t, tenantA.Create(ctx, restoreJob(a, a)))
	})
	t.Run("a user allowed in both namespaces restores across them", func(t *testing.T) {
		rj := restoreJob(a, b)
		require.NoError(t, ops.Create(ctx, rj))
		assert.Equal(t, b, rj.TargetNamespace())
	})
	t.Run("tenants hold no cluster-admin kinds", func(t *testing.T) {
		cases := []client.Object{
			&backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: "tenant-class"}, Spec: backupsv1.BackupClassSpec{Strategies: []backupsv1.BackupClassStrategy{{
				Application: backupsv1.ApplicationSelector{Kind: "Shop"}, StrategyRef: corev1.TypedLocalObjectReference{Kind: "VeleroBackupStrategy", Name: "x"}}}}},
			&securityv1.BackupVerifyRun{ObjectMeta: metav1.ObjectMeta{Name: "tenant-run", Namespace: a}},
		}
		for _, o := range cases {
			err := tenantA.Create(ctx, o)
			assert.True(t, apierrors.IsForbidden(err), "%T: %v", o, err)
		}
		err := tenantA.List(ctx, &securityv1.SecurityEventList{})
		assert.True(t, apierrors.IsForbidden(err), "SecurityEvents: %v", err)
		err = tenantA.Create(ctx, &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: a}})
		assert.True(t, apierrors.IsForbidden(err), "tenants read Backups, drivers make them: %v", err)
		assert.NoError(t, tenantA.List(ctx, &backupsv1.BackupList{}, client.InNamespace(a)), "tenants read their Backups")
	})
}

func assertRefused(t *testing.T, err error, user, target string) {
	t.Helper()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ValidatingAdmissionPolicy", "refused by the admission policy")
	assert.Contains(t, err.Error(), "user "+user+" may not create RestoreJobs in namespace "+target)
}
