package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/coffer-backup/coffer/core-controller/internal/claim"
	"github.com/coffer-backup/coffer/core-controller/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

func TestParseFlags(t *testing.T) {
	o, err := parseFlags(nil)
	require.NoError(t, err)
	assert.Equal(t, claim.DefaultTimeout, o.controllers.ClaimTimeout)
	assert.Equal(t, 8, o.controllers.PlanWorkers)
	assert.True(t, o.leaderElect)
	m := metricsOptions(o.metricsAddr, o.metricsSecure, o.metricsCertDir)
	assert.Equal(t, ":8443", m.BindAddress)
	assert.True(t, m.SecureServing, "metrics are served over HTTPS by default")
	assert.NotNil(t, m.FilterProvider, "and only to tokens allowed to get /metrics")
	assert.Empty(t, m.CertDir, "with a self-signed certificate")

	o, err = parseFlags([]string{"--metrics-secure=false", "--metrics-bind-address=:8080", "--metrics-cert-dir=/certs"})
	require.NoError(t, err)
	m = metricsOptions(o.metricsAddr, o.metricsSecure, o.metricsCertDir)
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
// once, /readyz once the caches have synced, and a cancelled context stops it cleanly.
func TestRunServesProbes(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	probes := l.Addr().String()
	require.NoError(t, l.Close())
	o, err := parseFlags([]string{"--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=" + probes})
	require.NoError(t, err)

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
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("run did not stop")
	}
}
