// Package csidir gives a real node (e2e/harness/node) CSI volumes with snapshots: the node's own
// CSI driver (e2e/harness/cmd/coffer-csi-dir: a volume is a directory, a snapshot a copy of one)
// runs as a root process on the node and registers with its kubelet through the plugin
// registration socket; the Kubernetes CSI project's external provisioner, external snapshotter
// and snapshot controller, built from their pinned modules (hack/testbin.sh --csi), run as
// processes against the node's API server. Start creates the CSIDriver, a StorageClass and a
// VolumeSnapshotClass (the one Velero's CSI support picks) for it.
package csidir

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/coffer-backup/coffer/e2e/harness/components"
	"github.com/coffer-backup/coffer/e2e/harness/images"
)

const (
	// Driver is the CSI driver's name.
	Driver = "dir.csi.coffer.dev"
	// StorageClass provisions the driver's volumes (binding at once: the node is the only one).
	StorageClass = "csi-dir"
	// SnapshotClass is the driver's VolumeSnapshotClass, the default one for the driver and the
	// one Velero's CSI support picks (its label velero.io/csi-volumesnapshot-class).
	SnapshotClass = "csi-dir"
	// DriverPackage builds the driver's binary.
	DriverPackage = "github.com/coffer-backup/coffer/e2e/harness/cmd/coffer-csi-dir"
)

// AssetsEnv names the directory of the CSI sidecars' binaries (what hack/testbin.sh --csi prints).
const AssetsEnv = "COFFER_CSI_ASSETS"

// Assets is the directory of the CSI sidecars' binaries, $COFFER_CSI_ASSETS.
func Assets() (string, error) {
	dir := os.Getenv(AssetsEnv)
	if dir == "" {
		return "", fmt.Errorf("%s is not set: run the suites through `make e2e`, or export %s=$(hack/testbin.sh --csi)", AssetsEnv, AssetsEnv)
	}
	for _, b := range []string{"csi-provisioner", "csi-snapshotter", "snapshot-controller"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("%s=%s lacks %s: run `hack/testbin.sh --csi`: %w", AssetsEnv, dir, b, err)
		}
	}
	return dir, nil
}

// CRDDirectory holds the VolumeSnapshot CRDs (copied from the snapshotter's module, beside the
// wrapper module that pins it), for node.Options.CRDDirectoryPaths.
func CRDDirectory(repoRoot string) string {
	return filepath.Join(repoRoot, "tools", "testbin", "csi", "crds")
}

// Node is where the driver runs: the node's name, its kubelet's root directory, and a directory
// of its own for sockets and volumes (short: unix socket paths are limited to 107 bytes).
type Node struct {
	Name, KubeletRoot, Dir string
}

// CSI is the running driver and its controllers.
type CSI struct {
	procs map[string]*components.Process
	// Volumes is the directory of the volumes' directories (named by volume handle).
	Volumes string
}

// Start builds the driver (the Go toolchain runs in the current directory, which must be inside
// the e2e module), runs it on n with the sidecars of assets against kubeconfig's cluster, creates
// the driver's objects, and returns once the kubelet has registered the driver (its CSINode lists
// it).
func Start(ctx context.Context, cl client.Client, assets, kubeconfig string, n Node) (_ *CSI, err error) {
	if err := os.MkdirAll(n.Dir, 0o700); err != nil {
		return nil, err
	}
	bin := filepath.Join(n.Dir, "coffer-csi-dir")
	if err := images.BuildBinary(ctx, "", DriverPackage, bin); err != nil {
		return nil, err
	}
	c := &CSI{procs: map[string]*components.Process{}, Volumes: filepath.Join(n.Dir, "data", "volumes")}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, c.Log())
			c.Stop()
		}
	}()
	sock := filepath.Join(n.Dir, "csi.sock")
	start := func(name, bin string, args ...string) error {
		p, err := components.Start(bin, args...)
		if err != nil {
			return fmt.Errorf("starting %s: %w", name, err)
		}
		c.procs[name] = p
		return nil
	}
	if err := start("driver", bin, "--name", Driver, "--endpoint", sock, "--root", filepath.Join(n.Dir, "data"), "--node-id", n.Name,
		"--registration", filepath.Join(n.KubeletRoot, "plugins_registry", Driver+"-reg.sock")); err != nil {
		return nil, err
	}
	common := []string{"--kubeconfig", kubeconfig, "--leader-election=false", "--v=3"}
	sidecar := slices.Concat([]string{"--csi-address", sock, "--timeout=2m", "--extra-create-metadata"}, common)
	if err := start("provisioner", filepath.Join(assets, "csi-provisioner"), sidecar...); err != nil {
		return nil, err
	}
	if err := start("snapshotter", filepath.Join(assets, "csi-snapshotter"), sidecar...); err != nil {
		return nil, err
	}
	if err := start("snapshot-controller", filepath.Join(assets, "snapshot-controller"), common...); err != nil {
		return nil, err
	}

	immediate := storagev1.VolumeBindingImmediate
	objects := []client.Object{
		&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: Driver}, Spec: storagev1.CSIDriverSpec{
			AttachRequired: ptr.To(false), PodInfoOnMount: ptr.To(false), FSGroupPolicy: ptr.To(storagev1.NoneFSGroupPolicy),
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}}},
		&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: StorageClass}, Provisioner: Driver, VolumeBindingMode: &immediate},
		&unstructured.Unstructured{Object: map[string]any{"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
			"metadata": map[string]any{"name": SnapshotClass,
				"labels":      map[string]any{"velero.io/csi-volumesnapshot-class": "true"},
				"annotations": map[string]any{"snapshot.storage.kubernetes.io/is-default-class": "true"}},
			"driver": Driver, "deletionPolicy": "Delete"}},
	}
	for _, o := range objects {
		if err := cl.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for name, p := range c.procs {
			if p.Exited() {
				return false, fmt.Errorf("%s exited", name)
			}
		}
		cn := &storagev1.CSINode{}
		if err := cl.Get(ctx, client.ObjectKey{Name: n.Name}, cn); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		for _, d := range cn.Spec.Drivers {
			if d.Name == Driver {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for the kubelet to register %s: %w", Driver, err)
	}
	return c, nil
}

// Log is the output so far of the driver and each controller.
func (c *CSI) Log() string {
	var b strings.Builder
	for _, name := range []string{"driver", "provisioner", "snapshotter", "snapshot-controller"} {
		if p := c.procs[name]; p != nil {
			fmt.Fprintf(&b, "--- %s:\n%s\n", name, p.Tail())
		}
	}
	return b.String()
}

// Stop stops the controllers, then the driver.
func (c *CSI) Stop() {
	if c == nil {
		return
	}
	for _, name := range []string{"snapshot-controller", "snapshotter", "provisioner", "driver"} {
		if p := c.procs[name]; p != nil {
			p.Stop(5 * time.Second)
		}
	}
}
