package download

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHashMatchesSha256(t *testing.T) {
	data := bytes.Repeat([]byte("coffer"), 200000)
	sum := sha256.Sum256(data)
	d, err := Hash(bytes.NewReader(data))
	require.NoError(t, err)
	assert.Equal(t, int64(len(data)), d.SizeBytes)
	assert.Equal(t, hex.EncodeToString(sum[:]), d.SHA256)
	assert.Equal(t, "sha256:"+hex.EncodeToString(sum[:]), d.Checksum())
}

func TestHashURL(t *testing.T) {
	data := []byte("tarball bytes")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/missing" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(data)
	}))
	defer srv.Close()
	d, err := HashURL(context.Background(), srv.Client(), srv.URL+"/ok")
	require.NoError(t, err)
	assert.Equal(t, int64(len(data)), d.SizeBytes)
	_, err = HashURL(context.Background(), srv.Client(), srv.URL+"/missing")
	assert.ErrorContains(t, err, "404")
}

// zeros is an endless reader that allocates nothing.
type zeros struct{ n int64 }

func (z *zeros) Read(p []byte) (int, error) {
	if z.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > z.n {
		p = p[:z.n]
	}
	clear(p)
	z.n -= int64(len(p))
	return len(p), nil
}

// BenchmarkHash streams 256 MiB per op: memory stays at the fixed buffer (see allocs/op, B/op).
func BenchmarkHash(b *testing.B) {
	const size = 256 << 20
	b.SetBytes(size)
	b.ReportAllocs()
	for range b.N {
		if _, err := Hash(&zeros{n: size}); err != nil {
			b.Fatal(err)
		}
	}
}

// cutServer serves body with Content-Length announced; for paths under /cut it sends only the
// first half, then closes the connection, as a store whose connection drops mid-download.
func cutServer(t *testing.T, body []byte) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		if !strings.HasPrefix(r.URL.Path, "/cut") {
			_, _ = w.Write(body)
			return
		}
		_, _ = w.Write(body[:len(body)/2])
		w.(http.Flusher).Flush()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestShortBodyIsATransportError: a body that ends before the Content-Length the server announced
// is a transport fault (IsTransport), through a gzip reader stacked on it too; before, it was a
// bare io.ErrUnexpectedEOF, which a reader of a tarball took for truncated data. A body that
// arrives whole ends with io.EOF, however its content decodes.
func TestShortBodyIsATransportError(t *testing.T) {
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	_, _ = w.Write(bytes.Repeat([]byte("coffer tarball "), 20000))
	require.NoError(t, w.Close())
	srv := cutServer(t, gz.Bytes())
	ctx := context.Background()

	t.Run("hash", func(t *testing.T) {
		_, err := HashURL(ctx, srv.Client(), srv.URL+"/cut/b.tar.gz")
		require.Error(t, err)
		assert.True(t, IsTransport(err), "%v", err)
		var te *TransportError
		require.ErrorAs(t, err, &te)
		assert.Equal(t, int64(gz.Len()), te.Expected)
		assert.Less(t, te.Read, te.Expected)
		assert.Contains(t, err.Error(), fmt.Sprintf("of the %d bytes the object store announced", gz.Len()))
		d, err := HashURL(ctx, srv.Client(), srv.URL+"/whole/b.tar.gz")
		require.NoError(t, err)
		assert.Equal(t, int64(gz.Len()), d.SizeBytes)
	})
	t.Run("through gzip", func(t *testing.T) {
		body, err := Open(ctx, srv.Client(), srv.URL+"/cut/b.tar.gz")
		require.NoError(t, err)
		defer body.Close()
		zr, err := gzip.NewReader(body)
		require.NoError(t, err)
		_, err = io.Copy(io.Discard, zr)
		assert.True(t, IsTransport(err), "%v", err)
	})
	t.Run("a whole body ends with EOF", func(t *testing.T) {
		body, err := Open(ctx, srv.Client(), srv.URL+"/whole/b.tar.gz")
		require.NoError(t, err)
		defer body.Close()
		b, err := io.ReadAll(body)
		require.NoError(t, err)
		assert.Equal(t, gz.Bytes(), b)
		n, err := body.Read(make([]byte, 8))
		assert.Zero(t, n)
		assert.Equal(t, io.EOF, err)
	})
}

// TestCountingBody: the reader Open wraps a body in, without a network.
func TestCountingBody(t *testing.T) {
	read := func(r io.Reader, expected int64) error {
		_, err := io.ReadAll(&countingBody{body: io.NopCloser(r), expected: expected})
		return err
	}
	assert.NoError(t, read(strings.NewReader("12345"), 5), "all announced bytes")
	assert.NoError(t, read(strings.NewReader("12345"), -1), "no length announced: the transport's EOF")
	err := read(strings.NewReader("123"), 5)
	assert.True(t, IsTransport(err), "short: %v", err)
	assert.NotErrorIs(t, err, io.ErrUnexpectedEOF)
	err = read(io.MultiReader(strings.NewReader("12"), iotest.ErrReader(io.ErrUnexpectedEOF)), 5)
	assert.True(t, IsTransport(err), "a read error: %v", err)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF, "the read error is kept in the chain")
	err = read(iotest.ErrReader(errors.New("connection reset by peer")), -1)
	assert.True(t, IsTransport(err), "a read error without a length: %v", err)
}
