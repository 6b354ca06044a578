package node

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// The node's network is one Linux bridge the harness creates and owns. The bridge carries
// 10.a.b.1/24: a /24, not a /32, so the host has a connected route to the pods and answers
// them over the bridge (pods reach host services listening on the bridge IP, e.g. MinIO), with
// no extra route to add or remove. Pods get addresses from .10 up through the CNI bridge
// plugin with host-local IPAM; isGateway and ipMasq are off, so there is no NAT, no
// forwarding, and no route out of the /24: pods reach the host's bridge IP and each other,
// nothing else.

// randHex returns n random bytes in hex.
func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// usedIPv4 lists the IPv4 networks this machine already uses: interface addresses, routes of
// every table (but default routes) and the resolvers of /etc/resolv.conf.
func usedIPv4() ([]*net.IPNet, error) {
	var used []*net.IPNet
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for _, ifc := range ifaces {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				used = append(used, &net.IPNet{IP: n.IP.Mask(n.Mask), Mask: n.Mask})
			}
		}
	}
	out, err := run(10*time.Second, "ip", "-4", "route", "show", "table", "all")
	if err != nil {
		return nil, err
	}
	routeTypes := map[string]bool{"unicast": true, "local": true, "broadcast": true, "multicast": true, "anycast": true,
		"unreachable": true, "blackhole": true, "prohibit": true, "throw": true, "nat": true}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && routeTypes[f[0]] {
			f = f[1:]
		}
		if len(f) == 0 || f[0] == "default" {
			continue
		}
		if n := parseNet(f[0]); n != nil {
			used = append(used, n)
		}
	}
	if f, err := os.Open("/etc/resolv.conf"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if fs := strings.Fields(sc.Text()); len(fs) >= 2 && fs[0] == "nameserver" {
				if n := parseNet(fs[1]); n != nil {
					used = append(used, n)
				}
			}
		}
		f.Close()
	}
	return used, nil
}

func parseNet(s string) *net.IPNet {
	if !strings.Contains(s, "/") {
		ip := net.ParseIP(s).To4()
		if ip == nil {
			return nil
		}
		return &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}
	}
	_, n, err := net.ParseCIDR(s)
	if err != nil || n.IP.To4() == nil {
		return nil
	}
	return n
}

func overlaps(a, b *net.IPNet) bool { return a.Contains(b.IP) || b.Contains(a.IP) }

// pickSubnet chooses a random 10.a.b.0/24 (a in 1..254: 10.0.0.0/24 is the control plane's
// service range) that overlaps nothing in used.
func pickSubnet(used []*net.IPNet) (*net.IPNet, error) {
	for range 500 {
		var b [2]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		x := int(binary.BigEndian.Uint16(b[:]))
		a, c := 1+(x>>8)%254, x&0xff
		n := &net.IPNet{IP: net.IPv4(10, byte(a), byte(c), 0).To4(), Mask: net.CIDRMask(24, 32)}
		free := true
		for _, u := range used {
			if overlaps(n, u) {
				free = false
				break
			}
		}
		if free {
			return n, nil
		}
	}
	return nil, fmt.Errorf("no free 10.x.y.0/24 on this machine")
}

// hostIP is .1 of the subnet: the bridge's (and the node's) address.
func hostIP(n *net.IPNet) net.IP {
	ip := make(net.IP, 4)
	copy(ip, n.IP.To4())
	ip[3] = 1
	return ip
}

// createBridge creates the node's bridge with a fresh name and subnet and returns both.
func createBridge() (string, *net.IPNet, error) {
	var lastErr error
	for range 5 {
		used, err := usedIPv4()
		if err != nil {
			return "", nil, err
		}
		subnet, err := pickSubnet(used)
		if err != nil {
			return "", nil, err
		}
		name := "cofferbr" + randHex(2)
		if _, err := run(10*time.Second, "ip", "link", "add", "name", name, "type", "bridge"); err != nil {
			lastErr = err // most likely the name exists: another harness's bridge
			continue
		}
		ones, _ := subnet.Mask.Size()
		addr := fmt.Sprintf("%s/%d", hostIP(subnet), ones)
		if _, err := run(10*time.Second, "ip", "addr", "add", addr, "dev", name); err != nil {
			_, _ = run(10*time.Second, "ip", "link", "del", name)
			return "", nil, err
		}
		if _, err := run(10*time.Second, "ip", "link", "set", name, "up"); err != nil {
			_, _ = run(10*time.Second, "ip", "link", "del", name)
			return "", nil, err
		}
		// Another harness may have picked the same subnet at the same moment: check again now
		// that ours is in place, and retry elsewhere if anyone else holds an overlapping address.
		if clash, err := addressClash(name, subnet); err != nil || clash {
			_, _ = run(10*time.Second, "ip", "link", "del", name)
			lastErr = fmt.Errorf("subnet %s taken concurrently", subnet)
			continue
		}
		return name, subnet, nil
	}
	return "", nil, fmt.Errorf("creating the node bridge: %w", lastErr)
}

func addressClash(own string, subnet *net.IPNet) (bool, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return false, err
	}
	for _, ifc := range ifaces {
		if ifc.Name == own {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && overlaps(subnet, n) {
				return true, nil
			}
		}
	}
	return false, nil
}

// deleteBridge removes the veths still attached to the bridge, then the bridge.
func deleteBridge(name string) error {
	if _, err := net.InterfaceByName(name); err != nil {
		return nil // already gone
	}
	out, _ := run(10*time.Second, "ip", "-o", "link", "show", "master", name)
	for _, line := range strings.Split(out, "\n") {
		// "12: veth1234@if3: <...> ... master cofferbrab12 ..."
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		veth := strings.TrimSuffix(f[1], ":")
		if i := strings.Index(veth, "@"); i >= 0 {
			veth = veth[:i]
		}
		_, _ = run(10*time.Second, "ip", "link", "del", veth)
	}
	_, err := run(10*time.Second, "ip", "link", "del", name)
	return err
}

// cniConfig is the node's network: the bridge plugin on the harness's bridge with host-local
// IPAM in the node's /24 (addresses from .10), leases kept under the node's directory.
func cniConfig(network, bridge string, subnet *net.IPNet, ipamDir string) ([]byte, error) {
	base := subnet.IP.To4()
	at := func(last byte) string { return net.IPv4(base[0], base[1], base[2], last).String() }
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       network,
		"plugins": []any{
			map[string]any{
				"type":             "bridge",
				"bridge":           bridge,
				"isGateway":        false,
				"isDefaultGateway": false,
				"ipMasq":           false,
				"hairpinMode":      false,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": ipamDir,
					"ranges": [][]map[string]string{{{
						"subnet":     subnet.String(),
						"rangeStart": at(10),
						"rangeEnd":   at(254),
						"gateway":    at(1),
					}}},
				},
			},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}
