package realstack

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
)

// tlsMinIO puts a TLS endpoint with a self-signed certificate in front of the stack's MinIO (the
// Host header kept, so that presigned signatures still match) and returns its URL and CA (PEM).
func tlsMinIO(t *testing.T) (string, []byte) {
	target, err := url.Parse("http://" + stack.S3Endpoint)
	require.NoError(t, err)
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = r.In.Host
	}}
	srv := httptest.NewUnstartedServer(proxy)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

// TestSelfSignedStorageLocation: a BackupStorageLocation whose object store (MinIO) serves TLS
// with a self-signed certificate, named in spec.objectStorage.caCert. Velero writes the backup
// through it; before, the verifier downloaded with http.DefaultClient, refused the certificate and
// reported the sound backup as failed. Now each location's client trusts its caCert.
func TestSelfSignedStorageLocation(t *testing.T) {
	ctx := context.Background()
	endpoint, ca := tlsMinIO(t)
	name := uniq("tls")
	_, vb := backupThrough(t, name, map[string]string{"region": "us-east-1", "s3ForcePathStyle": "true", "s3Url": endpoint}, ca)
	vb.Annotations = map[string]string{backupsv1.AnnotationChecksum: "sha256:" + hex.EncodeToString(bucketSum(t, name+"/backups/"+vb.Name+"/"+vb.Name+".tar.gz"))}
	require.NoError(t, cl.Update(ctx, vb))

	h := newHarness(t)
	run := veleroRun(t, "tls-"+vb.Name, vb.Name, securityv1.ModeChecksumOnly, "")
	h.finish(run)
	assert.Equal(t, securityv1.RunSucceeded, run.Status.Phase, run.Status.Message)
	res := result(t, run)
	assert.Equal(t, []string{securityv1.CodeChecksumMatch}, codes(res.Spec.Findings))
	assert.Equal(t, vb.Annotations[backupsv1.AnnotationChecksum], res.Spec.ComputedChecksum)
}

// resetTransport fails every request as a dropped connection does; net/http then returns an
// error quoting the whole presigned URL.
type resetTransport struct{}

func (resetTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("read: connection reset by peer")
}

// TestPresignedURLNeverLeaks: downloads fail after Velero issued the presigned URL. Before, the
// error (quoting the URL with its signature) became a finding, the run's message and its events.
// Now the query string is redacted from every error of the download path: no status, Result,
// SecurityEvent, Kubernetes Event or log line of the run holds it.
func TestPresignedURLNeverLeaks(t *testing.T) {
	ns := uniq("lk")
	namespaceWithData(t, ns)
	vb := veleroBackup(t, ns, true, ns)

	var mu sync.Mutex
	var logs strings.Builder
	ctx := ctrl.LoggerInto(context.Background(), funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logs.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: 1})) // the verifier's own lines, V(1) included (client-go logs bodies from V(8) on)
	rec := events.NewFakeRecorder(100)
	h := newHarness(t)
	h.r.Recorder = rec
	h.velero().HTTP = &http.Client{Transport: resetTransport{}}
	run := veleroRun(t, "leak", vb.Name, securityv1.ModeChecksumOnly, "")
	key := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(run)}
	_, err := h.r.Reconcile(ctx, key)
	require.NoError(t, err)
	h.clock.Step(11 * time.Minute)
	_, err = h.r.Reconcile(ctx, key)
	require.NoError(t, err)
	require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(run), run))
	assertVerifyFailed(t, run)

	var seen []string
	add := func(what string, v any) {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		seen = append(seen, what+": "+string(b))
	}
	add("run status", run.Status)
	add("result", result(t, run).Spec)
	for _, evs := range securityEvents(t, run) {
		add("security events", evs)
	}
	close(rec.Events)
	for e := range rec.Events {
		seen = append(seen, "event: "+e)
	}
	mu.Lock()
	seen = append(seen, "log: "+logs.String())
	mu.Unlock()
	all := strings.Join(seen, "\n")
	assert.Contains(t, all, "connection reset by peer", "the download error did reach them")
	assert.Contains(t, all, "?REDACTED")
	for _, s := range seen {
		assert.NotContains(t, s, "X-Amz-", "a presigned query string leaked")
	}
}
