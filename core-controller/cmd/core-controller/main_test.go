package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/core-controller/internal/claim"
	"github.com/coffer-backup/coffer/core-controller/internal/testenv"
	"github.com/coffer-backup/coffer/metricskit"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

func TestParseFlags(t *testing.T) {
	o, err := parseFlags(nil)
	require.NoError(t, err)
	assert.Equal(t, claim.DefaultTimeout, o.controllers.ClaimTimeout)
	assert.Equal(t, 8, o.controllers.PlanWorkers)
	assert.True(t, o.leaderElect)
	m := metricskit.Options(o.metricsAddr, o.metricsSecure, o.metricsCertDir)
	assert.Equal(t, ":8443", m.BindAddress)
	assert.True(t, m.SecureServing, "metrics are served over HTTPS by default")
	assert.NotNil(t, m.FilterProvider, "and only to tokens allowed to get /metrics")
	assert.Empty(t, m.CertDir, "with a self-signed certificate")

	o, err = parseFlags([]string{"--metrics-secure=false", "--metrics-bind-address=:8080", "--metrics-cert-dir=/certs"})
	require.NoError(t, err)
	m = metricskit.Options(o.metricsAddr, o.metricsSecure, o.metricsCertDir)
	assert.Equal(t, ":8080", m.BindAddress)
	assert.False(t, m.SecureServing)
	assert.Nil(t, m.FilterProvider, "plain HTTP has no token to check")
	assert.Equal(t, "/certs", m.CertDir)

	o, err = parseFlags([]string{"--driver-claim-timeout=90s", "--plan-workers=2", "--leader-elect=false", "--kubeconfig=/dev/null", "--zap-log-level=debug"})
	require.NoError(t, err)
	assert.Equal(t, 90*time.Second, o.controllers.ClaimTimeout)
	assert.Equal(t, 2, o.controllers.PlanWorkers)
	assert.False(t, o.leaderElect)

	for _, bad := range [][]string{{"--driver-claim-timeout=0"}, {"--plan-workers=0"}, {"--no-such-flag"}, {"stray"}} {
		_, err := parseFlags(bad)
		assert.Error(t, err, "%v", bad)
	}
}

// TestRunServesProbes starts the binary's manager against the API server: /healthz answers at
// once, /readyz once the caches have synced, and a cancelled context stops it cleanly. Meanwhile
// it fails an unclaimed RestoreJob, whose options and annotations, which its cache drops
// (cacheTransform), stay whole on the server.
func TestRunServesProbes(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	probes := l.Addr().String()
	require.NoError(t, l.Close())
	o, err := parseFlags([]string{"--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=" + probes, "--driver-claim-timeout=1s"})
	require.NoError(t, err)
	ns := env.Namespace(t)
	notes := strings.Repeat("x", 200<<10)
	rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: ns, Annotations: map[string]string{"tenant.example/notes": notes}},
		Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: "gone"}, Options: backupsv1.StringOptions(map[string]string{"inert": "true", "note": "kept"})}}
	require.NoError(t, env.Client.Create(context.Background(), rj))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, env.Config, o) }()
	for _, path := range []string{"/healthz", "/readyz"} {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			select {
			case err := <-done:
				t.Fatalf("run ended: %v", err)
			default:
			}
			resp, err := http.Get("http://" + probes + path)
			if err != nil {
				return false, nil
			}
			_ = resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		})
		require.NoError(t, err, "waiting for %s", path)
	}
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(rj), rj)
		return err == nil && rj.Status.Phase == backupsv1.RestoreJobFailed, err
	}), "core fails the unclaimed RestoreJob")
	require.NotNil(t, rj.Spec.Options)
	assert.JSONEq(t, `{"inert": "true", "note": "kept"}`, string(rj.Spec.Options.Raw), "core's status patch left the options alone")
	assert.Equal(t, notes, rj.Annotations["tenant.example/notes"], "and the annotation")
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("run did not stop")
	}
}

// TestCacheHoldsWhatCoreReads: core's cache holds RestoreJobs without their options and every
// object without managedFields and the annotations core does not read (a tenant's 200 KiB
// annotation), while the scheduled time of a BackupJob is kept. TestRunServesProbes checks that
// core's writes to trimmed objects leave what the cache dropped intact on the server.
func TestCacheHoldsWhatCoreReads(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := env.Namespace(t)
	big := strings.Repeat("x", 200<<10)
	rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: ns, Annotations: map[string]string{"tenant.example/notes": big}},
		Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: "gone"}, Options: backupsv1.StringOptions(map[string]string{"inert": "true", "note": "kept"})}}
	require.NoError(t, env.Client.Create(ctx, rj))
	bj := &backupsv1.BackupJob{ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: ns,
		Annotations: map[string]string{backupsv1.AnnotationScheduledTime: "2026-04-29T02:00:00Z", "tenant.example/notes": big}},
		Spec: backupsv1.BackupJobSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "VirtualMachine", Name: "vm"}, BackupClassName: "none"}}
	require.NoError(t, env.Client.Create(ctx, bj))

	c, err := cache.New(env.Config, cache.Options{Scheme: env.Client.Scheme(), DefaultTransform: cacheTransform()})
	require.NoError(t, err)
	go func() { _ = c.Start(ctx) }()
	require.True(t, c.WaitForCacheSync(ctx))
	cachedRJ, cachedBJ := &backupsv1.RestoreJob{}, &backupsv1.BackupJob{}
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(rj), cachedRJ))
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(bj), cachedBJ))
	assert.Nil(t, cachedRJ.Spec.Options, "core never reads options")
	assert.Empty(t, cachedRJ.Annotations)
	assert.Empty(t, cachedRJ.ManagedFields)
	assert.Equal(t, "gone", cachedRJ.Spec.BackupRef.Name)
	assert.Equal(t, map[string]string{backupsv1.AnnotationScheduledTime: "2026-04-29T02:00:00Z"}, cachedBJ.Annotations)

	// Of a Backup, core holds what retention and the unclaimed-restore message read: not the
	// driver's labels, metadata and record (underlyingResources), not the artifact, no message.
	group := "velerodriver.backups.cozystack.io"
	taken := metav1.NewTime(time.Now().Truncate(time.Second))
	b := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: ns,
		Labels:      map[string]string{backupsv1.LabelImported: "true", backupsv1.LabelManagedBy: "driver", backupsv1.LabelPlan: "nightly"},
		Annotations: map[string]string{backupsv1.AnnotationAdopted: "true", "tenant.example/notes": big}},
		Spec: backupsv1.BackupSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "VirtualMachine", Name: "vm"},
			PlanRef:     &corev1.LocalObjectReference{Name: "nightly"},
			StrategyRef: corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "VeleroBackupStrategy", Name: "s"}, TakenAt: taken,
			DriverMetadata: map[string]string{"velero.io/backup": "b"}}}
	require.NoError(t, env.Client.Create(ctx, b))
	b.Status = backupsv1.BackupStatus{Phase: backupsv1.BackupReady,
		Artifact:            &backupsv1.BackupArtifact{URI: "s3://bucket/b.tar", SizeBytes: 42},
		UnderlyingResources: &runtime.RawExtension{Raw: []byte(`{"apiVersion":"apps.cozystack.io/v1alpha1","kind":"VMInstance","disks":["` + big + `"]}`)},
		Verification: &backupsv1.BackupVerification{Checksum: &backupsv1.VerificationVerdict{Result: backupsv1.VerificationFailed, Time: taken,
			Message: "checksum differs", Failures: 2, ResultRef: &backupsv1.VerificationResultRef{Namespace: "ugallu-system", Name: "r"}}},
		Conditions: []metav1.Condition{{Type: backupsv1.ConditionVerified, Status: metav1.ConditionFalse, Reason: "ChecksumMismatch",
			Message: strings.Repeat("m", 1000), LastTransitionTime: taken}}}
	require.NoError(t, env.Client.Status().Update(ctx, b))
	cachedB := &backupsv1.Backup{}
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return c.Get(ctx, client.ObjectKeyFromObject(b), cachedB) == nil && cachedB.ResourceVersion == b.ResourceVersion, nil
	}))
	assert.Equal(t, map[string]string{backupsv1.LabelImported: "true"}, cachedB.Labels)
	assert.Equal(t, map[string]string{backupsv1.AnnotationAdopted: "true"}, cachedB.Annotations)
	assert.True(t, cachedB.Imported() && cachedB.Adopted() && !cachedB.ReadOnly())
	assert.Equal(t, b.Spec.ApplicationRef, cachedB.Spec.ApplicationRef)
	assert.Equal(t, b.Spec.PlanRef, cachedB.Spec.PlanRef)
	assert.Equal(t, b.Spec.StrategyRef, cachedB.Spec.StrategyRef)
	assert.True(t, taken.Equal(&cachedB.Spec.TakenAt))
	assert.Nil(t, cachedB.Spec.DriverMetadata)
	assert.Nil(t, cachedB.Status.Artifact)
	assert.Nil(t, cachedB.Status.UnderlyingResources)
	assert.Equal(t, backupsv1.BackupReady, cachedB.Status.Phase)
	if assert.Len(t, cachedB.Status.Conditions, 1) {
		got := cachedB.Status.Conditions[0]
		assert.Equal(t, []string{backupsv1.ConditionVerified, "False", "ChecksumMismatch", ""}, []string{got.Type, string(got.Status), got.Reason, got.Message})
	}
	if assert.NotNil(t, cachedB.Status.Verification) && assert.NotNil(t, cachedB.Status.Verification.Checksum) {
		v := cachedB.Status.Verification.Checksum
		assert.Equal(t, backupsv1.VerificationFailed, v.Result)
		assert.Equal(t, int32(2), v.Failures)
		assert.Empty(t, v.Message)
		assert.Nil(t, v.ResultRef)
	}
	assert.True(t, cachedB.VerifyFailureConfirmed(), "retention reads the verdicts as the server holds them")
	stored := &backupsv1.Backup{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(b), stored))
	assert.JSONEq(t, string(b.Status.UnderlyingResources.Raw), string(stored.Status.UnderlyingResources.Raw), "the API server keeps it whole")
	assert.Equal(t, b.Labels, stored.Labels)
	assert.Equal(t, strings.Repeat("m", 1000), stored.Status.Conditions[0].Message)
}
