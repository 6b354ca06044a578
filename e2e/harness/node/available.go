package node

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coffer-backup/coffer/e2e/harness/cluster"
)

// CNIBinDir is where Debian's containernetworking-plugins package installs the CNI plugins.
const CNIBinDir = "/usr/lib/cni"

// ErrNotRoot is wrapped by Available's error when the process is not root: the only reason a
// test may skip the real-node tier.
var ErrNotRoot = errors.New("the real-node tier needs root (it creates a bridge, mounts and cgroups)")

const (
	aptHint     = "apt-get install containerd runc containernetworking-plugins iptables conntrack socat"
	testbinHint = "hack/testbin.sh kube-scheduler kubelet (and `make testbin` for the control plane)"
)

// Available reports whether this machine can run a node: nil when it can, otherwise an error
// naming everything that is missing and how to get it. It wraps ErrNotRoot when not root.
func Available() error {
	var errs []error
	if os.Geteuid() != 0 {
		errs = append(errs, ErrNotRoot)
	}
	var missing []string
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "ip"} {
		if _, err := lookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(CNIBinDir, p)); err != nil {
			missing = append(missing, filepath.Join(CNIBinDir, p))
		}
	}
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("missing %s: %s", strings.Join(missing, ", "), aptHint))
	}
	if dir, err := cluster.AssetsDir(); err != nil {
		errs = append(errs, err)
	} else {
		var bins []string
		for _, b := range []string{"kubelet", "kube-scheduler", "kube-controller-manager"} {
			if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
				bins = append(bins, b)
			}
		}
		if len(bins) > 0 {
			errs = append(errs, fmt.Errorf("%s=%s lacks %s: run %s", cluster.AssetsEnv, dir, strings.Join(bins, ", "), testbinHint))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("real node unavailable: %w", errors.Join(errs...))
}

// Require skips t when the process is not root and fails it when root but something else is
// missing: CI runs as root, and there the tier must never skip silently.
func Require(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		if errors.Is(err, ErrNotRoot) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
}

// lookPath finds a binary on PATH or in the sbin directories (root's PATH may lack them).
func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/local/sbin", "/usr/sbin", "/sbin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}
