// Package strategy renders driver strategy templates, failing closed.
//
// A strategy template is any JSON-shaped value (a Velero BackupSpec, a pod template). Every string
// in it, map keys included, is a Go text/template executed with Context, with missingkey=error. Any
// error fails the whole render: the caller reports ReasonTemplateRenderFailed and creates nothing;
// a template is never left half-rendered with "{{" in place.
package strategy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"text/template"
)

// Mode says which operation a template is rendered for.
type Mode string

const (
	ModeBackup  Mode = "backup"
	ModeRestore Mode = "restore"
	// ModeVerify renders a template that restores into scratch and compares (driver-job's
	// verifyTemplate).
	ModeVerify Mode = "verify"
)

// Context is what a template sees.
type Context struct {
	// Application is the live application object, as unstructured JSON.
	Application map[string]any
	// Parameters are the BackupClass parameters of the matched strategy.
	Parameters map[string]string
	// Mode is backup, restore or verify.
	Mode Mode
	// Backup is the Coffer Backup being restored from, as unstructured JSON; nil on backup.
	Backup map[string]any
}

// Error is a render failure; Path locates the offending string.
type Error struct {
	Path string
	Err  error
}

func (e *Error) Error() string { return fmt.Sprintf("rendering %s: %v", e.Path, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// Render renders every string of in (any JSON-marshalable value) and decodes the result into out
// (a non-nil pointer), replacing its value. out is left untouched on error.
func Render(in any, ctx Context, out any) error {
	raw, err := json.Marshal(in)
	if err != nil {
		return &Error{Path: "$", Err: err}
	}
	var tree any
	if err := json.Unmarshal(raw, &tree); err != nil {
		return &Error{Path: "$", Err: err}
	}
	rendered, err := renderValue(tree, ctx, "$")
	if err != nil {
		return err
	}
	raw, err = json.Marshal(rendered)
	if err != nil {
		return &Error{Path: "$", Err: err}
	}
	dst := reflect.ValueOf(out)
	if dst.Kind() != reflect.Pointer || dst.IsNil() {
		return &Error{Path: "$", Err: fmt.Errorf("out must be a non-nil pointer, not %T", out)}
	}
	fresh := reflect.New(dst.Elem().Type())
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(fresh.Interface()); err != nil {
		return &Error{Path: "$", Err: fmt.Errorf("rendered template does not decode: %w", err)}
	}
	dst.Elem().Set(fresh.Elem())
	return nil
}

func renderValue(v any, ctx Context, path string) (any, error) {
	switch t := v.(type) {
	case string:
		return renderString(t, ctx, path)
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			r, err := renderValue(e, ctx, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			key, err := renderString(k, ctx, path+"."+k+"(key)")
			if err != nil {
				return nil, err
			}
			if _, dup := out[key]; dup {
				return nil, &Error{Path: path + "." + k, Err: fmt.Errorf("key renders to %q, which is already set", key)}
			}
			r, err := renderValue(e, ctx, path+"."+k)
			if err != nil {
				return nil, err
			}
			out[key] = r
		}
		return out, nil
	default:
		return v, nil
	}
}

func renderString(s string, ctx Context, path string) (string, error) {
	if !strings.Contains(s, "{{") {
		return s, nil
	}
	t, err := template.New(path).Option("missingkey=error").Parse(s)
	if err != nil {
		return "", &Error{Path: path, Err: err}
	}
	var buf strings.Builder
	if err := t.Execute(&buf, ctx); err != nil {
		return "", &Error{Path: path, Err: err}
	}
	return buf.String(), nil
}
