// Package components builds Coffer's component binaries from their own modules and runs them as
// separate processes against a local cluster, as they run in production.
package components

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/coffer-backup/coffer/apis/election"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
)

// Build compiles cmd/<binary> of a component module into dir and returns the binary's path.
func Build(root, component, binary, dir string) (string, error) {
	out := filepath.Join(dir, binary)
	cmd := exec.Command("go", "build", "-o", out, "./cmd/"+binary)
	cmd.Dir = filepath.Join(root, component)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %v: %s", binary, err, b)
	}
	return out, nil
}

// Process is a running component.
type Process struct {
	cmd  *exec.Cmd
	done chan error
	Log  *SyncBuffer
}

// SyncBuffer is a log buffer safe to read while a process writes it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Tail is the last few KiB of the process's output.
func (p *Process) Tail() string {
	s := p.Log.String()
	if len(s) > 4096 {
		s = s[len(s)-4096:]
	}
	return s
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case err := <-p.done:
		p.done <- err
		return true
	default:
		return false
	}
}

// Start runs a binary with args; its output goes to Log.
func Start(bin string, args ...string) (*Process, error) {
	return StartWithEnv(bin, nil, args...)
}

// StartWithEnv runs a binary with args and, when env is not nil, exactly that environment.
func StartWithEnv(bin string, env []string, args ...string) (*Process, error) {
	p := &Process{cmd: exec.Command(bin, args...), done: make(chan error, 1), Log: &SyncBuffer{}}
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.Log, p.Log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { p.done <- p.cmd.Wait() }()
	return p, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// PeakRSSBytes reads the process's peak resident set size (VmHWM) from /proc.
func (p *Process) PeakRSSBytes() (int64, error) { return p.statusBytes("VmHWM:") }

// RSSBytes reads the process's resident set size now (VmRSS) from /proc.
func (p *Process) RSSBytes() (int64, error) { return p.statusBytes("VmRSS:") }

// statusBytes reads a size in kB of /proc/<pid>/status.
func (p *Process) statusBytes(field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, p.Pid())
}

// clockTicks is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on every Linux
// architecture Go supports).
const clockTicks = 100

// CPUSeconds reads the CPU time the process has used so far (user and system) from /proc.
func (p *Process) CPUSeconds() (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid()))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces: fields count from its end.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat: %q", p.Pid(), b)
	}
	utime, err := strconv.ParseFloat(f[11], 64) // field 14
	if err != nil {
		return 0, err
	}
	stime, err := strconv.ParseFloat(f[12], 64) // field 15
	if err != nil {
		return 0, err
	}
	return (utime + stime) / clockTicks, nil
}

// Stop sends SIGTERM and waits (SIGKILL after grace). Stopping a stopped process returns at once.
func (p *Process) Stop(grace time.Duration) {
	if p.Exited() {
		return
	}
	_ = syscall.Kill(-p.Pid(), syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err // later waits return at once
	case <-time.After(grace):
		p.Kill()
	}
}

// Kill sends SIGKILL, as a crash would, and waits for the exit.
func (p *Process) Kill() {
	_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
	err := <-p.done
	p.done <- err // later waits return at once
}

// ServiceAccountKubeconfig writes a kubeconfig, next to the admin one, that impersonates the
// ServiceAccount ns/name: a component started with it has exactly the RBAC deploy/ grants it.
func ServiceAccountKubeconfig(adminKubeconfig, ns, name string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(adminKubeconfig)
	if err != nil {
		return "", err
	}
	for _, auth := range cfg.AuthInfos {
		auth.Impersonate = "system:serviceaccount:" + ns + ":" + name
		auth.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	}
	path := filepath.Join(filepath.Dir(adminKubeconfig), "kubeconfig-"+ns+"-"+name)
	return path, clientcmd.WriteToFile(*cfg, path)
}

// MetricsReaderNamespace and MetricsReaderName are the ServiceAccount that deploy/ binds to the
// ClusterRole coffer-metrics-reader (deploy/core-controller/rbac): kube-prometheus's Prometheus.
// Components scrapes metrics as it, so the shipped binding is what lets the harness in.
const (
	MetricsReaderNamespace = "monitoring"
	MetricsReaderName      = "prometheus-k8s"
)

// ServiceAccountToken creates the ServiceAccount ns/name (and its namespace) unless it exists, and
// returns a token the API server issues for it (TokenRequest), valid for a day.
func ServiceAccountToken(ctx context.Context, adminKubeconfig, ns, name string) (string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", adminKubeconfig)
	if err != nil {
		return "", err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating ServiceAccount %s/%s: %w", ns, name, err)
	}
	day := int64(24 * 60 * 60)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &day}}
	tr, err = cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, tr, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", ns, name, err)
	}
	return tr.Status.Token, nil
}

// scrapeClient trusts any certificate: the components' metrics endpoints serve a self-signed one.
var scrapeClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
}}

// Scrape GETs a metrics endpoint as Prometheus does, with token as the bearer token (none when
// empty), and returns the response's status code and body.
func Scrape(url, token string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := scrapeClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// Spec is a component as deploy/ runs it: the module and binary, and the namespace of its
// ServiceAccount (coffer-<module>) and leader-election Lease.
type Spec struct {
	Module, Binary, Namespace string
	// Args are added to the flags every component takes (kubeconfig, leader election, metrics on a
	// free loopback port, probes off).
	Args []string
	// Env is added to the environment the component inherits ("NAME=value").
	Env []string
}

// Component is a running component that can be killed and started again with the same flags.
type Component struct {
	Spec
	*Process
	// MetricsURL is the component's Prometheus endpoint: HTTPS on loopback with a self-signed
	// certificate, answering only bearer tokens allowed to get /metrics, as deploy/ runs it.
	MetricsURL string
	// MetricsToken is the bearer token Metrics sends: the metrics reader's (MetricsReaderName).
	MetricsToken    string
	bin, kubeconfig string
	metricsAddr     string
}

// Metrics scrapes the component's metrics endpoint as the metrics reader.
func (c *Component) Metrics() (string, error) {
	code, body, err := Scrape(c.MetricsURL, c.MetricsToken)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("GET %s: %d %s: %s", c.MetricsURL, code, http.StatusText(code), strings.TrimSpace(body))
	}
	return body, err
}

// Launch builds a component into binDir (unless it is there already) and starts it authenticated
// as its ServiceAccount. Its metrics are scraped with a token of the metrics reader, whose
// ServiceAccount Launch creates: the cluster must have deploy/core-controller's RBAC installed
// (manifests.InstallNodeless) for the scrape to be allowed.
func Launch(root, binDir, adminKubeconfig string, s Spec) (*Component, error) {
	bin := filepath.Join(binDir, s.Binary)
	if _, err := os.Stat(bin); err != nil {
		if bin, err = Build(root, s.Module, s.Binary, binDir); err != nil {
			return nil, err
		}
	}
	kc, err := ServiceAccountKubeconfig(adminKubeconfig, s.Namespace, "coffer-"+s.Module)
	if err != nil {
		return nil, err
	}
	port, err := cluster.FreePort()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	token, err := ServiceAccountToken(ctx, adminKubeconfig, MetricsReaderNamespace, MetricsReaderName)
	if err != nil {
		return nil, err
	}
	c := &Component{Spec: s, bin: bin, kubeconfig: kc, metricsAddr: "127.0.0.1:" + strconv.Itoa(port), MetricsToken: token}
	c.MetricsURL = "https://" + c.metricsAddr + "/metrics"
	return c, c.Restart()
}

// FastElection is the leader-election timing components run with here, unless their Spec.Args
// say otherwise (a later flag wins): controller-runtime's defaults, a 15 s Lease renewed every
// 2 s. Suites that kill leaders on purpose then wait about 17 s, not the 40 s of the shipped
// timing (election.Defaults), for each takeover; e2e/deployments runs the shipped Deployments,
// failover included, and BenchmarkScale the shipped timing.
var FastElection = election.Timing{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}

// Restart starts the component again (after Kill or Stop).
func (c *Component) Restart() error {
	args := append([]string{"--kubeconfig=" + c.kubeconfig, "--leader-elect=true", "--leader-election-namespace=" + c.Namespace,
		"--metrics-bind-address=" + c.metricsAddr, "--health-probe-bind-address=0"}, FastElection.Flags()...)
	args = append(args, c.Args...)
	var env []string
	if len(c.Env) > 0 {
		env = append(os.Environ(), c.Env...)
	}
	p, err := StartWithEnv(c.bin, env, args...)
	if err != nil {
		return fmt.Errorf("starting %s: %w", c.Binary, err)
	}
	if c.Process != nil {
		p.Log.Write([]byte(c.Log.String() + "\n--- restarted ---\n"))
	}
	c.Process = p
	return nil
}

// StopAndCheck stops a component at the end of a test, fails the test if the component hit an
// RBAC denial (the shipped RBAC must cover everything it did), and logs its tail when the test
// failed.
func StopAndCheck(t testing.TB, c *Component) {
	c.Stop(10 * time.Second)
	if strings.Contains(c.Log.String(), "is forbidden: User") {
		t.Errorf("%s hit an RBAC denial:\n%s", c.Binary, c.Tail())
	}
	if t.Failed() {
		t.Logf("%s log (tail):\n%s", c.Binary, c.Tail())
	}
}
