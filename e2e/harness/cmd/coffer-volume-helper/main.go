// Command coffer-volume-helper is the helper of the e2e node's local-path-provisioner: the
// provisioner runs it in a pod on the node, as its setupCommand and teardownCommand, with
// -p <volume directory> -s <size in bytes> -m <Filesystem|Block> -a <create|delete>. create makes
// the directory (mode 0777, as the provisioner's default setup script does), delete removes it and
// everything in it. No shell: the image holds this static binary alone.
//
// Build it static (CGO_ENABLED=0); e2e/harness/localpath packs it into its image.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	path := flag.String("p", "", "the volume's directory")
	flag.String("s", "", "the volume's size in bytes (a directory has no size)")
	mode := flag.String("m", "Filesystem", "the volume mode")
	action := flag.String("a", "", "create or delete")
	flag.Parse()
	if err := run(*path, *mode, *action); err != nil {
		fmt.Fprintln(os.Stderr, "coffer-volume-helper:", err)
		os.Exit(1)
	}
}

func run(path, mode, action string) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) == "/" {
		return fmt.Errorf("-p %q is not a volume directory", path)
	}
	if mode != "Filesystem" {
		return fmt.Errorf("volume mode %q: only Filesystem volumes are directories", mode)
	}
	switch action {
	case "create":
		if err := os.MkdirAll(path, 0o777); err != nil {
			return err
		}
		return os.Chmod(path, 0o777) // the umask narrowed MkdirAll's mode
	case "delete":
		return os.RemoveAll(path)
	}
	return fmt.Errorf("-a %q is not create or delete", action)
}
