package download

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// result is the shape of a file of Velero's BackupResults / RestoreResults: messages of Velero
// itself, of cluster-scoped items and of each namespace.
type result struct {
	Velero     []string            `json:"velero,omitempty"`
	Cluster    []string            `json:"cluster,omitempty"`
	Namespaces map[string][]string `json:"namespaces,omitempty"`
}

// Results decodes a gzipped Velero results file ({"errors": …, "warnings": …}) into flat lists of
// "scope: message" lines, errors and warnings each bounded to limit lines (the rest counted).
func Results(r io.Reader, limit int) (errs, warnings []string, err error) {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, nil, fmt.Errorf("reading Velero results: %w", err)
	}
	var doc map[string]result
	if err := json.NewDecoder(io.LimitReader(gz, 16<<20)).Decode(&doc); err != nil {
		return nil, nil, fmt.Errorf("decoding Velero results: %w", err)
	}
	return flatten(doc["errors"], limit), flatten(doc["warnings"], limit), nil
}

func flatten(r result, limit int) []string {
	var out []string
	for _, m := range r.Velero {
		out = append(out, "velero: "+m)
	}
	for _, m := range r.Cluster {
		out = append(out, "cluster: "+m)
	}
	nss := make([]string, 0, len(r.Namespaces))
	for ns := range r.Namespaces {
		nss = append(nss, ns)
	}
	sort.Strings(nss)
	for _, ns := range nss {
		for _, m := range r.Namespaces[ns] {
			out = append(out, "namespace "+ns+": "+strings.TrimSpace(m))
		}
	}
	if len(out) > limit {
		out = append(out[:limit], fmt.Sprintf("… and %d more", len(out)-limit))
	}
	return out
}

// ResourceList counts the items of a gzipped Velero RestoreResourceList ({"v1/ConfigMap":
// ["ns/name(created)", ...]}) by action: created, updated, skipped, failed.
func ResourceList(r io.Reader) (map[string]int64, error) {
	counts, _, err := ResourceListFailed(r, 0)
	return counts, err
}

// ResourceListFailed is ResourceList, and names (up to limit, sorted) the items whose action is
// failed, as "v1/ConfigMap ns/name".
func ResourceListFailed(r io.Reader, limit int) (map[string]int64, []string, error) {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, nil, fmt.Errorf("reading Velero's resource list: %w", err)
	}
	var doc map[string][]string
	if err := json.NewDecoder(io.LimitReader(gz, 64<<20)).Decode(&doc); err != nil {
		return nil, nil, fmt.Errorf("decoding Velero's resource list: %w", err)
	}
	counts := map[string]int64{}
	var failed []string
	for kind, items := range doc {
		for _, it := range items {
			i := strings.LastIndexByte(it, '(')
			if i < 0 || !strings.HasSuffix(it, ")") {
				return nil, nil, fmt.Errorf("Velero's resource list has an entry without an action: %q", it)
			}
			action := it[i+1 : len(it)-1]
			counts[action]++
			if action == "failed" {
				failed = append(failed, kind+" "+it[:i])
			}
		}
	}
	sort.Strings(failed)
	if len(failed) > limit {
		failed = failed[:limit]
	}
	return counts, failed, nil
}
