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
