package admission

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// labelledNamespace creates a namespace with labels.
func labelledNamespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "admission-", Labels: labels}}
	require.NoError(t, cl.Create(context.Background(), ns))
	return ns.Name
}

func classWithSelector(t *testing.T, name string, sel *metav1.LabelSelector) {
	t.Helper()
	c := &backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: backupsv1.BackupClassSpec{
		NamespaceSelector: sel,
		Strategies: []backupsv1.BackupClassStrategy{{Application: backupsv1.ApplicationSelector{Kind: "Shop"},
			StrategyRef: corev1.TypedLocalObjectReference{APIGroup: classGroup("velerodriver.backups.cozystack.io"), Kind: "VeleroBackupStrategy", Name: "x"}}}}}
	require.NoError(t, cl.Create(context.Background(), c))
	t.Cleanup(func() { _ = cl.Delete(context.Background(), c) })
}

func classGroup(g string) *string { return &g }

func classPlan(ns, class string) *backupsv1.Plan {
	return &backupsv1.Plan{ObjectMeta: metav1.ObjectMeta{GenerateName: "plan-", Namespace: ns}, Spec: backupsv1.PlanSpec{
		ApplicationRef:  corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"},
		BackupClassName: class,
		Schedule:        backupsv1.PlanSchedule{Type: backupsv1.PlanScheduleTypeCron, Cron: "0 2 * * *"}}}
}

func classJob(ns, class string) *backupsv1.BackupJob {
	return &backupsv1.BackupJob{ObjectMeta: metav1.ObjectMeta{GenerateName: "job-", Namespace: ns}, Spec: backupsv1.BackupJobSpec{
		ApplicationRef:  corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"},
		BackupClassName: class}}
}

// TestBackupClassNamespaceSelector proves the shipped policy coffer-backupclass-namespaces as a
// tenant holding the shipped coffer-tenant role: a class whose namespaceSelector does not select the
// namespace is refused in Plans and BackupJobs; a class without selector is admitted everywhere.
func TestBackupClassNamespaceSelector(t *testing.T) {
	ctx := context.Background()
	gold := labelledNamespace(t, map[string]string{"coffer.test/tier": "gold", "coffer.test/team": "a"})
	plain := labelledNamespace(t, nil)
	quarantined := labelledNamespace(t, map[string]string{"coffer.test/tier": "gold", "coffer.test/team": "a", "coffer.test/quarantine": "true"})
	for _, ns := range []string{gold, plain, quarantined} {
		bindTenant(t, "class-tenant", ns)
	}
	tenant := as(t, "class-tenant")

	restricted, open, exprs := "restricted-"+plain, "open-"+plain, "exprs-"+plain
	classWithSelector(t, restricted, &metav1.LabelSelector{MatchLabels: map[string]string{"coffer.test/tier": "gold"}})
	classWithSelector(t, open, nil)
	classWithSelector(t, exprs, &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "coffer.test/tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"silver", "gold"}},
		{Key: "coffer.test/team", Operator: metav1.LabelSelectorOpExists},
		{Key: "coffer.test/quarantine", Operator: metav1.LabelSelectorOpDoesNotExist},
		{Key: "coffer.test/team", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"b"}},
	}})

	// Bindings and new parameters take effect asynchronously: wait until the attack is refused.
	var err error
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p := classPlan(plain, restricted)
		if err = tenant.Create(ctx, p); err == nil {
			return false, cl.Delete(ctx, p)
		}
		return true, nil
	}), "the policy never refused a Plan naming the restricted class")
	assertClassRefused(t, err, restricted, plain)

	t.Run("a BackupJob naming the restricted class is refused outside its namespaces", func(t *testing.T) {
		assertClassRefused(t, tenant.Create(ctx, classJob(plain, restricted)), restricted, plain)
	})
	t.Run("the restricted class is admitted in a namespace it selects", func(t *testing.T) {
		require.NoError(t, tenant.Create(ctx, classPlan(gold, restricted)))
		require.NoError(t, tenant.Create(ctx, classJob(gold, restricted)))
	})
	t.Run("a class without selector admits every namespace", func(t *testing.T) {
		for _, ns := range []string{gold, plain} {
			require.NoError(t, tenant.Create(ctx, classPlan(ns, open)))
			require.NoError(t, tenant.Create(ctx, classJob(ns, open)))
		}
	})
	t.Run("matchExpressions: In, Exists, DoesNotExist, NotIn", func(t *testing.T) {
		require.NoError(t, tenant.Create(ctx, classPlan(gold, exprs)))
		assertClassRefused(t, tenant.Create(ctx, classPlan(plain, exprs)), exprs, plain)
		assertClassRefused(t, tenant.Create(ctx, classPlan(quarantined, exprs)), exprs, quarantined)
	})
	t.Run("a Plan cannot be moved to the restricted class", func(t *testing.T) {
		p := classPlan(plain, open)
		require.NoError(t, tenant.Create(ctx, p))
		p.Spec.BackupClassName = restricted
		assertClassRefused(t, tenant.Update(ctx, p), restricted, plain)
	})
	t.Run("a name that matches no class is left to the controllers", func(t *testing.T) {
		require.NoError(t, tenant.Create(ctx, classPlan(plain, "no-such-class-"+plain)))
	})
}

func assertClassRefused(t *testing.T, err error, class, ns string) {
	t.Helper()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ValidatingAdmissionPolicy", "refused by the admission policy")
	assert.Contains(t, err.Error(), "BackupClass "+class+" may not be used in namespace "+ns)
}
