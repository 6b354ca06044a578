// Package golden is the local cluster of real processes and the golden lifecycle that runs on it.
// `make demo` narrates it; e2e/lifecycle asserts it; the chaos and HA suites reuse the stack.
//
// The stack: etcd, kube-apiserver and kube-controller-manager (garbage collection, namespace
// deletion, Jobs) on loopback, MinIO and a Velero server, deploy/ installed as a user would (apart
// from the Deployments, which need a node), and core-controller, driver-velero, driver-job and the
// verifier built from their own modules and run as separate processes, each authenticated as the
// ServiceAccount deploy/ gives it.
package golden

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/components"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

// Options configure a stack.
type Options struct {
	// Dir holds the cluster's state and logs; empty means a new temp dir, removed by Stop.
	Dir string
	// Components run as processes; nil means Default(dir). A spec listed twice runs two
	// replicas (keys "<binary>" and "<binary>-2" in Stack.Components).
	Components []components.Spec
	// Say narrates progress (nil: quiet).
	Say func(format string, args ...any)
}

// Default are the four components as deploy/ runs them. etcdSnapshotDir is the verifier's
// --etcd-snapshot-dir.
func Default(etcdSnapshotDir string) []components.Spec {
	return []components.Spec{
		{Module: "core-controller", Binary: "core-controller", Namespace: "coffer-system", Args: []string{"--driver-claim-timeout=2m"}},
		{Module: "driver-velero", Binary: "driver-velero", Namespace: "coffer-system"},
		{Module: "driver-job", Binary: "driver-job", Namespace: "coffer-system"},
		{Module: "verifier", Binary: "verifier", Namespace: "ugallu-system",
			Args: []string{"--cluster-id=local", "--cluster-name=coffer-local", "--etcd-snapshot-dir=" + etcdSnapshotDir}},
	}
}

// Managed are the four components as deploy/ runs them, the verifier as deploy/managed/verifier
// runs it (its Deployment's own arguments): no etcd-snapshot backend, for clusters whose control
// plane takes no pods, as this one (it has no nodes at all).
func Managed(root string) ([]components.Spec, error) {
	args, err := manifests.DeploymentArgs(filepath.Join(root, "deploy", "managed", "verifier"),
		map[string]string{"CLUSTER_ID": "local", "CLUSTER_NAME": "coffer-local", "POD_NAMESPACE": "ugallu-system"})
	if err != nil {
		return nil, err
	}
	specs := Default("")
	specs[3].Args = args
	return specs, nil
}

// Stack is a running local cluster with Coffer's components.
type Stack struct {
	Root       string
	Cluster    *cluster.Cluster
	Velero     *velerostack.Stack
	Client     client.WithWatch
	Components map[string]*components.Component
	ownDir     bool
	say        func(string, ...any)
}

// Start brings the stack up. On error everything started is stopped.
func Start(ctx context.Context, opts Options) (_ *Stack, err error) {
	s := &Stack{Components: map[string]*components.Component{}, say: opts.Say}
	if s.say == nil {
		s.say = func(string, ...any) {}
	}
	if s.Root, err = manifests.RepoRoot(); err != nil {
		return nil, err
	}
	dir := opts.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "coffer-stack-"); err != nil {
			return nil, err
		}
		s.ownDir = true
	}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	log, err := os.Create(filepath.Join(dir, "control-plane.log"))
	if err != nil {
		return nil, err
	}
	s.say("Starting etcd, kube-apiserver and kube-controller-manager (state and logs in %s)", dir)
	s.Cluster, err = cluster.Start(ctx, cluster.Options{Dir: dir, ControllerManager: true, Output: log,
		CRDDirectoryPaths: []string{filepath.Join(s.Root, "e2e", "harness", "testdata")}})
	if err != nil {
		return nil, err
	}
	if s.Client, err = client.NewWithWatch(s.Cluster.Config, client.Options{Scheme: cluster.Scheme}); err != nil {
		return nil, err
	}
	s.say("Installing deploy/ (CRDs, RBAC, admission policies) as a user would")
	if err := manifests.InstallNodeless(ctx, s.Client, s.Root); err != nil {
		return nil, err
	}
	s.say("Starting MinIO and a Velero server with its AWS plugin")
	if s.Velero, err = velerostack.Start(ctx, s.Cluster); err != nil {
		return nil, err
	}
	s.say("Installing deploy/verifier/velero (the verifier's sandbox modifiers) in Velero's namespace")
	velero, err := manifests.Render(filepath.Join(s.Root, "deploy", "verifier", "velero"))
	if err != nil {
		return nil, err
	}
	if err := manifests.Apply(ctx, s.Client, velero); err != nil {
		return nil, err
	}
	specs := opts.Components
	if specs == nil {
		snapshots := filepath.Join(dir, "etcd-snapshots")
		if err := os.MkdirAll(snapshots, 0o700); err != nil {
			return nil, err
		}
		specs = Default(snapshots)
	}
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, err
	}
	for _, spec := range specs {
		s.say("Building and starting %s as ServiceAccount %s/coffer-%s", spec.Binary, spec.Namespace, spec.Module)
		c, err := components.Launch(s.Root, bin, s.Cluster.Kubeconfig, spec)
		if err != nil {
			return nil, err
		}
		s.Components[Key(s.Components, spec.Binary)] = c
	}
	return s, nil
}

// Key is the name a component gets in a stack's map: its binary's name, then "<binary>-2",
// "<binary>-3" for further replicas.
func Key(m map[string]*components.Component, binary string) string {
	key := binary
	for i := 2; m[key] != nil; i++ {
		key = fmt.Sprintf("%s-%d", binary, i)
	}
	return key
}

// Stop stops the components, Velero, MinIO and the control plane.
func (s *Stack) Stop() {
	for _, c := range s.Components {
		c.Stop(10 * time.Second)
	}
	if s.Velero != nil {
		s.Velero.Stop()
	}
	if s.Cluster != nil {
		_ = s.Cluster.Stop()
		if s.ownDir {
			_ = os.RemoveAll(s.Cluster.Dir)
		}
	}
}

// Logs is the tail of every component's log, for failure reports.
func (s *Stack) Logs() string {
	out := ""
	for name, c := range s.Components {
		out += fmt.Sprintf("--- %s ---\n%s\n", name, c.Tail())
	}
	return out
}
