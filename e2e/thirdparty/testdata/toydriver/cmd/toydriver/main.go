// Command toydriver runs the toy ConfigMap strategy driver against the cluster of its kubeconfig.
package main

import (
	"os"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"example.com/toydriver"
)

func main() {
	ctrl.SetLogger(klog.NewKlogr())
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{Scheme: toydriver.Scheme()})
	if err == nil {
		err = toydriver.New(mgr.GetClient()).SetupWithManager(mgr)
	}
	if err == nil {
		err = mgr.Start(ctrl.SetupSignalHandler())
	}
	if err != nil {
		ctrl.Log.Error(err, "toydriver failed")
		os.Exit(1)
	}
}
