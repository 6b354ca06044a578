// Command images builds an OCI image archive of every Coffer component and of coffer-agent from
// its static binary: one layer, non-root user 65532, no shell, no base image. No Docker and no
// registry are involved; load an archive with `ctr images import` or `skopeo copy oci-archive:...`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/coffer-backup/coffer/e2e/images"
	"github.com/coffer-backup/coffer/e2e/manifests"
)

// image is one image: the module, its main package and the image name deploy/ uses.
type image struct{ module, pkg, name string }

var all = []image{
	{"core-controller", "./cmd/core-controller", "coffer/core-controller"},
	{"driver-velero", "./cmd/driver-velero", "coffer/driver-velero"},
	{"driver-job", "./cmd/driver-job", "coffer/driver-job"},
	{"verifier", "./cmd/verifier", "coffer/verifier"},
	{"driver-job", "./cmd/coffer-agent", "coffer/coffer-agent"},
}

func main() {
	out := flag.String("out", "bin/images", "Directory of the archives (relative to the repository root).")
	tag := flag.String("tag", "dev", "Image tag.")
	flag.Parse()
	if err := run(*out, *tag); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(out, tag string) error {
	ctx := context.Background()
	root, err := manifests.RepoRoot()
	if err != nil {
		return err
	}
	if !filepath.IsAbs(out) {
		out = filepath.Join(root, out)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, im := range all {
		start := time.Now()
		bin := filepath.Join(out, filepath.Base(im.pkg))
		if err := images.BuildBinary(ctx, filepath.Join(root, im.module), im.pkg, bin); err != nil {
			return err
		}
		img, err := images.Build(ctx, images.Options{Binary: bin, Name: im.name + ":" + tag,
			Out: filepath.Join(out, filepath.Base(im.pkg)+".oci.tar")})
		if err != nil {
			return err
		}
		_ = os.Remove(bin)
		fmt.Printf("%-40s %s  %s  (%s)\n", img.Name, img.Digest, img.Archive, time.Since(start).Round(100*time.Millisecond))
	}
	return nil
}
