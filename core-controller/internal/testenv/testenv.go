// Package testenv starts a real kube-apiserver and etcd (envtest, binaries from `make testbin`)
// with the core CRDs installed, for the controller tests of this module.
package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// Scheme knows the built-in kinds and the core kinds.
var Scheme = func() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(backupsv1.AddToScheme(s))
	return s
}()

// Env is a running API server.
type Env struct {
	Config *rest.Config
	Client client.WithWatch
	env    *envtest.Environment
}

// Main starts the API server, runs the package's tests and stops it. A missing binary fails the
// tests with instructions; it never skips them.
func Main(m *testing.M, env **Env) int {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run `make test`, or export KUBEBUILDER_ASSETS=$(hack/testbin.sh)")
		return 1
	}
	_, file, _, _ := runtime.Caller(0)
	crds := filepath.Join(filepath.Dir(file), "..", "..", "..", "deploy", "core-controller", "crd")
	e := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDDirectoryPaths:        []string{crds},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute,
	}
	cfg, err := e.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the API server:", err)
		return 1
	}
	defer func() { _ = e.Stop() }()
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: Scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*env = &Env{Config: cfg, Client: c, env: e}
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
