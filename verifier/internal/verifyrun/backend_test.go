// A fourth backend, test-only and scripted, added in this one file: the run reconciler drives any
// backend.Backend through the same lifecycle without knowing it (the registry names it under a
// backend value the CRD admits; the reconciler reads nothing else of it).
package verifyrun

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/verifier/internal/backend"
)

// scripted answers each pass with the next of its steps, and counts its calls.
type scripted struct {
	mu       sync.Mutex
	steps    []step
	calls    int
	cleanups int
}

type step struct {
	out backend.Outcome
	err error
}

func (s *scripted) next() (backend.Outcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.steps[min(s.calls, len(s.steps)-1)]
	s.calls++
	return st.out, st.err
}

// checksumOnly is a backend that verifies by checksum only.
type checksumOnly struct{ *scripted }

func (b checksumOnly) Checksum(context.Context, *securityv1.BackupVerifyRun) (backend.Outcome, error) {
	return b.next()
}

// restorer also verifies by full restore.
type restorer struct{ *scripted }

func (b restorer) Checksum(context.Context, *securityv1.BackupVerifyRun) (backend.Outcome, error) {
	return b.next()
}

func (b restorer) FullRestore(context.Context, *securityv1.BackupVerifyRun) (backend.Outcome, error) {
	return b.next()
}

func (b restorer) Waiting(run *securityv1.BackupVerifyRun) string {
	return "scripted restore of " + run.Name
}

func (b restorer) Cleanup(context.Context, *securityv1.BackupVerifyRun) []securityv1.Finding {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cleanups++
	return []securityv1.Finding{{Code: securityv1.CodeCleanupFailed, Severity: securityv1.SeverityLow, Message: "scripted cleanup"}}
}

type lifecycle struct {
	t     *testing.T
	ctx   context.Context
	ns    string
	clock *clocktesting.FakeClock
	r     *Reconciler
}

func newLifecycle(t *testing.T, backends map[securityv1.Backend]backend.Backend) *lifecycle {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "lifecycle-"}}
	require.NoError(t, cl.Create(ctx, ns))
	clock := clocktesting.NewFakeClock(v0)
	return &lifecycle{t: t, ctx: ctx, ns: ns.Name, clock: clock,
		r: &Reconciler{Client: cl, Backends: backends, Clock: clock, Recorder: &events.FakeRecorder{}, ClusterID: "c-1", ClusterName: "test"}}
}

func (l *lifecycle) run(b securityv1.Backend, m securityv1.Mode) *securityv1.BackupVerifyRun {
	run := &securityv1.BackupVerifyRun{ObjectMeta: metav1.ObjectMeta{GenerateName: "run-", Namespace: l.ns},
		Spec: securityv1.BackupVerifyRunSpec{Backend: b, BackupRef: securityv1.BackupRef{Name: "nightly"}, Mode: m}}
	if m == securityv1.ModeFullRestore {
		run.Spec.SandboxNamespace = "scripted-bvsandbox"
	}
	require.NoError(l.t, cl.Create(l.ctx, run))
	return run
}

func (l *lifecycle) step(run *securityv1.BackupVerifyRun) reconcile.Result {
	l.t.Helper()
	res, err := l.r.Reconcile(l.ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(run)})
	require.NoError(l.t, err)
	require.NoError(l.t, cl.Get(l.ctx, client.ObjectKeyFromObject(run), run))
	return res
}

func (l *lifecycle) result(run *securityv1.BackupVerifyRun) *securityv1.BackupVerifyResult {
	res := &securityv1.BackupVerifyResult{}
	require.NoError(l.t, cl.Get(l.ctx, client.ObjectKey{Namespace: run.Namespace, Name: run.Status.ResultName()}, res))
	return res
}

func (l *lifecycle) events(run *securityv1.BackupVerifyRun) []string {
	list := &securityv1.SecurityEventList{}
	require.NoError(l.t, cl.List(l.ctx, list, client.MatchingLabels{securityv1.LabelRunUID: string(run.UID)}))
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Spec.Type)
	}
	return out
}

func condition(run *securityv1.BackupVerifyRun, typ string) metav1.Condition {
	c := meta.FindStatusCondition(run.Status.Conditions, typ)
	if c == nil {
		return metav1.Condition{}
	}
	return *c
}

// A full restore through a scripted backend: in progress (polled, saying what it waits for),
// infrastructure trouble (retried, no verdict), then done with a high finding: one Result with the
// backend's findings and the cleanup's, cleanup called once, Succeeded BackupVerifyMismatch, and the
// Started and Mismatch SecurityEvents once each. A pass after the end calls the backend no more.
func TestAnyBackendRunsTheWholeLifecycle(t *testing.T) {
	s := &scripted{steps: []step{
		{out: backend.Outcome{Done: false}},
		{err: errors.New("object store unreachable")},
		{out: backend.Outcome{Done: true, ComputedChecksum: "sha256:ab", SizeBytes: 7, Findings: []securityv1.Finding{
			{Code: securityv1.CodeContentMismatch, Severity: securityv1.SeverityHigh, Message: "configmap/web differs"}}}},
	}}
	l := newLifecycle(t, map[securityv1.Backend]backend.Backend{securityv1.BackendVelero: restorer{s}})
	run := l.run(securityv1.BackendVelero, securityv1.ModeFullRestore)

	res := l.step(run)
	assert.Equal(t, MinPollInterval, res.RequeueAfter, "a run just started checks again soon")
	c := condition(run, securityv1.ConditionProgressing)
	assert.Equal(t, securityv1.ReasonRestoreInProgress, c.Reason)
	assert.Equal(t, "waiting for scripted restore of "+run.Name, c.Message)

	res = l.step(run)
	assert.Positive(t, res.RequeueAfter)
	c = condition(run, securityv1.ConditionProgressing)
	assert.Equal(t, securityv1.ReasonRetrying, c.Reason)
	assert.Contains(t, c.Message, "object store unreachable")
	assert.Equal(t, securityv1.RunRunning, run.Status.Phase)

	l.step(run)
	require.Equal(t, securityv1.RunSucceeded, run.Status.Phase, "carried out: the verdict is the Mismatch")
	assert.Equal(t, securityv1.ReasonBackupVerifyMismatch, condition(run, securityv1.ConditionReady).Reason)
	assert.Equal(t, metav1.ConditionFalse, condition(run, securityv1.ConditionReady).Status)
	assert.Equal(t, 1, s.cleanups)
	r := l.result(run)
	assert.Equal(t, run.UID, r.Spec.RunRef.UID)
	assert.Equal(t, "sha256:ab", r.Spec.ComputedChecksum)
	var codes []string
	for _, f := range r.Spec.Findings {
		codes = append(codes, f.Code)
	}
	assert.Equal(t, []string{securityv1.CodeContentMismatch, securityv1.CodeCleanupFailed}, codes)
	assert.ElementsMatch(t, []string{securityv1.EventBackupVerifyStarted, securityv1.EventBackupVerifyMismatch}, l.events(run))

	calls := s.calls
	l.step(run)
	assert.Equal(t, calls, s.calls, "an ended run is not verified again")
	assert.Equal(t, 1, s.cleanups)
}

// A checksum-only backend asked for a full restore, and a backend this verifier does not run,
// fail the run BackupVerifyFailed at once, saying why (ModeNotSupported, BackendNotConfigured),
// without calling any backend.
func TestBackendsItCannotRunFailClearly(t *testing.T) {
	s := &scripted{steps: []step{{out: backend.Outcome{Done: true}}}}
	l := newLifecycle(t, map[securityv1.Backend]backend.Backend{securityv1.BackendVelero: checksumOnly{s}})
	for _, tt := range []struct {
		backend securityv1.Backend
		mode    securityv1.Mode
		reason  string
	}{
		{securityv1.BackendVelero, securityv1.ModeFullRestore, securityv1.ReasonModeNotSupported},
		{securityv1.BackendEtcdSnapshot, securityv1.ModeChecksumOnly, securityv1.ReasonBackendNotConfigured},
	} {
		run := l.run(tt.backend, tt.mode)
		l.step(run)
		require.Equal(t, securityv1.RunFailed, run.Status.Phase, tt.reason)
		ready := condition(run, securityv1.ConditionReady)
		assert.Equal(t, securityv1.ReasonBackupVerifyFailed, ready.Reason)
		assert.True(t, strings.HasPrefix(l.result(run).Spec.Details[securityv1.DetailFailure], tt.reason), ready.Message)
	}
	assert.Zero(t, s.calls)
}

// TestPollAfter: a full-restore checks its Restore again after a twentieth of its age, no sooner
// than every half second and no later than the spec's 10 s.
func TestPollAfter(t *testing.T) {
	for age, want := range map[time.Duration]time.Duration{
		0: 500 * time.Millisecond, 5 * time.Second: 500 * time.Millisecond, 30 * time.Second: 1500 * time.Millisecond,
		199 * time.Second: 9950 * time.Millisecond, 200 * time.Second: 10 * time.Second, time.Hour: 10 * time.Second,
	} {
		assert.Equal(t, want, pollAfter(age), "age %s", age)
	}
}
