package download

import (
	"bytes"
	"compress/gzip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func gzipped(t *testing.T, s string) *bytes.Buffer {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	_, err := w.Write([]byte(s))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return &buf
}

func TestResults(t *testing.T) {
	doc := `{"errors":{"velero":["plugin crashed"],"namespaces":{"shop":["error backing up pods/web: timeout"],"a":["x"]}},
	         "warnings":{"cluster":["skipped CRD"],"namespaces":{"shop":["w1","w2","w3"]}}}`
	errs, warns, err := Results(gzipped(t, doc), 3)
	require.NoError(t, err)
	assert.Equal(t, []string{"velero: plugin crashed", "namespace a: x", "namespace shop: error backing up pods/web: timeout"}, errs)
	assert.Equal(t, []string{"cluster: skipped CRD", "namespace shop: w1", "namespace shop: w2", "… and 1 more"}, warns)

	errs, warns, err = Results(gzipped(t, `{}`), 3)
	require.NoError(t, err)
	assert.Empty(t, errs)
	assert.Empty(t, warns)

	_, _, err = Results(bytes.NewBufferString("not gzip"), 3)
	assert.Error(t, err)
}

func TestResourceList(t *testing.T) {
	counts, err := ResourceList(gzipped(t, `{"v1/ConfigMap":["shop/a(created)","shop/b(skipped)","shop/c(skipped)"],
		"apps/v1/Deployment":["shop/web(updated)","shop/x(y)(failed)"]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"created": 1, "skipped": 2, "updated": 1, "failed": 1}
	if len(counts) != len(want) {
		t.Fatalf("counts %v, want %v", counts, want)
	}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("%s: %d, want %d", k, counts[k], v)
		}
	}
	if _, err := ResourceList(gzipped(t, `{"v1/ConfigMap":["shop/a"]}`)); err == nil {
		t.Error("an entry without an action must be an error")
	}
}
