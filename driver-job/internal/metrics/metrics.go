// Package metrics holds the Job driver's Prometheus metrics, on controller-runtime's registry.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// Runs counts finished runs by kind (backup, restore, cleanup) and outcome.
	Runs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "coffer_jobdriver_runs_total",
		Help: "Backups, restores and cleanups the Job driver finished, by kind (backup, restore, cleanup) and outcome (Succeeded, Failed).",
	}, []string{"kind", "outcome"})
	// Duration observes the duration of finished backups and restores.
	Duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "coffer_jobdriver_run_duration_seconds",
		Help:    "Duration (startedAt to completedAt) of BackupJobs and RestoreJobs run by the Job driver, by kind and outcome.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 16),
	}, []string{"kind", "outcome"})
	// ArtifactBytes counts the bytes of the artifacts agents reported.
	ArtifactBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "coffer_jobdriver_artifact_bytes_total",
		Help: "Bytes of the artifacts that backup agents reported to the Job driver.",
	})
)

func init() { ctrlmetrics.Registry.MustRegister(Runs, Duration, ArtifactBytes) }

// Finished records a finished run; seconds < 0 records no duration (cleanups).
func Finished(kind, outcome string, seconds float64) {
	Runs.WithLabelValues(kind, outcome).Inc()
	if seconds >= 0 {
		Duration.WithLabelValues(kind, outcome).Observe(seconds)
	}
}
