package agent

import (
	"bytes"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWalkBeforeIsTheWalksOrder: the order walkBefore tells is the one filepath.WalkDir visits
// files in, for names where byte order and the walk's differ ("a/b" against "a.b", "a-b", "a b").
func TestWalkBeforeIsTheWalksOrder(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a.b", "a-b", "a b", "ab", "a0", "a/b", "a/b.c", "a/bc/d", "a/b-c/x", "a.b.c/x", "b", "Z", "_", "a/c/d/e"} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var order []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			order = append(order, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(order) < 8 {
		t.Fatalf("the tree has %d files: %v", len(order), order)
	}
	for i := range order {
		for j := range order {
			if got, want := walkBefore(order[i], order[j]), i < j; got != want {
				t.Errorf("walkBefore(%q, %q) = %v; the walk visits them in the order %v", order[i], order[j], got, order)
			}
		}
	}
}

// TestSealedStream: a stream of several segments reads back; one that lost its last segment, had
// a byte changed, or is read under another key or object key, does not.
func TestSealedStream(t *testing.T) {
	keys, err := deriveRepoKeys(testChunkKey)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 2*segmentSize+12345)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	var out bytes.Buffer
	w, err := newSealedWriter(&out, keys.seal, "r/files/x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	read := func(stream []byte, key string, k repoKeys) ([]byte, error) {
		r, err := newSealedReader(bytes.NewReader(stream), k.seal, key)
		if err != nil {
			return nil, err
		}
		return io.ReadAll(r)
	}
	got, err := read(out.Bytes(), "r/files/x", keys)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, %v; want the %d written", len(got), err, len(data))
	}
	last := out.Len() - (12345 + keys.seal.Overhead() + 4)
	other, _ := deriveRepoKeys(strings.Repeat("x", 40))
	flipped := bytes.Clone(out.Bytes())
	flipped[len(flipped)/2] ^= 1
	for name, tc := range map[string]struct {
		stream []byte
		key    string
		k      repoKeys
	}{
		"without its last segment": {out.Bytes()[:last], "r/files/x", keys},
		"a byte changed":           {flipped, "r/files/x", keys},
		"under another object key": {out.Bytes(), "r/files/y", keys},
		"under another chunk key":  {out.Bytes(), "r/files/x", other},
	} {
		if _, err := read(tc.stream, tc.key, tc.k); err == nil {
			t.Errorf("a sealed stream %s read without error", name)
		}
	}
}
