package v1alpha1

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestLabelValue(t *testing.T) {
	long := strings.Repeat("db.", 30) + "x" // a valid DNS subdomain of 91 characters
	tests := []struct {
		name, in string
		// want is the exact value, or its prefix when hashed.
		want   string
		hashed bool
	}{
		{"valid kept", "VirtualMachine", "VirtualMachine", false},
		{"name with dots kept", "db1.prod", "db1.prod", false},
		{"empty kept", "", "", false},
		{"long cut and hashed", long, long[:51], true},
		{"invalid characters replaced and hashed", "my app/β", "my-app", true},
		{"nothing usable left: the hash alone", "..//", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := LabelValue(tt.in)
			assert.Empty(t, validation.IsValidLabelValue(got), "%q is a valid label value", got)
			assert.Equal(t, got, LabelValue(tt.in), "deterministic")
			if !tt.hashed {
				assert.Equal(t, tt.want, got)
				return
			}
			assert.True(t, strings.HasPrefix(got, tt.want), "%q has prefix %q", got, tt.want)
			assert.NotEqual(t, tt.in, got)
			assert.Regexp(t, `[0-9a-f]{10}$`, got, "ends in the hash")
		})
	}
	assert.NotEqual(t, LabelValue(long+"1"), LabelValue(long+"2"), "distinct long values stay distinct")
	assert.NotEqual(t, LabelValue("a b"), LabelValue("a/b"), "distinct invalid values stay distinct")
}

func TestApplicationLabels(t *testing.T) {
	got := ApplicationLabels(corev1.TypedLocalObjectReference{Kind: "MariaDB", Name: "db1"})
	assert.Equal(t, map[string]string{LabelApplicationKind: "MariaDB", LabelApplicationName: "db1"}, got)
}
