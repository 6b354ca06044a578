package contentdiff

import (
	"encoding/base64"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Diff is where two normalized objects first differ: the path, and what each side holds there.
type Diff struct {
	path             []string
	backup, live     any
	inBackup, inLive bool
}

// FirstDiff walks backup (the backup's normalized copy) and live (the sandbox's) in sorted key
// order and returns the first difference; false when they hold the same content.
func FirstDiff(backup, live any) (Diff, bool) {
	return firstDiff(backup, live, nil)
}

func firstDiff(a, b any, path []string) (Diff, bool) {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			break
		}
		keys := make([]string, 0, len(av)+len(bv))
		for k := range av {
			keys = append(keys, k)
		}
		for k := range bv {
			if _, dup := av[k]; !dup {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			x, inA := av[k]
			y, inB := bv[k]
			p := append(path[:len(path):len(path)], k)
			if inA != inB {
				return Diff{path: p, backup: x, live: y, inBackup: inA, inLive: inB}, true
			}
			if d, found := firstDiff(x, y, p); found {
				return d, true
			}
		}
		return Diff{}, false
	case []any:
		bv, ok := b.([]any)
		if !ok {
			break
		}
		for i := 0; i < len(av) || i < len(bv); i++ {
			p := append(path[:len(path):len(path)], "["+strconv.Itoa(i)+"]")
			if i >= len(av) || i >= len(bv) {
				d := Diff{path: p, inBackup: i < len(av), inLive: i < len(bv)}
				if d.inBackup {
					d.backup = av[i]
				} else {
					d.live = bv[i]
				}
				return d, true
			}
			if d, found := firstDiff(av[i], bv[i], p); found {
				return d, true
			}
		}
		return Diff{}, false
	}
	if equalLeaves(a, b) {
		return Diff{}, false
	}
	return Diff{path: path, backup: a, live: b, inBackup: true, inLive: true}, true
}

func equalLeaves(a, b any) bool {
	switch a.(type) {
	case map[string]any, []any:
		return false // b is not of a's shape
	}
	switch b.(type) {
	case map[string]any, []any:
		return false
	}
	if x, ok := a.(int64); ok {
		if y, ok := b.(int64); ok {
			return x == y
		}
	}
	if x, ok := number(a); ok {
		y, ok := number(b)
		return ok && x == y // as DigestOf sees them: 1 and 1.0 encode alike
	}
	return a == b
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

// fieldPath renders a path: data.password, spec.ports[0].port, data["app.properties"].
func fieldPath(path []string) string {
	var b strings.Builder
	for _, s := range path {
		switch {
		case strings.HasPrefix(s, "["):
			b.WriteString(s)
		case plainKey(s):
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s)
		default:
			b.WriteString("[" + strconv.Quote(s) + "]")
		}
	}
	return b.String()
}

func plainKey(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// Describe says where an object's sandbox copy departs from its backup copy, for a finding; gk is
// the object's kind. Values are never quoted from a Secret (only the key and the lengths), and
// from other objects only from a ConfigMap's data (a short excerpt).
func (d Diff) Describe(gk schema.GroupKind) string {
	p := fieldPath(d.path)
	dataKey := len(d.path) == 2 && (d.path[0] == "data" || d.path[0] == "binaryData")
	switch {
	case dataKey && (gk == gkSecret || d.path[0] == "binaryData"):
		return showAt(p, d, func(v any) string { return sizeOf(v, true) })
	case dataKey && gk == gkConfigMap:
		return showAt(p, d, excerpt)
	}
	switch {
	case !d.inLive:
		return p + " is missing from the sandbox"
	case !d.inBackup:
		return p + " is in the sandbox but not in the backup"
	}
	return p + " differs"
}

func showAt(p string, d Diff, show func(any) string) string {
	switch {
	case !d.inLive:
		return fmt.Sprintf("%s is missing from the sandbox (backup: %s)", p, show(d.backup))
	case !d.inBackup:
		return fmt.Sprintf("%s is in the sandbox but not in the backup (sandbox: %s)", p, show(d.live))
	}
	return fmt.Sprintf("%s differs (backup: %s, sandbox: %s)", p, show(d.backup), show(d.live))
}

// sizeOf is the length of a value: of its decoded bytes for base64 data.
func sizeOf(v any, b64 bool) string {
	s, ok := v.(string)
	if !ok {
		return "not a string"
	}
	if b64 {
		if b, err := base64.StdEncoding.DecodeString(s); err == nil {
			return strconv.Itoa(len(b)) + " bytes"
		}
	}
	return strconv.Itoa(len(s)) + " bytes"
}

// maxExcerpt bounds the characters of a ConfigMap value quoted in a finding.
const maxExcerpt = 40

func excerpt(v any) string {
	s, ok := v.(string)
	if !ok {
		return "not a string"
	}
	if utf8.RuneCountInString(s) <= maxExcerpt {
		return strconv.Quote(s)
	}
	r := []rune(s)
	return strconv.Quote(string(r[:maxExcerpt])) + fmt.Sprintf("… (%d bytes)", len(s))
}
