package download

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

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
