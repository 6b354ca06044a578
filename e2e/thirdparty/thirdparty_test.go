// Package thirdparty proves that a strategy driver can be written outside this repository with the
// apis module alone: a throwaway module requires only github.com/coffer-backup/coffer/apis (and
// controller-runtime), vendors its dependencies and compiles a driver skeleton.
package thirdparty

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coffer-backup/coffer/e2e/harness/manifests"
)

func TestDriverBuildsAgainstTheApisModuleAlone(t *testing.T) {
	root, err := manifests.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src, err := os.ReadFile("testdata/skeleton/main.go.txt")
	if err != nil {
		t.Fatal(err)
	}
	gomod := "module example.com/skeleton-driver\n\ngo 1.26.0\n\n" +
		"require (\n\tgithub.com/coffer-backup/coffer/apis v0.0.0\n\tsigs.k8s.io/controller-runtime " + version(t, root, "sigs.k8s.io/controller-runtime") + "\n)\n\n" +
		"replace github.com/coffer-backup/coffer/apis => " + filepath.Join(root, "apis") + "\n"
	for name, data := range map[string][]byte{"go.mod": []byte(gomod), "main.go": src} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goCmd(t, dir, "mod", "tidy")
	goCmd(t, dir, "mod", "vendor")
	goCmd(t, dir, "build", "-mod=vendor", "-o", filepath.Join(dir, "driver"), ".")

	mods, err := os.ReadFile(filepath.Join(dir, "vendor", "modules.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var coffer []string
	seen := map[string]bool{}
	for _, line := range strings.Split(string(mods), "\n") {
		if m := strings.Fields(line); strings.HasPrefix(line, "# github.com/coffer-backup/") && !seen[m[1]] {
			seen[m[1]] = true
			coffer = append(coffer, m[1])
		}
	}
	if len(coffer) != 1 || coffer[0] != "github.com/coffer-backup/coffer/apis" {
		t.Fatalf("the skeleton vendors Coffer modules %v; it must need the apis module only", coffer)
	}
	if _, err := os.Stat(filepath.Join(dir, "driver")); err != nil {
		t.Fatalf("no driver binary: %v", err)
	}
}

// version is the version of a module that the apis-adjacent modules of this repository pin, so the
// skeleton builds from the module cache that the repository's own build filled.
func version(t *testing.T, root, module string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "driver-job", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == module {
			return f[1]
		}
	}
	t.Fatalf("%s is not required by driver-job/go.mod", module)
	return ""
}

func goCmd(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	if args[0] == "build" {
		cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
