package main

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// TestServiceAccountFlag: --service-account names the ServiceAccount without asking the API server
// (nil config), and is refused unless it is <namespace>/<name>.
func TestServiceAccountFlag(t *testing.T) {
	sa, err := serviceAccount(context.Background(), nil, nil, "ugallu-system/coffer-verifier")
	if err != nil || sa != (types.NamespacedName{Namespace: "ugallu-system", Name: "coffer-verifier"}) {
		t.Fatalf("got %v, %v", sa, err)
	}
	for _, bad := range []string{"coffer-verifier", "/coffer-verifier", "ugallu-system/", "a/b/c"} {
		if _, err := serviceAccount(context.Background(), nil, nil, bad); err == nil {
			t.Errorf("--service-account=%s was accepted", bad)
		}
	}
}
