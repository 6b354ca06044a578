// Package driver assembles the Job driver: its scheme, its cache and its reconcilers.
package driver

import (
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-job/internal/backup"
	"github.com/coffer-backup/coffer/driver-job/internal/backupjob"
	"github.com/coffer-backup/coffer/driver-job/internal/names"
	"github.com/coffer-backup/coffer/driver-job/internal/restorejob"
)

// Scheme knows the kinds the driver reads and writes.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(backupsv1.AddToScheme(s))
	utilruntime.Must(jobapi.AddToScheme(s))
	return s
}

// CacheOptions caches only the driver's own Jobs, not every Job in the cluster; pods are read
// uncached, once per finished Job.
func CacheOptions() cache.Options {
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&batchv1.Job{}: {Label: labels.SelectorFromSet(labels.Set{backupsv1.LabelManagedBy: names.DriverName})},
	}}
}

// Setup registers the driver's three reconcilers with a manager.
func Setup(mgr ctrl.Manager, clk clock.PassiveClock) error {
	rec := mgr.GetEventRecorder(names.DriverName)
	c, live, scheme := mgr.GetClient(), mgr.GetAPIReader(), mgr.GetScheme()
	if err := (&backupjob.Reconciler{Client: c, Live: live, Scheme: scheme, Clock: clk, Recorder: rec}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&restorejob.Reconciler{Client: c, Live: live, Scheme: scheme, Clock: clk, Recorder: rec}).SetupWithManager(mgr); err != nil {
		return err
	}
	return (&backup.Reconciler{Client: c, Live: live, Scheme: scheme, Recorder: rec}).SetupWithManager(mgr)
}
