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
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/coffer-backup/coffer/e2e/harness/images"
	"github.com/coffer-backup/coffer/e2e/harness/node"
)

// report is what testdata/reporter writes to its termination message.
type report struct {
	Message string `json:"message"`
	UID     int    `json:"uid"`
	Reply   string `json:"reply"`
	Error   string `json:"error"`
}

func TestRealNodeRunsJob(t *testing.T) {
	node.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	dir := t.TempDir()
	bin := filepath.Join(dir, "reporter")
	require.NoError(t, images.BuildBinary(ctx, "", "./testdata/reporter", bin))
	img, err := images.Build(ctx, images.Options{Binary: bin, Name: "coffer/reporter:dev", Out: filepath.Join(dir, "reporter.oci.tar")})
	require.NoError(t, err)

	began := time.Now()
	n, err := node.Start(ctx, node.Options{
		Images: []string{img.Archive},
		Logf:   t.Logf,
		LogDir: os.Getenv("COFFER_NODE_LOGS"), // e.g. CI artifacts
	})
	require.NoError(t, err)
	t.Logf("bring-up (start → node Ready): %s", time.Since(began).Round(time.Millisecond))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			if err := n.Stop(); err != nil {
				t.Errorf("stopping the node: %v", err)
			}
		}
	})
	t.Cleanup(func() {
		if t.Failed() && !stopped {
			t.Logf("node diagnostics:\n%s", n.Diagnostics())
		}
	})

	names, err := n.Images()
	require.NoError(t, err)
	require.Contains(t, names, "docker.io/coffer/pause:dev")
	require.Contains(t, names, img.Name)

	cs, err := kubernetes.NewForConfig(n.Cluster.Config)
	require.NoError(t, err)
	ns, err := n.Cluster.Namespace(ctx, "real-node")
	require.NoError(t, err)

	// A Job that succeeds: its report comes back as the termination message, its output as logs.
	created := time.Now()
	_, err = cs.BatchV1().Jobs(ns).Create(ctx, reporterJob("ok", map[string]string{"REPORT_MESSAGE": "all good"}), metav1.CreateOptions{})
	require.NoError(t, err)
	require.Equal(t, batchv1.JobComplete, waitJob(ctx, t, cs, ns, "ok"))
	t.Logf("Job create → Complete: %s", time.Since(created).Round(time.Millisecond))
	pod := jobPod(ctx, t, cs, ns, "ok")
	term := pod.Status.ContainerStatuses[0].State.Terminated
	require.NotNil(t, term)
	require.EqualValues(t, 0, term.ExitCode)
	r := decode(t, term.Message)
	require.Equal(t, "all good", r.Message)
	require.Equal(t, 65532, r.UID, "the image's user")
	logs, err := cs.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	require.NoError(t, err, "pod logs through the apiserver (kubelet client certificate)")
	require.Contains(t, string(logs), `"message":"all good"`)

	// A Job whose pod exits 3: Failed, and its message still readable.
	_, err = cs.BatchV1().Jobs(ns).Create(ctx, reporterJob("fails", map[string]string{"REPORT_MESSAGE": "broken", "REPORT_EXIT": "3"}), metav1.CreateOptions{})
	require.NoError(t, err)
	require.Equal(t, batchv1.JobFailed, waitJob(ctx, t, cs, ns, "fails"))
	pod = jobPod(ctx, t, cs, ns, "fails")
	term = pod.Status.ContainerStatuses[0].State.Terminated
	require.NotNil(t, term)
	require.EqualValues(t, 3, term.ExitCode)
	require.Equal(t, "broken", decode(t, term.Message).Message)

	// A pod reaches a host service listening on the node IP (as MinIO will).
	l, err := net.Listen("tcp", net.JoinHostPort(n.IP, "0"))
	require.NoError(t, err)
	defer l.Close()
	got := make(chan string, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			got <- "accept: " + err.Error()
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil {
			got <- "read: " + err.Error()
			return
		}
		line = strings.TrimSpace(line)
		fmt.Fprintf(conn, "ack %s from %s\n", line, conn.RemoteAddr().(*net.TCPAddr).IP)
		got <- line
	}()
	probe := reporterPod("probe", map[string]string{"REPORT_MESSAGE": "hello-host", "REPORT_CONNECT": l.Addr().String()})
	_, err = cs.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{})
	require.NoError(t, err)
	pod = waitPodDone(ctx, t, cs, ns, "probe")
	require.Equal(t, corev1.PodSucceeded, pod.Status.Phase, "pod status: %+v", pod.Status)
	r = decode(t, pod.Status.ContainerStatuses[0].State.Terminated.Message)
	require.Empty(t, r.Error)
	require.Equal(t, "ack hello-host from "+pod.Status.PodIP, r.Reply)
	require.Equal(t, "hello-host", <-got)
	_, subnet, _ := net.ParseCIDR(n.Subnet)
	require.True(t, subnet.Contains(net.ParseIP(pod.Status.PodIP)), "pod IP %s outside %s", pod.Status.PodIP, n.Subnet)

	// A pod still running when the node stops: Stop must kill it and release its mounts and
	// network namespace.
	_, err = cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sleeper"},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptrTo(false),
			Containers:                   []corev1.Container{{Name: "sleep", Image: images.PauseName, ImagePullPolicy: corev1.PullNever}},
			Volumes:                      []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "sleeper", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, err
	}))

	for prog, rss := range n.PeakRSS() {
		t.Logf("peak RSS %-26s %6.1f MiB", prog, float64(rss)/(1<<20))
	}

	// Stop leaves nothing behind.
	stopAt := time.Now()
	require.NoError(t, n.Stop())
	stopped = true
	t.Logf("stop: %s", time.Since(stopAt).Round(time.Millisecond))
	require.Empty(t, n.Residue())
	require.Error(t, exec.Command("ip", "link", "show", n.Bridge).Run(), "bridge %s still exists", n.Bridge)
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	require.NotContains(t, string(mountinfo), n.Dir)
	require.NoDirExists(t, n.Dir)
	for _, h := range []string{"cpu", "memory", "cpuset", "pids", "systemd", "unified"} {
		require.NoDirExists(t, filepath.Join("/sys/fs/cgroup", h, n.Name))
	}
	require.Empty(t, pgrep(t, n.Dir), "processes of the node still running")
	require.Empty(t, pgrep(t, n.ContainerdSocket), "containerd or shims still running")
}

// A node that cannot start (the kubelet rejects its flags) is torn down by Start itself.
func TestStartFailureLeavesNothing(t *testing.T) {
	node.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, err := node.Start(ctx, node.Options{KubeletArgs: []string{"--no-such-flag"}, Logf: t.Logf})
	require.Error(t, err)
	require.Contains(t, err.Error(), "kubelet exited")
	m := regexp.MustCompile(`starting node (coffer-node-[0-9a-f]+) \(bridge (cofferbr[0-9a-f]+), dir (\S+)\)`).FindStringSubmatch(err.Error())
	require.NotNil(t, m, "error names the node: %v", err)
	name, bridge, dir := m[1], m[2], m[3]
	require.Error(t, exec.Command("ip", "link", "show", bridge).Run(), "bridge %s still exists", bridge)
	require.NoDirExists(t, dir)
	require.NoDirExists(t, filepath.Join("/sys/fs/cgroup/memory", name))
	require.Empty(t, pgrep(t, dir+"/"))
}

func reporterContainer(env map[string]string) corev1.Container {
	c := corev1.Container{
		Name:            "reporter",
		Image:           "coffer/reporter:dev",
		ImagePullPolicy: corev1.PullNever,
	}
	for k, v := range env {
		c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: v})
	}
	return c
}

func reporterJob(name string, env map[string]string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptrTo[int32](0),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy:                 corev1.RestartPolicyNever,
				AutomountServiceAccountToken:  ptrTo(false),
				TerminationGracePeriodSeconds: ptrTo[int64](1),
				Containers:                    []corev1.Container{reporterContainer(env)},
			}},
		},
	}
}

func reporterPod(name string, env map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptrTo(false),
			TerminationGracePeriodSeconds: ptrTo[int64](1),
			Containers:                    []corev1.Container{reporterContainer(env)},
		},
	}
}

// waitJob waits for the Job's Complete or Failed condition and returns which.
func waitJob(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string) batchv1.JobConditionType {
	t.Helper()
	var done batchv1.JobConditionType
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		j, err := cs.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range j.Status.Conditions {
			if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
				done = c.Type
				return true, nil
			}
		}
		return false, nil
	})
	require.NoError(t, err, "Job %s/%s did not finish", ns, name)
	return done
}

func jobPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, job string) *corev1.Pod {
	t.Helper()
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job})
	require.NoError(t, err)
	require.Len(t, pods.Items, 1)
	require.Len(t, pods.Items[0].Status.ContainerStatuses, 1)
	return &pods.Items[0]
}

func waitPodDone(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		return (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed) &&
			len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Terminated != nil, nil
	})
	require.NoError(t, err, "pod %s/%s did not finish: %+v", ns, name, pod)
	return pod
}

func decode(t *testing.T, msg string) report {
	t.Helper()
	var r report
	require.NoError(t, json.Unmarshal([]byte(msg), &r), "termination message %q", msg)
	return r
}

// pgrep lists the processes whose command line contains s.
func pgrep(t *testing.T, s string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		if cmd := strings.ReplaceAll(string(b), "\x00", " "); strings.Contains(cmd, s) {
			if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil && !strings.Contains(string(st), ") Z ") {
				out = append(out, e.Name()+": "+cmd)
			}
		}
	}
	return out
}

func ptrTo[T any](v T) *T { return &v }
