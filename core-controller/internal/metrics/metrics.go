// Package metrics exposes the core controller's Prometheus metrics. State (per-Plan times, skipped
// ticks, BackupJobs by phase) comes from a scrape-time collector over the informer cache, so
// deleted objects leave no stale series; run durations are a histogram observed once per run.
//
// Every replica keeps a cache, but only the elected leader reports the state: the collector of
// the others reports nothing, so each per-Plan series is exported once however many replicas run
// (docs/core-controller.md, "Metrics"). The counters and the histogram move only where the
// controllers run, which is the leader too.
package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// JobDuration observes startedAt → completedAt of each terminal BackupJob, by outcome.
var JobDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name:    "coffer_backupjob_duration_seconds",
	Help:    "Duration of BackupJobs from startedAt to completedAt, by outcome (Succeeded or Failed).",
	Buckets: prometheus.ExponentialBuckets(1, 2, 16),
}, []string{"outcome"})

// UnclaimedFailed counts the runs core failed because no driver claimed them within the claim
// timeout, by namespace, kind (BackupJob or RestoreJob) and the reason of their Ready=False
// condition.
var UnclaimedFailed = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "coffer_unclaimed_runs_failed_total",
	Help: "Runs (BackupJobs, RestoreJobs) that core failed because no driver claimed them within the claim timeout, by namespace, kind and reason.",
}, []string{"namespace", "kind", "reason"})

var (
	createdDesc = prometheus.NewDesc("coffer_plan_created_timestamp_seconds",
		"Unix time at which the Plan was created (a Plan that never succeeded is judged by its age).", []string{"namespace", "plan"}, nil)
	lastSuccessDesc = prometheus.NewDesc("coffer_plan_last_successful_time_seconds",
		"Unix time at which the newest successful BackupJob of the Plan completed.", []string{"namespace", "plan"}, nil)
	nextScheduleDesc = prometheus.NewDesc("coffer_plan_next_schedule_time_seconds",
		"Unix time of the Plan's next tick.", []string{"namespace", "plan"}, nil)
	lastScheduleDesc = prometheus.NewDesc("coffer_plan_last_schedule_time_seconds",
		"Unix time of the tick of the Plan's newest BackupJob.", []string{"namespace", "plan"}, nil)
	skippedDesc = prometheus.NewDesc("coffer_plan_skipped_ticks_total",
		"Ticks of the Plan that did not fire (missed past the deadline, while the controller was down, or forbidden by the concurrency policy).",
		[]string{"namespace", "plan"}, nil)
	readyDesc = prometheus.NewDesc("coffer_plan_ready",
		"1 when the Plan is valid, scheduling and its BackupClass resolves, 0 when it is suspended or invalid or its class does not resolve.", []string{"namespace", "plan"}, nil)
	restorableDesc = prometheus.NewDesc("coffer_plan_last_restorable_backup_timestamp_seconds",
		"Unix time at which the newest Backup of the Plan that a full-restore verification proved restorable was taken (absent when none was): time() minus it is the Plan's restorable RPO.",
		[]string{"namespace", "plan"}, nil)
	restoreDurationDesc = prometheus.NewDesc("coffer_plan_last_restorable_backup_restore_duration_seconds",
		"How long the full-restore verification that proved the Plan's newest restorable Backup took to restore it (absent when none was, or it was not measured): the Plan's measured recovery time.",
		[]string{"namespace", "plan"}, nil)
	jobsDesc = prometheus.NewDesc("coffer_backupjobs",
		"BackupJobs by namespace and phase (Unclaimed: no driver has taken it yet).", []string{"namespace", "phase"}, nil)
	oldestRunningDesc = prometheus.NewDesc("coffer_backupjob_oldest_running_start_time_seconds",
		"Unix time at which the oldest Running BackupJob of the namespace started (absent when none runs).", []string{"namespace"}, nil)
)

// Collector reads Plans and BackupJobs from a cache at scrape time.
type Collector struct {
	Reader client.Reader
	// Elected is closed once this replica leads (the manager's Elected()); until then the
	// collector reports nothing. Nil reports always.
	Elected <-chan struct{}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{createdDesc, lastSuccessDesc, nextScheduleDesc, lastScheduleDesc, restorableDesc, restoreDurationDesc, skippedDesc, readyDesc, jobsDesc, oldestRunningDesc} {
		ch <- d
	}
}

// leading tells whether this replica is the elected leader.
func (c *Collector) leading() bool {
	if c.Elected == nil {
		return true
	}
	select {
	case <-c.Elected:
		return true
	default:
		return false
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if !c.leading() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	plans := &backupsv1.PlanList{}
	if err := c.Reader.List(ctx, plans); err == nil {
		for _, p := range plans.Items {
			labels := []string{p.Namespace, p.Name}
			var restorable *metav1.Time
			if r := p.Status.LastRestorableBackup; r != nil {
				restorable = &r.TakenAt
			}
			for desc, t := range map[*prometheus.Desc]*time.Time{
				restorableDesc:   timeOf(restorable),
				createdDesc:      timeOf(&p.CreationTimestamp),
				lastSuccessDesc:  timeOf(p.Status.LastSuccessfulTime),
				nextScheduleDesc: timeOf(p.Status.NextScheduleTime),
				lastScheduleDesc: timeOf(p.Status.LastScheduleTime),
			} {
				if t != nil {
					ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(t.Unix()), labels...)
				}
			}
			if r := p.Status.LastRestorableBackup; r != nil && r.RestoreDuration != nil {
				ch <- prometheus.MustNewConstMetric(restoreDurationDesc, prometheus.GaugeValue, r.RestoreDuration.Seconds(), labels...)
			}
			ch <- prometheus.MustNewConstMetric(skippedDesc, prometheus.CounterValue, float64(p.Status.SkippedTicks), labels...)
			ready := 0.0
			for _, cond := range p.Status.Conditions {
				if cond.Type == backupsv1.ConditionReady && cond.Status == "True" {
					ready = 1
				}
			}
			ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, ready, labels...)
		}
	}
	jobs := &backupsv1.BackupJobList{}
	if err := c.Reader.List(ctx, jobs); err == nil {
		counts := map[[2]string]int{}
		oldest := map[string]time.Time{}
		for _, j := range jobs.Items {
			phase := string(j.Status.Phase)
			if !j.IsClaimed() && !j.IsTerminal() {
				phase = "Unclaimed"
			}
			counts[[2]string{j.Namespace, phase}]++
			if j.Status.Phase == backupsv1.BackupJobRunning && j.Status.StartedAt != nil {
				if o, ok := oldest[j.Namespace]; !ok || j.Status.StartedAt.Time.Before(o) {
					oldest[j.Namespace] = j.Status.StartedAt.Time
				}
			}
		}
		for k, n := range counts {
			ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(n), k[0], k[1])
		}
		for ns, t := range oldest {
			ch <- prometheus.MustNewConstMetric(oldestRunningDesc, prometheus.GaugeValue, float64(t.Unix()), ns)
		}
	}
}

func timeOf(t *metav1.Time) *time.Time {
	if t == nil || t.IsZero() {
		return nil
	}
	return &t.Time
}

// Register adds the core metrics to reg. The state collector reads reader and reports only once
// elected is closed (the manager's Elected(), closed at once without leader election).
func Register(reg prometheus.Registerer, reader client.Reader, elected <-chan struct{}) error {
	if err := reg.Register(JobDuration); err != nil {
		return err
	}
	if err := reg.Register(UnclaimedFailed); err != nil {
		return err
	}
	return reg.Register(&Collector{Reader: reader, Elected: elected})
}
