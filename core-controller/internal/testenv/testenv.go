// Package testenv starts the local cluster of e2e/harness/cluster (a real kube-apiserver and etcd,
// built by `make testbin`) with the core CRDs installed, for the controller tests of this module.
// The API server runs the OwnerReferencesPermissionEnforcement admission plugin, as hardened
// clusters (and OpenShift) do, so that a controller setting blockOwnerDeletion without the RBAC for
// it fails here too.
package testenv

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
)

// Scheme knows the built-in kinds and every Coffer kind.
var Scheme = cluster.Scheme

// Env is a running API server.
type Env struct {
	Config *rest.Config
	Client client.WithWatch
	// Root is the checkout's root directory.
	Root string

	rbacOnce sync.Once
	rbacErr  error
}

// ServiceAccount is the user core runs as (deploy/core-controller/rbac).
const ServiceAccount = "system:serviceaccount:coffer-system:coffer-core-controller"

// Main starts the API server, runs the package's tests and stops it. A missing binary fails the
// tests with instructions; it never skips them.
func Main(m *testing.M, env **Env) int {
	root, err := manifests.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c, err := cluster.Start(context.Background(), cluster.Options{
		CRDDirectoryPaths: []string{root + "/deploy/core-controller/crd"},
		APIServerArgs:     []string{"--enable-admission-plugins=OwnerReferencesPermissionEnforcement"},
	})
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
	*env = &Env{Config: c.Config, Client: cl, Root: root}
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

// AsCoreController installs the RBAC core ships (deploy/core-controller/rbac) and returns a client
// that acts as core's ServiceAccount, so that a test sees what the shipped role denies.
func (e *Env) AsCoreController(t *testing.T) client.WithWatch {
	t.Helper()
	e.rbacOnce.Do(func() { e.rbacErr = e.installRBAC() })
	if e.rbacErr != nil {
		t.Fatalf("installing core's RBAC: %v", e.rbacErr)
	}
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: ServiceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:coffer-system", "system:authenticated"}}
	cl, err := client.NewWithWatch(cfg, client.Options{Scheme: Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func (e *Env) installRBAC() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "coffer-system"}}
	if err := client.IgnoreAlreadyExists(e.Client.Create(ctx, ns)); err != nil {
		return err
	}
	objs, err := manifests.Render(e.Root + "/deploy/core-controller/rbac")
	if err != nil {
		return err
	}
	if err := manifests.Apply(ctx, e.Client, objs); err != nil {
		return err
	}
	// The authorizer learns of new bindings from its informers: wait until it has.
	return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: ServiceAccount, Groups: []string{"system:serviceaccounts"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Group: "backups.cozystack.io", Resource: "plans", Verb: "list"},
		}}
		if err := e.Client.Create(ctx, review); err != nil {
			return false, err
		}
		return review.Status.Allowed, nil
	})
}
