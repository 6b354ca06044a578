package velerocheck

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Objects a controller owns are not always in the sandbox under their own names when the diff
// runs. Velero restores them with the ownerReferences they had, which name their owners' old UIDs;
// the garbage collector deletes them in the sandbox and their controllers create them again, some
// under new names (EndpointSlices have generated names), some a moment later. Such an
// object is derived state: it counts as restored when its controller, as its backup copy names
// it, is in the sandbox (directly, or through its own controller in turn). Controllers are read
// from the backup's own copies, in the tarball, in the pass that also indexes it for the content
// diff (content.go).

// maxManifest bounds one object's JSON in the tarball; larger entries are not read.
const maxManifest = 16 << 20

type objectKey struct {
	gk       schema.GroupKind
	ns, name string
}

type controllerRef struct {
	group, kind, name string
}

// presence is what the sandbox holds of an object, directly or through its controllers.
type presence int

const (
	absent presence = iota
	present
	// leftOut: the object, or a controller of it, is of a kind the Restore leaves out.
	leftOut
)

// regenerated returns the missing objects whose controller is not in the sandbox, and how many of
// the others were left out with a controller of a kind the Restore excludes; the rest are left to
// their controllers. versions gives the version the backup holds of each kind, excluded the kinds
// the restore left out.
func (c *Checker) regenerated(ctx context.Context, missing []missingObject, ctrl map[objectKey]controllerRef, versions map[schema.GroupKind]string,
	sandboxOf map[string]string, excluded map[schema.GroupKind]string) ([]missingObject, int, error) {
	memo := map[objectKey]presence{}
	// state says whether the object key (in its source namespace) is in its sandbox, or is
	// controlled by something that is, or by something left out; depth bounds a cycle of
	// references.
	var state func(k objectKey, depth int) (presence, error)
	state = func(k objectKey, depth int) (presence, error) {
		if depth > 8 {
			return absent, nil
		}
		if _, ok := excluded[k.gk]; ok {
			return leftOut, nil
		}
		if p, ok := memo[k]; ok {
			return p, nil
		}
		p := absent
		if v, known := versions[k.gk]; known {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(k.gk.WithVersion(v))
			err := c.Reader.Get(ctx, client.ObjectKey{Namespace: sandboxOf[k.ns], Name: k.name}, u)
			if err != nil && !apierrors.IsNotFound(err) {
				return absent, fmt.Errorf("reading %s %s from sandbox %s: %w", k.gk.Kind, k.name, sandboxOf[k.ns], err)
			}
			if err == nil {
				p = present
			}
		}
		if p == absent {
			if ref, owned := ctrl[k]; owned {
				var err error
				if p, err = state(objectKey{gk: schema.GroupKind{Group: ref.group, Kind: ref.kind}, ns: k.ns, name: ref.name}, depth+1); err != nil {
					return absent, err
				}
			}
		}
		memo[k] = p
		return p, nil
	}
	var left []missingObject
	nLeftOut := 0
	for _, m := range missing {
		p := absent
		if ref, owned := ctrl[objectKey{gk: m.gvk.GroupKind(), ns: m.source, name: m.name}]; owned {
			var err error
			if p, err = state(objectKey{gk: schema.GroupKind{Group: ref.group, Kind: ref.kind}, ns: m.source, name: ref.name}, 1); err != nil {
				return nil, 0, err
			}
		}
		switch p {
		case leftOut:
			nLeftOut++
		case absent:
			left = append(left, m)
		}
	}
	return left, nLeftOut, nil
}

type missingObject struct {
	gvk                   schema.GroupVersionKind
	source, sandbox, name string
}
