package v1alpha1

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
)

// DefaultApplicationAPIGroup is the API group of an application reference that names none.
const DefaultApplicationAPIGroup = "apps.cozystack.io"

// ApplicationAPIGroup returns the reference's API group, or the default when it names none.
func ApplicationAPIGroup(ref corev1.TypedLocalObjectReference) string {
	if ref.APIGroup == nil || *ref.APIGroup == "" {
		return DefaultApplicationAPIGroup
	}
	return *ref.APIGroup
}

// NormalizeApplicationRef returns a copy of ref whose apiGroup is set, defaulted when empty.
func NormalizeApplicationRef(ref corev1.TypedLocalObjectReference) corev1.TypedLocalObjectReference {
	group := ApplicationAPIGroup(ref)
	ref.APIGroup = &group
	return ref
}

// Matches reports whether the selector selects applications of the given reference.
func (s ApplicationSelector) Matches(ref corev1.TypedLocalObjectReference) bool {
	group := DefaultApplicationAPIGroup
	if s.APIGroup != nil && *s.APIGroup != "" {
		group = *s.APIGroup
	}
	return group == ApplicationAPIGroup(ref) && s.Kind == ref.Kind
}

// StrategyIs reports whether a strategy reference points at the given group and kind; drivers use
// it to decide whether a run is theirs.
func StrategyIs(ref corev1.TypedLocalObjectReference, group, kind string) bool {
	return ref.APIGroup != nil && *ref.APIGroup == group && ref.Kind == kind
}

// ResolvedStrategy is what a BackupClass resolves to for one application.
type ResolvedStrategy struct {
	// ClassName is the BackupClass the strategy came from.
	ClassName string
	// StrategyRef is the driver strategy to run.
	StrategyRef corev1.TypedLocalObjectReference
	// Parameters are the class parameters for that strategy (never nil).
	Parameters map[string]string
}

// ClassNotFoundError says a BackupClass does not exist.
type ClassNotFoundError struct{ Name string }

func (e *ClassNotFoundError) Error() string {
	return fmt.Sprintf("BackupClass %q not found", e.Name)
}

// NoMatchingStrategyError says a BackupClass has no strategy for an application type.
type NoMatchingStrategyError struct {
	ClassName string
	APIGroup  string
	Kind      string
}

func (e *NoMatchingStrategyError) Error() string {
	return fmt.Sprintf("BackupClass %q has no strategy for applications of kind %q in group %q",
		e.ClassName, e.Kind, e.APIGroup)
}

// ClassNotAllowedError says a BackupClass's namespaceSelector does not select a namespace.
//
// +kubebuilder:object:generate=false
type ClassNotAllowedError struct {
	ClassName string
	Namespace string
	// Invalid is set when the selector itself does not parse (it then selects nothing).
	Invalid error
}

func (e *ClassNotAllowedError) Error() string {
	if e.Invalid != nil {
		return fmt.Sprintf("BackupClass %q may not be used in namespace %q: its spec.namespaceSelector is invalid (%v) and selects no namespace",
			e.ClassName, e.Namespace, e.Invalid)
	}
	return fmt.Sprintf("BackupClass %q may not be used in namespace %q: its spec.namespaceSelector does not select the namespace's labels",
		e.ClassName, e.Namespace)
}

// AllowsNamespace returns nil when the class may be used in the namespace namespace with the
// given labels, and a *ClassNotAllowedError otherwise. A class without a namespaceSelector allows
// every namespace; a selector that does not parse allows none (fail closed).
func (c *BackupClass) AllowsNamespace(namespace string, labels map[string]string) error {
	if c.Spec.NamespaceSelector == nil {
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(c.Spec.NamespaceSelector)
	if err != nil {
		return &ClassNotAllowedError{ClassName: c.Name, Namespace: namespace, Invalid: err}
	}
	if !sel.Matches(k8slabels.Set(labels)) {
		return &ClassNotAllowedError{ClassName: c.Name, Namespace: namespace}
	}
	return nil
}

// ResolveStrategy picks the first strategy of class whose application selector matches app.
// A nil class yields a *ClassNotFoundError named after className.
func ResolveStrategy(className string, class *BackupClass, app corev1.TypedLocalObjectReference) (*ResolvedStrategy, error) {
	if class == nil {
		return nil, &ClassNotFoundError{Name: className}
	}
	for _, s := range class.Spec.Strategies {
		if !s.Application.Matches(app) {
			continue
		}
		params := make(map[string]string, len(s.Parameters))
		for k, v := range s.Parameters {
			params[k] = v
		}
		return &ResolvedStrategy{ClassName: class.Name, StrategyRef: s.StrategyRef, Parameters: params}, nil
	}
	return nil, &NoMatchingStrategyError{ClassName: class.Name, APIGroup: ApplicationAPIGroup(app), Kind: app.Kind}
}

// ResolutionReason maps an error of ResolveStrategy or AllowsNamespace to the condition reason the contract uses,
// or "" for other errors.
func ResolutionReason(err error) string {
	var notFound *ClassNotFoundError
	var noMatch *NoMatchingStrategyError
	var notAllowed *ClassNotAllowedError
	switch {
	case errors.As(err, &notFound):
		return ReasonBackupClassNotFound
	case errors.As(err, &notAllowed):
		return ReasonBackupClassNotAllowed
	case errors.As(err, &noMatch):
		return ReasonNoMatchingStrategy
	}
	return ""
}

// Record returns the RunStrategy a claim stores for the resolution.
func (r *ResolvedStrategy) Record() *RunStrategy {
	params := make(map[string]string, len(r.Parameters))
	for k, v := range r.Parameters {
		params[k] = v
	}
	return &RunStrategy{BackupClassName: r.ClassName, StrategyRef: r.StrategyRef, Parameters: params}
}

// Resolved returns the resolution a claim recorded (Parameters never nil).
func (s *RunStrategy) Resolved() *ResolvedStrategy {
	params := make(map[string]string, len(s.Parameters))
	for k, v := range s.Parameters {
		params[k] = v
	}
	return &ResolvedStrategy{ClassName: s.BackupClassName, StrategyRef: s.StrategyRef, Parameters: params}
}
