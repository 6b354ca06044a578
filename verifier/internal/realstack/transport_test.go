package realstack

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	velerodriverv1 "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

// cuttingProxy is an HTTP proxy on a random loopback port in front of the stack's MinIO (the Host
// header kept, so that presigned signatures still match). While cuts is not zero, it answers a GET
// of a backup's tarball (*.tar.gz) with MinIO's headers, Content-Length included, and half of the
// body, then closes the connection, as a connection that drops mid-download; each cut decrements
// a positive cuts (a negative one cuts for ever). It counts the tarball GETs and the cuts.
type cuttingProxy struct {
	URL                string
	cuts, gets, cutted atomic.Int64
}

func newCuttingProxy(t *testing.T) *cuttingProxy {
	t.Helper()
	p := &cuttingProxy{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out, err := http.NewRequestWithContext(r.Context(), r.Method, stack.S3URL()+r.URL.RequestURI(), r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out.Host = r.Host
		out.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		tarball := r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, ".tar.gz") && resp.StatusCode == http.StatusOK
		if tarball {
			p.gets.Add(1)
		}
		if tarball && resp.ContentLength > 1 && p.take() {
			_, _ = io.CopyN(w, resp.Body, resp.ContentLength/2)
			w.(http.Flusher).Flush()
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// take reports whether this tarball GET is cut.
func (p *cuttingProxy) take() bool {
	for {
		n := p.cuts.Load()
		switch {
		case n == 0:
			return false
		case n < 0:
			p.cutted.Add(1)
			return true
		case p.cuts.CompareAndSwap(n, n-1):
			p.cutted.Add(1)
			return true
		}
	}
}

// TestCutDownloadIsRetriedNotAVerdict: the object store's connection drops in the middle of the
// tarball that a full-restore of a Velero-made Coffer Backup compares its sandbox with (a real
// proxy in front of MinIO: the storage location's publicUrl points at it, so Velero's
// DownloadRequests hand out URLs through it). Before, net/http's io.ErrUnexpectedEOF became
// "the backup's tarball does not decode": a critical restore-failed finding and Verified=False on
// a sound Backup, which retention may then prune. Now it is a transport fault: cut once, the run
// retries and passes with no finding; cut every time, the run ends Failed BackupVerifyFailed at
// its deadline, with no finding about the Backup and no verdict on it.
func TestCutDownloadIsRetriedNotAVerdict(t *testing.T) {
	proxy := newCuttingProxy(t)
	name := uniq("cut")
	_, vb := backupThrough(t, name, map[string]string{"region": "us-east-1", "s3ForcePathStyle": "true", "s3Url": stack.S3URL(), "publicUrl": proxy.URL}, nil)
	ns := vb.Spec.IncludedNamespaces[0]
	dm := map[string]string{velerodriverv1.MetaBackupName: vb.Name, velerodriverv1.MetaNamespace: velerostack.Namespace}
	art := &backupsv1.BackupArtifact{URI: "s3://" + velerostack.Bucket + "/" + name + "/backups/" + vb.Name + "/" + vb.Name + ".tar.gz", Checksum: "sha256:" + strings.Repeat("0", 64)}

	fullRestore := func(t *testing.T, suffix string) (*harness, *securityv1.BackupVerifyRun, *backupsv1.Backup) {
		b := cofferBackupIn(t, ns, ns+"-"+suffix, velerodriverv1.Group, dm, backupsv1.BackupReady, art)
		h := cofferHarness(t)
		run := newRun(t, ns+"-"+suffix, securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendCoffer, BackupRef: securityv1.BackupRef{Name: b.Name, Namespace: ns},
			Mode: securityv1.ModeFullRestore, SandboxNamespace: ns + "-" + suffix + "-bvsandbox", Timeout: &metav1.Duration{Duration: 5 * time.Minute}})
		playDriverVelero(t, h, run, b)
		return h, run, b
	}

	t.Run("cut once: retried, passes", func(t *testing.T) {
		proxy.cuts.Store(1)
		gets := proxy.gets.Load()
		h, run, b := fullRestore(t, "once")
		h.finish(run)
		r := result(t, run)
		require.Equal(t, securityv1.RunSucceeded, run.Status.Phase, "%s\n%s", run.Status.Message, findingsOf(r.Spec.Findings))
		assert.Equal(t, []string{securityv1.CodeRestoreSucceeded}, codes(r.Spec.Findings), findingsOf(r.Spec.Findings))
		assert.Equal(t, int64(1), proxy.cutted.Load(), "the first tarball GET was cut")
		assert.GreaterOrEqual(t, proxy.gets.Load()-gets, int64(2), "and the tarball read again")
		assertVerdict(t, b, run, backupsv1.VerificationPassed, metav1.ConditionTrue, backupsv1.ReasonRestoreVerified)
	})

	t.Run("cut every time: BackupVerifyFailed, no verdict", func(t *testing.T) {
		proxy.cuts.Store(-1)
		t.Cleanup(func() { proxy.cuts.Store(0) })
		cutted := proxy.cutted.Load()
		h, run, b := fullRestore(t, "always")
		// Retried while the deadline lasts...
		for i := 0; i < 3; i++ {
			res := h.step(run)
			require.Equal(t, securityv1.RunRunning, run.Status.Phase, run.Status.Message)
			c := meta.FindStatusCondition(run.Status.Conditions, securityv1.ConditionProgressing)
			require.NotNil(t, c)
			require.Equal(t, securityv1.ReasonRetrying, c.Reason, c.Message)
			assert.Contains(t, c.Message, "transport fault")
			h.clock.Step(res.RequeueAfter)
		}
		assert.GreaterOrEqual(t, proxy.cutted.Load()-cutted, int64(3), "each attempt read the tarball and was cut")
		// ...and the run fails as not carried out once it passed.
		h.clock.Step(6 * time.Minute)
		h.finish(run)
		assertVerifyFailed(t, run)
		r := result(t, run)
		assert.Equal(t, []string{securityv1.CodeTimeout}, codes(r.Spec.Findings), "the run's timeout, nothing about the Backup: %s", findingsOf(r.Spec.Findings))
		assert.Contains(t, run.Status.Message, "transport fault")
		assert.Contains(t, run.Status.Message, "bytes the object store announced", "says how much arrived")
		got := getBackup(t, b)
		assert.Nil(t, got.Status.Verification, "no verdict on a Backup that could not be read")
		assert.Nil(t, meta.FindStatusCondition(got.Status.Conditions, backupsv1.ConditionVerified))
	})
}
