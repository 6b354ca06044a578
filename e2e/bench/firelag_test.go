// Package bench measures Coffer against its peers on one machine, in one run.
package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/cluster"
	"github.com/coffer-backup/coffer/e2e/components"
	"github.com/coffer-backup/coffer/e2e/manifests"
)

// Both controllers get the same API budget, so the comparison is of the controllers.
const qps, burst = "100", "200"

// BenchmarkFireLag creates N Plans and N CronJobs that fire every minute on one local API server,
// with core-controller and kube-controller-manager's CronJob controller running as processes, and
// measures for one tick the lag from the scheduled time to the receipt (on a watch) of each
// BackupJob and Job. Run it with -benchtime=1x: one iteration takes minutes.
func BenchmarkFireLag(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			for range b.N {
				fireLag(b, n)
			}
		})
	}
}

func fireLag(b *testing.B, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	root, err := manifests.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	c, err := cluster.Start(ctx, cluster.Options{
		ControllerManager:     true,
		ControllerManagerArgs: []string{"--controllers=cronjob,serviceaccount", "--kube-api-qps=" + qps, "--kube-api-burst=" + burst},
		CRDDirectoryPaths:     []string{filepath.Join(root, "deploy", "core-controller", "crd")},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = c.Stop() }()
	bin, err := components.Build(root, "core-controller", "core-controller", c.Dir)
	if err != nil {
		b.Fatal(err)
	}
	core, err := components.Start(bin, "--kubeconfig="+c.Kubeconfig, "--leader-elect=false", "--metrics-bind-address=0",
		"--health-probe-bind-address=0", "--kube-api-qps="+qps, "--kube-api-burst="+burst)
	if err != nil {
		b.Fatal(err)
	}
	defer core.Stop(10 * time.Second)

	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = -1, 0 // the load generator is not rate limited
	cl, err := client.NewWithWatch(cfg, client.Options{Scheme: cluster.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	ns, err := c.Namespace(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	createAll(ctx, b, cl, ns, n)

	// Measure the first tick at least 15 s after everything exists.
	tick := time.Now().Add(15 * time.Second).Truncate(time.Minute).Add(time.Minute)
	b.ResetTimer()
	plans, crons := watchLags(ctx, b, cl, ns, n, tick)
	b.StopTimer()
	rss, _ := core.PeakRSSBytes()

	report(b, "coffer", plans)
	report(b, "cronjob", crons)
	b.ReportMetric(float64(rss)/(1<<20), "core-peak-RSS-MiB")
	fmt.Fprintf(os.Stdout, "| %d | %s | %s | %.0f MiB |\n", n, summary(plans), summary(crons), float64(rss)/(1<<20))
	if len(plans) < n {
		b.Errorf("only %d of %d Plans fired within the measurement window", len(plans), n)
	}
}

func createAll(ctx context.Context, b *testing.B, cl client.Client, ns string, n int) {
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := range n {
		for _, obj := range []client.Object{
			&backupsv1.Plan{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%05d", i), Namespace: ns},
				Spec: backupsv1.PlanSpec{
					ApplicationRef:    corev1.TypedLocalObjectReference{Kind: "VirtualMachine", Name: fmt.Sprintf("vm-%05d", i)},
					BackupClassName:   "default",
					Schedule:          backupsv1.PlanSchedule{Cron: "* * * * *"},
					ConcurrencyPolicy: backupsv1.ConcurrencyAllow,
				},
			},
			&batchv1.CronJob{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c-%05d", i), Namespace: ns},
				Spec: batchv1.CronJobSpec{
					Schedule: "* * * * *",
					JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
						Suspend: ptr(true), // no pods: the bench measures scheduling only
						Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
							RestartPolicy: corev1.RestartPolicyNever,
							Containers:    []corev1.Container{{Name: "c", Image: "none"}},
						}},
					}},
				},
			},
		} {
			wg.Add(1)
			sem <- struct{}{}
			go func(o client.Object) {
				defer func() { <-sem; wg.Done() }()
				if err := cl.Create(ctx, o); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}(obj)
		}
	}
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
}

// watchLags collects, for one tick, receipt time minus scheduled time of every BackupJob and Job.
func watchLags(ctx context.Context, b *testing.B, cl client.WithWatch, ns string, n int, tick time.Time) (plans, crons []time.Duration) {
	bw, err := cl.Watch(ctx, &backupsv1.BackupJobList{}, client.InNamespace(ns))
	if err != nil {
		b.Fatal(err)
	}
	defer bw.Stop()
	jw, err := cl.Watch(ctx, &batchv1.JobList{}, client.InNamespace(ns))
	if err != nil {
		b.Fatal(err)
	}
	defer jw.Stop()
	deadline := time.After(time.Until(tick) + 4*time.Minute)
	for len(plans) < n || len(crons) < n {
		select {
		case ev := <-bw.ResultChan():
			if ev.Type == watch.Added {
				if lag, ok := lagOf(ev.Object.(client.Object), backupsv1.AnnotationScheduledTime, tick); ok {
					plans = append(plans, lag)
				}
			}
		case ev := <-jw.ResultChan():
			if ev.Type == watch.Added {
				if lag, ok := lagOf(ev.Object.(client.Object), batchv1.CronJobScheduledTimestampAnnotation, tick); ok {
					crons = append(crons, lag)
				}
			}
		case <-deadline:
			return plans, crons
		}
	}
	return plans, crons
}

func lagOf(o client.Object, annotation string, tick time.Time) (time.Duration, bool) {
	at, err := time.Parse(time.RFC3339, o.GetAnnotations()[annotation])
	if err != nil || !at.Equal(tick) {
		return 0, false
	}
	return time.Since(at), true
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(q*float64(len(sorted)-1))]
}

func report(b *testing.B, who string, lags []time.Duration) {
	sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
	b.ReportMetric(quantile(lags, 0.5).Seconds(), who+"-p50-s")
	b.ReportMetric(quantile(lags, 0.99).Seconds(), who+"-p99-s")
	b.ReportMetric(quantile(lags, 1).Seconds(), who+"-max-s")
}

func summary(lags []time.Duration) string {
	return fmt.Sprintf("%d fired; p50 %.2f s, p99 %.2f s, max %.2f s", len(lags),
		quantile(lags, 0.5).Seconds(), quantile(lags, 0.99).Seconds(), quantile(lags, 1).Seconds())
}

func ptr[T any](v T) *T { return &v }
