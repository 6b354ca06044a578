// Package bench measures Coffer against its peers on one machine, in one run.
package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/components"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
)

// Both controllers get the same API budget, so the comparison is of the controllers. Override
// with COFFER_BENCH_QPS and COFFER_BENCH_BURST.
var qps, burst = envOr("COFFER_BENCH_QPS", "100"), envOr("COFFER_BENCH_BURST", "200")

// COFFER_BENCH_CORE_ARGS adds flags to core-controller (e.g. --plan-workers=32).

// alone (COFFER_BENCH_MODE=alone) measures each controller on a tick of its own: the Plans at one
// tick while the CronJobs are suspended, then the CronJobs at a later tick while the Plans are
// suspended, so neither shares the API server with the other. The default measures both at the
// same tick.
var alone = os.Getenv("COFFER_BENCH_MODE") == "alone"

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// BenchmarkFireLag creates N Plans and N CronJobs that fire every minute on one local API server,
// with core-controller and kube-controller-manager's CronJob controller running as processes, and
// measures for one tick the lag from the scheduled time to the receipt (on a watch) of each
// BackupJob and Job. Run it with -benchtime=1x: one iteration takes minutes.
func BenchmarkFireLag(b *testing.B) { forSizes(b, fireLag) }

// forSizes runs one sub-benchmark "N=<n>" per size of benchSizes.
func forSizes(b *testing.B, run func(b *testing.B, n int)) {
	for _, n := range benchSizes() {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			for range b.N {
				run(b, n)
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
	core, err := components.Start(bin, append([]string{"--kubeconfig=" + c.Kubeconfig, "--leader-elect=false", "--metrics-bind-address=0",
		"--health-probe-bind-address=0", "--kube-api-qps=" + qps, "--kube-api-burst=" + burst}, strings.Fields(os.Getenv("COFFER_BENCH_CORE_ARGS"))...)...)
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
	tick := nextTick()
	b.ResetTimer()
	plans, crons := watchLags(ctx, b, cfg, n, tick, true, !alone)
	if alone {
		b.StopTimer()
		swapSuspension(ctx, b, cl, ns, n)
		tick = nextTick()
		b.StartTimer()
		_, crons = watchLags(ctx, b, cfg, n, tick, false, true)
	}
	b.StopTimer()
	rss, _ := core.PeakRSSBytes()

	report(b, "coffer", plans)
	report(b, "cronjob", crons)
	b.ReportMetric(float64(rss)/(1<<20), "core-peak-RSS-MiB")
	mode := "same tick"
	if alone {
		mode = "own ticks"
	}
	fmt.Fprintf(os.Stdout, "| %d | %s/%s | %s | %s | %s | %.0f MiB |\n", n, qps, burst, mode, summary(plans), summary(crons), float64(rss)/(1<<20))
	// A tick not served before the next one is missed (and counted by the Plan); report how many
	// of each fired for this tick rather than failing: this is a measurement.
	b.ReportMetric(float64(len(plans)), "coffer-fired")
	b.ReportMetric(float64(len(crons)), "cronjob-fired")
}

func createAll(ctx context.Context, b *testing.B, cl client.Client, ns string, n int) {
	// The class the Plans name, so that they are Ready (a Plan whose class does not resolve says so
	// in a Warning event of its own, which the bench is not about).
	class := &backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: backupsv1.BackupClassSpec{
		Strategies: []backupsv1.BackupClassStrategy{{Application: backupsv1.ApplicationSelector{Kind: "VirtualMachine"},
			StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr("velerodriver.backups.cozystack.io"), Kind: "VeleroBackupStrategy", Name: "bench"}}},
	}}
	if err := client.IgnoreAlreadyExists(cl.Create(ctx, class)); err != nil {
		b.Fatal(err)
	}
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
					Suspend:  ptr(alone), // measured on a tick of their own
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

// watchLags collects, for one tick, receipt time minus scheduled time of every BackupJob and Job,
// through informers (which re-establish their watches, unlike a bare watch).
func watchLags(ctx context.Context, b *testing.B, cfg *rest.Config, n int, tick time.Time, wantPlans, wantCrons bool) (plans, crons []time.Duration) {
	c, err := cache.New(cfg, cache.Options{Scheme: cluster.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	record := func(obj client.Object, annotation string, into *[]time.Duration) {
		if lag, ok := lagOf(obj, annotation, tick); ok {
			mu.Lock()
			*into = append(*into, lag)
			mu.Unlock()
		}
	}
	for _, w := range []struct {
		obj        client.Object
		annotation string
		into       *[]time.Duration
	}{
		{&backupsv1.BackupJob{}, backupsv1.AnnotationScheduledTime, &plans},
		{&batchv1.Job{}, batchv1.CronJobScheduledTimestampAnnotation, &crons},
	} {
		inf, err := c.GetInformer(ctx, w.obj)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(o any) {
			if obj, ok := o.(client.Object); ok {
				record(obj, w.annotation, w.into)
			}
		}}); err != nil {
			b.Fatal(err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = c.Start(cctx) }()
	if !c.WaitForCacheSync(ctx) {
		b.Fatal("informers did not sync")
	}
	deadline := time.Now().Add(time.Until(tick) + 4*time.Minute)
	for time.Now().Before(deadline) {
		mu.Lock()
		done := (!wantPlans || len(plans) >= n) && (!wantCrons || len(crons) >= n)
		mu.Unlock()
		if done {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	return append([]time.Duration(nil), plans...), append([]time.Duration(nil), crons...)
}

// nextTick is the first minute boundary at least 15 s away.
func nextTick() time.Time {
	return time.Now().Add(15 * time.Second).Truncate(time.Minute).Add(time.Minute)
}

// swapSuspension suspends every Plan and resumes every CronJob.
func swapSuspension(ctx context.Context, b *testing.B, cl client.Client, ns string, n int) {
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i := range n {
		for _, o := range []struct {
			obj   client.Object
			patch string
		}{
			{&backupsv1.Plan{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%05d", i), Namespace: ns}}, `{"spec":{"suspend":true}}`},
			{&batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c-%05d", i), Namespace: ns}}, `{"spec":{"suspend":false}}`},
		} {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				if err := cl.Patch(ctx, o.obj, client.RawPatch(types.MergePatchType, []byte(o.patch))); err != nil {
					b.Error(err)
				}
			}()
		}
	}
	wg.Wait()
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

// benchSizes are the Plan counts to measure; COFFER_BENCH_N=1000 measures one.
func benchSizes() []int {
	if v := os.Getenv("COFFER_BENCH_N"); v != "" {
		var n int
		if _, err := fmt.Sscan(v, &n); err == nil && n > 0 {
			return []int{n}
		}
	}
	return []int{1000, 5000}
}
