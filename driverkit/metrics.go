package driverkit

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics are the standard run metrics of a driver, named <prefix>_runs_total{kind,outcome},
// <prefix>_run_duration_seconds{kind,outcome} and <prefix>_artifact_bytes_total. kind is backup,
// restore or cleanup; outcome is the terminal phase.
type Metrics struct {
	Runs          *prometheus.CounterVec
	Duration      *prometheus.HistogramVec
	ArtifactBytes prometheus.Counter
}

// NewMetrics creates a driver's metrics and registers them on controller-runtime's registry
// (reg nil) or on reg.
func NewMetrics(prefix, driver string, reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "_runs_total",
			Help: "Runs " + driver + " finished, by kind (backup, restore, cleanup) and outcome (Succeeded, Failed).",
		}, []string{"kind", "outcome"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    prefix + "_run_duration_seconds",
			Help:    "Duration (startedAt to completedAt) of BackupJobs and RestoreJobs run by " + driver + ", by kind and outcome.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 16),
		}, []string{"kind", "outcome"}),
		ArtifactBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: prefix + "_artifact_bytes_total",
			Help: "Bytes of the artifacts " + driver + " recorded on Backups.",
		}),
	}
	if reg == nil {
		reg = ctrlmetrics.Registry
	}
	reg.MustRegister(m.Runs, m.Duration, m.ArtifactBytes)
	return m
}

// finished records a run that reached a terminal phase; seconds < 0 records no duration.
func (m *Metrics) finished(kind, outcome string, seconds float64) {
	if m == nil {
		return
	}
	m.Runs.WithLabelValues(kind, outcome).Inc()
	if seconds >= 0 {
		m.Duration.WithLabelValues(kind, outcome).Observe(seconds)
	}
}
