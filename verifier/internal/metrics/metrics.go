// Package metrics holds the verifier's Prometheus metrics, named exactly as the spec names them.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// Runs counts finished runs.
	Runs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ugallu_backup_verify_runs_total",
		Help: "Finished backup verification runs by backend, mode and outcome (Succeeded, Failed).",
	}, []string{"backend", "mode", "outcome"})
	// Findings counts findings by severity.
	Findings = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ugallu_backup_verify_findings_total",
		Help: "Findings of finished verification runs, by severity.",
	}, []string{"severity"})
	// FullRestoreDuration observes full-restore runs from start to the end of cleanup.
	FullRestoreDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ugallu_backup_verify_full_restore_duration_seconds",
		Help:    "Duration of full-restore verifications, by outcome.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 14),
	}, []string{"outcome"})
	// RestoreDuration observes, for each full-restore that restored into its sandbox, how long the
	// restore itself took (the Result's details.restoreSeconds): the measured recovery time.
	RestoreDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ugallu_backup_verify_restore_duration_seconds",
		Help:    "Duration of the restore into the sandbox of full-restore verifications (creation to completion of the restore), by backend.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 16),
	}, []string{"backend"})
	// PolicyPending is the number of Backups a BackupVerifyPolicy wants verified and cannot start
	// yet (its maxConcurrentRuns).
	PolicyPending = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ugallu_backup_verify_policy_pending_runs",
		Help: "Verification runs a BackupVerifyPolicy wants and holds back for its concurrency limit.",
	}, []string{"policy"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(Runs, Findings, FullRestoreDuration, RestoreDuration, PolicyPending)
}
