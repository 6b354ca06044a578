package driver

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRecordScan: of a listing in key order, the scan keeps the records and whether each has its
// artifact beside it, and of the other keys no more than the prefixes of the last one.
func TestRecordScan(t *testing.T) {
	keys := []string{
		"a/b1", "a/b1.record.json", // artifact and record
		"a/b2", "a/b2-chunk", "a/b2.x", "a/b2.record.json", // keys between them, each starting with the artifact's
		"a/b3.record.json",                     // its artifact is gone
		"a/b4", "a/b4/c", "a/b4/c.record.json", // a record below another artifact
		"a/b4.record.json",
		"a/b5.record.json", "a/b5.record.json.record.json", // a record is the artifact of none
	}
	for i := range 1000 {
		keys = append(keys, fmt.Sprintf("a/b9/chunk-%04d", i))
	}
	sort.Strings(keys)
	s := &recordScan{}
	for _, k := range keys {
		require.NoError(t, s.add(k, "etag-"+k))
		assert.LessOrEqual(t, len(s.open), strings.Count(k, "")+1)
	}
	rec := func(key string, artifact bool) listedRecord {
		return listedRecord{key: key, etag: "etag-" + key, artifact: artifact}
	}
	assert.Equal(t, []listedRecord{
		rec("a/b1.record.json", true), rec("a/b2.record.json", true), rec("a/b3.record.json", false),
		rec("a/b4.record.json", true), rec("a/b4/c.record.json", true),
		rec("a/b5.record.json", false), rec("a/b5.record.json.record.json", true),
	}, s.records, "the records in key order, each with whether its artifact is listed")
	for _, r := range s.records {
		got, ok := listed(s.records, r.key)
		assert.True(t, ok)
		assert.Equal(t, r, got)
	}
	_, ok := listed(s.records, "a/b6.record.json")
	assert.False(t, ok)
	assert.Len(t, s.open, 1, "after the chunks, only the last key is open")

	s = &recordScan{}
	require.NoError(t, s.add("b", ""))
	assert.ErrorContains(t, s.add("a", ""), "not in key order")
}
