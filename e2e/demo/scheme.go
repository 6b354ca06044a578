package demo

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

var tableSerializer = func() runtime.NegotiatedSerializer {
	s := runtime.NewScheme()
	metav1.AddMetaToScheme(s)
	return serializer.NewCodecFactory(s).WithoutConversion()
}()
