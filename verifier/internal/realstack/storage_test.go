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
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
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
	bsl := &velerov1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: velerostack.Namespace},
		Spec: velerov1.BackupStorageLocationSpec{Provider: "aws",
			StorageType: velerov1.StorageType{ObjectStorage: &velerov1.ObjectStorageLocation{Bucket: velerostack.Bucket, Prefix: name, CACert: ca}},
			Config:      map[string]string{"region": "us-east-1", "s3ForcePathStyle": "true", "s3Url": endpoint}}}
	require.NoError(t, cl.Create(ctx, bsl))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := cl.Get(ctx, client.ObjectKeyFromObject(bsl), bsl)
		return bsl.Status.Phase == velerov1.BackupStorageLocationPhaseAvailable, err
	}), "velero validates the TLS location: %s\n%s", bsl.Status.Message, stack.VeleroLog())

	ns := uniq("tlsns")
	namespaceWithData(t, ns)
	vb := &velerov1.Backup{ObjectMeta: metav1.ObjectMeta{Name: ns, Namespace: velerostack.Namespace},
		Spec: velerov1.BackupSpec{IncludedNamespaces: []string{ns}, StorageLocation: bsl.Name, SnapshotVolumes: ptr(false)}}
	require.NoError(t, cl.Create(ctx, vb))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := cl.Get(ctx, client.ObjectKeyFromObject(vb), vb)
		return vb.Status.Phase == velerov1.BackupPhaseCompleted, err
	}), "velero backup through the TLS location: %s\n%s", vb.Status.Phase, stack.VeleroLog())
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
