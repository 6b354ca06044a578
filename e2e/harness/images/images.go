// Package images builds container images for the e2e node harness without Docker or a
// registry: one static binary becomes a single-layer OCI image, written as an OCI image-layout
// tar archive that `ctr -n k8s.io images import` accepts. Pods run such images with
// `imagePullPolicy: Never`.
//
// The output is deterministic: the same binary and options give the same bytes, hence the same
// manifest digest.
package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// DefaultUser is the numeric user:group images run as unless Options.User says otherwise
	// (the conventional "nonroot" ids; the images hold no /etc/passwd).
	DefaultUser = "65532:65532"
	// BinDir is where Build places the binary unless Options.Path says otherwise.
	BinDir = "/usr/local/bin"

	// AnnotationImageName is the index annotation containerd's importer names the image by.
	AnnotationImageName = "io.containerd.image.name"
	// AnnotationRefName is the OCI annotation for the reference (the tag, as containerd's own
	// exporter writes it).
	AnnotationRefName = "org.opencontainers.image.ref.name"
)

// Epoch is the timestamp of every file, history entry and config in a built image.
var Epoch = time.Unix(0, 0).UTC()

// Options describe an image made of one static binary.
type Options struct {
	// Binary is the path of the binary to pack; it must be static (CGO_ENABLED=0): the image
	// has no libc, no shell, nothing else.
	Binary string
	// Name is the image reference, e.g. "coffer/coffer-agent:dev". It is stored normalized
	// (docker.io/coffer/coffer-agent:dev), as the kubelet and containerd resolve it, so a pod may
	// use either spelling.
	Name string
	// Path is the binary's path inside the image; default /usr/local/bin/<base name of Binary>.
	Path string
	// Entrypoint is the image's entrypoint; default [Path].
	Entrypoint []string
	// Cmd are the image's default arguments.
	Cmd []string
	// Env is the image's environment; default PATH=/usr/local/bin.
	Env []string
	// User is "uid:gid" (numeric); default DefaultUser.
	User string
	// Out is the path of the archive to write (required). It is replaced atomically.
	Out string
	// OS and Architecture of the image; default linux and runtime.GOARCH.
	OS, Architecture string
}

// Image is a built image archive.
type Image struct {
	// Name is the normalized reference, e.g. docker.io/coffer/coffer-agent:dev.
	Name string
	// Archive is the path of the OCI image-layout tar.
	Archive string
	// Digest is the image manifest's digest ("sha256:…").
	Digest string
	// Path is the binary's path inside the image.
	Path string
}

// Build packs a static binary into a single-layer OCI image and writes it as an archive.
func Build(ctx context.Context, opts Options) (*Image, error) {
	if opts.Binary == "" || opts.Out == "" || opts.Name == "" {
		return nil, fmt.Errorf("images: Binary, Name and Out are required")
	}
	ref, err := Normalize(opts.Name)
	if err != nil {
		return nil, err
	}
	if opts.Path == "" {
		opts.Path = path.Join(BinDir, filepath.Base(opts.Binary))
	}
	if !path.IsAbs(opts.Path) {
		return nil, fmt.Errorf("images: Path %q is not absolute", opts.Path)
	}
	if len(opts.Entrypoint) == 0 {
		opts.Entrypoint = []string{opts.Path}
	}
	if opts.Env == nil {
		opts.Env = []string{"PATH=" + BinDir}
	}
	if opts.User == "" {
		opts.User = DefaultUser
	}
	if opts.OS == "" {
		opts.OS = "linux"
	}
	if opts.Architecture == "" {
		opts.Architecture = runtime.GOARCH
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	bin, err := os.ReadFile(opts.Binary)
	if err != nil {
		return nil, fmt.Errorf("images: reading the binary: %w", err)
	}
	layerTar, err := layerTar(opts.Path, bin)
	if err != nil {
		return nil, err
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestSpeed) // no name, no mtime: deterministic
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(layerTar); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	compressed := gz.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(compressed)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}

	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.ConfigFile(base, &v1.ConfigFile{
		Architecture: opts.Architecture,
		OS:           opts.OS,
		Created:      v1.Time{Time: Epoch},
		Config: v1.Config{
			Entrypoint: opts.Entrypoint,
			Cmd:        opts.Cmd,
			Env:        opts.Env,
			User:       opts.User,
			WorkingDir: "/",
		},
	})
	if err != nil {
		return nil, err
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: Epoch}, CreatedBy: "coffer e2e/harness/images: " + opts.Path},
	})
	if err != nil {
		return nil, err
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}

	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), mutate.IndexAddendum{
		Add: img,
		Descriptor: v1.Descriptor{
			Annotations: map[string]string{
				AnnotationImageName: ref,
				AnnotationRefName:   tagOf(ref),
			},
			Platform: &v1.Platform{OS: opts.OS, Architecture: opts.Architecture},
		},
	})
	dir, err := os.MkdirTemp(filepath.Dir(opts.Out), ".oci-layout-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if _, err := layout.Write(dir, idx); err != nil {
		return nil, fmt.Errorf("images: writing the OCI layout: %w", err)
	}
	if err := tarDir(dir, opts.Out); err != nil {
		return nil, err
	}
	return &Image{Name: ref, Archive: opts.Out, Digest: digest.String(), Path: opts.Path}, nil
}

// layerTar is the layer's content: the directories down to the binary, the binary (0755) and
// a world-writable /tmp, all owned by root with the fixed Epoch mtime.
func layerTar(binPath string, bin []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	rel := strings.TrimPrefix(path.Clean(binPath), "/")
	var dirs []string
	for d := path.Dir(rel); d != "."; d = path.Dir(d) {
		dirs = append([]string{d}, dirs...)
	}
	dirs = append(dirs, "tmp")
	sort.Strings(dirs)
	for _, d := range dirs {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode, ModTime: Epoch, Format: tar.FormatUSTAR}); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: 0o755, Size: int64(len(bin)), ModTime: Epoch, Format: tar.FormatUSTAR}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tarDir writes the files under dir, sorted, with fixed metadata, to out (atomically).
func tarDir(dir, out string) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			names = append(names, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	for _, p := range names {
		fi, err := os.Stat(p)
		if err != nil {
			f.Close()
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		h := &tar.Header{Name: rel, ModTime: Epoch, Format: tar.FormatPAX}
		if fi.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, rel+"/", 0o755
		} else {
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, fi.Size()
		}
		if err := tw.WriteHeader(h); err != nil {
			f.Close()
			return err
		}
		if !fi.IsDir() {
			src, err := os.Open(p)
			if err != nil {
				f.Close()
				return err
			}
			_, err = io.Copy(tw, src)
			src.Close()
			if err != nil {
				f.Close()
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// Normalize returns the fully qualified form of an image reference as containerd and the
// kubelet spell it: "coffer/pause:dev" → "docker.io/coffer/pause:dev", "busybox" →
// "docker.io/library/busybox:latest". Digest references are refused: Build names tags.
func Normalize(ref string) (string, error) {
	if _, err := name.NewTag(ref, name.WeakValidation); err != nil {
		return "", fmt.Errorf("images: invalid image name %q: %w", ref, err)
	}
	if strings.Contains(ref, "@") {
		return "", fmt.Errorf("images: %q: digest references cannot be built", ref)
	}
	repo, tag := ref, "latest"
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		repo, tag = ref[:i], ref[i+1:]
	}
	domain, rest := "docker.io", repo
	if i := strings.Index(repo, "/"); i >= 0 {
		first := repo[:i]
		if strings.ContainsAny(first, ".:") || first == "localhost" {
			domain, rest = first, repo[i+1:]
		}
	}
	if domain == "index.docker.io" {
		domain = "docker.io"
	}
	if domain == "docker.io" && !strings.Contains(rest, "/") {
		rest = "library/" + rest
	}
	if rest != strings.ToLower(rest) {
		return "", fmt.Errorf("images: invalid image name %q: repository must be lowercase", ref)
	}
	return domain + "/" + rest + ":" + tag, nil
}

func tagOf(ref string) string {
	return ref[strings.LastIndex(ref, ":")+1:]
}

// BuildBinary compiles a Go main package (an import path, or a path relative to dir) into out
// as a static binary: CGO_ENABLED=0, -trimpath, stripped. dir is the working directory of the
// build (it selects the module or workspace); empty means the current directory.
func BuildBinary(ctx context.Context, dir, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("images: building %s: %v: %s", pkg, err, b)
	}
	return nil
}

// Image names and packages of the harness's own images.
const (
	// PauseName is the sandbox ("pause") image of the e2e node, built from PausePackage.
	PauseName = "coffer/pause:dev"
	// PausePackage is the import path of the pause binary.
	PausePackage = "github.com/coffer-backup/coffer/e2e/harness/cmd/coffer-pause"
)

// Pause builds the coffer-pause binary and its image (PauseName) into dir. It runs the Go
// toolchain in the current directory, which must lie in a module or workspace that can build
// PausePackage (any module of the workspace, or one requiring the e2e/harness module).
func Pause(ctx context.Context, dir string) (*Image, error) {
	bin := filepath.Join(dir, "coffer-pause")
	if err := BuildBinary(ctx, "", PausePackage, bin); err != nil {
		return nil, err
	}
	return Build(ctx, Options{
		Binary: bin,
		Name:   PauseName,
		User:   "65535:65535", // as the upstream pause image
		Out:    filepath.Join(dir, "coffer-pause.oci.tar"),
	})
}

// AgentName is coffer-agent's image as deploy/samples names it.
const AgentName = "coffer/coffer-agent:dev"

// Agent builds coffer-agent (from the driver-job module of the checkout at root) and its image
// AgentName into dir, and returns the image.
func Agent(ctx context.Context, root, dir string) (*Image, error) {
	bin := filepath.Join(dir, "coffer-agent")
	if err := BuildBinary(ctx, filepath.Join(root, "driver-job"), "./cmd/coffer-agent", bin); err != nil {
		return nil, err
	}
	return Build(ctx, Options{Binary: bin, Name: AgentName, Out: filepath.Join(dir, "coffer-agent.oci.tar")})
}

// Component is one of Coffer's images: the module that builds it, its main package and the
// image name (without tag) that deploy/ and the samples use.
type Component struct{ Module, Package, Name string }

// Components are the images of Coffer's four components and of coffer-agent.
var Components = []Component{
	{"core-controller", "./cmd/core-controller", "coffer/core-controller"},
	{"driver-velero", "./cmd/driver-velero", "coffer/driver-velero"},
	{"driver-job", "./cmd/driver-job", "coffer/driver-job"},
	{"verifier", "./cmd/verifier", "coffer/verifier"},
	{"driver-job", "./cmd/coffer-agent", "coffer/coffer-agent"},
}

// BuildComponents builds every image of Components, tagged tag, into the directory out: each
// binary with the Go toolchain in <root>/<Module>, then its archive <out>/<binary>.oci.tar (the
// binary itself is removed). root is the checkout root. done, when set, is called after each
// image with how long it took.
func BuildComponents(ctx context.Context, root, out, tag string, done func(img *Image, took time.Duration)) ([]*Image, error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	var built []*Image
	for _, c := range Components {
		start := time.Now()
		bin := filepath.Join(out, filepath.Base(c.Package))
		if err := BuildBinary(ctx, filepath.Join(root, c.Module), c.Package, bin); err != nil {
			return nil, err
		}
		img, err := Build(ctx, Options{Binary: bin, Name: c.Name + ":" + tag,
			Out: filepath.Join(out, filepath.Base(c.Package)+".oci.tar")})
		if err != nil {
			return nil, err
		}
		_ = os.Remove(bin)
		built = append(built, img)
		if done != nil {
			done(img, time.Since(start))
		}
	}
	return built, nil
}
