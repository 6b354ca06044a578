package realstack

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	bvsandbox "github.com/coffer-backup/coffer/verifier/internal/sandbox"
)

// TestSweeperRemovesSandboxesNoRunWillCleanUp: a run deleted mid full-restore, or one whose cleanup
// failed, leaves its sandbox (with copies of the backup's Secrets) behind. The sweeper deletes the
// sandboxes whose run is gone or ended, once they are older than its grace period, and nothing
// else: not a running run's sandbox, not a young one, not a namespace without a run's label or
// without the sandbox suffix.
func TestSweeperRemovesSandboxesNoRunWillCleanUp(t *testing.T) {
	ctx := context.Background()
	stem := uniq("sw")
	running := veleroRun(t, "sw-running", "any", securityv1.ModeChecksumOnly, "")
	ended := veleroRun(t, "sw-ended", "any", securityv1.ModeChecksumOnly, "")
	ended.Status.Phase = securityv1.RunFailed
	require.NoError(t, cl.Status().Update(ctx, ended))

	namespace := func(name, runUID string) *corev1.Namespace {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if runUID != "" {
			ns.Labels = map[string]string{securityv1.LabelRunUID: runUID}
		}
		require.NoError(t, cl.Create(ctx, ns))
		t.Cleanup(func() { _ = cl.Delete(context.Background(), ns) })
		return ns
	}
	swept := []*corev1.Namespace{
		namespace(stem+"-gone-bvsandbox", "0b3e1c9a-0000-4000-8000-000000000000"),
		namespace(stem+"-ended-bvsandbox", string(ended.UID)),
	}
	kept := []*corev1.Namespace{
		namespace(stem+"-running-bvsandbox", string(running.UID)),
		namespace(stem+"-unlabelled-bvsandbox", ""),
		namespace(stem+"-gone", "0b3e1c9a-0000-4000-8000-000000000000"),
	}

	clock := clocktesting.NewFakeClock(time.Now())
	s := &bvsandbox.Sweeper{Reader: cl, Runs: cl, Client: cl, Clock: clock, Grace: time.Hour}
	n, err := s.Sweep(ctx)
	require.NoError(t, err)
	assert.Zero(t, n, "nothing younger than the grace period is swept")

	clock.Step(2 * time.Hour)
	n, err = s.Sweep(ctx)
	require.NoError(t, err)
	assert.Equal(t, len(swept), n)
	gone := func(ns *corev1.Namespace) bool {
		got := &corev1.Namespace{}
		err := cl.Get(ctx, client.ObjectKeyFromObject(ns), got)
		return apierrors.IsNotFound(err) || err == nil && !got.DeletionTimestamp.IsZero()
	}
	for _, ns := range swept {
		assert.True(t, gone(ns), "%s is swept", ns.Name)
	}
	for _, ns := range kept {
		assert.False(t, gone(ns), "%s is kept", ns.Name)
	}
}
