// Package cachetrim trims the objects a controller caches to what the controller reads.
//
// A controller-runtime manager caches every object of each kind it watches, cluster-wide, for as
// long as it runs. Tenants write annotations (and, on RestoreJobs, options) of up to the API
// server's limits, so what a tenant writes must not stay in every controller's memory unless the
// controller reads it. Transform drops metadata.managedFields (no component reads it) and every
// annotation the component does not name, and a component may drop more of a kind it reads
// partly. Labels are kept: selectors, indexes and owners are matched by them.
//
// A trimmed object is only good for reading and for patches computed against it (a merge patch
// of the changes): an Update would write the trimmed object back and erase on the server what the
// cache dropped. Coffer's components write cached objects only with Patch and Status().Patch.
package cachetrim

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unique"

	"k8s.io/apimachinery/pkg/api/meta"
)

// Keep names the annotations a component reads, each with the longest value it keeps. An
// annotation not named, or longer than its bound, is dropped from the cached object, as if it
// were not set.
type Keep map[string]int

// Transform returns a cache transform (controller-runtime's cache.Options.DefaultTransform,
// client-go's TransformFunc) that drops managedFields and the annotations keep does not name (the
// names of those kept are keep's strings), then applies each of more to the object. Objects that are not Kubernetes objects (a deletion
// tombstone) pass unchanged.
func Transform(keep Keep, more ...func(obj any)) func(any) (any, error) {
	return func(obj any) (any, error) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return obj, nil
		}
		m.SetManagedFields(nil)
		if a := m.GetAnnotations(); len(a) > 0 {
			// The kept keys are keep's own strings, shared by every object: a key decoded with
			// each object is a string of its own (tens of bytes a key and object).
			var kept map[string]string
			for k, limit := range keep {
				if v, ok := a[k]; ok && len(v) <= limit {
					if kept == nil {
						kept = map[string]string{}
					}
					kept[k] = v
				}
			}
			m.SetAnnotations(kept)
		}
		for _, f := range more {
			f(obj)
		}
		return obj, nil
	}
}

// Merge returns one Keep with every annotation of ks (the larger bound where two name one key).
func Merge(ks ...Keep) Keep {
	out := Keep{}
	for _, k := range ks {
		for key, limit := range k {
			out[key] = max(out[key], limit)
		}
	}
	return out
}

// Intern returns s as one shared copy of its value (unique.Make): the many cached objects that
// name the same namespace, kind, group, phase or reason then share one string instead of each
// holding its own. Strings no object uses any more are collected.
func Intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

// maxInternedPointers bounds InternPtr's table: values beyond it are interned as strings only.
const maxInternedPointers = 1024

var pointers sync.Map // string -> *string

var pointerCount atomic.Int64

// InternPtr returns p, or a shared pointer to the same value: a cached object's optional string
// (an API group) then costs no allocation of its own. The table holds at most
// maxInternedPointers values (the API groups of a cluster are few; a flood of distinct values
// only stops being shared).
func InternPtr(p *string) *string {
	if p == nil {
		return nil
	}
	if v, ok := pointers.Load(*p); ok {
		return v.(*string)
	}
	s := Intern(*p)
	if pointerCount.Load() >= maxInternedPointers {
		return &s
	}
	v, loaded := pointers.LoadOrStore(s, &s)
	if !loaded {
		pointerCount.Add(1)
	}
	return v.(*string)
}

// maxInternedMaps bounds InternMap's table: maps beyond it are not shared.
const maxInternedMaps = 1024

var internedMaps sync.Map // canonical form -> map[string]string

var mapCount atomic.Int64

// InternMap returns m, or a shared map with the same entries: the cached objects whose kept map
// (a driver's metadata, say) is alike then hold one. A shared map is never to be written: a cached
// object is read, or copied before it is changed (the cache's Get and List copy it). The table
// holds at most maxInternedMaps maps (a flood of distinct ones only stops being shared).
func InternMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	var sb strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		sb.WriteString(k)
		sb.WriteByte(0)
		sb.WriteString(m[k])
		sb.WriteByte(0)
	}
	key := sb.String()
	if v, ok := internedMaps.Load(key); ok {
		return v.(map[string]string)
	}
	if mapCount.Load() >= maxInternedMaps {
		return m
	}
	v, loaded := internedMaps.LoadOrStore(key, m)
	if !loaded {
		mapCount.Add(1)
	}
	return v.(map[string]string)
}
