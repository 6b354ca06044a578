package runs

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	velerov1 "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
)

func plan(name string) *backupsv1.Plan {
	return &backupsv1.Plan{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: "plan-uid"},
		Spec: backupsv1.PlanSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"},
			BackupClassName: "golden", Schedule: backupsv1.PlanSchedule{Cron: "0 2 * * *"}},
	}
}

func TestPlanBackupJob(t *testing.T) {
	j := PlanBackupJob(plan("shop-nightly"), "x7k2p")
	assert.Equal(t, "shop-nightly-manual-x7k2p", j.Name)
	assert.Equal(t, "shop", j.Namespace)
	assert.Equal(t, map[string]string{backupsv1.LabelPlan: "shop-nightly"}, j.Labels)
	assert.Empty(t, j.Annotations[backupsv1.AnnotationScheduledTime], "no tick: no scheduled time")
	require.Len(t, j.OwnerReferences, 1)
	ref := j.OwnerReferences[0]
	assert.Equal(t, metav1.OwnerReference{APIVersion: "backups.cozystack.io/v1alpha1", Kind: "Plan", Name: "shop-nightly",
		UID: "plan-uid", Controller: ptr.To(true)}, ref, "controlled by the Plan, without blocking its deletion")
	assert.Equal(t, backupsv1.BackupJobSpec{
		PlanRef:         &corev1.LocalObjectReference{Name: "shop-nightly"},
		ApplicationRef:  corev1.TypedLocalObjectReference{APIGroup: ptr.To("apps.cozystack.io"), Kind: "Shop", Name: "shop"},
		BackupClassName: "golden",
	}, j.Spec, "the spec a tick of the Plan gets (CORE-1)")
}

func TestPlanBackupJobLongName(t *testing.T) {
	long := strings.Repeat("p", 200)
	a, b := PlanBackupJob(plan(long), "aaaaa"), PlanBackupJob(plan(long+"q"), "aaaaa")
	for _, j := range []*backupsv1.BackupJob{a, b} {
		assert.LessOrEqual(t, len(j.Name), backupsv1.MaxGeneratedNameLength)
		assert.True(t, strings.HasSuffix(j.Name, "-aaaaa"), j.Name)
		assert.Empty(t, validation.IsDNS1123Subdomain(j.Name))
		assert.Empty(t, validation.IsValidLabelValue(j.Labels[backupsv1.LabelPlan]))
	}
	assert.NotEqual(t, a.Name, b.Name, "distinct Plans, distinct names")
}

func readyBackup() *backupsv1.Backup {
	return &backupsv1.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: "shop-nightly-29623800", Namespace: "shop"},
		Spec: backupsv1.BackupSpec{
			ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"},
			StrategyRef:    corev1.TypedLocalObjectReference{APIGroup: ptr.To(velerov1.Group), Kind: velerov1.Kind, Name: "shop-namespace"},
			DriverMetadata: map[string]string{MetaVeleroBackupName: "shop-shop-nightly-29623800-1a2b3c4d", MetaVeleroNamespace: "velero-x"},
		},
		Status: backupsv1.BackupStatus{Phase: backupsv1.BackupReady, Artifact: &backupsv1.BackupArtifact{URI: "s3://b/p"}},
	}
}

func TestRestoreJob(t *testing.T) {
	b := readyBackup()
	for _, tc := range []struct {
		name, target string
		options      map[string]string
	}{
		{"in place", "", nil},
		{"own namespace named", "shop", nil},
		{"elsewhere", "shop-copy", map[string]string{backupsv1.OptionTargetNamespace: "shop-copy"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rj := RestoreJob(b, tc.target, "x7k2p")
			assert.Equal(t, "shop-nightly-29623800-restore-x7k2p", rj.Name)
			assert.Equal(t, "shop", rj.Namespace)
			assert.Equal(t, corev1.LocalObjectReference{Name: b.Name}, rj.Spec.BackupRef)
			assert.Equal(t, backupsv1.StringOptions(tc.options), rj.Spec.Options)
			want := tc.target
			if want == "" {
				want = "shop"
			}
			assert.Equal(t, want, rj.TargetNamespace())
		})
	}
}

func TestCheckRestorable(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		name   string
		mutate func(*backupsv1.Backup)
		want   string
	}{
		{"ready", func(*backupsv1.Backup) {}, ""},
		{"pending", func(b *backupsv1.Backup) { b.Status = backupsv1.BackupStatus{} }, "is Pending, not Ready with an artifact"},
		{"failed", func(b *backupsv1.Backup) { b.Status.Phase = backupsv1.BackupFailed }, "is Failed, not Ready"},
		{"no artifact", func(b *backupsv1.Backup) { b.Status.Artifact = nil }, "is Ready, not Ready with an artifact"},
		{"artifact missing", func(b *backupsv1.Backup) {
			b.Status.Conditions = []metav1.Condition{{Type: backupsv1.ConditionArtifactAvailable, Status: metav1.ConditionFalse}}
		}, "artifact of Backup shop/shop-nightly-29623800 is missing"},
		{"deleting", func(b *backupsv1.Backup) { b.DeletionTimestamp = &now }, "is being deleted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := readyBackup()
			tc.mutate(b)
			err := CheckRestorable(b)
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, ErrNotRestorable)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

func TestVerifyRun(t *testing.T) {
	run, err := VerifyRun(readyBackup(), DefaultVerifyNamespace, false, "x7k2p")
	require.NoError(t, err)
	assert.Equal(t, "shop-shop-nightly-29623800-x7k2p", run.Name)
	assert.Equal(t, "ugallu-system", run.Namespace)
	assert.Equal(t, securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendVelero, Mode: securityv1.ModeChecksumOnly,
		BackupRef: securityv1.BackupRef{Name: "shop-shop-nightly-29623800-1a2b3c4d", Namespace: "velero-x"}}, run.Spec)

	run, err = VerifyRun(readyBackup(), "admins", true, "x7k2p")
	require.NoError(t, err)
	assert.Equal(t, "admins", run.Namespace)
	assert.Equal(t, securityv1.ModeFullRestore, run.Spec.Mode)
	assert.Equal(t, "shop-x7k2p-bvsandbox", run.Spec.SandboxNamespace)

	b := readyBackup()
	delete(b.Spec.DriverMetadata, MetaVeleroNamespace)
	run, err = VerifyRun(b, DefaultVerifyNamespace, false, "x7k2p")
	require.NoError(t, err)
	assert.Equal(t, "velero", run.Spec.BackupRef.Namespace, "Velero's default namespace")
}

func TestVerifyRunRefusesOtherDrivers(t *testing.T) {
	b := readyBackup()
	b.Spec.StrategyRef = corev1.TypedLocalObjectReference{APIGroup: ptr.To(jobv1.Group), Kind: jobv1.Kind, Name: "volume-tar"}
	_, err := VerifyRun(b, DefaultVerifyNamespace, false, "x7k2p")
	assert.ErrorIs(t, err, ErrNotVerifiable)
	assert.EqualError(t, err, "backup is not verifiable: Backup shop/shop-nightly-29623800 was made by a JobBackupStrategy "+
		"(jobdriver.backups.cozystack.io), and the verifier verifies Velero backups only (VeleroBackupStrategy)")

	b = readyBackup()
	b.Spec.DriverMetadata = nil
	_, err = VerifyRun(b, DefaultVerifyNamespace, false, "x7k2p")
	assert.ErrorIs(t, err, ErrNotVerifiable)
	assert.ErrorContains(t, err, "names no Velero backup")
}

// The sandbox is a namespace name the sandbox admission policy admits, however long the Backup's
// namespace.
func TestSandboxName(t *testing.T) {
	for _, ns := range []string{"a", "shop", strings.Repeat("n", 63), strings.Repeat("n", 52) + "-" + strings.Repeat("m", 10)} {
		name := SandboxName(ns, "x7k2p")
		assert.Empty(t, validation.IsDNS1123Label(name), name)
		assert.True(t, strings.HasSuffix(name, "-x7k2p"+securityv1.SandboxSuffix), name)
	}
	assert.NotEqual(t, SandboxName("shop", "aaaaa"), SandboxName("shop", "bbbbb"), "one sandbox per run")
}
