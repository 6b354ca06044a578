// Package cluster runs Coffer's local control plane: etcd and kube-apiserver (through
// controller-runtime's envtest) and, optionally, kube-controller-manager, all built from source by
// `make testbin` and found through KUBEBUILDER_ASSETS. Every server listens on a free loopback
// port, so several clusters can run on one machine.
package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// AssetsEnv names the variable holding the directory of the cluster's binaries.
const AssetsEnv = "KUBEBUILDER_ASSETS"

// AssetsDir returns the directory of kube-apiserver, etcd and friends, or an error that tells the
// user how to build them. Tests call it instead of skipping: a missing binary is a failure.
func AssetsDir() (string, error) {
	dir := os.Getenv(AssetsEnv)
	if dir == "" {
		return "", fmt.Errorf("%s is not set: run the tests through `make test`, or export %s=$(hack/testbin.sh)", AssetsEnv, AssetsEnv)
	}
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("%s=%s lacks %s: run `make testbin`: %w", AssetsEnv, dir, b, err)
		}
	}
	return dir, nil
}

// Options configure a local cluster.
type Options struct {
	// Dir holds the cluster's state (certificates, kubeconfig, logs). Empty means a new temp dir,
	// removed by Stop.
	Dir string
	// ControllerManager also runs kube-controller-manager (namespace deletion, garbage
	// collection, Jobs, service accounts).
	ControllerManager bool
	// ControllerManagerArgs are extra kube-controller-manager flags (later ones win).
	ControllerManagerArgs []string
	// CRDDirectoryPaths are installed (and waited for) before Start returns.
	CRDDirectoryPaths []string
	// APIServerArgs are extra kube-apiserver flags, each "--name=value". A flag named here
	// replaces the default for that flag (e.g. --advertise-address); repeat a flag to pass it
	// several values.
	APIServerArgs []string
	// BindAddress is the IP address kube-apiserver listens on; empty means envtest's 127.0.0.1.
	// The serving certificate names it (besides localhost), and Config and Kubeconfig point at
	// it, so every client uses https://<BindAddress>:<port>.
	BindAddress string
	// Output receives the servers' logs; nil discards them.
	Output *os.File
}

// Cluster is a running local control plane.
type Cluster struct {
	// Config is an admin (system:masters) client config.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file for Config.
	Kubeconfig string
	// Dir holds the cluster's state.
	Dir string
	// EtcdURL is the client URL of the cluster's etcd.
	EtcdURL string

	env     *envtest.Environment
	kcm     *exec.Cmd
	kcmDone chan error
	ownDir  bool
}

// Start brings a cluster up and returns once it serves (and, with a controller manager, once the
// default ServiceAccount exists, i.e. the controllers work).
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: opts.Dir}
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "coffer-cluster-"); err != nil {
			return nil, err
		}
		c.ownDir = true
	}
	certDir := filepath.Join(c.Dir, "apiserver")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, err
	}
	c.env = &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDDirectoryPaths:        opts.CRDDirectoryPaths,
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	c.env.ControlPlane.APIServer = nil
	api := c.env.ControlPlane.GetAPIServer()
	api.CertDir = certDir
	if opts.Output != nil {
		api.Out, api.Err = opts.Output, opts.Output
	}
	if opts.BindAddress != "" {
		// envtest keeps an address given with its port: it listens there, health-checks there
		// and adds it to the serving certificate.
		port, err := FreePortOn(opts.BindAddress)
		if err != nil {
			c.cleanup()
			return nil, err
		}
		api.SecureServing.Address, api.SecureServing.Port = opts.BindAddress, strconv.Itoa(port)
	}
	if err := setArgs(api.Configure(), opts.APIServerArgs); err != nil {
		c.cleanup()
		return nil, err
	}
	cfg, err := c.env.Start()
	if err != nil {
		// envtest returns an error after starting the control plane when installing the CRDs
		// fails (an invalid CRD): stop what it started, so no etcd or API server outlives us.
		_ = c.env.Stop()
		c.cleanup()
		return nil, fmt.Errorf("starting etcd and kube-apiserver: %w", err)
	}
	c.Config = cfg
	c.EtcdURL = c.env.ControlPlane.Etcd.URL.String()
	if err := c.writeKubeconfig(); err != nil {
		_ = c.Stop()
		return nil, err
	}
	if opts.ControllerManager {
		if err := c.startControllerManager(ctx, assets, opts.Output, opts.ControllerManagerArgs); err != nil {
			_ = c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// setArgs sets "--name=value" flags on envtest arguments, values of one name together.
func setArgs(args *envtest.Arguments, flags []string) error {
	var order []string
	values := map[string][]string{}
	for _, f := range flags {
		name, value, ok := strings.Cut(strings.TrimLeft(f, "-"), "=")
		if !ok || name == "" || !strings.HasPrefix(f, "--") {
			return fmt.Errorf("kube-apiserver flag %q is not of the form --name=value", f)
		}
		if _, seen := values[name]; !seen {
			order = append(order, name)
		}
		values[name] = append(values[name], value)
	}
	for _, name := range order {
		args.Set(name, values[name]...)
	}
	return nil
}

func (c *Cluster) writeKubeconfig() error {
	user, err := c.env.AddUser(envtest.User{Name: "coffer-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("provisioning the admin user: %w", err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		return err
	}
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	return os.WriteFile(c.Kubeconfig, data, 0o600)
}

func (c *Cluster) startControllerManager(ctx context.Context, assets string, out *os.File, extra []string) error {
	bin := filepath.Join(assets, "kube-controller-manager")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("kube-controller-manager missing from %s: run `make testbin`: %w", assets, err)
	}
	caFile := filepath.Join(c.Dir, "apiserver-ca.crt")
	if err := os.WriteFile(caFile, c.Config.CAData, 0o600); err != nil {
		return err
	}
	port, err := FreePort()
	if err != nil {
		return err
	}
	kcmDir := filepath.Join(c.Dir, "kube-controller-manager")
	if err := os.MkdirAll(kcmDir, 0o700); err != nil {
		return err
	}
	args := []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--authentication-kubeconfig=" + c.Kubeconfig,
		"--authorization-kubeconfig=" + c.Kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + kcmDir,
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		"--service-account-private-key-file=" + filepath.Join(c.env.ControlPlane.APIServer.CertDir, "sa-signer.key"),
		"--root-ca-file=" + caFile,
		"--controllers=*",
		"--concurrent-gc-syncs=5",
	}
	cmd := exec.Command(bin, append(args, extra...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var logBuf bytes.Buffer
	if out != nil {
		cmd.Stdout, cmd.Stderr = out, out
	} else {
		cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting kube-controller-manager: %w", err)
	}
	c.kcm = cmd
	c.kcmDone = make(chan error, 1)
	go func() { c.kcmDone <- cmd.Wait() }()

	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case werr := <-c.kcmDone:
			c.kcmDone <- werr
			return false, fmt.Errorf("kube-controller-manager exited: %v: %s", werr, tail(logBuf.Bytes()))
		default:
		}
		_, err := cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("waiting for kube-controller-manager to create the default ServiceAccount: %w", err)
	}
	return nil
}

// Stop tears the cluster down in reverse order and removes a temp state dir.
func (c *Cluster) Stop() error {
	var errs []error
	if c.kcm != nil && c.kcm.Process != nil {
		_ = syscall.Kill(-c.kcm.Process.Pid, syscall.SIGTERM)
		select {
		case <-c.kcmDone:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-c.kcm.Process.Pid, syscall.SIGKILL)
			<-c.kcmDone
		}
	}
	if c.env != nil {
		if err := c.env.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	c.cleanup()
	return errors.Join(errs...)
}

func (c *Cluster) cleanup() {
	if c.ownDir {
		_ = os.RemoveAll(c.Dir)
	}
}

// Namespace creates a fresh namespace named prefix plus a random suffix, for one test.
func (c *Cluster) Namespace(ctx context.Context, prefix string) (string, error) {
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return "", err
	}
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return ns.Name, nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) { return FreePortOn("127.0.0.1") }

// FreePortOn returns a TCP port on ip that was free a moment ago.
func FreePortOn(ip string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, fmt.Errorf("finding a free port on %s: %w", ip, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(b []byte) string {
	const n = 2000
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
