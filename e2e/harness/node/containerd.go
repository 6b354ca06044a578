package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/coffer-backup/coffer/e2e/harness/images"
)

// k8sNamespace is the containerd namespace of the CRI plugin.
const k8sNamespace = "k8s.io"

// containerdConfig is the node's containerd 1.6 configuration (version 2): every path under the
// node's directory, no TCP listener, no debug or metrics socket.
//
//   - restrict_oom_score_adj: the machine lacks CAP_SYS_RESOURCE, runc cannot lower
//     oom_score_adj, and every sandbox would fail with "can't get final child's PID from pipe".
//   - SystemdCgroup = false: cgroupfs driver (no systemd; cgroup v1 hybrid).
//   - netns_mounts_under_state_dir: pods' network namespaces are bind-mounted under the state
//     directory rather than the shared /var/run/netns.
//   - runc Root: runc's container state under the node's directory, not /run/containerd/runc.
//   - stream_server_port 0: a random port for exec/attach/port-forward streams.
//   - the btrfs, zfs, aufs and devmapper snapshotters cannot work here: disabled, not failed.
//   - snapshotter: overlayfs, or native where the node's directory is itself on overlayfs.
func containerdConfig(d *layoutDirs, pauseRef, snapshotter string) string {
	return fmt.Sprintf(`version = 2
root = %q
state = %q
oom_score = 0
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = %q

[ttrpc]
  address = %q

[debug]
  address = ""
  level = "info"

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = %q

  [plugins."io.containerd.runtime.v1.linux"]
    runtime_root = %q

  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = %q
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    disable_apparmor = true
    enable_selinux = false
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_unprivileged_ports = false
    enable_unprivileged_icmp = false

    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = %q
      default_runtime_name = "runc"
      discard_unpacked_layers = false

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = %q

    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = %q
      conf_dir = %q
      max_conf_num = 1

    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = ""
`,
		d.containerdRoot, d.containerdState,
		d.containerdSock, d.containerdSock+".ttrpc",
		filepath.Join(d.containerdRoot, "opt"),
		filepath.Join(d.containerdState, "runtime-v1"),
		pauseRef, snapshotter,
		filepath.Join(d.containerdState, "runc"),
		CNIBinDir, d.cniConf,
	)
}

// ctr runs ctr against the node's containerd in the k8s.io namespace.
func (n *Node) ctr(timeout time.Duration, args ...string) (string, error) {
	return run(timeout, n.ctrPath, append([]string{"--address", n.dirs.containerdSock, "--namespace", k8sNamespace}, args...)...)
}

// waitContainerd waits until containerd answers, or fails when it exits.
func (n *Node) waitContainerd(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	for {
		if n.containerd.exited() {
			return n.containerd.exitErr()
		}
		if _, err := os.Stat(n.dirs.containerdSock); err == nil {
			if _, err := run(10*time.Second, n.ctrPath, "--address", n.dirs.containerdSock, "version"); err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd did not answer on %s within a minute\n--- containerd log (tail) ---\n%s", n.dirs.containerdSock, n.containerd.tail(4096))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Import loads OCI image archives (see e2e/harness/images) into the node's containerd, where the
// kubelet finds them: pods use them with imagePullPolicy Never.
func (n *Node) Import(ctx context.Context, archives ...string) error {
	for _, a := range archives {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := n.ctr(2*time.Minute, "images", "import", "--snapshotter", n.snapshotter, a); err != nil {
			return fmt.Errorf("importing %s: %w", a, err)
		}
	}
	return nil
}

// KillContainer SIGKILLs the process of a running container, by its ID as a pod's status gives it
// ("containerd://<id>"), as the kernel's OOM killer would: no handler of the process runs, and the
// kubelet restarts the container as its pod's restart policy says.
func (n *Node) KillContainer(id string) error {
	_, err := n.ctr(30*time.Second, "tasks", "kill", "--signal", "SIGKILL", strings.TrimPrefix(id, "containerd://"))
	return err
}

// Images lists the image names in the node's containerd.
func (n *Node) Images() ([]string, error) {
	out, err := n.ctr(30*time.Second, "images", "list", "--quiet")
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

// removeContainers force-deletes every task and container of the node's containerd (the
// kubelet is stopped by then): their shims exit and their rootfs mounts go. It returns the ids
// it saw.
func (n *Node) removeContainers() []string {
	out, err := n.ctr(30*time.Second, "containers", "list", "--quiet")
	if err != nil {
		return nil
	}
	ids := strings.Fields(out)
	for _, id := range ids {
		_, _ = n.ctr(30*time.Second, "tasks", "kill", "--all", "--signal", "SIGKILL", id)
	}
	for _, id := range ids {
		_, _ = n.ctr(30*time.Second, "tasks", "delete", "--force", id)
	}
	for _, id := range ids {
		_, _ = n.ctr(30*time.Second, "containers", "delete", id)
	}
	return ids
}

// containerIDsOnDisk lists the ids of the containers and sandboxes containerd keeps state for
// under the node's directory: what removeContainers would have listed, when containerd is gone.
func containerIDsOnDisk(d *layoutDirs) []string {
	var ids []string
	for _, dir := range []string{
		filepath.Join(d.containerdState, "io.containerd.runtime.v2.task", k8sNamespace),
		filepath.Join(d.containerdState, "io.containerd.grpc.v1.cri", "sandboxes"),
		filepath.Join(d.containerdRoot, "io.containerd.grpc.v1.cri", "sandboxes"),
		filepath.Join(d.containerdRoot, "io.containerd.grpc.v1.cri", "containers"),
	} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.IsDir() {
				ids = append(ids, e.Name())
			}
		}
	}
	return ids
}

// pauseImage returns the sandbox image archive: Options.PauseImage, or coffer/pause:dev built
// from source into dir.
func pauseImage(ctx context.Context, opts Options, dir string) (string, error) {
	if opts.PauseImage != "" {
		return opts.PauseImage, nil
	}
	img, err := images.Pause(ctx, dir)
	if err != nil {
		return "", err
	}
	return img.Archive, nil
}

// overlayfsMagic is the statfs type of an overlay filesystem.
const overlayfsMagic = 0x794c7630

// chooseSnapshotter picks overlayfs, unless dir lies on an overlay filesystem (a container's
// root): overlayfs cannot stack on it everywhere, native (plain copies) always works.
func chooseSnapshotter(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err == nil && st.Type == overlayfsMagic {
		return "native"
	}
	return "overlayfs"
}
