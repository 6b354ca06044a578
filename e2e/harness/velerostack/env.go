package velerostack

import (
	"context"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
)

// Env is a local cluster with the Velero stack on it, for suites that test against both.
type Env struct {
	Cluster *cluster.Cluster
	Stack   *Stack
	// Client is an admin client knowing cluster.Scheme.
	Client client.WithWatch
}

// StartEnv starts a cluster with the CRDs in crdDirs (paths relative to the checkout root) and the
// Velero stack.
func StartEnv(ctx context.Context, crdDirs ...string) (*Env, error) {
	return StartEnvWith(ctx, cluster.Options{}, crdDirs...)
}

// StartEnvWith is StartEnv with cluster options (kube-controller-manager, say); the CRD directories
// are added to opts.CRDDirectoryPaths.
func StartEnvWith(ctx context.Context, opts cluster.Options, crdDirs ...string) (*Env, error) {
	root, err := manifests.RepoRoot()
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, d := range crdDirs {
		dirs = append(dirs, filepath.Join(root, d))
	}
	opts.CRDDirectoryPaths = append(opts.CRDDirectoryPaths, dirs...)
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	e := &Env{Cluster: c}
	if e.Stack, err = Start(ctx, c); err != nil {
		e.Stop()
		return nil, err
	}
	if e.Client, err = client.NewWithWatch(c.Config, client.Options{Scheme: cluster.Scheme}); err != nil {
		e.Stop()
		return nil, err
	}
	return e, nil
}

// Stop stops Velero, MinIO and the cluster, in that order.
func (e *Env) Stop() {
	if e.Stack != nil {
		e.Stack.Stop()
	}
	_ = e.Cluster.Stop()
}
