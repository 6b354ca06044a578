package toydriver

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// GroupVersion and Kind name the driver's strategy kind (crd/toy.example.com_configmapstrategies.yaml).
var GroupVersion = schema.GroupVersion{Group: "toy.example.com", Version: "v1alpha1"}

const Kind = "ConfigMapStrategy"

// ConfigMapStrategy is the driver's cluster-scoped strategy: a BackupClass that names one has its
// applications backed up into ConfigMaps.
type ConfigMapStrategy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ConfigMapStrategySpec `json:"spec,omitempty"`
}

type ConfigMapStrategySpec struct {
	// Deadline bounds a run (default DefaultDeadline).
	Deadline *metav1.Duration `json:"deadline,omitempty"`
}

type ConfigMapStrategyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ConfigMapStrategy `json:"items"`
}

func (s *ConfigMapStrategy) DeepCopyObject() runtime.Object {
	out := *s
	s.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if s.Spec.Deadline != nil {
		out.Spec.Deadline = &metav1.Duration{Duration: s.Spec.Deadline.Duration}
	}
	return &out
}

func (l *ConfigMapStrategyList) DeepCopyObject() runtime.Object {
	out := *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = make([]ConfigMapStrategy, len(l.Items))
	for i := range l.Items {
		out.Items[i] = *l.Items[i].DeepCopyObject().(*ConfigMapStrategy)
	}
	return &out
}

// Scheme knows the built-in kinds, Coffer's and the strategy kind.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(backupsv1.AddToScheme(s))
	s.AddKnownTypes(GroupVersion, &ConfigMapStrategy{}, &ConfigMapStrategyList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return s
}
