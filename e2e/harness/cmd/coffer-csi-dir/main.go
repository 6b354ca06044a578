// Command coffer-csi-dir is the real node's CSI driver (e2e/harness/csidir): a volume is a
// directory under --root, a snapshot a copy of one, and a volume created from a snapshot a copy of
// that. It serves the CSI identity, controller and node services on --endpoint (the external
// provisioner and snapshotter talk to it there, the kubelet to publish volumes into pods) and
// registers itself with the kubelet through the kubelet's plugin registration socket, as
// node-driver-registrar does for other drivers. It runs as root on the node, as one process for
// the controller and the node.
//
// It is a test driver: a volume's capacity is recorded, not enforced, and a snapshot is a copy
// taken while the volume may be written (crash-consistent only for a writer that is idle).
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const version = "1.0.0"

func main() {
	name := flag.String("name", "dir.csi.coffer.dev", "the driver's name")
	endpoint := flag.String("endpoint", "", "the CSI socket's path")
	registration := flag.String("registration", "", "the kubelet registration socket's path (in the kubelet's plugins_registry)")
	root := flag.String("root", "", "the directory holding volumes and snapshots")
	nodeID := flag.String("node-id", "", "the node's name")
	flag.Parse()
	if *endpoint == "" || *root == "" || *nodeID == "" {
		log.Fatal("--endpoint, --root and --node-id are required")
	}
	d := &driver{name: *name, root: *root, node: *nodeID}
	for _, dir := range []string{d.volumes(), d.snapshots()} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			log.Fatal(err)
		}
	}
	csiServer, err := serve(*endpoint, func(s *grpc.Server) {
		csi.RegisterIdentityServer(s, d)
		csi.RegisterControllerServer(s, d)
		csi.RegisterNodeServer(s, d)
	})
	if err != nil {
		log.Fatal(err)
	}
	servers := []*grpc.Server{csiServer}
	if *registration != "" {
		r := &registrar{name: *name, endpoint: *endpoint}
		regServer, err := serve(*registration, func(s *grpc.Server) { registerapi.RegisterRegistrationServer(s, r) })
		if err != nil {
			log.Fatal(err)
		}
		servers = append(servers, regServer)
	}
	log.Printf("serving %s on %s", *name, *endpoint)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	for _, s := range servers {
		s.Stop()
	}
}

func serve(path string, register func(*grpc.Server)) (*grpc.Server, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	s := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		if err != nil {
			log.Printf("%s: %v", info.FullMethod, err)
		} else if info.FullMethod != "/csi.v1.Identity/Probe" {
			log.Printf("%s: ok", info.FullMethod)
		}
		return resp, err
	}))
	register(s)
	go func() { _ = s.Serve(l) }()
	return s, nil
}

// registrar answers the kubelet's plugin watcher.
type registrar struct {
	registerapi.UnimplementedRegistrationServer
	name, endpoint string
}

func (r *registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: r.name, Endpoint: r.endpoint, SupportedVersions: []string{version}}, nil
}

func (r *registrar) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !s.PluginRegistered {
		log.Printf("the kubelet refused the registration: %s", s.Error)
	} else {
		log.Printf("registered with the kubelet")
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

type driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer
	name, root, node string
	mu               sync.Mutex // serializes changes of volumes and snapshots
}

// record is what the driver keeps beside a volume or snapshot directory.
type record struct {
	Name     string    `json:"name"`
	Capacity int64     `json:"capacity"`
	Source   string    `json:"source,omitempty"` // a snapshot's volume, a volume's snapshot
	Created  time.Time `json:"created"`
}

func (d *driver) volumes() string   { return filepath.Join(d.root, "volumes") }
func (d *driver) snapshots() string { return filepath.Join(d.root, "snapshots") }

// id names a volume or snapshot by its request's name, so a repeated request finds what the first
// made.
func id(prefix, name string) string {
	sum := sha256.Sum256([]byte(name))
	return prefix + hex.EncodeToString(sum[:12])
}

func validID(s string) bool {
	if len(s) != 26 || (s[:2] != "v-" && s[:2] != "s-") {
		return false
	}
	_, err := hex.DecodeString(s[2:])
	return err == nil
}

func readRecord(dir, id string) (*record, error) {
	b, err := os.ReadFile(filepath.Join(dir, id+".json"))
	if err != nil {
		return nil, err
	}
	r := &record{}
	return r, json.Unmarshal(b, r)
}

func writeRecord(dir, id string, r *record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+id+".json")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, id+".json"))
}

func (d *driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.name, VendorVersion: version}, nil
}

func (d *driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{Type: &csi.PluginCapability_Service_{
		Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}}}}}, nil
}

func (d *driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

func (d *driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var caps []*csi.ControllerServiceCapability
	for _, c := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
	} {
		caps = append(caps, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: c}}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

func (d *driver) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if _, err := d.volume(req.GetVolumeId()); err != nil {
		return nil, err
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{VolumeCapabilities: req.GetVolumeCapabilities()}}, nil
}

func (d *driver) volume(volumeID string) (*record, error) {
	if !validID(volumeID) || volumeID[:2] != "v-" {
		return nil, status.Errorf(codes.NotFound, "no volume %q", volumeID)
	}
	r, err := readRecord(d.volumes(), volumeID)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, status.Errorf(codes.NotFound, "no volume %q", volumeID)
	}
	return r, err
}

func (d *driver) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "a volume needs a name")
	}
	for _, c := range req.GetVolumeCapabilities() {
		if c.GetBlock() != nil {
			return nil, status.Error(codes.InvalidArgument, "block volumes are not supported")
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	vid := id("v-", req.GetName())
	capacity := req.GetCapacityRange().GetRequiredBytes()
	src := req.GetVolumeContentSource()
	var from, fromDir string
	var fromCapacity int64
	switch {
	case src.GetSnapshot() != nil:
		from = src.GetSnapshot().GetSnapshotId()
		r, err := d.snapshot(from)
		if err != nil {
			return nil, err
		}
		fromDir, fromCapacity = filepath.Join(d.snapshots(), from), r.Capacity
	case src.GetVolume() != nil:
		from = src.GetVolume().GetVolumeId()
		r, err := d.volume(from)
		if err != nil {
			return nil, err
		}
		fromDir, fromCapacity = filepath.Join(d.volumes(), from), r.Capacity
	}
	if capacity < fromCapacity {
		capacity = fromCapacity
	}
	if r, err := readRecord(d.volumes(), vid); err == nil {
		if r.Source != from || (req.GetCapacityRange().GetRequiredBytes() > r.Capacity) {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q exists with another source or a smaller size", req.GetName())
		}
		return d.created(vid, r, src), nil
	}
	dir := filepath.Join(d.volumes(), vid)
	if err := os.RemoveAll(dir); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if fromDir != "" {
		if err := copyTree(fromDir, dir); err != nil {
			return nil, status.Errorf(codes.Internal, "copying %s: %v", from, err)
		}
	} else if err := mkdirOpen(dir); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	r := &record{Name: req.GetName(), Capacity: capacity, Source: from, Created: time.Now().UTC()}
	if err := writeRecord(d.volumes(), vid, r); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return d.created(vid, r, src), nil
}

// mkdirOpen makes an empty volume's directory, writable by the pod of any user it is given to
// (as a fresh file system's root would be with fsGroup aside).
func mkdirOpen(dir string) error {
	if err := os.Mkdir(dir, 0o777); err != nil {
		return err
	}
	return os.Chmod(dir, 0o777) // past the umask
}

func (d *driver) created(vid string, r *record, src *csi.VolumeContentSource) *csi.CreateVolumeResponse {
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: vid, CapacityBytes: r.Capacity, ContentSource: src}}
}

func (d *driver) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	vid := req.GetVolumeId()
	if !validID(vid) {
		return &csi.DeleteVolumeResponse{}, nil // never ours: gone
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := os.RemoveAll(filepath.Join(d.volumes(), vid)); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := os.Remove(filepath.Join(d.volumes(), vid+".json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (d *driver) snapshot(snapshotID string) (*record, error) {
	if !validID(snapshotID) || snapshotID[:2] != "s-" {
		return nil, status.Errorf(codes.NotFound, "no snapshot %q", snapshotID)
	}
	r, err := readRecord(d.snapshots(), snapshotID)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, status.Errorf(codes.NotFound, "no snapshot %q", snapshotID)
	}
	return r, err
}

func (d *driver) CreateSnapshot(_ context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	if req.GetName() == "" || req.GetSourceVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "a snapshot needs a name and a source volume")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	sid := id("s-", req.GetName())
	if r, err := readRecord(d.snapshots(), sid); err == nil {
		if r.Source != req.GetSourceVolumeId() {
			return nil, status.Errorf(codes.AlreadyExists, "snapshot %q exists of another volume", req.GetName())
		}
		return d.snapshotTaken(sid, r), nil
	}
	v, err := d.volume(req.GetSourceVolumeId())
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(d.snapshots(), sid)
	if err := os.RemoveAll(dir); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := copyTree(filepath.Join(d.volumes(), req.GetSourceVolumeId()), dir); err != nil {
		return nil, status.Errorf(codes.Internal, "copying %s: %v", req.GetSourceVolumeId(), err)
	}
	r := &record{Name: req.GetName(), Capacity: v.Capacity, Source: req.GetSourceVolumeId(), Created: time.Now().UTC()}
	if err := writeRecord(d.snapshots(), sid, r); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return d.snapshotTaken(sid, r), nil
}

func (d *driver) snapshotTaken(sid string, r *record) *csi.CreateSnapshotResponse {
	return &csi.CreateSnapshotResponse{Snapshot: &csi.Snapshot{SnapshotId: sid, SourceVolumeId: r.Source, SizeBytes: r.Capacity,
		CreationTime: timestamppb.New(r.Created), ReadyToUse: true}}
}

func (d *driver) DeleteSnapshot(_ context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	sid := req.GetSnapshotId()
	if !validID(sid) {
		return &csi.DeleteSnapshotResponse{}, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := os.RemoveAll(filepath.Join(d.snapshots(), sid)); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := os.Remove(filepath.Join(d.snapshots(), sid+".json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

func (d *driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: d.node}, nil
}

func (d *driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

// NodePublishVolume bind-mounts the volume's directory at the pod's target path (read-only when
// asked).
func (d *driver) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	target := req.GetTargetPath()
	if target == "" {
		return nil, status.Error(codes.InvalidArgument, "no target path")
	}
	if _, err := d.volume(req.GetVolumeId()); err != nil {
		return nil, err
	}
	if mounted(target) {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	src := filepath.Join(d.volumes(), req.GetVolumeId())
	if err := syscall.Mount(src, target, "", syscall.MS_BIND, ""); err != nil {
		return nil, status.Errorf(codes.Internal, "bind mount of %s: %v", src, err)
	}
	if req.GetReadonly() {
		if err := syscall.Mount("", target, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
			_ = syscall.Unmount(target, 0)
			return nil, status.Errorf(codes.Internal, "read-only remount of %s: %v", target, err)
		}
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (d *driver) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	target := req.GetTargetPath()
	if target == "" {
		return nil, status.Error(codes.InvalidArgument, "no target path")
	}
	if mounted(target) {
		if err := syscall.Unmount(target, 0); err != nil {
			return nil, status.Errorf(codes.Internal, "unmounting %s: %v", target, err)
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// mounted says whether path is a mount point of this mount namespace (/proc/self/mountinfo's
// fifth field, with its octal escapes of spaces and such).
func mounted(path string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	clean := filepath.Clean(path)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && mountEscapes.Replace(f[4]) == clean {
			return true
		}
	}
	return false
}

var mountEscapes = strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)

// copyTree copies the tree at src to dst (which must not exist): directories, regular files and
// symbolic links, with their modes, owners and modification times.
func copyTree(src, dst string) error {
	tmp := dst + ".partial"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	// Directories' times are set last: writing into a directory changes its modification time.
	type dirTime struct {
		path string
		mod  time.Time
	}
	var dirs []dirTime
	err := filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(tmp, rel)
		info, err := e.Info()
		if err != nil {
			return err
		}
		switch {
		case e.IsDir():
			if err := os.Mkdir(to, 0o700); err != nil {
				return err
			}
			dirs = append(dirs, dirTime{to, info.ModTime()})
		case e.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, to); err != nil {
				return err
			}
		case e.Type().IsRegular():
			if err := copyFile(p, to); err != nil {
				return err
			}
		default:
			return nil // devices, sockets, pipes: not data
		}
		return keepAttributes(to, info)
	})
	if err != nil {
		return err
	}
	for _, d := range dirs {
		if err := os.Chtimes(d.path, d.mod, d.mod); err != nil {
			return err
		}
	}
	return os.Rename(tmp, dst)
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func keepAttributes(p string, info fs.FileInfo) error {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("no owner of %s", p)
	}
	if err := os.Lchown(p, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if info.Mode()&fs.ModeSymlink != 0 {
		return nil
	}
	if err := os.Chmod(p, info.Mode().Perm()|info.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
		return err
	}
	return os.Chtimes(p, info.ModTime(), info.ModTime())
}
