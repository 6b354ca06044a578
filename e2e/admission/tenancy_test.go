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
		rj.Spec.Options = backupsv1.StringOptions(map[string]string{backupsv1.OptionTargetNamespace: target})
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

// bindRole binds user to the ClusterRole role in ns.
func bindRole(t *testing.T, user, ns, role string) {
	t.Helper()
	require.NoError(t, cl.Create(context.Background(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "builtin-", Namespace: ns},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
	}))
}

// bindBuiltin binds user in ns to Kubernetes' built-in role (edit or admin) and to the
// system:aggregate-to-* ClusterRoles it aggregates, whose rules kube-controller-manager (not run by
// this suite) would copy into it, and to coffer-tenant, which deploy/ aggregates into both.
func bindBuiltin(t *testing.T, user, ns, role string) {
	t.Helper()
	parts := map[string][]string{"edit": {"edit", "view"}, "admin": {"admin", "edit", "view"}}[role]
	require.NotEmpty(t, parts, role)
	bindRole(t, user, ns, role)
	for _, p := range parts {
		bindRole(t, user, ns, "system:aggregate-to-"+p)
	}
	bindTenant(t, user, ns)
}

// TestRestoreRBACNeedsTheRightToBind attacks the restoreRBAC boundary as tenants bound to
// Kubernetes' built-in roles (with coffer-tenant, as aggregation into them would give): a restore
// re-creates the backup's Roles, RoleBindings and ServiceAccounts with the driver's rights, so the
// option is admitted only from a user who could create and bind them in the target namespace
// themselves. edit and admin cannot (admin lacks bind and escalate); a user who may also bind and
// escalate roles, and cluster-admin, can. One who holds that in tenant-a only cannot ask for it
// into tenant-c.
func TestRestoreRBACNeedsTheRightToBind(t *testing.T) {
	ctx := context.Background()
	a, c := namespace(t), namespace(t)
	// rbac-manager: bind and escalate, in namespace a only.
	binder := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{GenerateName: "binder-"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"roles", "clusterroles"}, Verbs: []string{"bind", "escalate"}}}}
	require.NoError(t, cl.Create(ctx, binder))
	t.Cleanup(func() { _ = cl.Delete(context.Background(), binder) })
	for _, u := range []struct{ user, role string }{{"rbac-edit", "edit"}, {"rbac-admin", "admin"}, {"rbac-manager", "admin"}} {
		bindBuiltin(t, u.user, a, u.role)
		bindBuiltin(t, u.user, c, "edit")
	}
	bindRole(t, "rbac-manager", a, binder.Name)
	edit, admin, manager := as(t, "rbac-edit"), as(t, "rbac-admin"), as(t, "rbac-manager")
	withRBAC := func(ns, target, value string) *backupsv1.RestoreJob {
		rj := restoreJob(ns, target)
		if rj.Spec.Options == nil {
			rj.Spec.Options = backupsv1.StringOptions(map[string]string{})
		}
		rj.Spec.SetOption(backupsv1.OptionRestoreRBAC, value)
		return rj
	}

	// Policies and bindings take effect asynchronously: wait until the attack is refused.
	var err error
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		rj := withRBAC(a, "", "true")
		if err = edit.Create(ctx, rj); err == nil {
			return false, cl.Delete(ctx, rj)
		}
		return true, nil
	}), "the restore-rbac policy never refused an edit user")
	assertRBACRefused(t, err, "rbac-edit", a)

	t.Run("admin may not either: it lacks bind and escalate", func(t *testing.T) {
		err := admin.Create(ctx, withRBAC(a, "", "true"))
		assertRBACRefused(t, err, "rbac-admin", a)
		assert.Contains(t, err.Error(), "may not escalate roles", "admin creates and patches Roles and RoleBindings, within its own rights")
	})
	t.Run("a user who may bind and escalate roles may", func(t *testing.T) {
		rj := withRBAC(a, "", "true")
		require.NoError(t, manager.Create(ctx, rj))
		assert.True(t, rj.Spec.IsTrue(backupsv1.OptionRestoreRBAC), "the admitted opt-in is recorded on the RestoreJob")
	})
	t.Run("cluster-admin may", func(t *testing.T) {
		require.NoError(t, cl.Create(ctx, withRBAC(a, "", "true")))
	})
	t.Run("not into a namespace where the user may not bind", func(t *testing.T) {
		assertRBACRefused(t, manager.Create(ctx, withRBAC(a, c, "true")), "rbac-manager", c)
		assertRBACRefused(t, edit.Create(ctx, withRBAC(a, c, "true")), "rbac-edit", c)
		require.NoError(t, edit.Create(ctx, restoreJob(a, c)), "without the option the restore into c is admitted as before")
	})
	t.Run("without the option, or with false, every tenant restores", func(t *testing.T) {
		require.NoError(t, edit.Create(ctx, restoreJob(a, "")))
		require.NoError(t, edit.Create(ctx, withRBAC(a, "", "false")))
		require.NoError(t, admin.Create(ctx, withRBAC(a, "", "false")))
	})
	t.Run("any other value is refused, even from cluster-admin", func(t *testing.T) {
		for _, v := range []string{"yes", "True", ""} {
			err := cl.Create(ctx, withRBAC(a, "", v))
			require.Error(t, err, "%q", v)
			assert.Contains(t, err.Error(), `spec.options.restoreRBAC must be "true" or "false"`, "%q", v)
		}
	})
	t.Run("the option cannot be added after creation", func(t *testing.T) {
		rj := restoreJob(a, "")
		require.NoError(t, edit.Create(ctx, rj))
		rj.Spec.Options = backupsv1.StringOptions(map[string]string{backupsv1.OptionRestoreRBAC: "true"})
		err := cl.Update(ctx, rj)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "spec is immutable")
	})
}

func assertRBACRefused(t *testing.T, err error, user, target string) {
	t.Helper()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ValidatingAdmissionPolicy", "refused by the admission policy")
	assert.Contains(t, err.Error(), "coffer-restore-rbac")
	assert.Contains(t, err.Error(), "user "+user+" may not ")
	assert.Contains(t, err.Error(), "in namespace "+target+", so this RestoreJob may not restore Roles, RoleBindings and ServiceAccounts there")
}
