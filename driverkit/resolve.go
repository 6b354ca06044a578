package driverkit

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// StrategyKind names a driver's strategy kind.
type StrategyKind struct{ Group, Kind string }

// Owns reports whether a strategy reference names this kind.
func (k StrategyKind) Owns(ref corev1.TypedLocalObjectReference) bool {
	return backupsv1.StrategyIs(ref, k.Group, k.Kind)
}

// ResolveClass resolves a BackupJob's class. It returns nil, nil when the class does not resolve
// to kind (the class is missing, has no strategy for the application, or names another driver's
// kind): such a job is left untouched, for core-controller or another driver to report on.
func ResolveClass(ctx context.Context, c client.Reader, job *backupsv1.BackupJob, kind StrategyKind) (*backupsv1.ResolvedStrategy, error) {
	class := &backupsv1.BackupClass{}
	if err := c.Get(ctx, client.ObjectKey{Name: job.Spec.BackupClassName}, class); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	resolved, err := backupsv1.ResolveStrategy(class.Name, class, job.Spec.ApplicationRef)
	if backupsv1.ResolutionReason(err) != "" {
		return nil, nil
	}
	if err != nil || !kind.Owns(resolved.StrategyRef) {
		return nil, err
	}
	return resolved, nil
}

// GetStrategy reads the strategy ref names into s. A missing strategy is a StrategyNotFound
// failure.
func GetStrategy[S client.Object](ctx context.Context, c client.Reader, ref corev1.TypedLocalObjectReference, s S) (S, error) {
	if err := c.Get(ctx, client.ObjectKey{Name: ref.Name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return s, Failf(backupsv1.ReasonStrategyNotFound, "%s %q not found; create it or fix the BackupClass", ref.Kind, ref.Name)
		}
		return s, err
	}
	return s, nil
}

// Application reads the application object ref names in namespace ns, at the preferred version
// its API group serves. A kind the cluster does not serve, or a missing object, is an
// ApplicationNotFound failure; a Forbidden read (the driver's role does not cover the group) is a
// Forbidden failure that says which rule to add.
func Application(ctx context.Context, c client.Client, ns string, ref corev1.TypedLocalObjectReference) (*unstructured.Unstructured, error) {
	gk := schema.GroupKind{Group: backupsv1.ApplicationAPIGroup(ref), Kind: ref.Kind}
	m, err := c.RESTMapper().RESTMapping(gk)
	if meta.IsNoMatchError(err) {
		return nil, Failf(backupsv1.ReasonApplicationNotFound, "the cluster serves no kind %s in group %q", gk.Kind, gk.Group)
	}
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(m.GroupVersionKind)
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, u); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return nil, Failf(backupsv1.ReasonApplicationNotFound, "%s %s/%s not found", gk.Kind, ns, ref.Name)
		case apierrors.IsForbidden(err):
			return nil, Failf(ReasonForbidden, "the driver may not read %s in group %q (%v); grant its ServiceAccount get on %s",
				m.Resource.Resource, gk.Group, err, m.Resource.GroupResource())
		}
		return nil, err
	}
	return u, nil
}

// ApplicationOrName reads the application like Application, and when it does not exist (a
// restore after loss) returns an object holding only its name and namespace, for templates.
func ApplicationOrName(ctx context.Context, c client.Client, ns string, ref corev1.TypedLocalObjectReference) (map[string]any, error) {
	u, err := Application(ctx, c, ns, ref)
	if err == nil {
		return u.Object, nil
	}
	if f, ok := AsFailure(err); ok && f.Reason == backupsv1.ReasonApplicationNotFound {
		return map[string]any{"metadata": map[string]any{"name": ref.Name, "namespace": ns}}, nil
	}
	return nil, err
}

// ReasonForbidden fails a run the driver's RBAC does not allow; ReasonObjectStoreUnavailable one
// whose object store kept failing until the deadline. Both name infrastructure, not the data.
const (
	ReasonForbidden              = "Forbidden"
	ReasonObjectStoreUnavailable = "ObjectStoreUnavailable"
)

func describe(ref corev1.TypedLocalObjectReference) string {
	return fmt.Sprintf("%s %s", ref.Kind, ref.Name)
}
