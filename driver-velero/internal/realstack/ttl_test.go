package realstack

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/internal/driver"
	"github.com/coffer-backup/coffer/driver-velero/internal/names"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

// TestTTLShorterThanRetentionIsRefused: a BackupJob whose Plan's retention keeps Backups longer
// than the strategy's Velero ttl (or Velero's default ttl, when the template sets none) fails
// TTLShorterThanRetention before anything is created, naming both durations and what to change
// (contract BK-9). A Plan within the ttl, a retention no age bounds (keepLast alone) and a Plan that
// is gone proceed. The namespaces are not served by the running manager nor by the Velero server:
// the test calls the reconciler and looks at what it created.
func TestTTLShorterThanRetentionIsRefused(t *testing.T) {
	ctx := context.Background()
	suffix := time.Now().Format("150405")
	ns, veleroNS := "ttl-"+suffix, "ttl-velero-"+suffix
	for _, n := range []string{ns, veleroNS} {
		require.NoError(t, cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}))
	}
	shop(t, ns, "shop")
	strategy := func(name, ttl string, floor ...*backupsv1.RetentionFloor) {
		tmpl := `{"includedNamespaces": ["{{ .Application.metadata.namespace }}"]` + ttl + `}`
		require.NoError(t, cl.Create(ctx, &veleroapi.VeleroBackupStrategy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: veleroapi.VeleroBackupStrategySpec{
			VeleroNamespace: veleroNS,
			BackupTemplate:  veleroapi.VeleroTemplate{Spec: k8sruntime.RawExtension{Raw: []byte(tmpl)}},
		}}))
		class := &backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: backupsv1.BackupClassSpec{Strategies: []backupsv1.BackupClassStrategy{
			{Application: backupsv1.ApplicationSelector{Kind: "Shop"}, Parameters: map[string]string{names.ParamStorageLocation: velerostack.BSLName},
				StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr(veleroapi.Group), Kind: veleroapi.Kind, Name: name}},
		}}}
		if len(floor) > 0 {
			class.Spec.RetentionFloor = floor[0]
		}
		require.NoError(t, cl.Create(ctx, class))
	}
	month, defaults := ns+"-month", ns+"-default"
	strategy(month, `, "ttl": "720h0m0s"`) // Velero keeps backups 30 days
	strategy(defaults, "")                 // Velero's default ttl, 720h
	// The same ttl under a class whose floor holds pruned Backups 20 more days, or keeps every
	// Backup for 40 days: the Plan's own retention fits the ttl, what the floor adds does not.
	delayed, aged := ns+"-delayed", ns+"-aged"
	strategy(delayed, `, "ttl": "720h0m0s"`, &backupsv1.RetentionFloor{DeletionDelay: &metav1.Duration{Duration: 480 * time.Hour}})
	strategy(aged, `, "ttl": "720h0m0s"`, &backupsv1.RetentionFloor{MinAge: &metav1.Duration{Duration: 960 * time.Hour}})
	plan := func(name, class string, r *backupsv1.RetentionPolicy) {
		require.NoError(t, cl.Create(ctx, &backupsv1.Plan{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: backupsv1.PlanSpec{
			ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"}, BackupClassName: class,
			Schedule: backupsv1.PlanSchedule{Cron: "0 2 * * *"}, Retention: r,
		}}))
	}
	n := func(v int32) *int32 { return &v }
	plan("half-year", month, &backupsv1.RetentionPolicy{KeepDaily: n(7), KeepMonthly: n(6), MaxAge: &metav1.Duration{Duration: 4380 * time.Hour}})
	plan("monthly", month, &backupsv1.RetentionPolicy{KeepMonthly: n(2)})
	plan("default-ttl", defaults, &backupsv1.RetentionPolicy{KeepWeekly: n(8)})
	plan("two-weeks", month, &backupsv1.RetentionPolicy{KeepLast: n(3), KeepDaily: n(14), MaxAge: &metav1.Duration{Duration: 14 * 24 * time.Hour}})
	plan("two-weeks-delayed", delayed, &backupsv1.RetentionPolicy{MaxAge: &metav1.Duration{Duration: 14 * 24 * time.Hour}})
	plan("two-weeks-aged", aged, &backupsv1.RetentionPolicy{MaxAge: &metav1.Duration{Duration: 14 * 24 * time.Hour}})
	plan("counted", month, &backupsv1.RetentionPolicy{KeepLast: n(50)})
	plan("everything", month, nil)

	rec := events.NewFakeRecorder(100)
	backups := newKit(cl, rec).BackupJobReconciler()
	// run creates a BackupJob of planName (which may not exist) with class, reconciles it once and
	// returns it with its Velero Backup, nil when none was created.
	run := func(t *testing.T, name, planName, class string) (*backupsv1.BackupJob, *velerov1.Backup) {
		t.Helper()
		j := backupJob(ns, name, class, "Shop")
		j.Spec.PlanRef = &corev1.LocalObjectReference{Name: planName}
		require.NoError(t, cl.Create(ctx, j))
		_, err := backups.Reconcile(ctx, requestFor(j))
		require.NoError(t, err)
		require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(j), j))
		vb := &velerov1.Backup{}
		err = cl.Get(ctx, client.ObjectKey{Namespace: veleroNS, Name: names.VeleroBackup(j)}, vb)
		if apierrors.IsNotFound(err) {
			return j, nil
		}
		require.NoError(t, err)
		return j, vb
	}
	refused := func(t *testing.T, j *backupsv1.BackupJob, vb *velerov1.Backup, want ...string) {
		t.Helper()
		require.Equal(t, backupsv1.BackupJobFailed, j.Status.Phase, j.Status.Message)
		assert.Equal(t, backupsv1.ReasonTTLShorterThanRetention, meta.FindStatusCondition(j.Status.Conditions, backupsv1.ConditionReady).Reason)
		for _, w := range want {
			assert.Contains(t, j.Status.Message, w)
		}
		assert.Nil(t, vb, "no Velero Backup is created")
		list := &velerov1.BackupList{}
		require.NoError(t, cl.List(ctx, list, client.MatchingLabels{backupsv1.LabelBackupJobUID: string(j.UID)}))
		assert.Empty(t, list.Items, "no Velero Backup anywhere")
		assert.True(t, sawEvent(rec, backupsv1.ReasonTTLShorterThanRetention), "a Warning event says so")
	}
	proceeds := func(t *testing.T, j *backupsv1.BackupJob, vb *velerov1.Backup) {
		t.Helper()
		require.Equal(t, backupsv1.BackupJobRunning, j.Status.Phase, j.Status.Message)
		require.NotNil(t, vb, "the Velero Backup is created")
	}

	t.Run("maxAge longer than the ttl", func(t *testing.T) {
		j, vb := run(t, "half-year", "half-year", month)
		refused(t, j, vb, "VeleroBackupStrategy "+month+" keeps Velero backups for 720h0m0s (its backupTemplate's ttl)",
			"Plan half-year keeps Backups up to 4380h0m0s (retention maxAge 4380h0m0s)",
			"Set the strategy's backupTemplate.spec.ttl to at least 4380h0m0s, or shorten the Plan's retention (maxAge) to at most 720h0m0s")
	})
	t.Run("keep rules longer than the ttl", func(t *testing.T) {
		j, vb := run(t, "monthly", "monthly", month)
		refused(t, j, vb, fmt.Sprintf("up to %s (retention keepMonthly: 2 (2 × 31 days))", 62*24*time.Hour))
	})
	t.Run("Velero's default ttl when the template sets none", func(t *testing.T) {
		j, vb := run(t, "default-ttl", "default-ttl", defaults)
		refused(t, j, vb, "720h0m0s (Velero's default ttl, as its backupTemplate sets none)", "keepWeekly: 8 (8 weeks)")
	})
	t.Run("a Plan within the ttl", func(t *testing.T) {
		j, vb := run(t, "two-weeks", "two-weeks", month)
		proceeds(t, j, vb)
		assert.Equal(t, 720*time.Hour, vb.Spec.TTL.Duration)
		// Velero's own waits end by the run's deadline (the strategy sets none: an hour), not
		// Velero's default of 4h for item operations.
		for name, d := range map[string]time.Duration{"itemOperationTimeout": vb.Spec.ItemOperationTimeout.Duration, "csiSnapshotTimeout": vb.Spec.CSISnapshotTimeout.Duration} {
			assert.Greater(t, d, 50*time.Minute, name)
			assert.LessOrEqual(t, d, driver.DefaultDeadline, name)
		}
	})
	t.Run("the class's deletionDelay counts", func(t *testing.T) {
		j, vb := run(t, "two-weeks-delayed", "two-weeks-delayed", delayed)
		refused(t, j, vb, "Plan two-weeks-delayed keeps Backups up to 336h0m0s (retention maxAge 336h0m0s) and BackupClass "+delayed+" holds a pruned Backup 480h0m0s more (deletionDelay)",
			"Set the strategy's backupTemplate.spec.ttl to at least 816h0m0s")
	})
	t.Run("the class's minAge counts", func(t *testing.T) {
		j, vb := run(t, "two-weeks-aged", "two-weeks-aged", aged)
		refused(t, j, vb, "keeps Backups up to 960h0m0s (retention the class's minAge 960h0m0s)", "ttl to at least 960h0m0s")
	})
	t.Run("keepLast alone is not bounded by age", func(t *testing.T) {
		j, vb := run(t, "counted", "counted", month)
		proceeds(t, j, vb)
	})
	t.Run("a Plan without retention", func(t *testing.T) {
		j, vb := run(t, "everything", "everything", month)
		proceeds(t, j, vb)
	})
	t.Run("a Plan that is gone is core's business", func(t *testing.T) {
		j, vb := run(t, "orphan", "deleted-plan", month)
		proceeds(t, j, vb)
	})
}
