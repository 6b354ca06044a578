// Package node runs a real single-node Kubernetes cluster on this machine, for the tests that
// need pods to run: the control plane of e2e/harness/cluster (etcd, kube-apiserver,
// kube-controller-manager), kube-scheduler, a kubelet and a private containerd (1.6, CRI,
// runc, overlayfs), with pods on a Linux bridge the harness creates. Images come from
// e2e/harness/images archives imported into containerd; pods use them with imagePullPolicy Never.
//
// It needs root and changes host state (a bridge, mounts, cgroups): it belongs in an opt-in
// tier. Several nodes may run at once: every port is random, every name unique (bridge,
// subnet, node, cgroup root, containerd socket), and Stop removes only what its node created.
//
// A node records its owner (the process that started it) and what it creates in <Dir>/owner.
// When that process dies without stopping the node (a test timeout, SIGKILL), Sweep removes the
// node's leftovers exactly as Stop would; Start sweeps before it creates anything.
package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/images"
)

// Options configure a node.
type Options struct {
	// Images are image archives (e2e/harness/images) imported into the node before Start returns.
	Images []string
	// PauseImage is an archive of the sandbox image, named images.PauseName. Empty builds it
	// from e2e/harness/cmd/coffer-pause (the Go toolchain runs in the current directory).
	PauseImage string
	// TempDir is where the node's directory is created; empty means os.TempDir(). Keep it
	// short: unix socket paths under it are limited to 107 bytes.
	TempDir string
	// LogDir, when set, receives a copy of the node's logs (containerd, kubelet, scheduler,
	// control plane) at Stop, e.g. for CI artifacts.
	LogDir string
	// CRDDirectoryPaths are installed before Start returns.
	CRDDirectoryPaths []string
	// APIServerArgs, ControllerManagerArgs and KubeletArgs are extra flags ("--name=value").
	APIServerArgs, ControllerManagerArgs, KubeletArgs []string
	// Snapshotter is containerd's: "overlayfs" or "native". Empty picks overlayfs, or native
	// when TempDir is on an overlay filesystem.
	Snapshotter string
	// ServeToPods lets pods use the control plane as they would in a real cluster, with the
	// credentials of their ServiceAccount: kube-apiserver listens on the node's IP instead of
	// 127.0.0.1, with a serving certificate that names it (every client, Cluster.Config
	// included, then uses https://<IP>:<port>), and its ServiceAccount admission plugin, which
	// envtest disables, is on, so the kubelet mounts a pod's ServiceAccount token and the cluster
	// CA (ConfigMap kube-root-ca.crt) at /var/run/secrets/kubernetes.io/serviceaccount. The node
	// runs no kube-proxy, so the ClusterIP of the kubernetes Service leads nowhere: a container
	// finds the apiserver through KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT set to the
	// host and port of Cluster.Config.Host.
	ServeToPods bool
	// Timeout bounds the bring-up; default 3 minutes.
	Timeout time.Duration
	// Logf, when set, receives progress lines (e.g. t.Logf).
	Logf func(format string, args ...any)
}

// KubeletRoot is the kubelet's --root-dir: pods' volumes are under its pods/ (what a node agent
// that reads them, such as Velero's, mounts from the host).
func (n *Node) KubeletRoot() string { return n.dirs.kubeletRoot }

// Node is a running single-node cluster.
type Node struct {
	// Name is the Kubernetes node name (unique: coffer-node-<hex>).
	Name string
	// IP is the node's address: the bridge's, .1 of Subnet. The kubelet and the apiserver
	// advertise it; host services that pods must reach (e.g. MinIO) listen on it.
	IP string
	// Subnet is the pods' network, e.g. 10.23.45.0/24; pods get addresses from .10.
	Subnet string
	// Bridge is the name of the Linux bridge the pods are attached to.
	Bridge string
	// Dir holds all of the node's state; Stop removes it.
	Dir string
	// Cluster is the control plane: Cluster.Config is an admin client config, and
	// Cluster.Kubeconfig its kubeconfig file.
	Cluster *cluster.Cluster
	// ContainerdSocket is the address of the node's containerd (ctr --address, CRI).
	ContainerdSocket string
	// Ready is how long Start took until the node was Ready and usable.
	Ready time.Duration

	opts         Options
	dirs         *layoutDirs
	ctrPath      string
	snapshotter  string
	network      string
	cgroupRoot   string
	cgroups      []string // the cgroup directories the node created, one per hierarchy
	containerd   *proc
	kubelet      *proc
	scheduler    *proc
	cpLog        *os.File
	chainsBefore map[string]bool
	hostExisted  map[string]bool
	host         hostEntries
	etcd         procRef // the control plane's etcd: its command line does not name Dir
	etcdDataDir  string
	// orphaned: the node is being swept (its owner is dead); processes bound to IP go too.
	orphaned bool

	stopOnce sync.Once
	stopErr  error
}

// layoutDirs are the paths under the node's directory.
type layoutDirs struct {
	root, logs, pki, cluster, images                                  string
	containerdRoot, containerdState, containerdSock, containerdConfig string
	cniConf, cniIPAM                                                  string
	kubeletRoot, kubeletConfig, podLogs, volumePlugins, scheduler     string
}

func newLayout(root string) *layoutDirs {
	j := func(p ...string) string { return filepath.Join(append([]string{root}, p...)...) }
	return &layoutDirs{
		root: root, logs: j("logs"), pki: j("pki"), cluster: j("cluster"), images: j("images"),
		containerdRoot: j("containerd", "root"), containerdState: j("containerd", "state"),
		containerdSock: j("containerd", "containerd.sock"), containerdConfig: j("containerd", "config.toml"),
		cniConf: j("cni", "net.d"), cniIPAM: j("cni", "ipam"),
		kubeletRoot: j("kubelet"), kubeletConfig: j("kubelet-config.yaml"),
		podLogs: j("pod-logs"), volumePlugins: j("volume-plugins"), scheduler: j("kube-scheduler"),
	}
}

func (n *Node) logf(format string, args ...any) {
	if n.opts.Logf != nil {
		n.opts.Logf("node %s: "+format, append([]any{n.Name}, args...)...)
	}
}

// Start brings a node up and returns once it is Ready, schedulable, and the default
// ServiceAccount exists. On failure it tears down whatever it started and returns an error
// with the daemons' log tails. It first sweeps the leftovers of dead nodes under the same
// temporary directory (see Sweep), reporting through Options.Logf.
func Start(ctx context.Context, opts Options) (*Node, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if _, err := Sweep(opts.TempDir, opts.Logf); err != nil && opts.Logf != nil {
		opts.Logf("sweeping dead nodes: %v", err)
	}
	if opts.Timeout == 0 {
		opts.Timeout = 3 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	began := time.Now()

	dir, err := os.MkdirTemp(opts.TempDir, "coffer-node-")
	if err != nil {
		return nil, err
	}
	n := &Node{Name: "coffer-node-" + randHex(3), Dir: dir, opts: opts, dirs: newLayout(dir)}
	n.ContainerdSocket = n.dirs.containerdSock
	n.host = hostEntries{dir: dir, address: n.dirs.containerdSock}
	n.cgroupRoot = "/" + n.Name
	if err := n.saveOwner(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if err := n.start(ctx); err != nil {
		diag := n.Diagnostics()
		if serr := n.Stop(); serr != nil {
			err = errors.Join(err, fmt.Errorf("tearing the failed node down: %w", serr))
		}
		return nil, fmt.Errorf("starting node %s (bridge %s, dir %s): %w\n%s", n.Name, n.Bridge, n.Dir, err, diag)
	}
	n.Ready = time.Since(began)
	n.logf("ready in %s (IP %s, bridge %s, dir %s)", n.Ready.Round(time.Millisecond), n.IP, n.Bridge, n.Dir)
	return n, nil
}

func (n *Node) start(ctx context.Context) error {
	d := n.dirs
	for _, p := range []string{d.logs, d.pki, d.cluster, d.images, d.containerdRoot, d.containerdState, d.cniConf, d.cniIPAM, d.kubeletRoot, d.podLogs, d.volumePlugins, d.scheduler} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			return err
		}
	}
	var err error
	if n.ctrPath, err = lookPath("ctr"); err != nil {
		return err
	}
	n.chainsBefore = iptablesChains()
	n.hostExisted = existingHostPaths()
	if err := n.saveOwner(); err != nil {
		return err
	}

	// Network: the bridge and its /24; the node IP is the bridge's.
	bridge, subnet, err := createBridge()
	if err != nil {
		return err
	}
	n.Bridge, n.Subnet, n.IP = bridge, subnet.String(), hostIP(subnet).String()
	n.network = "coffer-" + bridge
	n.host.network = n.network
	if err := n.saveOwner(); err != nil {
		return err
	}
	n.logf("bridge %s, subnet %s, node IP %s", n.Bridge, n.Subnet, n.IP)

	n.cgroups, err = createCgroupRoot(n.cgroupRoot)
	if n.cgroups == nil {
		n.cgroups = []string{} // recorded: none created
	}
	if serr := n.saveOwner(); err == nil {
		err = serr
	}
	if err != nil {
		return err
	}

	caFile, certFile, keyFile, err := kubeletClientCerts(d.pki)
	if err != nil {
		return err
	}

	// The control plane starts while containerd comes up.
	if n.cpLog, err = os.Create(filepath.Join(d.logs, "control-plane.log")); err != nil {
		return err
	}
	type started struct {
		c   *cluster.Cluster
		err error
	}
	clusterDone := make(chan started, 1)
	clusterCtx, cancelCluster := context.WithCancel(ctx)
	defer cancelCluster()
	apiArgs := []string{
		"--advertise-address=" + n.IP,
		"--kubelet-client-certificate=" + certFile,
		"--kubelet-client-key=" + keyFile,
		"--kubelet-preferred-address-types=InternalIP,Hostname",
	}
	bindAddress := ""
	if n.opts.ServeToPods {
		bindAddress = n.IP
		apiArgs = append(apiArgs, "--disable-admission-plugins=") // envtest's default disables ServiceAccount
	}
	go func() {
		t0 := time.Now()
		c, err := cluster.Start(clusterCtx, cluster.Options{
			Dir:                   d.cluster,
			ControllerManager:     true,
			ControllerManagerArgs: n.opts.ControllerManagerArgs,
			CRDDirectoryPaths:     n.opts.CRDDirectoryPaths,
			Output:                n.cpLog,
			BindAddress:           bindAddress,
			APIServerArgs:         append(apiArgs, n.opts.APIServerArgs...),
		})
		if err == nil {
			n.logf("control plane up in %s", time.Since(t0).Round(time.Millisecond))
		}
		clusterDone <- started{c, err}
	}()
	runtimeErr := n.startRuntime(ctx)
	if runtimeErr != nil {
		cancelCluster() // cut the controller-manager wait short; Stop tears the rest down
	}
	res := <-clusterDone
	n.Cluster = res.c
	if n.Cluster != nil {
		// envtest started etcd as our child, with its data in a temporary directory of its own.
		for _, pid := range etcdServing(n.Cluster.EtcdURL) {
			if parentPID(pid) == os.Getpid() {
				n.etcd, n.etcdDataDir = refOf(pid), flagValue(procArgs(pid), "--data-dir")
			}
		}
		if err := n.saveOwner(); err != nil {
			return errors.Join(runtimeErr, res.err, err)
		}
	}
	if err := errors.Join(runtimeErr, res.err); err != nil {
		return err
	}

	// kube-scheduler and the kubelet.
	schedPort, err := cluster.FreePort()
	if err != nil {
		return err
	}
	if n.scheduler, err = startProc("kube-scheduler", filepath.Join(d.logs, "kube-scheduler.log"), n.asset("kube-scheduler"), schedulerArgs(d, n.Cluster.Kubeconfig, schedPort)...); err != nil {
		return err
	}
	port, err := cluster.FreePortOn(n.IP)
	if err != nil {
		return err
	}
	healthzPort, err := cluster.FreePort()
	if err != nil {
		return err
	}
	cfg, err := kubeletConfig(d, n.IP, port, healthzPort, n.cgroupRoot, caFile)
	if err != nil {
		return err
	}
	if err := os.WriteFile(d.kubeletConfig, cfg, 0o600); err != nil {
		return err
	}
	if n.kubelet, err = startProc("kubelet", filepath.Join(d.logs, "kubelet.log"), n.asset("kubelet"), kubeletArgs(d, n.Cluster.Kubeconfig, n.Name, n.IP, n.opts.KubeletArgs)...); err != nil {
		return err
	}
	if err := n.waitReady(ctx); err != nil {
		return err
	}
	// The kubelet's device manager listens on a fixed path; remember which socket is ours.
	n.host.devicePluginInode = inode(devicePluginSocket)
	return n.saveOwner()
}

func (n *Node) asset(name string) string {
	dir, _ := cluster.AssetsDir()
	return filepath.Join(dir, name)
}

// startRuntime writes the CNI and containerd configurations, starts containerd and imports the
// images.
func (n *Node) startRuntime(ctx context.Context) error {
	d := n.dirs
	pause, err := pauseImage(ctx, n.opts, d.images)
	if err != nil {
		return err
	}
	conf, err := cniConfig(n.network, n.Bridge, mustCIDR(n.Subnet), d.cniIPAM)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(d.cniConf, "10-coffer.conflist"), conf, 0o600); err != nil {
		return err
	}
	pauseRef, _ := images.Normalize(images.PauseName)
	n.snapshotter = n.opts.Snapshotter
	if n.snapshotter == "" {
		n.snapshotter = chooseSnapshotter(d.containerdRoot)
	}
	if err := os.WriteFile(d.containerdConfig, []byte(containerdConfig(d, pauseRef, n.snapshotter)), 0o600); err != nil {
		return err
	}
	bin, err := lookPath("containerd")
	if err != nil {
		return err
	}
	t0 := time.Now()
	if n.containerd, err = startProc("containerd", filepath.Join(d.logs, "containerd.log"), bin, "--config", d.containerdConfig); err != nil {
		return err
	}
	if err := n.waitContainerd(ctx); err != nil {
		return err
	}
	if err := n.Import(ctx, append([]string{pause}, n.opts.Images...)...); err != nil {
		return err
	}
	n.logf("containerd up (%s snapshotter), %d image(s) imported in %s", n.snapshotter, 1+len(n.opts.Images), time.Since(t0).Round(time.Millisecond))
	return nil
}

func mustCIDR(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return n
}

// waitReady waits until the Node is Ready without a not-ready or unreachable taint, and the
// default ServiceAccount exists; it fails as soon as a daemon exits.
func (n *Node) waitReady(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(n.Cluster.Config)
	if err != nil {
		return err
	}
	last := "not registered"
	for {
		for _, p := range []*proc{n.containerd, n.kubelet, n.scheduler} {
			if p.exited() {
				return p.exitErr()
			}
		}
		if ok, why := n.nodeUsable(ctx, cs); ok {
			_, err := cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
			if err == nil {
				return nil
			}
			last = "no default ServiceAccount: " + err.Error()
		} else {
			last = why
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node not ready (%s): %w", last, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (n *Node) nodeUsable(ctx context.Context, cs kubernetes.Interface) (bool, string) {
	node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, "not registered"
	}
	if err != nil {
		return false, err.Error()
	}
	ready := false
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status != corev1.ConditionTrue {
				return false, fmt.Sprintf("Ready=%s: %s", c.Status, c.Message)
			}
			ready = true
		}
	}
	if !ready {
		return false, "no Ready condition"
	}
	for _, t := range node.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return false, "tainted " + t.Key
		}
	}
	if node.Spec.Unschedulable {
		return false, "unschedulable"
	}
	return true, ""
}

// Stop tears the node down and removes everything it created: the daemons (kubelet,
// kube-scheduler, kube-controller-manager, kube-apiserver, etcd, containerd, in that order),
// the pods' containers and shims, the mounts under Dir, the cgroups, the bridge and its veths,
// any KUBE-* iptables chain that appeared, the node's entries in shared host directories, and
// Dir. It is safe to call more than once.
func (n *Node) Stop() error {
	n.stopOnce.Do(func() { n.stopErr = n.stop() })
	return n.stopErr
}

// stop is the one teardown, of a node this process runs (Stop) and of one whose owner died
// (Sweep, which adopts the daemons it finds and has no Cluster).
func (n *Node) stop() error {
	var errs []error
	d := n.dirs
	n.kubelet.stop(15 * time.Second)
	n.host.containers = containerIDsOnDisk(d)
	if n.containerd != nil && !n.containerd.exited() && n.ctrPath != "" {
		n.host.containers = append(n.host.containers, n.removeContainers()...)
	}
	n.host.containers = dedupe(n.host.containers)
	n.scheduler.stop(15 * time.Second)
	if n.Cluster != nil {
		if err := n.Cluster.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping the control plane: %w", err))
		}
	}
	n.containerd.stop(15 * time.Second)
	if n.cpLog != nil {
		_ = n.cpLog.Close()
	}

	// Whatever survived: shims (their command line names our containerd's socket), processes
	// in our cgroups (pods), any helper running from our directory; a swept node's control plane
	// and the host services bound to its IP.
	if left := killAndWait(n.ownProcesses(), 10*time.Second); len(left) > 0 {
		var desc []string
		for _, pid := range left {
			desc = append(desc, fmt.Sprintf("%d (%s)", pid, cmdline(pid)))
		}
		errs = append(errs, fmt.Errorf("processes survived SIGKILL: %s", strings.Join(desc, ", ")))
	}
	if n.etcdDataDir != "" { // envtest removes it when it stops etcd itself
		if err := os.RemoveAll(n.etcdDataDir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := unmountAll(n.Dir); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroups(n.cgroups); err != nil {
		errs = append(errs, err)
	}
	if n.Bridge != "" {
		if err := deleteBridge(n.Bridge); err != nil {
			errs = append(errs, fmt.Errorf("deleting bridge %s: %w", n.Bridge, err))
		}
	}
	if n.chainsBefore != nil {
		if err := removeNewChains(n.chainsBefore); err != nil {
			errs = append(errs, err)
		}
	}
	if n.hostExisted != nil {
		n.host.remove(n.hostExisted)
	}
	if n.opts.LogDir != "" {
		if err := copyLogs(d.logs, n.opts.LogDir, n.Name); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(n.Dir); err != nil {
		errs = append(errs, err)
	}
	if r := n.Residue(); len(r) > 0 {
		errs = append(errs, fmt.Errorf("left behind: %s", strings.Join(r, "; ")))
	}
	return errors.Join(errs...)
}

// ownProcesses lists the live processes that belong to this node: command lines naming its
// directory (containerd shims carry -address <Dir>/containerd/containerd.sock), members of its
// cgroups and its etcd. For a swept node, also the processes bound to its IP (e.g. a test's
// MinIO for the pods), unless another interface now holds that address.
func (n *Node) ownProcesses() []int {
	seen := map[int]bool{}
	var pids []int
	cands := append(procsMatching(n.Dir+"/"), cgroupProcs(n.cgroups)...)
	if n.etcd.alive() {
		cands = append(cands, n.etcd.PID)
	}
	if ip := net.ParseIP(n.IP); n.orphaned && ip != nil && !addressElsewhere(ip, n.Bridge) {
		cands = append(cands, procsBoundTo(ip)...)
	}
	for _, pid := range cands {
		if !seen[pid] && pid != os.Getpid() && processAlive(pid) {
			seen[pid] = true
			pids = append(pids, pid)
		}
	}
	return pids
}

// addressElsewhere tells whether an interface other than own carries ip.
func addressElsewhere(ip net.IP, own string) bool {
	ifaces, err := net.Interfaces()
	if err != nil {
		return true
	}
	for _, ifc := range ifaces {
		if ifc.Name == own {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if in, ok := a.(*net.IPNet); ok && in.IP.Equal(ip) {
				return true
			}
		}
	}
	return false
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// Residue lists what of the node is still on the machine: processes, mounts, cgroups, the
// bridge, the directory and etcd's, the node's files in shared host directories. Empty after a
// successful Stop.
func (n *Node) Residue() []string {
	var r []string
	for _, pid := range n.ownProcesses() {
		r = append(r, fmt.Sprintf("process %d (%s)", pid, cmdline(pid)))
	}
	for _, m := range mountsUnder(n.Dir) {
		r = append(r, "mount "+m)
	}
	for _, c := range existing(n.cgroups) {
		r = append(r, "cgroup "+c)
	}
	if n.Bridge != "" {
		if _, err := net.InterfaceByName(n.Bridge); err == nil {
			r = append(r, "link "+n.Bridge)
		}
	}
	if _, err := os.Stat(n.Dir); err == nil {
		r = append(r, "directory "+n.Dir)
	}
	if n.etcdDataDir != "" {
		if _, err := os.Stat(n.etcdDataDir); err == nil {
			r = append(r, "directory "+n.etcdDataDir)
		}
	}
	for _, p := range n.host.left() {
		r = append(r, "file "+p)
	}
	return r
}

// LogTail returns the end of a daemon's log: "kubelet", "containerd", "kube-scheduler" or
// "control-plane" (kube-apiserver and etcd).
func (n *Node) LogTail(component string, bytes int64) string {
	return fileTail(filepath.Join(n.dirs.logs, component+".log"), bytes)
}

// Diagnostics are the log tails of the node's daemons, for a failing test's output.
func (n *Node) Diagnostics() string {
	var b strings.Builder
	for _, c := range []string{"containerd", "kubelet", "kube-scheduler", "control-plane"} {
		if _, err := os.Stat(filepath.Join(n.dirs.logs, c+".log")); err != nil {
			continue
		}
		fmt.Fprintf(&b, "--- %s log (tail) ---\n%s\n", c, n.LogTail(c, 3000))
	}
	return b.String()
}

// PeakRSS returns the peak resident set size (VmHWM) of the node's processes by program
// (kubelet, containerd, kube-apiserver, etcd, …; shims summed), and "total".
func (n *Node) PeakRSS() map[string]int64 {
	out := map[string]int64{}
	needles := []string{n.Dir + "/"}
	if n.Cluster != nil {
		needles = append(needles, "--listen-client-urls="+n.Cluster.EtcdURL)
	}
	for _, pid := range procsMatching(needles...) {
		argv0 := strings.Fields(cmdline(pid))
		if len(argv0) == 0 {
			continue
		}
		rss := peakRSS(pid)
		out[filepath.Base(argv0[0])] += rss
		out["total"] += rss
	}
	return out
}

func copyLogs(from, to, name string) error {
	if err := os.MkdirAll(to, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(from)
	if errors.Is(err, os.ErrNotExist) {
		return nil // the node died before it had logs
	}
	if err != nil {
		return err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, e := range names {
		src, err := os.Open(filepath.Join(from, e))
		if err != nil {
			return err
		}
		dst, err := os.Create(filepath.Join(to, name+"-"+e))
		if err != nil {
			src.Close()
			return err
		}
		_, err = io.Copy(dst, src)
		src.Close()
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}
