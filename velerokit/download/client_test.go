package download

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// presigned is the query string of an S3 presigned URL, as Velero's DownloadRequest returns it.
const presigned = "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=coffer-test%2F20261201%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Signature=deadbeefcafe"

// TestOpenRedactsThePresignedQuery: every way a download can fail (refused, reset mid-body, an
// untrusted certificate) yields an error without the URL's query string, which holds the signature.
func TestOpenRedactsThePresignedQuery(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := "http://" + closed.Addr().String() + "/coffer/velero/backups/b/b.tar.gz" + presigned
	require.NoError(t, closed.Close())

	reset := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		_, _ = w.Write([]byte("partial"))
		w.(http.Flusher).Flush()
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	}))
	defer reset.Close()
	untrusted := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer untrusted.Close()

	plain, err := NewHTTPClient(nil)
	require.NoError(t, err)
	for name, u := range map[string]string{
		"refused":   refused,
		"reset":     reset.URL + "/b.tar.gz" + presigned,
		"untrusted": untrusted.URL + "/b.tar.gz" + presigned,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := HashURL(context.Background(), plain, u)
			require.Error(t, err)
			assert.NotContains(t, err.Error(), "X-Amz-")
			assert.NotContains(t, err.Error(), "deadbeefcafe")
			if name != "reset" { // a read error names no URL at all
				assert.Contains(t, err.Error(), "b.tar.gz", "the error still says which file: %v", err)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	assert.Nil(t, Redact(nil))
	plain := errors.New("no URL here")
	assert.Same(t, plain, Redact(plain))
	ue := &url.Error{Op: "Get", URL: "https://s3.example/b/k" + presigned, Err: io.ErrUnexpectedEOF}
	got := Redact(fmt.Errorf("downloading: %w", ue))
	assert.Equal(t, `downloading: Get "https://s3.example/b/k?REDACTED": unexpected EOF`, got.Error())
	assert.ErrorIs(t, got, io.ErrUnexpectedEOF, "the chain is kept")
	got = Redact(fmt.Errorf("fetching https://s3.example/b/k%s failed; retry http://x/y?a=b", presigned))
	assert.Equal(t, "fetching https://s3.example/b/k?REDACTED failed; retry http://x/y?REDACTED", got.Error())
	assert.Equal(t, "https://h/p", RedactURL("https://h/p"))
}

// TestNewHTTPClientHasTimeouts: an object store that accepts the connection and never answers
// fails the download after the response-header timeout, with no deadline on the context.
func TestNewHTTPClientHasTimeouts(t *testing.T) {
	c, err := NewHTTPClient(nil)
	require.NoError(t, err)
	tr := c.Transport.(*http.Transport)
	assert.Positive(t, tr.TLSHandshakeTimeout)
	assert.Positive(t, tr.ResponseHeaderTimeout)
	assert.Positive(t, tr.IdleConnTimeout)
	require.NotNil(t, tr.DialContext)

	stall := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-stall }))
	defer srv.Close()
	defer close(stall)
	saved := ResponseHeaderTimeout
	ResponseHeaderTimeout = 300 * time.Millisecond
	defer func() { ResponseHeaderTimeout = saved }()
	c, err = NewHTTPClient(nil)
	require.NoError(t, err)
	start := time.Now()
	_, err = Open(context.Background(), c, srv.URL+"/b.tar.gz"+presigned)
	require.Error(t, err)
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.Contains(t, err.Error(), "timeout")
	assert.NotContains(t, err.Error(), "X-Amz-")
}

// TestNewHTTPClientTrustsTheLocationCA: a self-signed object store is refused by default and
// trusted once its CA (a BackupStorageLocation's caCert) is given.
func TestNewHTTPClientTrustsTheLocationCA(t *testing.T) {
	data := []byte("tarball")
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(data) }))
	defer srv.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})

	plain, err := NewHTTPClient(nil)
	require.NoError(t, err)
	_, err = HashURL(context.Background(), plain, srv.URL+"/b.tar.gz"+presigned)
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "certificate"), "%v", err)

	trusting, err := NewHTTPClient(caPEM)
	require.NoError(t, err)
	d, err := HashURL(context.Background(), trusting, srv.URL+"/b.tar.gz"+presigned)
	require.NoError(t, err)
	assert.Equal(t, int64(len(data)), d.SizeBytes)

	_, err = NewHTTPClient([]byte("not a certificate"))
	assert.Error(t, err)
}

func TestOpenNotFound(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	c, err := NewHTTPClient(nil)
	require.NoError(t, err)
	_, err = Open(context.Background(), c, srv.URL+"/gone"+presigned)
	assert.True(t, IsNotFound(err), "%v", err)
	assert.ErrorContains(t, err, "404")
	assert.False(t, IsNotFound(errors.New("HTTP 404")))
}
