package images

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/require"
)

func TestBuildWritesAnImportableDeterministicArchive(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	bin := filepath.Join(dir, "coffer-pause")
	require.NoError(t, BuildBinary(ctx, "", PausePackage, bin))
	binData, err := os.ReadFile(bin)
	require.NoError(t, err)

	build := func(out string) *Image {
		img, err := Build(ctx, Options{
			Binary: bin,
			Name:   "coffer/coffer-agent:dev",
			Cmd:    []string{"--serve"},
			Out:    filepath.Join(dir, out),
		})
		require.NoError(t, err)
		return img
	}
	first, second := build("a.tar"), build("b.tar")
	require.Equal(t, "docker.io/coffer/coffer-agent:dev", first.Name)
	require.Equal(t, "/usr/local/bin/coffer-pause", first.Path)
	require.Equal(t, first.Digest, second.Digest, "two builds of one binary must give one digest")
	require.Equal(t, fileSum(t, first.Archive), fileSum(t, second.Archive), "archives must be byte-identical")

	// Read the archive back as containerd would: an OCI image layout in a tar.
	lay := filepath.Join(dir, "layout")
	untar(t, first.Archive, lay)
	for _, f := range []string{"oci-layout", "index.json"} {
		require.FileExists(t, filepath.Join(lay, f))
	}
	idx, err := layout.ImageIndexFromPath(lay)
	require.NoError(t, err)
	im, err := idx.IndexManifest()
	require.NoError(t, err)
	require.Equal(t, types.OCIImageIndex, im.MediaType)
	require.Len(t, im.Manifests, 1)
	desc := im.Manifests[0]
	require.Equal(t, types.OCIManifestSchema1, desc.MediaType)
	require.Equal(t, first.Digest, desc.Digest.String())
	require.Equal(t, "docker.io/coffer/coffer-agent:dev", desc.Annotations[AnnotationImageName])
	require.Equal(t, "dev", desc.Annotations[AnnotationRefName])
	require.NotNil(t, desc.Platform)
	require.Equal(t, "linux", desc.Platform.OS)

	img, err := idx.Image(desc.Digest)
	require.NoError(t, err)
	cfg, err := img.ConfigFile()
	require.NoError(t, err)
	require.Equal(t, []string{"/usr/local/bin/coffer-pause"}, cfg.Config.Entrypoint)
	require.Equal(t, []string{"--serve"}, cfg.Config.Cmd)
	require.Equal(t, DefaultUser, cfg.Config.User)
	require.Equal(t, Epoch, cfg.Created.Time.UTC())
	layers, err := img.Layers()
	require.NoError(t, err)
	require.Len(t, layers, 1)
	mt, err := layers[0].MediaType()
	require.NoError(t, err)
	require.Equal(t, types.OCILayer, mt)
	diffID, err := layers[0].DiffID()
	require.NoError(t, err)
	require.Equal(t, []string{diffID.String()}, hashStrings(cfg.RootFS.DiffIDs))

	rc, err := layers[0].Uncompressed()
	require.NoError(t, err)
	defer rc.Close()
	entries := map[string]*tar.Header{}
	var content []byte
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		entries[h.Name] = h
		require.Equal(t, Epoch, h.ModTime.UTC(), h.Name)
		require.Zero(t, h.Uid, h.Name)
		if h.Name == "usr/local/bin/coffer-pause" {
			content, err = io.ReadAll(tr)
			require.NoError(t, err)
		}
	}
	require.Contains(t, entries, "usr/")
	require.Contains(t, entries, "usr/local/bin/")
	require.Contains(t, entries, "tmp/")
	require.NotContains(t, entries, "bin/sh", "no shell in the image")
	require.Len(t, entries, 5)
	h := entries["usr/local/bin/coffer-pause"]
	require.EqualValues(t, tar.TypeReg, h.Typeflag)
	require.EqualValues(t, 0o755, h.Mode)
	require.True(t, bytes.Equal(binData, content), "the layer must hold the binary unchanged")

	// A different binary gives a different digest.
	other := filepath.Join(dir, "other")
	require.NoError(t, os.WriteFile(other, append(binData, 0), 0o755))
	img3, err := Build(ctx, Options{Binary: other, Name: "coffer/coffer-agent:dev", Path: "/usr/local/bin/coffer-pause", Cmd: []string{"--serve"}, Out: filepath.Join(dir, "c.tar")})
	require.NoError(t, err)
	require.NotEqual(t, first.Digest, img3.Digest)
}

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"coffer/pause:dev":                "docker.io/coffer/pause:dev",
		"busybox":                         "docker.io/library/busybox:latest",
		"docker.io/coffer/agent:v1":       "docker.io/coffer/agent:v1",
		"index.docker.io/coffer/agent":    "docker.io/coffer/agent:latest",
		"localhost/coffer/agent:dev":      "localhost/coffer/agent:dev",
		"registry.local:5000/a/b/c:1.2.3": "registry.local:5000/a/b/c:1.2.3",
	} {
		got, err := Normalize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "Coffer/Pause:dev", "coffer/pause@sha256:" + string(bytes.Repeat([]byte("a"), 64))} {
		_, err := Normalize(bad)
		require.Error(t, err, bad)
	}
}

func fileSum(t *testing.T, p string) [32]byte {
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return sha256.Sum256(b)
}

func untar(t *testing.T, archive, dst string) {
	f, err := os.Open(archive)
	require.NoError(t, err)
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		require.NoError(t, err)
		p := filepath.Join(dst, filepath.FromSlash(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			require.NoError(t, os.MkdirAll(p, 0o755))
		case tar.TypeReg:
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			b, err := io.ReadAll(tr)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(p, b, 0o644))
		default:
			t.Fatalf("unexpected entry %s (type %c)", h.Name, h.Typeflag)
		}
	}
}

func hashStrings[T interface{ String() string }](hs []T) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.String()
	}
	return out
}
