// Tests of the verdict a coffer run writes on its Backup (contract BK-10): VerifiedCondition as a
// table, and recordVerdict on a real kube-apiserver with the Backup CRD.
package verifyrun

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/verifier/internal/policy"
)

var (
	cl         client.WithWatch
	restConfig *rest.Config
	// v0 is the tests' time: whole seconds, as the API server keeps them.
	v0 = time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
)

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	c, err := cluster.Start(context.Background(), cluster.Options{CRDDirectoryPaths: []string{
		"../../../deploy/core-controller/crd", "../../../deploy/verifier/crd", "../../../deploy/verifier/securityevents"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the API server:", err)
		return 1
	}
	defer func() { _ = c.Stop() }()
	restConfig = c.Config
	if cl, err = client.NewWithWatch(c.Config, client.Options{Scheme: cluster.Scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

func TestVerifiedCondition(t *testing.T) {
	at := metav1.NewTime(v0)
	verdict := func(r backupsv1.VerificationResult, name, msg string) *backupsv1.VerificationVerdict {
		return &backupsv1.VerificationVerdict{Result: r, Time: at, Message: msg,
			ResultRef: &backupsv1.VerificationResultRef{Namespace: "shop", Name: name}}
	}
	pass, fail := backupsv1.VerificationPassed, backupsv1.VerificationFailed
	for _, tt := range []struct {
		name       string
		v          backupsv1.BackupVerification
		wantStatus metav1.ConditionStatus
		wantReason string
		wantMsg    string
	}{{
		name:       "checksum passed",
		v:          backupsv1.BackupVerification{Checksum: verdict(pass, "r1", "")},
		wantStatus: metav1.ConditionTrue, wantReason: backupsv1.ReasonChecksumVerified,
		wantMsg: "checksum-only: Passed at 2031-03-04T05:06:07Z (BackupVerifyResult shop/r1)",
	}, {
		name:       "checksum failed",
		v:          backupsv1.BackupVerification{Checksum: verdict(fail, "r1", "sha256 differs")},
		wantStatus: metav1.ConditionFalse, wantReason: backupsv1.ReasonChecksumMismatch,
		wantMsg: "checksum-only: Failed at 2031-03-04T05:06:07Z (BackupVerifyResult shop/r1): sha256 differs",
	}, {
		name:       "full-restore passed, no checksum",
		v:          backupsv1.BackupVerification{FullRestore: verdict(pass, "r2", "all objects match")},
		wantStatus: metav1.ConditionTrue, wantReason: backupsv1.ReasonRestoreVerified,
		wantMsg: "full-restore: Passed at 2031-03-04T05:06:07Z (BackupVerifyResult shop/r2): all objects match",
	}, {
		name:       "full-restore passed over a passed checksum",
		v:          backupsv1.BackupVerification{Checksum: verdict(pass, "r1", ""), FullRestore: verdict(pass, "r2", "")},
		wantStatus: metav1.ConditionTrue, wantReason: backupsv1.ReasonRestoreVerified,
		wantMsg: "full-restore: Passed at 2031-03-04T05:06:07Z (BackupVerifyResult shop/r2)",
	}, {
		name: "full-restore passed, with its measured restore time",
		v: backupsv1.BackupVerification{FullRestore: &backupsv1.VerificationVerdict{Result: pass, Time: at,
			RestoreDuration: &metav1.Duration{Duration: 83 * time.Second}}},
		wantStatus: metav1.ConditionTrue, wantReason: backupsv1.ReasonRestoreVerified,
		wantMsg: "full-restore: Passed at 2031-03-04T05:06:07Z, restored in 1m23s",
	}, {
		name:       "full-restore failed, checksum passed",
		v:          backupsv1.BackupVerification{Checksum: verdict(pass, "r1", ""), FullRestore: verdict(fail, "r2", "deployment/web differs")},
		wantStatus: metav1.ConditionFalse, wantReason: backupsv1.ReasonRestoreMismatch,
		wantMsg: "full-restore: Failed at 2031-03-04T05:06:07Z (BackupVerifyResult shop/r2): deployment/web differs",
	}, {
		name:       "checksum failed, full-restore passed: a failure wins",
		v:          backupsv1.BackupVerification{Checksum: verdict(fail, "r1", "size differs"), FullRestore: verdict(pass, "r2", "")},
		wantStatus: metav1.ConditionFalse, wantReason: backupsv1.ReasonChecksumMismatch,
		wantMsg: "checksum-only: Failed at 2031-03-04T05:06:07Z (BackupVerifyResult shop/r1): size differs",
	}, {
		name:       "both failed: the full-restore first",
		v:          backupsv1.BackupVerification{Checksum: verdict(fail, "r1", "a"), FullRestore: verdict(fail, "r2", "b")},
		wantStatus: metav1.ConditionFalse, wantReason: backupsv1.ReasonRestoreMismatch,
		wantMsg: "full-restore: Failed at 2031-03-04T05:06:07Z (BackupVerifyResult shop/r2): b",
	}, {
		name:       "no result reference",
		v:          backupsv1.BackupVerification{Checksum: &backupsv1.VerificationVerdict{Result: pass, Time: metav1.NewTime(v0.In(time.FixedZone("X", 3600)))}},
		wantStatus: metav1.ConditionTrue, wantReason: backupsv1.ReasonChecksumVerified,
		wantMsg: "checksum-only: Passed at 2031-03-04T05:06:07Z",
	}, {
		name:       "no verdict yet",
		v:          backupsv1.BackupVerification{},
		wantStatus: metav1.ConditionUnknown, wantReason: "NotVerified",
		wantMsg: "no verification has ended",
	}} {
		t.Run(tt.name, func(t *testing.T) {
			c := VerifiedCondition(&tt.v)
			assert.Equal(t, backupsv1.ConditionVerified, c.Type)
			assert.Equal(t, tt.wantStatus, c.Status)
			assert.Equal(t, tt.wantReason, c.Reason)
			assert.Equal(t, tt.wantMsg, c.Message)
		})
	}
}

// verdictFixture is one Backup, Ready with an artifact and a driver's condition, and a reconciler
// calling recordVerdict on it.
type verdictFixture struct {
	t   *testing.T
	ctx context.Context
	r   *VerdictReconciler
	b   *backupsv1.Backup
}

func newVerdictFixture(t *testing.T) *verdictFixture {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "verdict-"}}
	require.NoError(t, cl.Create(ctx, ns))
	b := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "nightly"},
		Spec: backupsv1.BackupSpec{
			ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: "web"},
			PlanRef:        &corev1.LocalObjectReference{Name: "db"},
			StrategyRef:    corev1.TypedLocalObjectReference{APIGroup: ptr.To("jobdriver.coffer.io"), Kind: "JobBackupStrategy", Name: "tar"},
			TakenAt:        metav1.NewTime(v0.Add(-time.Hour)),
		}}
	require.NoError(t, cl.Create(ctx, b))
	orig := b.DeepCopy()
	b.Status.Phase = backupsv1.BackupReady
	b.Status.Artifact = &backupsv1.BackupArtifact{URI: "s3://coffer/backups/nightly", SizeBytes: 42, Checksum: "sha256:" + strings.Repeat("cd", 32)}
	b.Status.Conditions = []metav1.Condition{{Type: backupsv1.ConditionArtifactAvailable, Status: metav1.ConditionTrue,
		Reason: "ArtifactFound", Message: "the driver saw it", LastTransitionTime: metav1.NewTime(v0.Add(-time.Hour))}}
	require.NoError(t, cl.Status().Patch(ctx, b, client.MergeFrom(orig)))
	return &verdictFixture{t: t, ctx: ctx, r: &VerdictReconciler{Client: cl}, b: b}
}

// run is a coffer run of the fixture's Backup, made for its UID.
func (f *verdictFixture) run(name string, m securityv1.Mode) *securityv1.BackupVerifyRun {
	return &securityv1.BackupVerifyRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.b.Namespace, Name: name, UID: types.UID(name + "-uid"),
			Labels: map[string]string{securityv1.LabelBackupUID: string(f.b.UID)}},
		Spec: securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendCoffer, BackupRef: securityv1.BackupRef{Name: f.b.Name}, Mode: m},
	}
}

// record calls recordVerdict as run's finish does at time at, with the run's Result (named
// "<run>-result").
func (f *verdictFixture) record(r *VerdictReconciler, run *securityv1.BackupVerifyRun, at time.Time, eventType, msg string) error {
	return f.recordResult(r, run, at, eventType, msg, nil)
}

// recordResult is record with the Result's details.
func (f *verdictFixture) recordResult(r *VerdictReconciler, run *securityv1.BackupVerifyRun, at time.Time, eventType, msg string, details map[string]string) error {
	res := &securityv1.BackupVerifyResult{ObjectMeta: metav1.ObjectMeta{Namespace: run.Namespace, Name: resultName(run)},
		Spec: securityv1.BackupVerifyResultSpec{Details: details}}
	_, err := recordVerdict(f.ctx, r.reader(), r.Client, run, res, eventType, msg, metav1.NewTime(at))
	return err
}

func (f *verdictFixture) get() *backupsv1.Backup {
	b := &backupsv1.Backup{}
	require.NoError(f.t, cl.Get(f.ctx, client.ObjectKeyFromObject(f.b), b))
	return b
}

// assertDriversFields checks that what the driver wrote is as it wrote it.
func (f *verdictFixture) assertDriversFields(b *backupsv1.Backup) {
	f.t.Helper()
	assert.Equal(f.t, f.b.Spec, b.Spec)
	assert.Equal(f.t, backupsv1.BackupReady, b.Status.Phase)
	assert.Equal(f.t, f.b.Status.Artifact, b.Status.Artifact)
	c := meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionArtifactAvailable)
	require.NotNil(f.t, c)
	assert.Equal(f.t, f.b.Status.Conditions[0], *c)
}

// assertVerdict compares verdicts, their times as instants (the API server's are in time.Local).
func assertVerdict(t *testing.T, want, got *backupsv1.VerificationVerdict) {
	t.Helper()
	require.NotNil(t, got)
	assert.True(t, want.Time.Equal(&got.Time), "time: want %s, got %s", want.Time, got.Time)
	w, g := *want, *got
	w.Time, g.Time = metav1.Time{}, metav1.Time{}
	assert.Equal(t, w, g)
}

// The verifier's cache holds Backups cut to what policies read (policy.TrimCachedBackup). A
// verdict is computed from a live read, so what the cut dropped (the driver's condition, the
// artifact, the application) stays on the server as the driver wrote it.
func TestVerdictIsWrittenFromALiveRead(t *testing.T) {
	f := newVerdictFixture(t)
	cached := interceptor.NewClient(cl, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if err := c.Get(ctx, key, obj, opts...); err != nil {
			return err
		}
		policy.TrimCachedBackup(obj)
		return nil
	}})
	r := &VerdictReconciler{Client: cached, Reader: cl}
	require.NoError(t, f.record(r, f.run("cs1", securityv1.ModeChecksumOnly), v0, securityv1.EventBackupVerifyCompleted, "Verification succeeded"))
	b := f.get()
	f.assertDriversFields(b)
	require.NotNil(t, b.Status.Verification)
	require.NotNil(t, b.Status.Verification.Checksum)
	assert.Equal(t, backupsv1.VerificationPassed, b.Status.Verification.Checksum.Result)
	assert.True(t, meta.IsStatusConditionTrue(b.Status.Conditions, backupsv1.ConditionVerified))
}

func TestRecordVerdict(t *testing.T) {
	f := newVerdictFixture(t)
	ref := func(run string) *backupsv1.VerificationResultRef {
		return &backupsv1.VerificationResultRef{Namespace: f.b.Namespace, Name: securityv1.ResultName(run)}
	}
	t1, t2, t3, t4 := v0, v0.Add(time.Minute), v0.Add(2*time.Minute), v0.Add(3*time.Minute)

	// A checksum that passed.
	cs1 := f.run("cs1", securityv1.ModeChecksumOnly)
	require.NoError(t, f.record(f.r, cs1, t1, securityv1.EventBackupVerifyCompleted, "Verification succeeded"))
	b := f.get()
	require.NotNil(t, b.Status.Verification)
	assertVerdict(t, &backupsv1.VerificationVerdict{Result: backupsv1.VerificationPassed, Time: metav1.NewTime(t1),
		ResultRef: ref("cs1"), Message: "Verification succeeded"}, b.Status.Verification.Checksum)
	assert.Nil(t, b.Status.Verification.FullRestore)
	c := meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionVerified)
	require.NotNil(t, c)
	assert.Equal(t, metav1.ConditionTrue, c.Status)
	assert.Equal(t, backupsv1.ReasonChecksumVerified, c.Reason)
	assert.Equal(t, VerifiedCondition(b.Status.Verification).Message, c.Message)
	assert.Equal(t, b.Generation, c.ObservedGeneration)
	assert.True(t, c.LastTransitionTime.Time.Equal(t1))
	f.assertDriversFields(b)
	rv := b.ResourceVersion

	// The same verdict again (a crash before the run's terminal status): nothing is written.
	require.NoError(t, f.record(f.r, cs1, t2, securityv1.EventBackupVerifyCompleted, "Verification succeeded"))
	assert.Equal(t, rv, f.get().ResourceVersion)

	// No verdict: a run that could not be carried out, a run of another backend, a run made for
	// a Backup that was replaced since, a run whose Backup is gone.
	fr := f.run("fr-failed", securityv1.ModeFullRestore)
	require.NoError(t, f.record(f.r, fr, t2, securityv1.EventBackupVerifyFailed, "the verification could not be carried out: timeout"))
	velero := f.run("velero", securityv1.ModeChecksumOnly)
	velero.Spec.Backend = securityv1.BackendVelero
	require.NoError(t, f.record(f.r, velero, t2, securityv1.EventBackupVerifyMismatch, "checksum differs"))
	replaced := f.run("replaced", securityv1.ModeChecksumOnly)
	replaced.Labels[securityv1.LabelBackupUID] = "0d6b6a0e-0000-4000-8000-000000000000"
	require.NoError(t, f.record(f.r, replaced, t2, securityv1.EventBackupVerifyMismatch, "checksum differs"))
	gone := f.run("gone", securityv1.ModeChecksumOnly)
	gone.Spec.BackupRef.Name = "no-such-backup"
	require.NoError(t, f.record(f.r, gone, t2, securityv1.EventBackupVerifyMismatch, "checksum differs"))
	assert.Equal(t, rv, f.get().ResourceVersion, "none of them wrote anything")

	// The driver writes its status meanwhile; the verdicts keep it.
	b = f.get()
	orig := b.DeepCopy()
	b.Status.Artifact.SizeBytes = 43
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: backupsv1.ConditionPartiallyFailed, Status: metav1.ConditionFalse,
		Reason: "Completed", Message: "no errors", LastTransitionTime: metav1.NewTime(t1)})
	require.NoError(t, cl.Status().Patch(f.ctx, b, client.MergeFrom(orig)))
	f.b = b

	// A full-restore that found a mismatch, with a message longer than the field allows.
	fr2 := f.run("fr2", securityv1.ModeFullRestore)
	long := strings.Repeat("deployment/web differs; ", 100)
	require.NoError(t, f.record(f.r, fr2, t3, securityv1.EventBackupVerifyMismatch, long))
	b = f.get()
	assert.Equal(t, backupsv1.VerificationFailed, b.Status.Verification.FullRestore.Result)
	assert.True(t, b.Status.Verification.FullRestore.Time.Time.Equal(t3))
	assert.Equal(t, ref("fr2"), b.Status.Verification.FullRestore.ResultRef)
	assert.LessOrEqual(t, len(b.Status.Verification.FullRestore.Message), 1024)
	assert.True(t, strings.HasPrefix(long, strings.TrimSuffix(b.Status.Verification.FullRestore.Message, "…")))
	assert.Equal(t, ref("cs1"), b.Status.Verification.Checksum.ResultRef, "the checksum verdict stays")
	c = meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionVerified)
	require.NotNil(t, c)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, backupsv1.ReasonRestoreMismatch, c.Reason)
	assert.True(t, c.LastTransitionTime.Time.Equal(t3))
	f.assertDriversFields(b)
	assert.NotNil(t, meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionPartiallyFailed), "the driver's condition stays")
	rv = b.ResourceVersion

	// An older verdict than the one recorded changes nothing.
	fr1 := f.run("fr1", securityv1.ModeFullRestore)
	require.NoError(t, f.record(f.r, fr1, t2, securityv1.EventBackupVerifyCompleted, "Verification succeeded"))
	assert.Equal(t, rv, f.get().ResourceVersion)

	// A newer one replaces it, with the restore time its Result measured.
	fr3 := f.run("fr3", securityv1.ModeFullRestore)
	require.NoError(t, f.recordResult(f.r, fr3, t4, securityv1.EventBackupVerifyCompleted, "Verification succeeded",
		map[string]string{securityv1.DetailRestoreSeconds: "83"}))
	b = f.get()
	assertVerdict(t, &backupsv1.VerificationVerdict{Result: backupsv1.VerificationPassed, Time: metav1.NewTime(t4),
		ResultRef: ref("fr3"), Message: "Verification succeeded", RestoreDuration: &metav1.Duration{Duration: 83 * time.Second}}, b.Status.Verification.FullRestore)
	assert.Equal(t, ref("cs1"), b.Status.Verification.Checksum.ResultRef)
	c = meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionVerified)
	require.NotNil(t, c)
	assert.Equal(t, metav1.ConditionTrue, c.Status)
	assert.Equal(t, backupsv1.ReasonRestoreVerified, c.Reason)
	f.assertDriversFields(b)
	assert.NotNil(t, meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionPartiallyFailed))

	// A run without the UID label (made by hand) records its verdict too.
	byHand := f.run("by-hand", securityv1.ModeChecksumOnly)
	delete(byHand.Labels, securityv1.LabelBackupUID)
	require.NoError(t, f.record(f.r, byHand, t4, securityv1.EventBackupVerifyMismatch, "sha256 differs"))
	b = f.get()
	assert.Equal(t, backupsv1.VerificationFailed, b.Status.Verification.Checksum.Result)
	assert.Equal(t, ref("by-hand"), b.Status.Verification.Checksum.ResultRef)
	c = meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionVerified)
	require.NotNil(t, c)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, backupsv1.ReasonChecksumMismatch, c.Reason)
	f.assertDriversFields(b)
}

// TestRecordVerdictConflict: the write is optimistic. Its merge patch carries the whole condition
// list, so had a driver written the status after the verdict's read, an unconditional patch would
// drop the driver's condition; instead it fails with a conflict, to be retried, and the driver's
// write stays.
func TestRecordVerdictConflict(t *testing.T) {
	f := newVerdictFixture(t)
	stale := f.get()
	b := stale.DeepCopy()
	orig := b.DeepCopy()
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: backupsv1.ConditionPartiallyFailed, Status: metav1.ConditionTrue,
		Reason: "CompletedWithErrors", Message: "one volume skipped", LastTransitionTime: metav1.NewTime(v0)})
	require.NoError(t, cl.Status().Patch(f.ctx, b, client.MergeFrom(orig)))

	behind := interceptor.NewClient(cl, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if out, ok := obj.(*backupsv1.Backup); ok && key == client.ObjectKeyFromObject(stale) {
				stale.DeepCopyInto(out)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	err := f.record(&VerdictReconciler{Client: behind}, f.run("cs", securityv1.ModeChecksumOnly), v0, securityv1.EventBackupVerifyCompleted, "ok")
	require.Error(t, err)
	assert.True(t, apierrors.IsConflict(err), "a conflict, retried by the controller: %v", err)
	got := f.get()
	assert.Nil(t, got.Status.Verification)
	assert.Nil(t, meta.FindStatusCondition(got.Status.Conditions, backupsv1.ConditionVerified))
	assert.True(t, meta.IsStatusConditionTrue(got.Status.Conditions, backupsv1.ConditionPartiallyFailed), "the driver's condition stays")

	// Read afresh, the verdict is written next to it.
	require.NoError(t, f.record(f.r, f.run("cs", securityv1.ModeChecksumOnly), v0, securityv1.EventBackupVerifyCompleted, "ok"))
	got = f.get()
	assert.True(t, meta.IsStatusConditionTrue(got.Status.Conditions, backupsv1.ConditionVerified))
	assert.True(t, meta.IsStatusConditionTrue(got.Status.Conditions, backupsv1.ConditionPartiallyFailed))
}

// TestRecordVerdictConfirmsFailures: one failed verification is a signal the Backup records with
// failures 1, which retention does not act on (WasGood); a second in a row confirms it; a pass in
// between starts the count again; a failure of each mode confirms it too.
func TestRecordVerdictConfirmsFailures(t *testing.T) {
	f := newVerdictFixture(t)
	at := func(i int) time.Time { return v0.Add(time.Duration(i) * time.Minute) }
	require.NoError(t, f.record(f.r, f.run("cs1", securityv1.ModeChecksumOnly), at(1), securityv1.EventBackupVerifyMismatch, "sha256 differs"))
	b := f.get()
	assert.Equal(t, int32(1), b.Status.Verification.Checksum.Failures)
	assert.False(t, b.IsGood(), "a failed verification makes the Backup unusable for keep rules")
	assert.False(t, b.VerifyFailureConfirmed())
	assert.True(t, b.WasGood(), "one failed verification is not yet a fact retention acts on")

	require.NoError(t, f.record(f.r, f.run("cs2", securityv1.ModeChecksumOnly), at(2), securityv1.EventBackupVerifyCompleted, "ok"))
	require.NoError(t, f.record(f.r, f.run("cs3", securityv1.ModeChecksumOnly), at(3), securityv1.EventBackupVerifyMismatch, "sha256 differs"))
	b = f.get()
	assert.Equal(t, int32(1), b.Status.Verification.Checksum.Failures, "a pass in between starts the count again")
	assert.True(t, b.WasGood())

	require.NoError(t, f.record(f.r, f.run("cs4", securityv1.ModeChecksumOnly), at(4), securityv1.EventBackupVerifyMismatch, "sha256 differs"))
	b = f.get()
	assert.Equal(t, int32(2), b.Status.Verification.Checksum.Failures)
	assert.True(t, b.VerifyFailureConfirmed(), "two failed verifications in a row confirm it")
	assert.False(t, b.WasGood())

	g := newVerdictFixture(t)
	require.NoError(t, g.record(g.r, g.run("cs", securityv1.ModeChecksumOnly), at(1), securityv1.EventBackupVerifyMismatch, "sha256 differs"))
	require.NoError(t, g.record(g.r, g.run("fr", securityv1.ModeFullRestore), at(2), securityv1.EventBackupVerifyMismatch, "deployment/web differs"))
	b = g.get()
	assert.True(t, b.VerifyFailureConfirmed(), "a failure of each mode confirms it")
	assert.False(t, b.WasGood())
}

// TestTamperedSandboxIsNoVerdict: a full-restore whose sandbox was tampered with during the run
// (a critical sandbox-tampered finding) compared nothing that can be trusted: no verdict is written
// on the Backup, which stays as it was.
func TestTamperedSandboxIsNoVerdict(t *testing.T) {
	f := newVerdictFixture(t)
	run := f.run("tampered", securityv1.ModeFullRestore)
	res := &securityv1.BackupVerifyResult{ObjectMeta: metav1.ObjectMeta{Namespace: run.Namespace, Name: resultName(run)},
		Spec: securityv1.BackupVerifyResultSpec{Findings: []securityv1.Finding{{Code: securityv1.CodeSandboxTampered, Severity: securityv1.SeverityCritical}}}}
	rv := f.get().ResourceVersion
	recorded, err := recordVerdict(f.ctx, f.r.reader(), f.r.Client, run, res, securityv1.EventBackupVerifyMismatch, "sandbox tampered", metav1.NewTime(v0))
	require.NoError(t, err)
	assert.False(t, recorded, "a tampered sandbox gives no verdict")
	b := f.get()
	assert.Equal(t, rv, b.ResourceVersion, "nothing written")
	assert.Nil(t, b.Status.Verification)
}

// An ended run is read from a cache that cut it (TrimEndedRun: no message, no condition but
// Ready's reason). Its verdict is recorded from live reads of the run, its Result and its Backup,
// with the message the cache dropped; once the cached Backup records it, the run's reconciles (a
// restart of the verifier reconciles every ended run) read nothing live and write nothing.
func TestEndedRunsAreReadLiveOnlyForANewVerdict(t *testing.T) {
	f := newVerdictFixture(t)
	run := f.run("cs-live", securityv1.ModeChecksumOnly)
	run.UID = ""
	run.Labels[securityv1.LabelPolicy] = "nightly"
	require.NoError(t, cl.Create(f.ctx, run))
	orig := run.DeepCopy()
	done := metav1.NewTime(v0)
	run.Status = securityv1.BackupVerifyRunStatus{Phase: securityv1.RunSucceeded, StartTime: &done, CompletionTime: &done,
		ResultRef: &securityv1.ResultReference{Name: resultName(run)}, Message: "Verification succeeded: 42 bytes match the recorded SHA-256",
		Conditions: []metav1.Condition{
			{Type: securityv1.ConditionReady, Status: metav1.ConditionTrue, Reason: securityv1.EventBackupVerifyCompleted, Message: "done", LastTransitionTime: done},
			{Type: securityv1.ConditionProgressing, Status: metav1.ConditionFalse, Reason: "Ended", Message: "ended", LastTransitionTime: done},
		}}
	require.NoError(t, cl.Status().Patch(f.ctx, run, client.MergeFrom(orig)))
	res := &securityv1.BackupVerifyResult{ObjectMeta: metav1.ObjectMeta{Namespace: run.Namespace, Name: resultName(run)},
		Spec: securityv1.BackupVerifyResultSpec{RunRef: &securityv1.RunReference{Name: run.Name, UID: run.UID}, Backend: securityv1.BackendCoffer,
			Mode: securityv1.ModeChecksumOnly}}
	require.NoError(t, cl.Create(f.ctx, res))

	cached := interceptor.NewClient(cl, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if err := c.Get(ctx, key, obj, opts...); err != nil {
			return err
		}
		policy.TrimCachedBackup(obj)
		TrimEndedRun(obj)
		return nil
	}})
	var live []string
	reader := interceptor.NewClient(cl, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		live = append(live, fmt.Sprintf("%T", obj))
		return c.Get(ctx, key, obj, opts...)
	}})
	trimmed := &securityv1.BackupVerifyRun{}
	require.NoError(t, cached.Get(f.ctx, client.ObjectKeyFromObject(run), trimmed))
	require.Empty(t, trimmed.Status.Message, "the cache drops an ended run's message")
	require.Len(t, trimmed.Status.Conditions, 1)

	r := &VerdictReconciler{Client: cached, Reader: reader}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(run)}
	_, err := r.Reconcile(f.ctx, req)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"*v1alpha1.BackupVerifyRun", "*v1alpha1.BackupVerifyResult", "*v1alpha1.Backup"}, live)
	b := f.get()
	f.assertDriversFields(b)
	require.NotNil(t, b.Status.Verification)
	assertVerdict(t, &backupsv1.VerificationVerdict{Result: backupsv1.VerificationPassed, Time: done,
		ResultRef: &backupsv1.VerificationResultRef{Namespace: run.Namespace, Name: resultName(run)},
		Message:   "Verification succeeded: 42 bytes match the recorded SHA-256"}, b.Status.Verification.Checksum)

	settled := &securityv1.BackupVerifyRun{}
	require.NoError(t, cl.Get(f.ctx, req.NamespacedName, settled))
	assert.Equal(t, "true", settled.Labels[securityv1.LabelSettled], "a policy's run whose verdict is recorded is settled: it leaves the cache")
	assert.False(t, Unsettled().Matches(labels.Set(settled.Labels)))

	live = nil
	_, err = r.Reconcile(f.ctx, req)
	require.NoError(t, err)
	assert.Empty(t, live, "a recorded verdict is known from the cache")
	assert.Equal(t, b.ResourceVersion, f.get().ResourceVersion)
	require.NoError(t, cl.Get(f.ctx, req.NamespacedName, run))
	assert.Equal(t, settled.ResourceVersion, run.ResourceVersion, "settled once")

	// A run ended before runs were settled (an upgrade): its verdict is known from the cache
	// (result and time), and it is settled without a live read.
	orig = run.DeepCopy()
	delete(run.Labels, securityv1.LabelSettled)
	require.NoError(t, cl.Patch(f.ctx, run, client.MergeFrom(orig)))
	_, err = r.Reconcile(f.ctx, req)
	require.NoError(t, err)
	assert.Empty(t, live, "a recorded verdict is known from the cache")
	require.NoError(t, cl.Get(f.ctx, req.NamespacedName, run))
	assert.Equal(t, "true", run.Labels[securityv1.LabelSettled])

	// A run that could not be carried out gives no verdict: nothing is read live either.
	failed := f.run("cs-failed", securityv1.ModeChecksumOnly)
	failed.UID = ""
	require.NoError(t, cl.Create(f.ctx, failed))
	orig = failed.DeepCopy()
	failed.Status = securityv1.BackupVerifyRunStatus{Phase: securityv1.RunFailed, CompletionTime: &done, ResultRef: &securityv1.ResultReference{Name: resultName(failed)},
		Conditions: []metav1.Condition{{Type: securityv1.ConditionReady, Status: metav1.ConditionFalse, Reason: securityv1.EventBackupVerifyFailed, Message: "S3 unreachable", LastTransitionTime: done}}}
	require.NoError(t, cl.Status().Patch(f.ctx, failed, client.MergeFrom(orig)))
	_, err = r.Reconcile(f.ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(failed)})
	require.NoError(t, err)
	assert.Empty(t, live)
	require.NoError(t, cl.Get(f.ctx, client.ObjectKeyFromObject(failed), failed))
	assert.Empty(t, failed.Labels[securityv1.LabelSettled], "a run that gave no verdict stays cached")
}

// A run made by hand (no policy) whose verdict is recorded is not settled: it stays cached, and
// its TTL prunes it.
func TestRunMadeByHandIsNotSettled(t *testing.T) {
	f := newVerdictFixture(t)
	run := f.run("by-hand", securityv1.ModeChecksumOnly)
	run.UID = ""
	require.NoError(t, cl.Create(f.ctx, run))
	orig := run.DeepCopy()
	done := metav1.NewTime(v0)
	run.Status = securityv1.BackupVerifyRunStatus{Phase: securityv1.RunSucceeded, CompletionTime: &done, ResultRef: &securityv1.ResultReference{Name: resultName(run)},
		Conditions: []metav1.Condition{{Type: securityv1.ConditionReady, Status: metav1.ConditionTrue, Reason: securityv1.EventBackupVerifyCompleted, Message: "done", LastTransitionTime: done}}}
	require.NoError(t, cl.Status().Patch(f.ctx, run, client.MergeFrom(orig)))
	require.NoError(t, cl.Create(f.ctx, &securityv1.BackupVerifyResult{ObjectMeta: metav1.ObjectMeta{Namespace: run.Namespace, Name: resultName(run)},
		Spec: securityv1.BackupVerifyResultSpec{RunRef: &securityv1.RunReference{Name: run.Name, UID: run.UID}, Backend: securityv1.BackendCoffer, Mode: securityv1.ModeChecksumOnly}}))
	r := &VerdictReconciler{Client: cl, Reader: cl}
	_, err := r.Reconcile(f.ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(run)})
	require.NoError(t, err)
	require.NotNil(t, f.get().Status.Verification.Checksum, "its verdict is recorded")
	require.NoError(t, cl.Get(f.ctx, client.ObjectKeyFromObject(run), run))
	assert.Empty(t, run.Labels[securityv1.LabelSettled])
}
