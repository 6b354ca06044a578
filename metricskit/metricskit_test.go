package metricskit

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/components"
)

// counting counts the requests a client sends the API server.
type counting struct {
	next http.RoundTripper
	n    atomic.Int64
}

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// fixture is a real API server with two ServiceAccounts: reader, which a ClusterRole lets get
// /metrics, and stranger, which nothing lets.
type fixture struct {
	reader, stranger string
	cfg              *rest.Config
}

func start(t *testing.T) fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	c, err := cluster.Start(ctx, cluster.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop() })
	cs, err := kubernetes.NewForConfig(c.Config)
	require.NoError(t, err)
	reader, err := components.ServiceAccountToken(ctx, c.Kubeconfig, "monitoring", "reader")
	require.NoError(t, err)
	stranger, err := components.ServiceAccountToken(ctx, c.Kubeconfig, "monitoring", "stranger")
	require.NoError(t, err)
	_, err = cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "monitoring", Name: "reader"}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return fixture{reader: reader, stranger: stranger, cfg: c.Config}
}

// serve puts a reviewer's filter, asking through a counting client, before a handler that
// answers "metrics"; the reviewer's clock is the test's.
func serve(t *testing.T, cfg *rest.Config, now *time.Time) (*httptest.Server, *reviewer, *counting) {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	require.NoError(t, err)
	next := hc.Transport
	if next == nil { // the shared default client, for a config that needs nothing of its own
		next = http.DefaultTransport
	}
	count := &counting{next: next}
	hc = &http.Client{Transport: count, Timeout: hc.Timeout}
	r, err := newReviewer(cfg, hc)
	require.NoError(t, err)
	r.now = func() time.Time { return *now }
	h, err := r.filter(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "metrics") }))
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, r, count
}

// get sends method to srv's path with the authorization header (none if empty) and returns the
// status and body.
func get(t *testing.T, srv *httptest.Server, method, path, authorization string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	require.NoError(t, err)
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	res, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer func() { _ = res.Body.Close() }()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(body)
}

func TestOnlyATokenAllowedToGetThePathGetsMetrics(t *testing.T) {
	f := start(t)
	now := time.Now()
	srv, _, count := serve(t, f.cfg, &now)

	for _, h := range []string{"", "Bearer", "Bearer ", "Basic " + f.reader, f.reader, "Bearer not-a-token"} {
		code, body := get(t, srv, http.MethodGet, "/metrics", h)
		assert.Equal(t, http.StatusUnauthorized, code, "authorization %.12q", h)
		assert.NotContains(t, body, "metrics")
	}
	code, body := get(t, srv, http.MethodGet, "/metrics", "Bearer "+f.stranger)
	assert.Equal(t, http.StatusForbidden, code, "a ServiceAccount not bound to the reader role")
	assert.Equal(t, "Authorization denied for user system:serviceaccount:monitoring:stranger\n", body)
	code, _ = get(t, srv, http.MethodGet, "/other", "Bearer "+f.reader)
	assert.Equal(t, http.StatusForbidden, code, "the reader may get /metrics only")
	code, _ = get(t, srv, http.MethodPost, "/metrics", "Bearer "+f.reader)
	assert.Equal(t, http.StatusForbidden, code, "the reader may only get")
	code, body = get(t, srv, http.MethodGet, "/metrics", "bearer  "+f.reader)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "metrics", body)

	// Answers are remembered: asking again costs the API server nothing.
	asked := count.n.Load()
	for range 3 {
		code, _ = get(t, srv, http.MethodGet, "/metrics", "Bearer "+f.reader)
		assert.Equal(t, http.StatusOK, code)
		code, _ = get(t, srv, http.MethodGet, "/metrics", "Bearer "+f.stranger)
		assert.Equal(t, http.StatusForbidden, code)
		code, _ = get(t, srv, http.MethodGet, "/metrics", "Bearer not-a-token")
		assert.Equal(t, http.StatusUnauthorized, code)
	}
	assert.Equal(t, asked, count.n.Load(), "remembered answers ask nothing")

	now = now.Add(denyFor)
	code, _ = get(t, srv, http.MethodGet, "/metrics", "Bearer "+f.reader)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, asked, count.n.Load(), "an allowed token is remembered for longer than a refusal")
	code, _ = get(t, srv, http.MethodGet, "/metrics", "Bearer "+f.stranger)
	assert.Equal(t, http.StatusForbidden, code)
	assert.Equal(t, asked+1, count.n.Load(), "a refused access is asked again after denyFor (a SubjectAccessReview; whom the token is, is still known)")
	code, _ = get(t, srv, http.MethodGet, "/metrics", "Bearer not-a-token")
	assert.Equal(t, http.StatusUnauthorized, code)
	assert.Equal(t, asked+2, count.n.Load(), "an unknown token is asked again after denyFor")

	now = now.Add(tokenFor - denyFor)
	asked = count.n.Load()
	code, _ = get(t, srv, http.MethodGet, "/metrics", "Bearer "+f.reader)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, asked+1, count.n.Load(), "the token is asked again after tokenFor (a TokenReview); its user's access is still known")

	now = now.Add(allowFor)
	code, _ = get(t, srv, http.MethodGet, "/metrics", "Bearer "+f.reader)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, asked+3, count.n.Load(), "after allowFor, both are asked again")
}

func TestRememberedAnswersAreBounded(t *testing.T) {
	f := start(t)
	now := time.Now()
	srv, r, count := serve(t, f.cfg, &now)
	r.atMost = 4

	code, _ := get(t, srv, http.MethodGet, "/metrics", "Bearer "+f.reader)
	require.Equal(t, http.StatusOK, code)
	for i := range 10 {
		code, _ = get(t, srv, http.MethodGet, "/metrics", "Bearer forged-"+strings.Repeat("x", i))
		require.Equal(t, http.StatusUnauthorized, code)
	}
	assert.Len(t, r.answered, 4, "a flood of new tokens fills the memory to its bound, no further")
	asked := count.n.Load()
	code, _ = get(t, srv, http.MethodGet, "/metrics", "Bearer "+f.reader)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, asked, count.n.Load(), "what was remembered before the flood still is")

	// Once the refusals expire, they make room again.
	now = now.Add(denyFor)
	code, _ = get(t, srv, http.MethodGet, "/metrics", "Bearer "+f.stranger)
	assert.Equal(t, http.StatusForbidden, code)
	assert.Len(t, r.answered, 4, "the reader's token and access, the stranger's token and access")
}

func TestAnAPIServerThatCannotBeAskedIsNotADecision(t *testing.T) {
	// An API server at a port nobody serves: no review can be made.
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	now := time.Now()
	srv, r, count := serve(t, &rest.Config{Host: closed.URL}, &now)

	for range 2 {
		code, _ := get(t, srv, http.MethodGet, "/metrics", "Bearer some-token")
		assert.Equal(t, http.StatusInternalServerError, code)
	}
	assert.Empty(t, r.answered, "a failed review is not remembered")
	assert.GreaterOrEqual(t, count.n.Load(), int64(2), "each request asked again")
}
