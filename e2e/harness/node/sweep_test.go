//go:build e2e

package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/coffer-backup/coffer/e2e/harness/images"
	"github.com/coffer-backup/coffer/e2e/harness/node"
)

// The test binary doubles as the helpers of TestSweepRemovesDeadNode, selected by helperEnv:
// "node" starts a node (under the directory in tempDirEnv) with a running pod, a host service
// bound to the node's IP and a helper naming the node's directory, prints a helperInfo line and
// blocks until it is killed; "listen" listens on listenEnv and blocks.
const (
	helperEnv  = "COFFER_NODE_SWEEP_HELPER"
	tempDirEnv = "COFFER_NODE_SWEEP_TEMPDIR"
	listenEnv  = "COFFER_NODE_SWEEP_LISTEN"
	infoPrefix = "COFFER-SWEEP-HELPER "
)

type helperInfo struct {
	Dir, Name, Bridge, IP, Socket string
	Listener, Tail                int
}

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "node":
		helperNode()
	case "listen":
		l, err := net.Listen("tcp", os.Getenv(listenEnv))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(l.Addr())
	}
	select {} // until killed
}

func helperNode() {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	n, err := node.Start(ctx, node.Options{TempDir: os.Getenv(tempDirEnv), Logf: logf})
	if err != nil {
		fail(err)
	}
	// A host service for the pods, as a test's MinIO: its command line does not name Dir.
	listener := exec.Command(os.Args[0])
	listener.Env = append(os.Environ(), helperEnv+"=listen", listenEnv+"="+net.JoinHostPort(n.IP, "0"))
	out, err := listener.StdoutPipe()
	if err != nil {
		fail(err)
	}
	if err := listener.Start(); err != nil {
		fail(err)
	}
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		fail(fmt.Errorf("listener: %w", err))
	}
	// A helper naming the node's directory, as a test's controller with the node's kubeconfig.
	tail := exec.Command("tail", "-f", filepath.Join(n.Dir, "logs", "kubelet.log"))
	if err := tail.Start(); err != nil {
		fail(err)
	}
	cs, err := kubernetes.NewForConfig(n.Cluster.Config)
	if err != nil {
		fail(err)
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, sleeperPod(), metav1.CreateOptions{}); err != nil {
		fail(err)
	}
	if err := waitRunning(ctx, cs, "default", "sleeper"); err != nil {
		fail(err)
	}
	b, _ := json.Marshal(helperInfo{Dir: n.Dir, Name: n.Name, Bridge: n.Bridge, IP: n.IP, Socket: n.ContainerdSocket,
		Listener: listener.Process.Pid, Tail: tail.Process.Pid})
	fmt.Println(infoPrefix + string(b))
}

func sleeperPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sleeper"},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  ptrTo(false),
			TerminationGracePeriodSeconds: ptrTo[int64](1),
			Containers:                    []corev1.Container{{Name: "sleep", Image: images.PauseName, ImagePullPolicy: corev1.PullNever}},
			Volumes:                       []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}},
		},
	}
}

func waitRunning(ctx context.Context, cs kubernetes.Interface, ns, name string) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, err
	})
}

// A node whose test binary was SIGKILLed is swept away completely; a live node under the same
// directory is left alone (by Start's own sweep too).
func TestSweepRemovesDeadNode(t *testing.T) {
	node.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	root, err := os.MkdirTemp("", "coffer-sweep-") // short: unix socket paths live under it
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(root) })

	// The doomed node, in a child process.
	helperLog := filepath.Join(t.TempDir(), "helper.log")
	logFile, err := os.Create(helperLog)
	require.NoError(t, err)
	defer logFile.Close()
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), helperEnv+"=node", tempDirEnv+"="+root)
	child.Stderr = logFile
	out, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
	})
	infoc := make(chan helperInfo, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if s, ok := strings.CutPrefix(sc.Text(), infoPrefix); ok {
				var info helperInfo
				if json.Unmarshal([]byte(s), &info) == nil {
					infoc <- info
				}
			}
		}
		close(infoc)
	}()
	var dead helperInfo
	select {
	case info, ok := <-infoc:
		if !ok {
			log, _ := os.ReadFile(helperLog)
			t.Fatalf("the helper exited without a node:\n%s", log)
		}
		dead = info
	case <-time.After(10 * time.Minute):
		log, _ := os.ReadFile(helperLog)
		t.Fatalf("the helper's node did not come up:\n%s", log)
	}
	t.Logf("helper %d runs node %s in %s", child.Process.Pid, dead.Name, dead.Dir)

	// The live node, in this process: Start sweeps first and must leave the helper's node alone.
	live, err := node.Start(ctx, node.Options{TempDir: root, Logf: t.Logf})
	require.NoError(t, err)
	liveStopped := false
	t.Cleanup(func() {
		if !liveStopped {
			_ = live.Stop()
		}
	})
	require.DirExists(t, dead.Dir, "Start swept a node whose owner is alive")

	// SIGKILL the helper: nothing of its node is cleaned up.
	require.NoError(t, child.Process.Kill())
	_ = child.Wait()
	killed = true
	var rec struct {
		Etcd        struct{ PID int }
		EtcdDataDir string
	}
	b, err := os.ReadFile(filepath.Join(dead.Dir, "owner"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rec))
	ids := strings.Fields(run(t, "ctr", "--address", dead.Socket, "--namespace", "k8s.io", "containers", "list", "--quiet"))
	require.NotEmpty(t, ids, "the sleeper's containers")
	hostFiles := hostEntries(dead, ids)
	require.NotEmpty(t, hostFiles)
	require.NotEmpty(t, pgrep(t, dead.Dir+"/"), "the node's processes")
	require.True(t, running(dead.Listener), "the host service")
	require.True(t, running(rec.Etcd.PID), "the node's etcd")
	require.DirExists(t, rec.EtcdDataDir)
	require.NoError(t, exec.Command("ip", "link", "show", dead.Bridge).Run())
	require.NotEmpty(t, mountsUnder(t, dead.Dir))
	require.DirExists(t, filepath.Join("/sys/fs/cgroup/memory", dead.Name))
	t.Logf("left behind: %d processes, %d mounts, %d host files", len(pgrep(t, dead.Dir+"/")), len(mountsUnder(t, dead.Dir)), len(hostFiles))

	swept, err := node.Sweep(root, t.Logf)
	require.NoError(t, err)
	require.Equal(t, []string{dead.Dir}, swept)

	require.Empty(t, pgrep(t, dead.Dir+"/"), "processes naming the node's directory")
	require.Empty(t, pgrep(t, dead.Socket), "containerd or shims")
	for _, pid := range []int{dead.Listener, dead.Tail, rec.Etcd.PID} {
		require.False(t, running(pid), "process %d (%s)", pid, cmdlineOf(pid))
	}
	require.Empty(t, mountsUnder(t, dead.Dir))
	require.Error(t, exec.Command("ip", "link", "show", dead.Bridge).Run(), "bridge %s still exists", dead.Bridge)
	for _, h := range []string{"cpu", "memory", "cpuset", "pids", "systemd", "unified"} {
		require.NoDirExists(t, filepath.Join("/sys/fs/cgroup", h, dead.Name))
	}
	for _, f := range hostFiles {
		require.NoFileExists(t, f)
	}
	require.NoDirExists(t, rec.EtcdDataDir)
	require.NoDirExists(t, dead.Dir)

	// The live node is untouched and still works.
	require.DirExists(t, live.Dir)
	require.NoError(t, exec.Command("ip", "link", "show", live.Bridge).Run())
	cs, err := kubernetes.NewForConfig(live.Cluster.Config)
	require.NoError(t, err)
	n, err := cs.CoreV1().Nodes().Get(ctx, live.Name, metav1.GetOptions{})
	require.NoError(t, err)
	ready := false
	for _, c := range n.Status.Conditions {
		ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
	}
	require.True(t, ready, "node %s conditions: %+v", live.Name, n.Status.Conditions)
	_, err = cs.CoreV1().Pods("default").Create(ctx, sleeperPod(), metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, waitRunning(ctx, cs, "default", "sleeper"))
	require.NoError(t, live.Stop())
	liveStopped = true
	require.Empty(t, live.Residue())
}

// hostEntries lists the shim sockets and libcni results of the containers on the host.
func hostEntries(h helperInfo, ids []string) []string {
	var out []string
	for _, id := range ids {
		if _, err := os.Stat(node.ShimSocket(h.Socket, id)); err == nil {
			out = append(out, node.ShimSocket(h.Socket, id))
		}
	}
	ents, _ := os.ReadDir("/var/lib/cni/results")
	for _, e := range ents {
		for _, id := range ids {
			if strings.Contains(e.Name(), "-"+id+"-") {
				out = append(out, filepath.Join("/var/lib/cni/results", e.Name()))
				break
			}
		}
	}
	return out
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	require.NoError(t, err, "%s %v: %s", name, args, out)
	return string(out)
}

// running tells whether pid is a live process (not a zombie).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

func cmdlineOf(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.ReplaceAll(string(b), "\x00", " ")
}

// mountsUnder lists the mount points below dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	return out
}
