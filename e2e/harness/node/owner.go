package node

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// ownerFile is the name, in the node's directory, of the record of who owns the node and of
// what it created on the host: Sweep reads it when the owner is gone.
const ownerFile = "owner"

// ownerRecord is the content of <Dir>/owner, rewritten by Start as the node creates things.
type ownerRecord struct {
	// PID and PIDStart identify the process that started the node (the test binary); PIDStart is
	// field 22 of /proc/<pid>/stat, so a reused PID is not mistaken for the owner.
	PID      int    `json:"pid"`
	PIDStart uint64 `json:"pidStart"`

	Name              string   `json:"name"`
	Dir               string   `json:"dir"`
	Bridge            string   `json:"bridge,omitempty"`
	Subnet            string   `json:"subnet,omitempty"`
	IP                string   `json:"ip,omitempty"`
	Network           string   `json:"network,omitempty"`
	CgroupRoot        string   `json:"cgroupRoot"`
	Cgroups           []string `json:"cgroups"` // null: not created yet (Sweep derives them from Name)
	ContainerdAddress string   `json:"containerdAddress"`
	// Etcd is the control plane's etcd: its command line does not name Dir.
	Etcd        procRef `json:"etcd"`
	EtcdURL     string  `json:"etcdURL,omitempty"`
	EtcdDataDir string  `json:"etcdDataDir,omitempty"`
	// IptablesChainsBefore and HostDirsBefore: null when not recorded (Sweep then removes no
	// KUBE-* chain and no shared directory).
	IptablesChainsBefore []string `json:"iptablesChainsBefore"`
	HostDirsBefore       []string `json:"hostDirsBefore"`
	DevicePluginInode    uint64   `json:"devicePluginInode,omitempty"`
	LogDir               string   `json:"logDir,omitempty"`
}

// procRef identifies a process across PID reuse.
type procRef struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// alive tells whether the process still runs (a zombie is gone).
func (r procRef) alive() bool {
	if r.PID <= 0 || !processAlive(r.PID) {
		return false
	}
	st, ok := procStart(r.PID)
	return ok && st == r.Start
}

func refOf(pid int) procRef {
	st, _ := procStart(pid)
	return procRef{PID: pid, Start: st}
}

// statFields returns the fields of /proc/<pid>/stat after the command name: index 0 is field 3
// (state), 1 the ppid, 2 the process group, 19 field 22 (start time in clock ticks since boot).
func statFields(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

func statInt(pid, idx int) (uint64, bool) {
	f := statFields(pid)
	if len(f) <= idx {
		return 0, false
	}
	v, err := strconv.ParseUint(f[idx], 10, 64)
	return v, err == nil
}

// procStart is the start time of a process (field 22 of /proc/<pid>/stat).
func procStart(pid int) (uint64, bool) { return statInt(pid, 19) }

func parentPID(pid int) int {
	v, _ := statInt(pid, 1)
	return int(v)
}

func processGroup(pid int) int {
	v, _ := statInt(pid, 2)
	return int(v)
}

// record is what a sweep needs to clean the node up after its owner died.
func (n *Node) record() ownerRecord {
	r := ownerRecord{
		PID: os.Getpid(), Name: n.Name, Dir: n.Dir, Bridge: n.Bridge, Subnet: n.Subnet, IP: n.IP,
		Network: n.network, CgroupRoot: n.cgroupRoot, Cgroups: n.cgroups, ContainerdAddress: n.ContainerdSocket,
		Etcd: n.etcd, EtcdDataDir: n.etcdDataDir, DevicePluginInode: n.host.devicePluginInode, LogDir: n.opts.LogDir,
	}
	r.PIDStart, _ = procStart(r.PID)
	if n.Cluster != nil {
		r.EtcdURL = n.Cluster.EtcdURL
	}
	if n.chainsBefore != nil {
		r.IptablesChainsBefore = sortedKeys(n.chainsBefore)
	}
	if n.hostExisted != nil {
		r.HostDirsBefore = sortedKeys(n.hostExisted)
	}
	return r
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// saveOwner (re)writes <Dir>/owner atomically.
func (n *Node) saveOwner() error {
	b, err := json.MarshalIndent(n.record(), "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(n.Dir, "."+ownerFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("recording the node's owner: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(n.Dir, ownerFile)); err != nil {
		return fmt.Errorf("recording the node's owner: %w", err)
	}
	return nil
}

// readOwner reads <dir>/owner; os.ErrNotExist when there is none.
func readOwner(dir string) (*ownerRecord, error) {
	b, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if err != nil {
		return nil, err
	}
	var r ownerRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, ownerFile), err)
	}
	return &r, nil
}
