package main

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// krewPlugin is the part of krew's plugin manifest (v1alpha2) that deploy/krew/coffer.yaml holds.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		Homepage         string `json:"homepage"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri,omitempty"`
			Sha256 string `json:"sha256,omitempty"`
			Bin    string `json:"bin"`
			Files  []struct {
				From string `json:"from"`
				To   string `json:"to"`
			} `json:"files"`
		} `json:"platforms"`
	} `json:"spec"`
}

// The manifest parses strictly as a krew plugin whose platforms install this binary; uri and
// sha256 are left to the release process (docs/kubectl-coffer.md#releasing).
func TestKrewManifest(t *testing.T) {
	raw, err := os.ReadFile("../../../deploy/krew/coffer.yaml")
	require.NoError(t, err)
	p := &krewPlugin{}
	require.NoError(t, yaml.UnmarshalStrict(raw, p))
	assert.Equal(t, "krew.googlecontainertools.github.com/v1alpha2", p.APIVersion)
	assert.Equal(t, "Plugin", p.Kind)
	assert.Equal(t, "coffer", p.Metadata.Name, "kubectl coffer")
	assert.Regexp(t, `^v\d+\.\d+\.\d+$`, p.Spec.Version)
	assert.NotEmpty(t, p.Spec.Homepage)
	assert.LessOrEqual(t, len(p.Spec.ShortDescription), 80)
	seen := map[string]bool{}
	require.NotEmpty(t, p.Spec.Platforms)
	for _, pl := range p.Spec.Platforms {
		goos, arch := pl.Selector.MatchLabels["os"], pl.Selector.MatchLabels["arch"]
		require.NotEmpty(t, goos)
		require.NotEmpty(t, arch)
		assert.False(t, seen[goos+"/"+arch], "%s/%s listed once", goos, arch)
		seen[goos+"/"+arch] = true
		bin := "kubectl-coffer"
		if goos == "windows" {
			bin += ".exe"
		}
		assert.Equal(t, bin, pl.Bin, "%s/%s", goos, arch)
		if assert.Len(t, pl.Files, 1) {
			assert.Equal(t, bin, pl.Files[0].From)
		}
		assert.Empty(t, pl.URI, "the release process sets uri")
		assert.Empty(t, pl.Sha256, "the release process sets sha256")
	}
	assert.True(t, seen["linux/amd64"] && seen["darwin/arm64"], "the common platforms: %v", seen)
	assert.Regexp(t, regexp.MustCompile(`(?m)^#   uri: https://github\.com/coffer-backup/coffer/releases/download/kubectl-coffer/vX\.Y\.Z/kubectl-coffer_<os>_<arch>\.tar\.gz$`),
		string(raw), "the comment says what the release adds")
}
