package policy_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/verifier/internal/policy"
	"github.com/coffer-backup/coffer/verifier/internal/verifyrun"
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

// settledRun creates an ended checksum run of Backup b, labelled as a policy's and settled (or
// not), completed at completed, with one SecurityEvent.
func (f *fixture) settledRun(b *backupsv1.Backup, settled bool, completed time.Time) *securityv1.BackupVerifyRun {
	r := &securityv1.BackupVerifyRun{ObjectMeta: metav1.ObjectMeta{Namespace: b.Namespace, Name: securityv1.PolicyRunName(b, securityv1.ModeChecksumOnly),
		Labels: map[string]string{securityv1.LabelPolicy: "nightly", securityv1.LabelBackupUID: string(b.UID)}},
		Spec: securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendCoffer, BackupRef: securityv1.BackupRef{Name: b.Name}}}
	if settled {
		r.Labels[securityv1.LabelSettled] = "true"
	}
	require.NoError(f.t, cl.Create(f.ctx, r))
	r.Status.Phase = securityv1.RunSucceeded
	r.Status.CompletionTime = &metav1.Time{Time: completed}
	require.NoError(f.t, cl.Status().Update(f.ctx, r))
	f.event(string(r.UID))
	return r
}

func (f *fixture) assertGone(r *securityv1.BackupVerifyRun, gone bool) {
	f.t.Helper()
	err := cl.Get(f.ctx, client.ObjectKeyFromObject(r), &securityv1.BackupVerifyRun{})
	if gone {
		assert.True(f.t, apierrors.IsNotFound(err), "%s is deleted: %v", r.Name, err)
		assert.Zero(f.t, f.eventsOf(r.UID), "with its events")
		return
	}
	assert.NoError(f.t, err, "%s is kept", r.Name)
	assert.Equal(f.t, 1, f.eventsOf(r.UID), "with its events")
}

// cacheOf is a client that, like the verifier's cache, lists no settled run.
func cacheOf(c client.WithWatch) client.WithWatch {
	return interceptor.NewClient(c, interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		if _, ok := list.(*securityv1.BackupVerifyRunList); ok {
			opts = append(opts, client.MatchingLabelsSelector{Selector: verifyrun.Unsettled()})
		}
		return c.List(ctx, list, opts...)
	}})
}

// Settled runs are not cached: RunPruner deletes those of a Backup as it goes, by its UID; the
// history reads them from the API server (a page at a time, at most every SettledEvery) and
// deletes those past the TTL and those whose Backup went while nothing pruned them.
func TestSettledRunsArePruned(t *testing.T) {
	f := newFixture(t)
	ns := f.namespace(false)
	f.plan(ns, "db", nil)
	kept, deleted, missed, old := f.backup(ns, "kept", "db", 1), f.backup(ns, "deleted", "db", 2), f.backup(ns, "missed", "db", 3), f.backup(ns, "old", "db", 4)
	f.ready(kept, deleted, missed, old)
	keptRun := f.settledRun(kept, true, t0.Add(-time.Hour))
	deletedRun := f.settledRun(deleted, true, t0.Add(-time.Hour))
	missedRun := f.settledRun(missed, true, t0.Add(-time.Hour))
	oldRun := f.settledRun(old, true, t0.Add(-31*24*time.Hour))

	require.NoError(t, cl.Delete(f.ctx, deleted))
	p := &policy.RunPruner{Client: cl, Reader: cl}
	_, err := p.Reconcile(f.ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: string(deleted.UID)}})
	require.NoError(t, err)
	f.assertGone(deletedRun, true)
	f.assertGone(keptRun, false)
	f.assertGone(missedRun, false)

	// A Backup deleted while no pruner ran: the history's pass over the settled runs finds it.
	require.NoError(t, cl.Delete(f.ctx, missed))
	clock := clocktesting.NewFakeClock(t0)
	h := &policy.HistoryPruner{Client: cacheOf(cl), Reader: cl, Clock: clock, TTL: policy.DefaultRunTTL}
	_, err = h.Prune(f.ctx)
	require.NoError(t, err)
	f.assertGone(missedRun, true)
	f.assertGone(oldRun, true)
	f.assertGone(keptRun, false)

	// The settled runs are read again only SettledEvery later.
	require.NoError(t, cl.Delete(f.ctx, kept))
	_, err = h.Prune(f.ctx)
	require.NoError(t, err)
	f.assertGone(keptRun, false)
	clock.Step(policy.SettledEvery)
	_, err = h.Prune(f.ctx)
	require.NoError(t, err)
	f.assertGone(keptRun, true)
}
