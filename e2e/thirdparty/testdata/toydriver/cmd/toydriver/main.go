// Command toydriver runs the toy ConfigMap strategy driver against the cluster of its kubeconfig
// (--kubeconfig, else KUBECONFIG or the in-cluster config).
package main

import (
	"flag"
	"os"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"example.com/toydriver"
)

func main() {
	var metricsAddr, probeAddr string
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address of the Prometheus metrics endpoint; 0 disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", "0", "Address of the /healthz and /readyz probes; 0 disables them.")
	flag.Parse() // --kubeconfig is controller-runtime's flag
	ctrl.SetLogger(klog.NewKlogr())
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{Scheme: toydriver.Scheme(),
		Metrics: metricsserver.Options{BindAddress: metricsAddr}, HealthProbeBindAddress: probeAddr})
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
