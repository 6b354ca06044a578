package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
)

// The verifier's cache (cacheOptions, on a real API server) holds the runs in flight whole, the
// ended runs not settled cut down, and no settled run: one that becomes settled leaves it.
func TestCacheHoldsNoSettledRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{CRDDirectoryPaths: []string{"../../../deploy/verifier/crd"}})
	require.NoError(t, err)
	defer func() { _ = c.Stop() }()
	cl, err := client.New(c.Config, client.Options{Scheme: cluster.Scheme})
	require.NoError(t, err)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cache-"}}
	require.NoError(t, cl.Create(ctx, ns))
	run := func(name string, phase securityv1.RunPhase, settled bool) *securityv1.BackupVerifyRun {
		r := &securityv1.BackupVerifyRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name, Labels: map[string]string{securityv1.LabelPolicy: "nightly"}},
			Spec: securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendCoffer, BackupRef: securityv1.BackupRef{Name: "db"}}}
		if settled {
			r.Labels[securityv1.LabelSettled] = "true"
		}
		require.NoError(t, cl.Create(ctx, r))
		r.Status.Phase, r.Status.Message = phase, "a message of the run"
		require.NoError(t, cl.Status().Update(ctx, r))
		return r
	}
	run("going", securityv1.RunRunning, false)
	run("ended", securityv1.RunSucceeded, false)
	run("settled", securityv1.RunSucceeded, true)
	settling := run("settling", securityv1.RunSucceeded, false)

	opts := cacheOptions()
	opts.Scheme = cluster.Scheme
	ca, err := cache.New(c.Config, opts)
	require.NoError(t, err)
	go func() { _ = ca.Start(ctx) }()
	require.True(t, ca.WaitForCacheSync(ctx))
	cached := func() map[string]string {
		list := &securityv1.BackupVerifyRunList{}
		require.NoError(t, ca.List(ctx, list, client.InNamespace(ns.Name)))
		out := map[string]string{}
		for _, r := range list.Items {
			out[r.Name] = r.Status.Message
		}
		return out
	}
	assert.Equal(t, map[string]string{"going": "a message of the run", "ended": "", "settling": ""}, cached(),
		"a run in flight whole, an ended one without its message, no settled one")

	orig := settling.DeepCopy()
	settling.Labels[securityv1.LabelSettled] = "true"
	require.NoError(t, cl.Patch(ctx, settling, client.MergeFrom(orig)))
	assert.Eventually(t, func() bool { _, ok := cached()["settling"]; return !ok }, 30*time.Second, 50*time.Millisecond, "a run settled leaves the cache")
}
