package policy_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/verifier/internal/policy"
)

// TestHistoryPrunerDeletesEndedRunsPastTheirTTL: a run that ended more than the TTL ago is deleted
// with its SecurityEvents (cluster-scoped, two per run, otherwise kept forever); a run that ended
// recently, and a run still going, are kept with theirs.
func TestHistoryPrunerDeletesEndedRunsPastTheirTTL(t *testing.T) {
	f := newFixture(t)
	ns := f.namespace(false)
	run := func(name string, phase securityv1.RunPhase, completed time.Time) *securityv1.BackupVerifyRun {
		r := &securityv1.BackupVerifyRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendVelero, BackupRef: securityv1.BackupRef{Name: "nightly"}}}
		require.NoError(t, cl.Create(f.ctx, r))
		r.Status.Phase = phase
		if !completed.IsZero() {
			r.Status.CompletionTime = &metav1.Time{Time: completed}
		}
		require.NoError(t, cl.Status().Update(f.ctx, r))
		f.event(string(r.UID))
		return r
	}
	old := run("old", securityv1.RunSucceeded, t0.Add(-31*24*time.Hour))
	oldFailed := run("old-failed", securityv1.RunFailed, t0.Add(-40*24*time.Hour))
	recent := run("recent", securityv1.RunSucceeded, t0.Add(-time.Hour))
	going := run("going", securityv1.RunRunning, time.Time{})

	p := &policy.HistoryPruner{Client: cl, Clock: clocktesting.NewFakeClock(t0), TTL: policy.DefaultRunTTL}
	n, err := p.Prune(f.ctx)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, n, 2)
	for _, r := range []*securityv1.BackupVerifyRun{old, oldFailed} {
		err := cl.Get(context.Background(), client.ObjectKeyFromObject(r), &securityv1.BackupVerifyRun{})
		assert.True(t, apierrors.IsNotFound(err), "%s is deleted: %v", r.Name, err)
		assert.Zero(t, f.eventsOf(r.UID), "with its events")
	}
	for _, r := range []*securityv1.BackupVerifyRun{recent, going} {
		require.NoError(t, cl.Get(context.Background(), client.ObjectKeyFromObject(r), &securityv1.BackupVerifyRun{}), "%s is kept", r.Name)
		assert.Equal(t, 1, f.eventsOf(r.UID), "with its events")
	}
}
