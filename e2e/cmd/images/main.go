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

	"github.com/coffer-backup/coffer/e2e/harness/images"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
)

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
	root, err := manifests.RepoRoot()
	if err != nil {
		return err
	}
	if !filepath.IsAbs(out) {
		out = filepath.Join(root, out)
	}
	_, err = images.BuildComponents(context.Background(), root, out, tag, func(img *images.Image, took time.Duration) {
		fmt.Printf("%-40s %s  %s  (%s)\n", img.Name, img.Digest, img.Archive, took.Round(100*time.Millisecond))
	})
	return err
}
