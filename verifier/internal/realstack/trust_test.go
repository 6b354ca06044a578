package realstack

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
	"github.com/coffer-backup/coffer/verifier/internal/velerocheck"
)

// trusting gives the harness's Velero backend the trust store the shipped Deployment configures:
// records in the verifier's own namespace, written under the verifier's shipped RBAC.
func trusting(t *testing.T, h *harness) *velerocheck.TrustStore {
	sa := asVerifier(t)
	ts := &velerocheck.TrustStore{Reader: sa, Writer: sa, Namespace: verifierSA.Namespace}
	h.velero().Trust = ts
	return ts
}

func trustRecord(t *testing.T, vb *velerov1.Backup) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{}
	require.NoError(t, cl.Get(context.Background(), client.ObjectKey{Namespace: verifierSA.Namespace,
		Name: velerocheck.TrustRecordName(vb.Namespace, vb.Name)}, cm))
	return cm
}

func terminalEvent(t *testing.T, run *securityv1.BackupVerifyRun, eventType string) securityv1.SecurityEvent {
	t.Helper()
	ev := securityEvents(t, run)[eventType]
	require.Len(t, ev, 1, "one %s event of run %s", eventType, run.Name)
	return ev[0]
}

// A Velero backup Coffer did not make carries no checksum. Its first checksum-only run compares
// nothing and says so (Audit, not Compliance); every later run compares with that first checksum,
// so a backup changed in storage since is a critical mismatch, as for a backup Coffer made.
func TestChecksumTrustedOnFirstUse(t *testing.T) {
	ns := uniq("tofu")
	namespaceWithData(t, ns)
	vb := veleroBackup(t, ns, false, ns)

	h := newHarness(t)
	trusting(t, h)
	first := veleroRun(t, "tofu-1", vb.Name, securityv1.ModeChecksumOnly, "")
	h.finish(first)
	assert.Equal(t, securityv1.RunSucceeded, first.Status.Phase, first.Status.Message)
	res := result(t, first)
	assert.Equal(t, []string{securityv1.CodeChecksumFirstUse}, codes(res.Spec.Findings))
	assert.Equal(t, securityv1.SeverityLow, res.Status.WorstSeverity)
	assert.Equal(t, securityv1.ChecksumNone, res.Spec.ChecksumBasis, "nothing was compared")
	assert.Empty(t, res.Spec.RecordedChecksum)
	assert.Contains(t, res.Spec.Findings[0].Message, "compared nothing")
	done := terminalEvent(t, first, securityv1.EventBackupVerifyCompleted)
	assert.Equal(t, securityv1.ClassAudit, done.Spec.Class, "a run that compared nothing proves no compliance")
	assert.Equal(t, string(securityv1.ChecksumNone), done.Spec.Signals["checksum.basis"])
	rec := trustRecord(t, vb)
	assert.Equal(t, res.Spec.ComputedChecksum, rec.Data["checksum"])
	assert.Equal(t, string(first.UID), rec.Data["runUID"])

	second := veleroRun(t, "tofu-2", vb.Name, securityv1.ModeChecksumOnly, "")
	h.finish(second)
	res2 := result(t, second)
	assert.Equal(t, []string{securityv1.CodeChecksumMatch}, codes(res2.Spec.Findings))
	assert.Equal(t, securityv1.ChecksumFirstVerification, res2.Spec.ChecksumBasis)
	assert.Equal(t, res.Spec.ComputedChecksum, res2.Spec.RecordedChecksum, "compared with the first run's checksum")
	assert.Contains(t, res2.Spec.Findings[0].Message, "trusted on first use")
	assert.Equal(t, securityv1.ClassCompliance, terminalEvent(t, second, securityv1.EventBackupVerifyCompleted).Spec.Class)

	// The tarball changed in storage after the first verification.
	key := velerostack.ObjectKey(vb.Name)
	orig := bucketObject(t, key)
	flipped := append([]byte(nil), orig...)
	flipped[len(flipped)/3] ^= 0x01
	putBucketObject(t, key, flipped)
	t.Cleanup(func() { putBucketObject(t, key, orig) })
	third := veleroRun(t, "tofu-3", vb.Name, securityv1.ModeChecksumOnly, "")
	h.finish(third)
	res3 := result(t, third)
	assert.Equal(t, []string{securityv1.CodeChecksumMismatch}, codes(res3.Spec.Findings))
	assert.Equal(t, securityv1.SeverityCritical, res3.Status.WorstSeverity)
	assert.Equal(t, securityv1.ChecksumFirstVerification, res3.Spec.ChecksumBasis)
	assert.Equal(t, res.Spec.ComputedChecksum, res3.Spec.RecordedChecksum)
	assert.Equal(t, securityv1.ClassDetection, terminalEvent(t, third, securityv1.EventBackupVerifyMismatch).Spec.Class)
	assert.Equal(t, res.Spec.ComputedChecksum, trustRecord(t, vb).Data["checksum"], "a mismatch never replaces the trusted checksum")

	// Without a trust store (--checksum-trust-namespace unset) nothing is kept and nothing compared.
	putBucketObject(t, key, orig)
	h2 := newHarness(t)
	plain := veleroRun(t, "tofu-off", vb.Name, securityv1.ModeChecksumOnly, "")
	h2.finish(plain)
	res4 := result(t, plain)
	assert.Equal(t, []string{securityv1.CodeChecksumNotRecorded}, codes(res4.Spec.Findings))
	assert.Equal(t, securityv1.ChecksumNone, res4.Spec.ChecksumBasis)
	assert.Equal(t, securityv1.ClassAudit, terminalEvent(t, plain, securityv1.EventBackupVerifyCompleted).Spec.Class)
}

// The crash window: a run that made the record and then lost its pass (its status never written)
// is still the first use when it runs again, not a comparison with itself; two first runs at once
// make one record, and exactly one of them reports the first use.
func TestChecksumTrustExactlyOnce(t *testing.T) {
	ns := uniq("tofu-once")
	namespaceWithData(t, ns)
	vb := veleroBackup(t, ns, false, ns)
	h := newHarness(t)
	trusting(t, h)
	ctx := context.Background()

	run := veleroRun(t, "tofu-crash", vb.Name, securityv1.ModeChecksumOnly, "")
	out, err := h.velero().Checksum(ctx, run) // the pass that crashed after making the record
	require.NoError(t, err)
	require.Equal(t, securityv1.ChecksumNone, out.ChecksumBasis)
	h.finish(run) // the run, reconciled again after the restart
	res := result(t, run)
	assert.Equal(t, []string{securityv1.CodeChecksumFirstUse}, codes(res.Spec.Findings), "its own record is no earlier verification")
	assert.Equal(t, securityv1.ChecksumNone, res.Spec.ChecksumBasis)

	vb2 := veleroBackup(t, uniq("tofu-race"), false, ns)
	runs := []*securityv1.BackupVerifyRun{
		veleroRun(t, "tofu-race-a", vb2.Name, securityv1.ModeChecksumOnly, ""),
		veleroRun(t, "tofu-race-b", vb2.Name, securityv1.ModeChecksumOnly, ""),
	}
	bases := make([]securityv1.ChecksumBasis, len(runs))
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := h.velero().Checksum(ctx, r)
			assert.NoError(t, err)
			bases[i] = out.ChecksumBasis
		}()
	}
	wg.Wait()
	assert.ElementsMatch(t, []securityv1.ChecksumBasis{securityv1.ChecksumNone, securityv1.ChecksumFirstVerification}, bases,
		"one run trusts on first use, the other compares with it")
}

// A new backup under the name of one that is gone is trusted afresh, saying so, not compared with
// its predecessor's checksum; records of gone backups are pruned past the TTL, and only those.
func TestChecksumTrustOfARenewedNameAndPrune(t *testing.T) {
	ns := uniq("tofu-renew")
	namespaceWithData(t, ns)
	vb := veleroBackup(t, ns, false, ns)
	h := newHarness(t)
	ts := trusting(t, h)
	ctx := context.Background()
	h.finish(veleroRun(t, "tofu-renew-1", vb.Name, securityv1.ModeChecksumOnly, ""))

	// The record as an earlier backup of the same name left it.
	rec := trustRecord(t, vb)
	rec.Data["completionTimestamp"] = "2020-01-01T00:00:00Z"
	rec.Data["checksum"] = "sha256:00"
	require.NoError(t, cl.Update(ctx, rec))
	run := veleroRun(t, "tofu-renew-2", vb.Name, securityv1.ModeChecksumOnly, "")
	h.finish(run)
	res := result(t, run)
	assert.Equal(t, []string{securityv1.CodeChecksumFirstUse}, codes(res.Spec.Findings), "no mismatch with another backup's checksum")
	assert.Contains(t, res.Spec.Findings[0].Message, "earlier backup of this name (completed 2020-01-01T00:00:00Z")
	assert.Equal(t, res.Spec.ComputedChecksum, trustRecord(t, vb).Data["checksum"], "the record now holds this backup's")

	// A record whose backup is gone, beside the live one.
	gone := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: verifierSA.Namespace, Name: velerocheck.TrustRecordName(velerostack.Namespace, "long-gone"),
		Labels: map[string]string{securityv1.LabelChecksumTrust: "true"}},
		Data: map[string]string{"backup": velerostack.Namespace + "/long-gone", "checksum": "sha256:00"}}
	require.NoError(t, cl.Create(ctx, gone))
	young := &velerocheck.TrustPruner{Store: ts, Clock: clocktesting.NewFakeClock(time.Now()), TTL: time.Hour}
	n, err := young.Prune(ctx)
	require.NoError(t, err)
	assert.Zero(t, n, "nothing is pruned before its TTL")
	old := &velerocheck.TrustPruner{Store: ts, Clock: clocktesting.NewFakeClock(time.Now().Add(2 * time.Hour)), TTL: time.Hour}
	n, err = old.Prune(ctx)
	require.NoError(t, err)
	assert.Positive(t, n)
	assert.True(t, apierrors.IsNotFound(cl.Get(ctx, client.ObjectKeyFromObject(gone), &corev1.ConfigMap{})), "the gone backup's record is deleted")
	trustRecord(t, vb) // the live backup's record stays
}

// A tenant can neither plant nor change a trust record: the records live in the verifier's own
// namespace, and the store reads no other.
func TestTenantCannotPlantATrustRecord(t *testing.T) {
	ctx := context.Background()
	ns := uniq("tofu-tenant")
	namespaceWithData(t, ns)
	vb := veleroBackup(t, ns, false, ns)
	require.NoError(t, cl.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant-admin", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "mallory"}}}))
	cfg := rest.CopyConfig(lc.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "mallory", Groups: []string{"system:authenticated"}}
	tenant, err := client.New(cfg, client.Options{Scheme: cluster.Scheme})
	require.NoError(t, err)

	forged := func(namespace string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: velerocheck.TrustRecordName(vb.Namespace, vb.Name),
			Labels: map[string]string{securityv1.LabelChecksumTrust: "true"}},
			Data: map[string]string{"backup": vb.Namespace + "/" + vb.Name, "completionTimestamp": vb.Status.CompletionTimestamp.UTC().Format(time.RFC3339),
				"checksum": "sha256:0000000000000000000000000000000000000000000000000000000000000000"}}
	}
	err = tenant.Create(ctx, forged(verifierSA.Namespace))
	assert.True(t, apierrors.IsForbidden(err), "a tenant may not write the verifier's namespace: %v", err)
	require.NoError(t, tenant.Create(ctx, forged(ns)), "in her own namespace she may")

	h := newHarness(t)
	trusting(t, h)
	run := veleroRun(t, "tofu-tenant", vb.Name, securityv1.ModeChecksumOnly, "")
	h.finish(run)
	assert.Equal(t, []string{securityv1.CodeChecksumFirstUse}, codes(result(t, run).Spec.Findings), "her ConfigMap is no record")
}
