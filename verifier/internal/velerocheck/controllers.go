package velerocheck

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
)

// Objects a controller owns are not always in the sandbox under their own names when the diff
// runs. Velero restores them with the ownerReferences they had, which name their owners' old UIDs;
// the garbage collector deletes them in the sandbox and their controllers create them again, some
// under new names (EndpointSlices have generated names), some a moment later. Such an
// object is derived state: it counts as restored when its controller, as its backup copy names
// it, is in the sandbox (directly, or through its own controller in turn). Controllers are read
// from the backup's own copies, in the tarball, and only when something is missing by name.

// maxManifest bounds one object's JSON in the tarball; larger entries are not read.
const maxManifest = 16 << 20

type objectKey struct {
	gk       schema.GroupKind
	ns, name string
}

type controllerRef struct {
	group, kind, name string
}

// controllers reads the backup's tarball and returns the controller of every namespaced object
// that has one. It streams the tarball once and keeps only the references.
func (c *Checker) controllers(ctx context.Context, run *securityv1.BackupVerifyRun, vb *velerov1.Backup, bsl *velerov1.BackupStorageLocation) (map[objectKey]controllerRef, error) {
	body, done, err := c.open(ctx, run, vb, bsl, "contents", velerov1.DownloadTargetKindBackupContents)
	if err != nil {
		return nil, err
	}
	defer done()
	ctrl, err := readControllers(body)
	if err != nil {
		return nil, c.storageError(bsl, "reading the backup's tarball", err)
	}
	return ctrl, nil
}

// readControllers reads a Velero backup tarball (resources/<resource>/[<version>-preferredversion/]
// namespaces/<ns>/<name>.json).
func readControllers(r io.Reader) (map[objectKey]controllerRef, error) {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("reading the backup's tarball: %w", err)
	}
	out := map[objectKey]controllerRef{}
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading the backup's tarball: %w", err)
		}
		if hdr.Typeflag != tar.TypeReg || hdr.Size > maxManifest || !strings.HasPrefix(hdr.Name, "resources/") ||
			!strings.Contains(hdr.Name, "/namespaces/") || !strings.HasSuffix(hdr.Name, ".json") {
			continue
		}
		var obj struct {
			APIVersion string            `json:"apiVersion"`
			Kind       string            `json:"kind"`
			Metadata   metav1.ObjectMeta `json:"metadata"`
		}
		if err := json.NewDecoder(tr).Decode(&obj); err != nil {
			continue // not an object; the diff reports it by name as before
		}
		ref := metav1.GetControllerOfNoCopy(&obj.Metadata)
		if ref == nil || obj.Metadata.Namespace == "" {
			continue
		}
		gv, err := schema.ParseGroupVersion(obj.APIVersion)
		og, oerr := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil || oerr != nil {
			continue
		}
		out[objectKey{gk: gv.WithKind(obj.Kind).GroupKind(), ns: obj.Metadata.Namespace, name: obj.Metadata.Name}] =
			controllerRef{group: og.Group, kind: ref.Kind, name: ref.Name}
	}
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
// their controllers. versions gives the version the backup holds of each kind.
func (c *Checker) regenerated(ctx context.Context, missing []missingObject, ctrl map[objectKey]controllerRef, versions map[schema.GroupKind]string, sandboxOf map[string]string) ([]missingObject, int, error) {
	memo := map[objectKey]presence{}
	// state says whether the object key (in its source namespace) is in its sandbox, or is
	// controlled by something that is, or by something left out; depth bounds a cycle of
	// references.
	var state func(k objectKey, depth int) (presence, error)
	state = func(k objectKey, depth int) (presence, error) {
		if depth > 8 {
			return absent, nil
		}
		if _, excluded := ExcludedFromSandbox[k.gk]; excluded {
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
	excluded := 0
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
			excluded++
		case absent:
			left = append(left, m)
		}
	}
	return left, excluded, nil
}

type missingObject struct {
	gvk                   schema.GroupVersionKind
	source, sandbox, name string
}
