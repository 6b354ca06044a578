package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/yaml"
)

// OwnerlessAge is how old the directory of a node without an owner file (one started before
// nodes recorded their owner, or one killed within moments of its creation) must be before Sweep
// treats it as dead.
const OwnerlessAge = 10 * time.Minute

// Sweep removes the leftovers of dead nodes: for every coffer-node-* directory under tempDir
// (empty means os.TempDir(), as for Options.TempDir) whose owner process is gone, it tears the
// node down exactly as Stop would (processes, containers and shims, mounts, cgroups, bridge and
// veths, recorded KUBE-* chains, host entries, the directory). A directory without an owner file
// counts as dead once older than OwnerlessAge, unless a process naming it still has a live parent
// outside the node (an older harness still running it). A node whose owner is alive is never
// touched; nor is one another sweeper is working on.
//
// It returns the directories it tore down, reporting each through logf (which may be nil), and
// the errors of those teardowns. Like Start, it needs root for anything but empty directories.
// A CI step can call it before and after the real-node tier.
func Sweep(tempDir string, logf func(format string, args ...any)) ([]string, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	root := tempDir
	if root == "" {
		root = os.TempDir()
	}
	dirs, err := filepath.Glob(filepath.Join(root, "coffer-node-*"))
	if err != nil {
		return nil, err
	}
	var swept []string
	var errs []error
	for _, dir := range dirs {
		if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
			continue
		}
		done, err := sweepDir(dir, logf)
		if done {
			swept = append(swept, dir)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("sweeping %s: %w", dir, err))
		}
	}
	return swept, errors.Join(errs...)
}

// sweepDir tears down the node in dir if its owner is dead; it tells whether it did.
func sweepDir(dir string, logf func(string, ...any)) (bool, error) {
	// One sweeper per directory: concurrent Starts sweep the same leftovers.
	f, err := os.Open(dir)
	if err != nil {
		return false, nil // gone meanwhile
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return false, nil
	}
	if fi, err := os.Stat(dir); err != nil || !sameDir(f, fi) {
		return false, nil // removed (and perhaps recreated) by the sweeper before us
	}

	rec, dead, why := ownerGone(dir)
	if !dead {
		if why != "" {
			logf("sweep: leaving %s: %s", dir, why)
		}
		return false, nil
	}
	n := adopt(dir, rec)
	found := n.Residue()
	logf("sweep: removing dead node %s (dir %s, bridge %s): %s; found %s", orUnknown(n.Name), dir, orUnknown(n.Bridge), why, summarize(found))
	if err := n.Stop(); err != nil {
		return true, err
	}
	logf("sweep: removed node %s (dir %s)", orUnknown(n.Name), dir)
	return true, nil
}

func sameDir(f *os.File, fi os.FileInfo) bool {
	ofi, err := f.Stat()
	return err == nil && os.SameFile(ofi, fi)
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}

// summarize condenses a Residue list: processes by program, the bridge and directories by
// name, mounts, cgroups and host files counted.
func summarize(r []string) string {
	if len(r) == 0 {
		return "nothing but the directory's files"
	}
	var procs, named []string
	counts := map[string]int{}
	for _, e := range r {
		kind, rest, _ := strings.Cut(e, " ")
		switch kind {
		case "process": // "process <pid> (<argv>)"
			pid, argv, _ := strings.Cut(rest, " ")
			prog := "?"
			if f := strings.Fields(strings.Trim(argv, "()")); len(f) > 0 {
				prog = filepath.Base(f[0])
			}
			procs = append(procs, prog+"["+pid+"]")
		case "link", "directory":
			named = append(named, e)
		default:
			counts[kind]++
		}
	}
	var parts []string
	if len(procs) > 0 {
		parts = append(parts, fmt.Sprintf("%d processes (%s)", len(procs), strings.Join(procs, ", ")))
	}
	for _, kind := range []string{"mount", "cgroup", "file"} {
		if counts[kind] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s(s)", counts[kind], kind))
		}
	}
	return strings.Join(append(parts, named...), ", ")
}

// ownerGone reads dir's owner record and tells whether the node is dead, and why (or, for a
// directory left alone, why when that is worth a line).
func ownerGone(dir string) (rec *ownerRecord, dead bool, why string) {
	rec, err := readOwner(dir)
	if err == nil {
		owner := procRef{PID: rec.PID, Start: rec.PIDStart}
		if owner.alive() {
			return rec, false, ""
		}
		if processAlive(rec.PID) {
			return rec, true, fmt.Sprintf("its owner, process %d, is gone (the PID is another process's now)", rec.PID)
		}
		return rec, true, fmt.Sprintf("its owner, process %d, is gone", rec.PID)
	}
	note := "no owner file"
	if !errors.Is(err, os.ErrNotExist) {
		note = fmt.Sprintf("unreadable owner file (%v)", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, false, ""
	}
	age := time.Since(fi.ModTime())
	if age < OwnerlessAge {
		return nil, false, ""
	}
	if pid, parent := liveParent(dir); pid != 0 {
		return nil, false, fmt.Sprintf("%s, but process %d (%s) naming it has a live parent %d (%s)", note, pid, truncate(cmdline(pid), 80), parent, truncate(cmdline(parent), 80))
	}
	return nil, true, fmt.Sprintf("%s, unchanged for %s", note, age.Round(time.Second))
}

// liveParent finds a process naming dir whose parent is alive, not init, and not itself one of
// the node's processes: the harness that runs the node (an owner that predates owner files).
// When the owner dies, its daemons are re-parented to init (or a subreaper, which keeps the
// directory alone: the safe side).
func liveParent(dir string) (pid, parent int) {
	for _, p := range procsMatching(dir + "/") {
		if !processAlive(p) {
			continue
		}
		pp := parentPID(p)
		if pp > 1 && processAlive(pp) && !strings.Contains(cmdline(pp), dir+"/") {
			return p, pp
		}
	}
	return 0, 0
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// adopt rebuilds the Node a dead owner left in dir, from its owner record or, without one, from
// the configuration files under dir; its daemons still running are adopted so that stop can
// shut them down in order.
func adopt(dir string, rec *ownerRecord) *Node {
	n := &Node{Dir: dir, dirs: newLayout(dir), orphaned: true}
	n.ContainerdSocket = n.dirs.containerdSock
	if rec != nil {
		n.Name, n.Bridge, n.Subnet, n.IP, n.network = rec.Name, rec.Bridge, rec.Subnet, rec.IP, rec.Network
		n.cgroupRoot, n.cgroups = rec.CgroupRoot, rec.Cgroups
		n.etcd, n.etcdDataDir = rec.Etcd, rec.EtcdDataDir
		if rec.IptablesChainsBefore != nil {
			n.chainsBefore = setOf(rec.IptablesChainsBefore)
		}
		if rec.HostDirsBefore != nil {
			n.hostExisted = setOf(rec.HostDirsBefore)
		}
		n.host.devicePluginInode = rec.DevicePluginInode
		n.opts.LogDir = rec.LogDir
	} else {
		n.adoptFromFiles()
	}

	// Only names this harness makes: a damaged record must not remove anything else.
	if !strings.HasPrefix(n.Name, "coffer-node-") || strings.Contains(n.Name, "/") {
		n.Name, n.cgroups = "", nil
	}
	if !strings.HasPrefix(n.Bridge, "cofferbr") {
		n.Bridge = ""
	}
	n.cgroups = cgroupDirs(n.Name, n.cgroups)
	if n.hostExisted == nil {
		n.hostExisted = setOf(sharedDirs) // unknown: remove the node's entries, no directory
	}
	if !n.etcd.alive() {
		n.etcd = procRef{}
		if ref, dataDir := etcdOfAPIServer(dir); ref.PID != 0 {
			n.etcd, n.etcdDataDir = ref, dataDir
		}
	}
	if !strings.HasPrefix(filepath.Base(n.etcdDataDir), "k8s_test_framework_") {
		n.etcdDataDir = "" // envtest's temporary directory, or nothing
	}
	n.host.dir, n.host.network, n.host.address = dir, n.network, n.ContainerdSocket
	n.ctrPath, _ = lookPath("ctr")

	d := n.dirs
	n.kubelet = adoptDaemon("kubelet", filepath.Join(d.logs, "kubelet.log"), "--config="+d.kubeletConfig)
	n.containerd = adoptDaemon("containerd", filepath.Join(d.logs, "containerd.log"), d.containerdConfig)
	n.scheduler = adoptDaemon("kube-scheduler", filepath.Join(d.logs, "kube-scheduler.log"), "--cert-dir="+d.scheduler)
	return n
}

func setOf(s []string) map[string]bool {
	m := make(map[string]bool, len(s))
	for _, v := range s {
		m[v] = true
	}
	return m
}

func adoptDaemon(program, logPath, needle string) *proc {
	pids := daemonsMatching(program, needle)
	if len(pids) == 0 {
		return nil
	}
	return adoptProc(program, logPath, refOf(pids[0]))
}

// cgroupDirs returns the recorded cgroup directories that are the node's (/<hierarchy>/<name>);
// when none were recorded (the owner died while creating them, or predates records), those that
// exist.
func cgroupDirs(name string, recorded []string) []string {
	if name == "" {
		return nil
	}
	mounts, _ := cgroupMounts()
	own := map[string]bool{}
	var all []string
	for mp := range mounts {
		p := filepath.Join(mp, name)
		own[p] = true
		all = append(all, p)
	}
	if recorded == nil {
		sort.Strings(all)
		return existing(all)
	}
	out := []string{}
	for _, p := range recorded {
		if own[p] {
			out = append(out, p)
		}
	}
	return out
}

// adoptFromFiles fills in what a node without an owner record created, from its kubelet and
// CNI configurations.
func (n *Node) adoptFromFiles() {
	if b, err := os.ReadFile(n.dirs.kubeletConfig); err == nil {
		var kc struct {
			Address    string `json:"address"`
			CgroupRoot string `json:"cgroupRoot"`
		}
		if yaml.Unmarshal(b, &kc) == nil {
			n.IP, n.cgroupRoot = kc.Address, kc.CgroupRoot
			n.Name = strings.TrimPrefix(kc.CgroupRoot, "/")
		}
	}
	if b, err := os.ReadFile(filepath.Join(n.dirs.cniConf, "10-coffer.conflist")); err == nil {
		var conf struct {
			Name    string `json:"name"`
			Plugins []struct {
				Bridge string `json:"bridge"`
				IPAM   struct {
					Ranges [][]struct {
						Subnet  string `json:"subnet"`
						Gateway string `json:"gateway"`
					} `json:"ranges"`
				} `json:"ipam"`
			} `json:"plugins"`
		}
		if json.Unmarshal(b, &conf) == nil && len(conf.Plugins) > 0 {
			n.network, n.Bridge = conf.Name, conf.Plugins[0].Bridge
			if r := conf.Plugins[0].IPAM.Ranges; len(r) > 0 && len(r[0]) > 0 {
				n.Subnet = r[0][0].Subnet
				if n.IP == "" {
					n.IP = r[0][0].Gateway
				}
			}
		}
	}
}

// etcdOfAPIServer finds the etcd of the node's kube-apiserver, while it runs: the etcd serving
// its --etcd-servers that started before it (a later etcd on a reused port is someone else's).
func etcdOfAPIServer(dir string) (procRef, string) {
	for _, api := range daemonsMatching("kube-apiserver", dir+"/") {
		apiStart, ok := procStart(api)
		if !ok {
			continue
		}
		for _, url := range strings.Split(flagValue(procArgs(api), "--etcd-servers"), ",") {
			for _, pid := range etcdServing(url) {
				if st, ok := procStart(pid); ok && st <= apiStart {
					return procRef{PID: pid, Start: st}, flagValue(procArgs(pid), "--data-dir")
				}
			}
		}
	}
	return procRef{}, ""
}

// etcdServing lists the etcd processes listening for clients on exactly url.
func etcdServing(url string) []int {
	if url == "" {
		return nil
	}
	var out []int
	for _, pid := range daemonsMatching("etcd", "--listen-client-urls="+url) {
		for _, u := range strings.Split(flagValue(procArgs(pid), "--listen-client-urls"), ",") {
			if u == url {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}
