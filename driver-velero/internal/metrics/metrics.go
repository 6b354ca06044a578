// Package metrics holds the Velero driver's Prometheus metrics, registered on controller-runtime's
// registry.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// Runs counts finished BackupJobs and RestoreJobs by kind and outcome.
	Runs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "coffer_velero_runs_total",
		Help: "BackupJobs and RestoreJobs the Velero driver finished, by kind (backup, restore) and outcome (Succeeded, Failed).",
	}, []string{"kind", "outcome"})
	// Duration observes startedAt → completedAt of finished runs.
	Duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "coffer_velero_run_duration_seconds",
		Help:    "Duration of BackupJobs and RestoreJobs run by the Velero driver, by kind and outcome.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 16),
	}, []string{"kind", "outcome"})
	// ArtifactBytes counts the bytes of the backup tarballs the driver measured.
	ArtifactBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "coffer_velero_artifact_bytes_total",
		Help: "Bytes of Velero backup tarballs streamed and checksummed by the driver.",
	})
)

func init() { ctrlmetrics.Registry.MustRegister(Runs, Duration, ArtifactBytes) }

// Finished records a run that reached a terminal phase.
func Finished(kind, outcome string, seconds float64) {
	Runs.WithLabelValues(kind, outcome).Inc()
	Duration.WithLabelValues(kind, outcome).Observe(seconds)
}
