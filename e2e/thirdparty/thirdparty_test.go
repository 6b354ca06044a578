// Package thirdparty proves that a strategy driver can be written outside this repository with the
// apis and driverkit modules alone: testdata/toydriver, a module of its own that requires nothing
// else of Coffer, builds from the module cache and passes the conformance suite
// (driverkit/conformance) against a real kube-apiserver and etcd; and that the backup verifier,
// unchanged, verifies the toy's Backups by full restore through the driver contract
// (verify_test.go).
package thirdparty

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/coffer-backup/coffer/e2e/harness/cluster"
)

const toy = "testdata/toydriver"

func TestToyDriverConforms(t *testing.T) {
	// The toy's test starts kube-apiserver and etcd from KUBEBUILDER_ASSETS.
	if _, err := cluster.AssetsDir(); err != nil {
		t.Fatal(err)
	}

	var mod struct{ Require []struct{ Path string } }
	if err := json.Unmarshal([]byte(goCmd(t, "mod", "edit", "-json")), &mod); err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"github.com/coffer-backup/coffer/apis": true, "github.com/coffer-backup/coffer/driverkit": true}
	for _, r := range mod.Require {
		if strings.HasPrefix(r.Path, "github.com/coffer-backup/") && !allowed[r.Path] {
			t.Errorf("the toy driver requires %s; it must need Coffer's apis and driverkit modules only", r.Path)
		}
	}
	// Nor does anything it builds, tests included, reach Coffer's test harness or its heavy
	// dependencies through driverkit or its conformance suite.
	for _, pkg := range strings.Fields(goCmd(t, "list", "-deps", "-test", "./...")) {
		for _, bad := range []string{"github.com/coffer-backup/coffer/e2e", "github.com/minio/", "sigs.k8s.io/kustomize/",
			"github.com/google/go-containerregistry/", "github.com/vmware-tanzu/velero/"} {
			if strings.HasPrefix(pkg, bad) {
				t.Errorf("the toy driver's build reaches %s", pkg)
			}
		}
	}

	goCmd(t, "build", "./...")
	t.Log(goCmd(t, "test", "-count=1", "./..."))
}

// goCmd runs go in the toy module, outside the workspace and offline: every module it needs is in
// the module cache that building this repository filled.
func goCmd(t *testing.T, args ...string) string {
	t.Helper()
	out, err := goRun(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// goRun is goCmd for any goroutine: it returns the failure instead of ending the test.
func goRun(args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = toy
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod -buildvcs=false", "GOPROXY=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}
