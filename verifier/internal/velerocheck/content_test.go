package velerocheck

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/coffer-backup/coffer/velerokit/download"
	"github.com/coffer-backup/coffer/verifier/internal/contentdiff"
)

// obj decodes JSON as the client and the tarball reader do (integers as int64).
func obj(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, utiljson.Unmarshal([]byte(s), &m))
	return m
}

// TestNormalizeDropsVelerosKeys: the labels and annotations Velero's restore sets or clears, which
// contentdiff names without importing Velero, are Velero's.
func TestNormalizeDropsVelerosKeys(t *testing.T) {
	cm := map[string]any{"metadata": map[string]any{"labels": map[string]any{velerov1.BackupNameLabel: "b", velerov1.RestoreNameLabel: "r"}}}
	assert.Empty(t, contentdiff.Normalize(cm, schema.GroupKind{Kind: "ConfigMap"}, nil))
	pvc := map[string]any{"metadata": map[string]any{"annotations": map[string]any{velerov1.VolumeSnapshotLabel: "s", velerov1.DataUploadNameAnnotation: "u"}}}
	assert.Empty(t, contentdiff.Normalize(pvc, schema.GroupKind{Kind: "PersistentVolumeClaim"}, nil))
}

func TestParseEntry(t *testing.T) {
	for p, want := range map[string]*entry{
		"resources/configmaps/namespaces/prod/a.json":                           {dir: "configmaps", ns: "prod", name: "a"},
		"resources/deployments.apps/v1-preferredversion/namespaces/prod/w.json": {dir: "deployments.apps", ns: "prod", name: "w"},
		"resources/deployments.apps/v1beta1/namespaces/prod/w.json":             nil, // another version: not what a Restore reads
		"resources/namespaces/cluster/prod.json":                                nil,
		"resources/persistentvolumes/v1-preferredversion/cluster/pv.json":       nil,
		"metadata/version": nil,
		"resources/configmaps/namespaces/prod/a.yaml": nil,
	} {
		e, ok := parseEntry(p)
		if want == nil {
			assert.False(t, ok, p)
			continue
		}
		assert.True(t, ok, p)
		assert.Equal(t, *want, e, p)
	}
}

type tarFile struct{ name, body string }

func tarball(t *testing.T, files ...tarFile) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range files {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: f.name, Size: int64(len(f.body)), Typeflag: tar.TypeReg, Mode: 0o755}))
		_, err := tw.Write([]byte(f.body))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, gz.Close())
	return &buf
}

// TestIndexContents: one object per key (its unversioned copy, or its preferred-version copy), the
// controllers of every namespaced object, digests only of the wanted objects without controller
// and of a kind the restore brings back.
func TestIndexContents(t *testing.T) {
	cm := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"prod"},"data":{"k":"v"}}`
	rs := `{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"w-1","namespace":"prod","ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"w","uid":"1","controller":true}]},"spec":{"replicas":1}}`
	pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"w-1-x","namespace":"prod","ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"w-1","uid":"2","controller":true}]},"spec":{}}`
	other := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b","namespace":"prod"},"data":{"k":"v"}}`
	buf := tarball(t,
		tarFile{"resources/configmaps/namespaces/prod/a.json", cm},
		tarFile{"resources/configmaps/v1-preferredversion/namespaces/prod/a.json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"prod"},"data":{"k":"changed"}}`},
		tarFile{"resources/replicasets.apps/v1-preferredversion/namespaces/prod/w-1.json", rs},
		tarFile{"resources/pods/namespaces/prod/w-1-x.json", pod},
		tarFile{"resources/configmaps/namespaces/prod/b.json", other},
		tarFile{"resources/configmaps/namespaces/prod/kube-root-ca.crt.json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"kube-root-ca.crt","namespace":"prod"}}`},
		tarFile{"resources/namespaces/cluster/prod.json", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"prod"}}`},
		tarFile{"resources/daemonsets.apps/namespaces/prod/agent.json", `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"agent","namespace":"prod"},"spec":{}}`},
	)
	cmKey := objectKey{gk: schema.GroupKind{Kind: "ConfigMap"}, ns: "prod", name: "a"}
	rsKey := objectKey{gk: schema.GroupKind{Group: "apps", Kind: "ReplicaSet"}, ns: "prod", name: "w-1"}
	rootCA := objectKey{gk: schema.GroupKind{Kind: "ConfigMap"}, ns: "prod", name: "kube-root-ca.crt"}
	dsKey := objectKey{gk: schema.GroupKind{Group: "apps", Kind: "DaemonSet"}, ns: "prod", name: "agent"}
	tb := buf.Bytes()
	wanted := map[objectKey]bool{cmKey: true, rsKey: true, rootCA: true, dsKey: true}
	idx, err := indexContents(bytes.NewReader(tb), wanted, map[string]string{"prod": "prod-bvsandbox"}, metadataOnly(ExcludedFromSandbox))
	require.NoError(t, err)
	want, err := contentdiff.DigestOf(contentdiff.Normalize(obj(t, cm), cmKey.gk, nil))
	require.NoError(t, err)
	assert.Equal(t, map[objectKey]contentdiff.Digest{cmKey: want}, idx.digests,
		"the first copy of a; not b (not wanted), not the ReplicaSet (controlled), not the root CA, not the DaemonSet (left out of the sandbox: only its metadata is read)")
	assert.Equal(t, map[objectKey]controllerRef{
		rsKey: {group: "apps", kind: "Deployment", name: "w"},
		{gk: schema.GroupKind{Kind: "Pod"}, ns: "prod", name: "w-1-x"}: {group: "apps", kind: "ReplicaSet", name: "w-1"},
	}, idx.ctrl)

	// A restore that leaves out only Pods (driver-velero's inert restore) brings the DaemonSet
	// back: it is compared.
	idx, err = indexContents(bytes.NewReader(tb), wanted, nil, metadataOnly(map[schema.GroupKind]string{{Kind: "Pod"}: "pods"}))
	require.NoError(t, err)
	assert.Contains(t, idx.digests, dsKey)
	assert.Len(t, idx.digests, 2)
	assert.Len(t, idx.ctrl, 2)
}

func TestIndexContentsOfACorruptTarball(t *testing.T) {
	good := tarball(t, tarFile{"resources/configmaps/namespaces/prod/a.json", `{}`}).Bytes()
	_, err := indexContents(bytes.NewReader([]byte("not gzip")), nil, nil, nil)
	assert.True(t, errors.Is(err, errTarball), "%v", err)
	_, err = indexContents(bytes.NewReader(good[:len(good)/2]), nil, nil, nil)
	assert.True(t, errors.Is(err, errTarball), "%v", err)
}

// TestCutDownloadIsNoVerdict: a tarball whose download stops before the length the object store
// announced is a transport fault, not a tarball that does not decode; a tarball that arrives whole
// and is itself truncated still is one (errTarball, a fact about the backup). Before, both were
// errTarball: the connection that broke became a restore-failed finding.
func TestCutDownloadIsNoVerdict(t *testing.T) {
	var files []tarFile
	for i := range 200 {
		files = append(files, tarFile{fmt.Sprintf("resources/configmaps/namespaces/prod/c%d.json", i),
			fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c%d","namespace":"prod"},"data":{"k":"%s"}}`, i, strings.Repeat("v", i))})
	}
	good := tarball(t, files...).Bytes()
	truncated := good[:len(good)/2]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/cut.tar.gz": // the whole tarball announced, half of it sent, the connection closed
			w.Header().Set("Content-Length", strconv.Itoa(len(good)))
			_, _ = w.Write(truncated)
			w.(http.Flusher).Flush()
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
		case "/truncated.tar.gz": // a truncated tarball, sent whole
			w.Header().Set("Content-Length", strconv.Itoa(len(truncated)))
			_, _ = w.Write(truncated)
		}
	}))
	defer srv.Close()
	index := func(path string) error {
		body, err := download.Open(context.Background(), srv.Client(), srv.URL+path)
		require.NoError(t, err)
		defer body.Close()
		_, err = indexContents(body, nil, nil, nil)
		return err
	}
	err := index("/cut.tar.gz")
	require.Error(t, err)
	assert.True(t, download.IsTransport(err), "%v", err)
	assert.False(t, errors.Is(err, errTarball), "a cut connection says nothing of the tarball: %v", err)
	err = index("/truncated.tar.gz")
	assert.True(t, errors.Is(err, errTarball), "%v", err)
	assert.False(t, download.IsTransport(err), "%v", err)
}
