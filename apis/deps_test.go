// Package apis_test guards the import graph of the apis module: third parties vendor it alone to
// write drivers, so it may reach only the standard library, k8s.io/api, k8s.io/apimachinery and
// what those two need themselves.
package apis_test

import (
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const self = "github.com/coffer-backup/coffer/apis"

// forbidden are modules that must never appear, whatever k8s.io/api itself comes to need.
var forbidden = []string{
	"sigs.k8s.io/controller-runtime",
	"k8s.io/client-go",
	"github.com/vmware-tanzu/velero",
	"go.etcd.io/etcd",
	"github.com/prometheus",
}

// depModules lists the modules (not packages) that the non-test packages of pkgs depend on.
func depModules(t *testing.T, pkgs ...string) []string {
	t.Helper()
	args := append([]string{"list", "-deps", "-f", "{{if .Module}}{{.Module.Path}}{{end}}"}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Env = append(cmd.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go list: %s", out)
	set := map[string]bool{}
	for _, l := range strings.Fields(string(out)) {
		set[l] = true
	}
	mods := make([]string, 0, len(set))
	for m := range set {
		mods = append(mods, m)
	}
	sort.Strings(mods)
	return mods
}

// violations returns the modules of got that are neither allowed nor this module, and any module
// that matches a forbidden prefix.
func violations(got, allowed []string) []string {
	ok := map[string]bool{self: true}
	for _, m := range allowed {
		ok[m] = true
	}
	var bad []string
	for _, m := range got {
		deny := false
		for _, f := range forbidden {
			if m == f || strings.HasPrefix(m, f+"/") {
				deny = true
			}
		}
		if deny || !ok[m] {
			bad = append(bad, m)
		}
	}
	return bad
}

func TestImportGraphStaysLeaf(t *testing.T) {
	// What k8s.io/api and k8s.io/apimachinery need for the packages the types use.
	allowed := depModules(t,
		"k8s.io/api/core/v1",
		"k8s.io/apimachinery/pkg/apis/meta/v1",
		"k8s.io/apimachinery/pkg/runtime",
		"k8s.io/apimachinery/pkg/runtime/schema",
		"k8s.io/apimachinery/pkg/types",
		"k8s.io/apimachinery/pkg/util/validation",
	)
	got := depModules(t, "./...")
	require.Contains(t, got, self)
	assert.Empty(t, violations(got, allowed), "apis reaches modules outside k8s.io/api, k8s.io/apimachinery and their dependencies")
}

func TestViolationsDetectsForbiddenModules(t *testing.T) {
	allowed := []string{"k8s.io/api", "k8s.io/apimachinery", "sigs.k8s.io/controller-runtime"}
	got := []string{self, "k8s.io/api", "sigs.k8s.io/controller-runtime", "github.com/vmware-tanzu/velero", "example.com/other"}
	assert.Equal(t, []string{"sigs.k8s.io/controller-runtime", "github.com/vmware-tanzu/velero", "example.com/other"}, violations(got, allowed))
}
