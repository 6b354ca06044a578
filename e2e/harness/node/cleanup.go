package node

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// --- mounts ---

// mountsUnder lists the mount points at or below dir, in the order of /proc/self/mountinfo
// (parents before the mounts stacked on them).
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 5 {
			continue
		}
		mp := unescapeMountPath(fs[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out
}

// unescapeMountPath decodes mountinfo's octal escapes (\040 for a space, …).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountAll unmounts everything at or below dir, newest first; a mount that refuses is
// detached (lazy unmount) as a last resort.
func unmountAll(dir string) error {
	for range 10 {
		mps := mountsUnder(dir)
		if len(mps) == 0 {
			return nil
		}
		for i := len(mps) - 1; i >= 0; i-- {
			if err := syscall.Unmount(mps[i], 0); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				_ = syscall.Unmount(mps[i], syscall.MNT_DETACH)
			}
		}
	}
	if mps := mountsUnder(dir); len(mps) > 0 {
		return fmt.Errorf("mounts left under %s: %s", dir, strings.Join(mps, ", "))
	}
	return nil
}

// --- processes ---

// otherProcs lists the processes, but this one, for which match is true.
func otherProcs(match func(pid int) bool) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid != self && match(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procsMatching lists the processes whose command line contains one of the needles.
func procsMatching(needles ...string) []int {
	return otherProcs(func(pid int) bool {
		line := cmdline(pid)
		for _, n := range needles {
			if n != "" && line != "" && strings.Contains(line, n) {
				return true
			}
		}
		return false
	})
}

func cmdline(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
}

// procArgs is the argument vector of a process.
func procArgs(pid int) []string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// flagValue returns the value of --name=value or --name value in args.
func flagValue(args []string, name string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// daemonsMatching lists the live processes running program (base name of argv[0]) whose
// command line contains needle.
func daemonsMatching(program, needle string) []int {
	var out []int
	for _, pid := range procsMatching(needle) {
		if args := procArgs(pid); len(args) > 0 && filepath.Base(args[0]) == program && processAlive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// procsBoundTo lists the processes (but this one) holding a TCP or UDP socket whose local
// address is ip, in this network namespace: host services a test ran for the node's pods.
func procsBoundTo(ip net.IP) []int {
	ip4 := ip.To4()
	if ip4 == nil {
		return nil
	}
	// /proc/net/* print addresses as the bytes of the in-memory (network order) value read as
	// little-endian 32-bit words.
	v4 := fmt.Sprintf("%02X%02X%02X%02X", ip4[3], ip4[2], ip4[1], ip4[0])
	v6 := "0000000000000000FFFF0000" + v4
	inodes := map[string]bool{}
	for _, f := range []string{"tcp", "udp", "tcp6", "udp6"} {
		b, err := os.ReadFile("/proc/self/net/" + f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 10 {
				continue
			}
			addr, _, _ := strings.Cut(fs[1], ":")
			if (addr == v4 || addr == v6) && fs[9] != "0" {
				inodes["socket:["+fs[9]+"]"] = true
			}
		}
	}
	if len(inodes) == 0 {
		return nil
	}
	return otherProcs(func(pid int) bool {
		dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
		fds, err := os.ReadDir(dir)
		if err != nil {
			return false
		}
		for _, fd := range fds {
			if t, err := os.Readlink(dir + fd.Name()); err == nil && inodes[t] {
				return true
			}
		}
		return false
	})
}

// killAndWait SIGKILLs the pids and waits (bounded) until they are gone.
func killAndWait(pids []int, timeout time.Duration) []int {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(timeout)
	for {
		var alive []int
		for _, pid := range pids {
			if processAlive(pid) {
				alive = append(alive, pid)
			}
		}
		if len(alive) == 0 || time.Now().After(deadline) {
			return alive
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// processAlive is true for a running process (a zombie counts as gone: it holds no resources
// but its pid, and its parent reaps it).
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

// --- cgroups ---

// cgroupMounts lists the mount points of the cgroup v1 hierarchies and of the cgroup v2
// (unified) hierarchy, with the controllers of each v1 hierarchy.
func cgroupMounts() (map[string][]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string][]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		parts := strings.SplitN(line, " - ", 2)
		if len(parts) != 2 {
			continue
		}
		pre, post := strings.Fields(parts[0]), strings.Fields(parts[1])
		if len(pre) < 5 || len(post) < 3 || pre[3] != "/" {
			continue // only hierarchies mounted at their root
		}
		switch post[0] {
		case "cgroup":
			var ctrls []string
			for _, o := range strings.Split(post[2], ",") {
				switch o {
				case "rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec", "xattr", "clone_children", "nsdelegate":
				default:
					ctrls = append(ctrls, strings.TrimPrefix(o, "name="))
				}
			}
			out[unescapeMountPath(pre[4])] = ctrls
		case "cgroup2":
			out[unescapeMountPath(pre[4])] = nil
		}
	}
	return out, nil
}

// createCgroupRoot creates /<name> in every cgroup hierarchy, so the kubelet (cgroupfs driver,
// cgroupRoot /<name>) keeps its pods apart from any other kubelet on the machine. A v1 cpuset
// child starts with no CPUs or memory nodes: copy the parent's. It returns the directories it
// created (also on error: Stop removes exactly those).
func createCgroupRoot(name string) ([]string, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	if len(mounts) == 0 {
		return nil, fmt.Errorf("no cgroup hierarchy is mounted")
	}
	var created []string
	for mp, ctrls := range mounts {
		dir := filepath.Join(mp, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return created, fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
		created = append(created, dir)
		for _, c := range ctrls {
			if c != "cpuset" {
				continue
			}
			for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(mp, file))
				if err != nil {
					return created, err
				}
				if err := os.WriteFile(filepath.Join(dir, file), v, 0o644); err != nil {
					return created, fmt.Errorf("initialising %s: %w", filepath.Join(dir, file), err)
				}
			}
		}
	}
	sort.Strings(created)
	return created, nil
}

// cgroupProcs lists the processes in the given cgroups and below.
func cgroupProcs(roots []string) []int {
	seen := map[int]bool{}
	var pids []int
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

// removeCgroups removes the given cgroups and their children, deepest first.
func removeCgroups(roots []string) error {
	var errs []error
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			var err error
			for range 50 { // a cgroup whose last task just exited may stay busy for a moment
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// existing lists the paths that exist.
func existing(paths []string) []string {
	var out []string
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// --- iptables ---

// iptablesChains returns "<tool> <table> <chain>" for every KUBE-* chain, in iptables and
// ip6tables.
func iptablesChains() map[string]bool {
	out := map[string]bool{}
	for _, tool := range []string{"iptables", "ip6tables"} {
		save, err := run(20*time.Second, tool+"-save")
		if err != nil {
			continue
		}
		table := ""
		for _, line := range strings.Split(save, "\n") {
			switch {
			case strings.HasPrefix(line, "*"):
				table = strings.TrimPrefix(line, "*")
			case strings.HasPrefix(line, ":KUBE-"):
				chain := strings.Fields(strings.TrimPrefix(line, ":"))[0]
				out[tool+" "+table+" "+chain] = true
			}
		}
	}
	return out
}

// removeNewChains deletes the KUBE-* chains that did not exist before the node started (and the
// rules jumping to them). The kubelet runs with makeIPTablesUtilChains=false and creates none:
// this only catches a regression.
func removeNewChains(before map[string]bool) error {
	var errs []error
	for key := range iptablesChains() {
		if before[key] {
			continue
		}
		f := strings.Fields(key)
		tool, table, chain := f[0], f[1], f[2]
		save, _ := run(20*time.Second, tool+"-save", "-t", table)
		for _, line := range strings.Split(save, "\n") {
			if strings.HasPrefix(line, "-A ") && strings.Contains(line, "-j "+chain) && !strings.HasPrefix(line, "-A "+chain+" ") {
				args := append([]string{"-t", table, "-D"}, strings.Fields(strings.TrimPrefix(line, "-A "))...)
				_, _ = run(20*time.Second, tool, args...)
			}
		}
		if _, err := run(20*time.Second, tool, "-t", table, "-F", chain); err != nil {
			errs = append(errs, err)
		}
		if _, err := run(20*time.Second, tool, "-t", table, "-X", chain); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// --- files outside the node's directory ---

// sharedDirs are directories outside the node's directory where containerd, the kubelet or
// libcni put per-node or per-container entries whatever their configuration says. Stop removes
// the node's own entries, then each directory that did not exist before Start, if it is empty
// (another node may still use it). Deepest first.
var sharedDirs = []string{
	"/run/containerd/s",               // containerd 1.6 shim sockets: sha256(address/namespace/id)
	"/run/containerd",                 //
	"/var/lib/cni/results",            // libcni: cached ADD results, <network>-<sandbox id>-<ifname>
	"/var/lib/cni",                    //
	"/var/lib/kubelet/device-plugins", // kubelet: the device manager's socket, not configurable
	"/var/lib/kubelet",                //
	"/var/log/containers",             // kubelet: symlinks to the pods' logs (if it makes them)
}

// devicePluginSocket is the kubelet's device-manager registration socket: a fixed path shared
// by every kubelet on the machine (the last one started owns it; no device plugin is used here).
const devicePluginSocket = "/var/lib/kubelet/device-plugins/kubelet.sock"

// inode returns the inode number of path, 0 when absent.
func inode(path string) uint64 {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return 0
	}
	return st.Ino
}

func existingHostPaths() map[string]bool {
	out := map[string]bool{}
	for _, p := range sharedDirs {
		if _, err := os.Lstat(p); err == nil {
			out[p] = true
		}
	}
	return out
}

// shimSocket is where containerd 1.6 puts the socket of the shim for a container: outside its
// state directory, named by a hash of its own address, the namespace and the container id.
func shimSocket(address, namespace, id string) string {
	sum := sha256.Sum256([]byte(filepath.Join(address, namespace, id)))
	return fmt.Sprintf("/run/containerd/s/%x", sum)
}

// hostEntries are the node's own entries in the shared directories.
type hostEntries struct {
	dir, network, address string
	containers            []string
	devicePluginInode     uint64
}

// remove removes the node's entries from the shared host directories: symlinks into dir,
// libcni results of network, shim sockets of the containers, the kubelet's device-plugin socket
// if it is still the one the node's kubelet created; then the directories that did not exist
// before, if empty.
func (h hostEntries) remove(existed map[string]bool) {
	dir, address, containers := h.dir, h.address, h.containers
	if h.devicePluginInode != 0 && inode(devicePluginSocket) == h.devicePluginInode {
		_ = os.Remove(devicePluginSocket)
	}
	if ents, err := os.ReadDir("/var/log/containers"); err == nil {
		for _, e := range ents {
			p := filepath.Join("/var/log/containers", e.Name())
			if t, err := os.Readlink(p); err == nil && strings.HasPrefix(t, dir+"/") {
				_ = os.Remove(p)
			}
		}
	}
	if ents, err := os.ReadDir("/var/lib/cni/results"); err == nil {
		for _, e := range ents {
			if h.ownResult(e.Name()) {
				_ = os.Remove(filepath.Join("/var/lib/cni/results", e.Name()))
			}
		}
	}
	for _, id := range containers {
		_ = os.Remove(shimSocket(address, k8sNamespace, id))
	}
	for _, p := range sharedDirs {
		if !existed[p] {
			_ = syscall.Rmdir(p) // fails, harmlessly, when not empty (someone else's entries)
		}
	}
}

// ownResult tells whether a libcni cache entry (<network>-<container id>-<ifname>) is the
// node's: its network, or one of its sandboxes on containerd's loopback network.
func (h hostEntries) ownResult(name string) bool {
	if h.network != "" && strings.HasPrefix(name, h.network+"-") {
		return true
	}
	for _, id := range h.containers {
		if strings.Contains(name, "-"+id+"-") {
			return true
		}
	}
	return false
}

// left lists the node's entries still in the shared directories.
func (h hostEntries) left() []string {
	var out []string
	if h.devicePluginInode != 0 && inode(devicePluginSocket) == h.devicePluginInode {
		out = append(out, devicePluginSocket)
	}
	for _, id := range h.containers {
		if p := shimSocket(h.address, k8sNamespace, id); inode(p) != 0 {
			out = append(out, p)
		}
	}
	if ents, err := os.ReadDir("/var/lib/cni/results"); err == nil {
		for _, e := range ents {
			if h.ownResult(e.Name()) {
				out = append(out, filepath.Join("/var/lib/cni/results", e.Name()))
			}
		}
	}
	if ents, err := os.ReadDir("/var/log/containers"); err == nil {
		for _, e := range ents {
			p := filepath.Join("/var/log/containers", e.Name())
			if t, err := os.Readlink(p); err == nil && strings.HasPrefix(t, h.dir+"/") {
				out = append(out, p)
			}
		}
	}
	return out
}
