// Package convert turns Cozystack's own strategies (strategy.backups.cozystack.io Velero and Job)
// and the BackupClasses that name them into Coffer's, whose drivers each own a group of their own
// (velerodriver.backups.cozystack.io VeleroBackupStrategy, jobdriver.backups.cozystack.io
// JobBackupStrategy). Both render templates with Go's text/template over the application; the
// conversion rewrites the template fields Cozystack's Job driver offers that Coffer names
// otherwise, and says what it cannot carry over.
package convert

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/template"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Group is Cozystack's strategy group.
const Group = "strategy.backups.cozystack.io"

const (
	veleroGroup = "velerodriver.backups.cozystack.io"
	jobGroup    = "jobdriver.backups.cozystack.io"
)

// kinds maps Cozystack's strategy kinds to Coffer's (group, kind).
var kinds = map[string][2]string{
	"Velero": {veleroGroup, "VeleroBackupStrategy"},
	"Job":    {jobGroup, "JobBackupStrategy"},
}

// fields are the template fields of Cozystack's Job driver that Coffer's context names otherwise
// (apis/strategy.Context: the application and the Backup as their JSON).
var fields = []struct{ from, to string }{
	{".Release.Name", ".Application.metadata.name"},
	{".Release.Namespace", ".Application.metadata.namespace"},
	{".Backup.ApplicationRef.Name", ".Backup.spec.applicationRef.name"},
	{".Backup.ApplicationRef.Kind", ".Backup.spec.applicationRef.kind"},
	{".Backup.ApplicationRef.APIGroup", ".Backup.spec.applicationRef.apiGroup"},
	{".Backup.Name", ".Backup.metadata.name"},
	{".Backup.Namespace", ".Backup.metadata.namespace"},
}

// Result is the converted documents and what the conversion could not carry over.
type Result struct {
	Out   []byte
	Notes []string
}

// Convert converts every Cozystack strategy and BackupClass in the YAML or JSON documents of in;
// other documents pass through unchanged.
func Convert(in io.Reader) (Result, error) {
	var res Result
	dec := utilyaml.NewYAMLOrJSONDecoder(in, 4096)
	var docs []map[string]any
	for {
		doc := map[string]any{}
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return res, fmt.Errorf("reading document %d: %w", len(docs)+1, err)
		}
		if len(doc) == 0 {
			continue
		}
		docs = append(docs, doc)
	}
	var out bytes.Buffer
	for i, doc := range docs {
		conv, notes, err := convertDoc(doc)
		if err != nil {
			return res, fmt.Errorf("document %d: %w", i+1, err)
		}
		res.Notes = append(res.Notes, notes...)
		raw, err := yaml.Marshal(conv)
		if err != nil {
			return res, err
		}
		out.WriteString("---\n")
		out.Write(raw)
	}
	res.Out = out.Bytes()
	return res, nil
}

func convertDoc(doc map[string]any) (map[string]any, []string, error) {
	apiVersion, _ := doc["apiVersion"].(string)
	kind, _ := doc["kind"].(string)
	meta, _ := doc["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	group, _, _ := strings.Cut(apiVersion, "/")
	switch {
	case group == Group && kind == "Velero":
		return veleroStrategy(doc, meta, name)
	case group == Group && kind == "Job":
		return jobStrategy(doc, meta, name)
	case group == Group:
		return doc, []string{fmt.Sprintf("%s %s: Coffer has no driver for Cozystack's %s strategies; left as is", kind, name, kind)}, nil
	case apiVersion == "backups.cozystack.io/v1alpha1" && kind == "BackupClass":
		return backupClass(doc, name)
	default:
		return doc, nil, nil
	}
}

func strategyMeta(meta map[string]any) map[string]any {
	out := map[string]any{"name": meta["name"]}
	for _, k := range []string{"labels", "annotations"} {
		if v, ok := meta[k]; ok {
			out[k] = v
		}
	}
	return out
}

func veleroStrategy(doc, meta map[string]any, name string) (map[string]any, []string, error) {
	tmpl, _ := nested(doc, "spec", "template").(map[string]any)
	backup, ok := tmpl["spec"]
	if !ok {
		return nil, nil, fmt.Errorf("Velero %s has no spec.template.spec", name)
	}
	spec := map[string]any{"backupTemplate": map[string]any{"spec": backup}}
	notes := []string{fmt.Sprintf("Velero %s → VeleroBackupStrategy %s: driver-velero confines every restore to the application's namespace (includedNamespaces, includeClusterResources: false, an exact namespaceMapping for spec.options.targetNamespace) whatever the template says", name, name)}
	if rs, ok := tmpl["restoreSpec"]; ok {
		spec["restoreTemplate"] = map[string]any{"spec": rs}
	}
	spec, tnotes := rewrite(spec, "VeleroBackupStrategy "+name)
	return map[string]any{"apiVersion": veleroGroup + "/v1alpha1", "kind": "VeleroBackupStrategy",
		"metadata": strategyMeta(meta), "spec": spec}, append(notes, tnotes...), nil
}

func jobStrategy(doc, meta map[string]any, name string) (map[string]any, []string, error) {
	tmpl, ok := nested(doc, "spec", "template").(map[string]any)
	if !ok {
		return nil, nil, fmt.Errorf("Job %s has no spec.template", name)
	}
	// Cozystack's Job driver runs one template for both, telling them apart by .Mode; so can
	// Coffer's (.Mode is "backup" or "restore").
	spec := map[string]any{"template": tmpl, "restoreTemplate": tmpl}
	notes := []string{fmt.Sprintf("Job %s → JobBackupStrategy %s: its template is both the backup and the restore template (.Mode tells them apart, as before); a backup pod must report its artifact as JSON in its termination message, or the backup fails ArtifactReportInvalid (docs/driver-job.md)", name, name)}
	spec, tnotes := rewrite(spec, "JobBackupStrategy "+name)
	return map[string]any{"apiVersion": jobGroup + "/v1alpha1", "kind": "JobBackupStrategy",
		"metadata": strategyMeta(meta), "spec": spec}, append(notes, tnotes...), nil
}

func backupClass(doc map[string]any, name string) (map[string]any, []string, error) {
	var notes []string
	strategies, _ := nested(doc, "spec", "strategies").([]any)
	for i, s := range strategies {
		ref, _ := nested(s, "strategyRef").(map[string]any)
		if ref == nil || ref["apiGroup"] != Group {
			continue
		}
		kind, _ := ref["kind"].(string)
		to, ok := kinds[kind]
		if !ok {
			notes = append(notes, fmt.Sprintf("BackupClass %s: strategies[%d] names a Cozystack %s strategy, which no Coffer driver runs; left as is", name, i, kind))
			continue
		}
		ref["apiGroup"], ref["kind"] = to[0], to[1]
	}
	return doc, notes, nil
}

// rewrite renames Cozystack's template fields in every string of v, and notes each string that is
// no template Coffer can render (a function Coffer's templates lack, such as sprig's default).
func rewrite(v map[string]any, where string) (map[string]any, []string) {
	var notes []string
	seen := map[string]bool{}
	var walk func(any) any
	walk = func(v any) any {
		switch t := v.(type) {
		case map[string]any:
			out := make(map[string]any, len(t))
			for k, e := range t {
				out[walk(k).(string)] = walk(e)
			}
			return out
		case []any:
			out := make([]any, len(t))
			for i, e := range t {
				out[i] = walk(e)
			}
			return out
		case string:
			s := t
			if strings.Contains(s, "{{") {
				for _, f := range fields {
					s = strings.ReplaceAll(s, f.from, f.to)
				}
				if _, err := template.New("").Option("missingkey=error").Parse(s); err != nil && !seen[t] {
					seen[t] = true
					notes = append(notes, fmt.Sprintf("%s: %q is no template Coffer renders (%v); rewrite it with text/template's own functions (if, index, eq, ...)", where, t, err))
				}
			}
			return s
		default:
			return v
		}
	}
	out := walk(v).(map[string]any)
	sort.Strings(notes)
	return out, notes
}

func nested(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}
