package v1alpha1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// An etcd-snapshot policy's run names: one per node, file and identity; the verifier's own
// directory's keep the names they had before nodes were named.
func TestEtcdNodePolicyRunName(t *testing.T) {
	own := EtcdNodePolicyRunName("", "nightly.db", "1a.2b")
	if own != EtcdPolicyRunName("nightly.db", "1a.2b") || !strings.HasPrefix(own, "etcd-nightly-db-checksum-") {
		t.Fatalf("the verifier's own directory: %q", own)
	}
	names := map[string]bool{}
	for _, n := range []string{
		own,
		EtcdNodePolicyRunName("cp-1", "nightly.db", "1a.2b"),
		EtcdNodePolicyRunName("cp-2", "nightly.db", "1a.2b"),
		EtcdNodePolicyRunName("cp-1", "nightly.db", "1a.2c"),
		EtcdNodePolicyRunName("cp-1.example.com", strings.Repeat("snapshot", 40)+".db", "1a.2b"),
	} {
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			t.Errorf("%q: %v", n, errs)
		}
		if names[n] {
			t.Errorf("%q twice", n)
		}
		names[n] = true
	}
	if n := EtcdNodePolicyRunName("cp-1", "nightly.db", "1a.2b"); !strings.HasPrefix(n, "etcd-cp-1-nightly-db-checksum-") {
		t.Errorf("the node is in the name: %q", n)
	}
}
