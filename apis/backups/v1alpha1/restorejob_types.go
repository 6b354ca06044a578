package v1alpha1

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// RestoreJobPhase summarises the conditions of a RestoreJob.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed
type RestoreJobPhase string

const (
	RestoreJobPending   RestoreJobPhase = "Pending"
	RestoreJobRunning   RestoreJobPhase = "Running"
	RestoreJobSucceeded RestoreJobPhase = "Succeeded"
	RestoreJobFailed    RestoreJobPhase = "Failed"
)

// RestoreJobSpec is one restore from a Backup. It is immutable once created.
type RestoreJobSpec struct {
	// backupRef is the Backup to restore from, in the same namespace.
	// +required
	// +kubebuilder:validation:XValidation:rule="size(self.name) > 0 && size(self.name) <= 253",message="backupRef.name must be 1-253 characters"
	BackupRef corev1.LocalObjectReference `json:"backupRef"`

	// targetApplicationRef is the application to restore into; unset means the Backup's application.
	// +optional
	// +kubebuilder:validation:XValidation:rule="size(self.name) > 0 && size(self.name) <= 253",message="targetApplicationRef.name must be 1-253 characters"
	// +kubebuilder:validation:XValidation:rule="size(self.kind) > 0 && size(self.kind) <= 63",message="targetApplicationRef.kind must be 1-63 characters"
	TargetApplicationRef *corev1.TypedLocalObjectReference `json:"targetApplicationRef,omitempty"`

	// options are restore options: a JSON object whose values are strings, booleans or numbers,
	// as Cozystack's RestoreJobs write them (recoveryTime, failIfTargetExists: true,
	// restoreTimeoutSeconds: 600, ...); each driver decodes the ones it takes, typed, and fails a
	// restore with an option it does not take or of the wrong type (InvalidOption). Standard ones,
	// strings, are read alike by every driver and by the admission policies shipped with core:
	// targetNamespace (OptionTargetNamespace) restores into another namespace, admitted
	// (coffer-restore-target) only when the creating user may create RestoreJobs there;
	// restoreRBAC (OptionRestoreRBAC) "true" restores the backup's Roles, RoleBindings and
	// ServiceAccounts, which are left out otherwise, admitted (coffer-restore-rbac) only when the
	// creating user may create and bind them in the target namespace; inert (OptionInert).
	// Bounded (MaxOptions by the CRD; keys, values and the standard options' types by the
	// admission policy RestoreOptionsPolicy, as the API server exposes no untyped value to a
	// CRD's CEL rules): every controller holds every RestoreJob in memory.
	// The type is Cozystack's (runtime.RawExtension), so code written for its RestoreJobs reads
	// Coffer's alike; StringOption, DecodeOptions and SetOption read and write it.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:MaxProperties=32
	Options *runtime.RawExtension `json:"options,omitempty"`
}

// RestoreJobStatus is written by the driver that owns the Backup's strategy.
type RestoreJobStatus struct {
	// observedGeneration is the generation last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase is Pending, Running, Succeeded or Failed.
	// +optional
	Phase RestoreJobPhase `json:"phase,omitempty"`

	// startedAt is when a driver first picked the restore up.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`

	// completedAt is when the restore reached Succeeded or Failed.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`

	// message is a human-readable summary, set on failure.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Message string `json:"message,omitempty"`

	// items counts what the restore did with the backup's items, when the driver can tell
	// (contract RJ-10): an in-place restore over objects that still exist restores nothing.
	// +optional
	Items *RestoreItems `json:"items,omitempty"`

	// conditions: Accepted and Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RestoreItems counts the items of a restore by what happened to them.
type RestoreItems struct {
	// restored items were created or updated.
	Restored int64 `json:"restored"`
	// skipped items were left alone, most often because they already existed.
	Skipped int64 `json:"skipped"`
	// failed items could not be restored.
	Failed int64 `json:"failed"`
	// compared items were compared by content, after the restore, with the backup's own record
	// of them (driver-job: every file's path, size and SHA-256 against the manifest inside the
	// artifact), and matched. Zero when the driver compares nothing; a verifier then says so.
	// A restore whose content differs fails ContentMismatch (contract RJ-13).
	// +optional
	Compared int64 `json:"compared,omitempty"`
}

// RestoreJob is a single restore from a Backup, into the same or another application.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rj,categories=coffer
// +kubebuilder:validation:XValidation:rule="self.spec == oldSelf.spec",message="spec is immutable"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Backup",type=string,JSONPath=`.spec.backupRef.name`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RestoreJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec RestoreJobSpec `json:"spec"`
	// +optional
	Status RestoreJobStatus `json:"status,omitempty"`
}

// RestoreJobList is a list of RestoreJobs.
// +kubebuilder:object:root=true
type RestoreJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RestoreJob `json:"items"`
}

// Bounds of spec.options, enforced at admission by the CRD's schema: at most MaxOptions, each a
// string of at most MaxOptionValueLength characters, a boolean or a number.
const (
	MaxOptions           = 32
	MaxOptionKeyLength   = 63
	MaxOptionValueLength = 1024
)

// RestoreOptionsPolicy is the ValidatingAdmissionPolicy (and its binding) that bounds
// spec.options: keys of 1-MaxOptionKeyLength characters; values strings of at most
// MaxOptionValueLength characters, booleans or numbers; the standard options strings.
const RestoreOptionsPolicy = "coffer-restore-options"

// OptionTargetNamespace is the standard restore option naming the namespace to restore into, when
// it is not the RestoreJob's own (contract RJ-5, RJ-9).
const OptionTargetNamespace = "targetNamespace"

// OptionInert is the standard restore option asking the driver to restore nothing that runs
// ("true"): no Pods, and workloads that start none where the driver can say so (contract RJ-12).
// The backup verifier sets it on the restores into its sandboxes, which also hold a ResourceQuota
// of zero pods, so a driver that ignores it cannot make a sandbox run anything either.
const OptionInert = "inert"

// OptionRestoreRBAC is the standard restore option asking the driver to restore the backup's Roles,
// RoleBindings and ServiceAccounts ("true"; "false" or unset leaves them out, any other value fails
// the run InvalidOption). A driver restores objects with its own rights, not its requester's, so
// the API server's RBAC escalation check never sees who asked: the admission policy
// RestoreRBACPolicy admits the option only from a user who may create those objects in the target
// namespace and bind and escalate roles there, and drivers run it only when that policy's binding
// existed when the RestoreJob was created (contract RJ-14). An inert restore restores none of
// them, whatever this option says.
const OptionRestoreRBAC = "restoreRBAC"

// RestoreRBACPolicy is the ValidatingAdmissionPolicy (and its binding) that authorizes
// spec.options.restoreRBAC.
const RestoreRBACPolicy = "coffer-restore-rbac"

// RestoresRBAC reports whether the RestoreJob asks for the backup's Roles, RoleBindings and
// ServiceAccounts, and an error naming the option when its value is neither "true" nor "false".
func (r *RestoreJob) RestoresRBAC() (bool, error) {
	v, set, err := r.Spec.StringOption(OptionRestoreRBAC)
	if err != nil {
		return false, err
	}
	switch {
	case !set || v == "false":
		return false, nil
	case v == "true":
		return true, nil
	default:
		return false, fmt.Errorf("spec.options.%s is %.64q; it must be \"true\" or \"false\"", OptionRestoreRBAC, v)
	}
}

// RestoreTargetPolicy is the ValidatingAdmissionPolicy (and its binding) that authorizes a restore
// into another namespace.
const RestoreTargetPolicy = "coffer-restore-target"

// TargetNamespace is the namespace the restore writes into: spec.options.targetNamespace, or the
// RestoreJob's own namespace.
func (r *RestoreJob) TargetNamespace() string {
	if t, _, _ := r.Spec.StringOption(OptionTargetNamespace); t != "" {
		return t
	}
	return r.Namespace
}

// optionMap is spec.options as raw JSON values by key (empty when unset).
func (s *RestoreJobSpec) optionMap() (map[string]json.RawMessage, error) {
	m := map[string]json.RawMessage{}
	if s.Options == nil || len(s.Options.Raw) == 0 {
		return m, nil
	}
	if err := json.Unmarshal(s.Options.Raw, &m); err != nil {
		return nil, fmt.Errorf("spec.options is no JSON object: %w", err)
	}
	return m, nil
}

// StringOption returns the string option key of spec.options and whether it is set; an option
// set to anything but a string is an error naming it.
func (s *RestoreJobSpec) StringOption(key string) (string, bool, error) {
	m, err := s.optionMap()
	if err != nil {
		return "", false, err
	}
	raw, set := m[key]
	if !set {
		return "", false, nil
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", true, fmt.Errorf("spec.options.%s is %.64s; it must be a string", key, raw)
	}
	return v, true, nil
}

// IsTrue reports whether the string option key is "true".
func (s *RestoreJobSpec) IsTrue(key string) bool {
	v, _, err := s.StringOption(key)
	return err == nil && v == "true"
}

// SetOption sets the option key of spec.options to v (a string, a boolean or a number).
func (s *RestoreJobSpec) SetOption(key string, v any) {
	m, err := s.optionMap()
	if err != nil {
		m = map[string]json.RawMessage{}
	}
	m[key], _ = json.Marshal(v)
	raw, _ := json.Marshal(m)
	s.Options = &runtime.RawExtension{Raw: raw}
}

// Options makes spec.options of the given values (strings, booleans or numbers).
func Options(opts map[string]any) *runtime.RawExtension {
	if opts == nil {
		return nil
	}
	raw, _ := json.Marshal(opts)
	return &runtime.RawExtension{Raw: raw}
}

// StringOptions makes spec.options of string values.
func StringOptions(opts map[string]string) *runtime.RawExtension {
	if opts == nil {
		return nil
	}
	raw, _ := json.Marshal(opts)
	return &runtime.RawExtension{Raw: raw}
}

// DecodeOptions decodes spec.options into into, a pointer to a struct whose json tags name the
// options a driver takes, typed: an option it does not take, or of another type, is an error
// naming it and saying what is taken, for the driver to fail the restore with
// (ReasonInvalidOption). The standard options (targetNamespace, restoreRBAC, inert) are taken by
// every driver and need no field.
func (s *RestoreJobSpec) DecodeOptions(into any) error {
	all, err := s.optionMap()
	if err != nil {
		return err
	}
	rest := map[string]json.RawMessage{}
	for k, v := range all {
		if k == OptionTargetNamespace || k == OptionRestoreRBAC || k == OptionInert {
			continue
		}
		rest[k] = v
	}
	if len(rest) == 0 {
		return nil
	}
	taken := optionNames(into)
	for k := range rest {
		if !slices.Contains(taken, k) {
			return fmt.Errorf("spec.options.%.63s is not an option of this driver; it takes %s", k, strings.Join(append(taken, OptionTargetNamespace, OptionRestoreRBAC, OptionInert), ", "))
		}
	}
	raw, err := json.Marshal(rest)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, into); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("spec.options.%s is a %s; it must be %s", te.Field, te.Value, kindWord(te.Type.Kind()))
		}
		return fmt.Errorf("spec.options: %w", err)
	}
	return nil
}

// optionNames are the json names of the fields of the struct into points to.
func optionNames(into any) []string {
	t := reflect.TypeOf(into)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var names []string
	if t == nil || t.Kind() != reflect.Struct {
		return names
	}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

func kindWord(k reflect.Kind) string {
	switch k {
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	default:
		return "a " + k.String()
	}
}
