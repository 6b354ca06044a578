// Package resolve reads what a run needs from the cluster: its BackupClass resolution, the
// JobBackupStrategy and the application object. It decides whether a run is this driver's.
package resolve

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// Ours reports whether a strategy reference is a JobBackupStrategy.
func Ours(ref corev1.TypedLocalObjectReference) bool {
	return backupsv1.StrategyIs(ref, jobapi.Group, jobapi.Kind)
}

// Class resolves a BackupJob's class. It returns nil, nil when the job is not this driver's (the
// class is missing, has no strategy for the application, or resolves to another driver): such a
// job is left untouched, for core-controller or another driver to report on.
func Class(ctx context.Context, c client.Reader, job *backupsv1.BackupJob) (*backupsv1.ResolvedStrategy, error) {
	class := &backupsv1.BackupClass{}
	if err := c.Get(ctx, client.ObjectKey{Name: job.Spec.BackupClassName}, class); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	resolved, err := backupsv1.ResolveStrategy(class.Name, class, job.Spec.ApplicationRef)
	if backupsv1.ResolutionReason(err) != "" {
		return nil, nil
	}
	if err != nil || !Ours(resolved.StrategyRef) {
		return nil, err
	}
	return resolved, nil
}

// Failure is an input or outcome problem that fails the run with Reason.
type Failure struct {
	Reason string
	Err    error
}

func (f *Failure) Error() string { return f.Err.Error() }

// Failf returns a *Failure with a formatted message.
func Failf(reason, format string, args ...any) *Failure {
	return &Failure{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// AsFailure returns err as a *Failure when it is one.
func AsFailure(err error) (*Failure, bool) {
	var f *Failure
	ok := errors.As(err, &f)
	return f, ok
}

// Strategy reads the JobBackupStrategy a reference names.
func Strategy(ctx context.Context, c client.Reader, ref corev1.TypedLocalObjectReference) (*jobapi.JobBackupStrategy, error) {
	s := &jobapi.JobBackupStrategy{}
	if err := c.Get(ctx, client.ObjectKey{Name: ref.Name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, Failf(backupsv1.ReasonStrategyNotFound, "JobBackupStrategy %q not found; create it or fix the BackupClass", ref.Name)
		}
		return nil, err
	}
	return s, nil
}

// Application reads the application object a reference names, in namespace ns, at the preferred
// version its API group serves.
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
		if apierrors.IsNotFound(err) {
			return nil, Failf(backupsv1.ReasonApplicationNotFound, "%s %s/%s not found", gk.Kind, ns, ref.Name)
		}
		return nil, err
	}
	return u, nil
}
