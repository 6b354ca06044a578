// Package testenv starts the local cluster of e2e/cluster (a real kube-apiserver and etcd, built
// by `make testbin`) with the core CRDs installed, for the controller tests of this module.
package testenv

import (
	"context"
	"fmt"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/coffer-backup/coffer/e2e/cluster"
	"github.com/coffer-backup/coffer/e2e/manifests"
)

// Scheme knows the built-in kinds and every Coffer kind.
var Scheme = cluster.Scheme

// Env is a running API server.
type Env struct {
	Config *rest.Config
	Client client.WithWatch
}

// Main starts the API server, runs the package's tests and stops it. A missing binary fails the
// tests with instructions; it never skips them.
func Main(m *testing.M, env **Env) int {
	root, err := manifests.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c, err := cluster.Start(context.Background(), cluster.Options{CRDDirectoryPaths: []string{root + "/deploy/core-controller/crd"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the API server:", err)
		return 1
	}
	defer func() { _ = c.Stop() }()
	cl, err := client.NewWithWatch(c.Config, client.Options{Scheme: Scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*env = &Env{Config: c.Config, Client: cl}
	return m.Run()
}

// Namespace creates a namespace for one test.
func (e *Env) Namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	return ns.Name
}
