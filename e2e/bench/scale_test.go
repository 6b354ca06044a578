package bench

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/apis/election"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/components"
)

// The sizes of BenchmarkScale: COFFER_BENCH_SCALE_NAMESPACES, COFFER_BENCH_SCALE_PLANS and
// COFFER_BENCH_SCALE_BACKUPS override them (the Plans and the Backups are spread evenly over the
// namespaces, the Backups over the Plans). COFFER_BENCH_SCALE_STEADY is the steady-state window, in seconds.
var (
	scaleNamespaces = envInt("COFFER_BENCH_SCALE_NAMESPACES", 1000)
	scalePlans      = envInt("COFFER_BENCH_SCALE_PLANS", 10000)
	scaleBackups    = envInt("COFFER_BENCH_SCALE_BACKUPS", 100000)
	scaleSteady     = time.Duration(envInt("COFFER_BENCH_SCALE_STEADY", 300)) * time.Second
)

// BenchmarkScale measures every component at scale on a real API server: 10,000 Plans and
// 100,000 Backups over 1,000 namespaces exist before the components start (as after a restart or
// an upgrade), so each one's first list holds all of them. The Backups are as drivers leave them
// (labels, driver metadata, an artifact, a checksum verdict, three conditions with messages) and
// name a strategy of a third-party kind, which no component of the bench runs: the bench
// measures what every component pays for the objects it caches and watches, not a driver's work
// on Backups of its own. No Plan ticks during the bench (each is due once a year, months away).
//
// Each component is started as deploy/ runs it (its own binary, its ServiceAccount, its shipped
// RBAC, its Deployment's environment, the shipped leader-election timing). Once every component
// has drained its work queues, the bench measures a steady state of COFFER_BENCH_SCALE_STEADY
// seconds (300: a minute holds a few watch renewals and metric scrapes, or none, and the rate
// varies from one minute to the next by more than the goal's margin) and reports per component: peak RSS (VmHWM) since start, CPU seconds per minute and API
// requests per minute over the steady state (its own client metrics), and the work queues' depth
// at the end. Run it with -benchtime=1x.
func BenchmarkScale(b *testing.B) {
	for range b.N {
		scale(b)
	}
}

func scale(b *testing.B) {
	limit := 45 * time.Minute
	if scaleVerified { // three more requests per Backup
		limit = 100 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	root, c, cl, veleroErr := nodelessCluster(ctx, b)
	if scaleKind == "velero" && veleroErr != nil {
		b.Fatalf("COFFER_BENCH_SCALE_KIND=velero needs Velero's CRDs: %v", veleroErr)
	}
	start := time.Now()
	if err := createScale(ctx, cl); err != nil {
		b.Fatal(err)
	}
	if err := createScaleKind(ctx, cl); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d namespaces, %d Plans and %d Backups of %s created in %s", scaleNamespaces, scalePlans, scaleBackups, scaleStrategy().Kind,
		time.Since(start).Round(time.Second))

	bin := filepath.Join(c.Dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		b.Fatal(err)
	}
	specs := []components.Spec{
		{Module: "core-controller", Binary: "core-controller", Namespace: "coffer-system"},
		{Module: "driver-job", Binary: "driver-job", Namespace: "coffer-system"},
		{Module: "verifier", Binary: "verifier", Namespace: "ugallu-system",
			Args: []string{"--cluster-id=scale", "--cluster-name=coffer-scale", "--etcd-snapshot-dir=" + b.TempDir()}},
	}
	if veleroErr == nil {
		specs = append(specs, components.Spec{Module: "driver-velero", Binary: "driver-velero", Namespace: "coffer-system"})
	} else {
		b.Logf("driver-velero not measured, without Velero's CRDs: %v", veleroErr)
	}
	// Built before the clock starts: a build is no component's cost. Each runs with the
	// environment its Deployment sets (GOMEMLIMIT).
	for i, s := range specs {
		env, err := deploymentEnv(root, s.Module)
		if err != nil {
			b.Fatal(err)
		}
		specs[i].Env = env
		// The shipped leader-election timing, not the harness's faster one.
		specs[i].Args = append(specs[i].Args, election.Defaults().Flags()...)
		if _, err := components.Build(root, s.Module, s.Binary, bin); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	var comps []*components.Component
	for _, s := range specs {
		comp, err := components.Launch(root, bin, c.Kubeconfig, s)
		if err != nil {
			b.Fatal(err)
		}
		defer components.StopAndCheck(b, comp)
		comps = append(comps, comp)
	}
	synced := time.Now()
	// A component that cannot take the load (its caches do not sync in time, it exits) is a
	// result, reported in its row with the last peak seen; the others are still measured.
	peaks := make([]int64, len(comps))
	failed := map[int]string{}
	for i, comp := range comps {
		if err := waitDrained(ctx, comp, &peaks[i]); err != nil {
			msg, _, _ := strings.Cut(err.Error(), "\n")
			failed[i] = msg
			b.Logf("%s: %v", comp.Binary, err)
			continue
		}
		b.Logf("%s drained its queues %s after start", comp.Binary, time.Since(synced).Round(time.Second))
	}
	b.Logf("every component drained its queues or failed %s after start", time.Since(synced).Round(time.Second))

	before := make([]usage, len(comps))
	for i, comp := range comps {
		if failed[i] != "" {
			continue
		}
		u, err := usageOf(comp)
		if err != nil {
			b.Fatal(err)
		}
		before[i] = u
		// A component that reads or writes each object at start shows here (not a flat count).
		b.Logf("%s made %.0f API requests from its start until it drained", comp.Binary, u.requests)
	}
	time.Sleep(scaleSteady)
	b.StopTimer()
	fmt.Fprintf(os.Stdout, "| component | peak RSS | RSS at end | CPU s/min | API requests/min | queue depth |\n|---|---|---|---|---|---|\n")
	for i, comp := range comps {
		if failed[i] != "" {
			fmt.Fprintf(os.Stdout, "| %s | %.0f MiB (last seen) | failed: %s | | | |\n", comp.Binary, float64(peaks[i])/(1<<20), failed[i])
			continue
		}
		after, err := usageOf(comp)
		if err != nil {
			b.Fatal(err)
		}
		peak, err := comp.PeakRSSBytes()
		if err != nil {
			b.Fatal(err)
		}
		rss, err := comp.RSSBytes()
		if err != nil {
			b.Fatal(err)
		}
		perMin := time.Minute.Seconds() / scaleSteady.Seconds()
		cpuMin := (after.cpu - before[i].cpu) * perMin
		reqMin := (after.requests - before[i].requests) * perMin
		depth := after.depth
		b.ReportMetric(float64(peak)/(1<<20), comp.Binary+"-peak-RSS-MiB")
		b.ReportMetric(cpuMin, comp.Binary+"-CPU-s/min")
		b.ReportMetric(reqMin, comp.Binary+"-requests/min")
		fmt.Fprintf(os.Stdout, "| %s | %.0f MiB | %.0f MiB | %.2f | %.0f | %.0f |\n", comp.Binary,
			float64(peak)/(1<<20), float64(rss)/(1<<20), cpuMin, reqMin, depth)
	}
	if scaleVerified {
		if err := checkScalePolicy(ctx, cl); err != nil {
			b.Error(err)
		}
	}
}

// usage is what a component has used so far: CPU seconds and API requests (its client's
// rest_client_requests_total), and its work queues' depth now.
type usage struct{ cpu, requests, depth float64 }

func usageOf(comp *components.Component) (usage, error) {
	m, err := comp.Metrics()
	if err != nil {
		return usage{}, err
	}
	cpu, err := comp.CPUSeconds()
	if err != nil {
		return usage{}, err
	}
	return usage{cpu: cpu, requests: metricSum(m, "rest_client_requests_total"), depth: metricSum(m, "workqueue_depth")}, nil
}

// createScale creates the namespaces, a BackupClass, the Plans and the Backups (with status), 32
// requests at a time.
func createScale(ctx context.Context, cl client.Client) error {
	class := &backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: backupsv1.BackupClassSpec{
		Strategies: []backupsv1.BackupClassStrategy{{Application: backupsv1.ApplicationSelector{Kind: "VirtualMachine"},
			StrategyRef: scaleStrategy(), Parameters: map[string]string{"bucket": scaleBucket}}},
	}}
	if err := cl.Create(ctx, class); err != nil {
		return err
	}
	run := func(n int, do func(i int) error) error { return cluster.Parallel(n, 32, do) }
	nsName := func(i int) string { return fmt.Sprintf("tenant-%04d", i%scaleNamespaces) }
	if err := run(scaleNamespaces, func(i int) error {
		return cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName(i)}})
	}); err != nil {
		return err
	}
	// Due once a year, half a year from now: no Plan ticks during the bench.
	due := time.Now().AddDate(0, 6, 0)
	cron := fmt.Sprintf("%d %d %d %d *", due.Minute(), due.Hour(), min(due.Day(), 28), int(due.Month()))
	if err := run(scalePlans, func(i int) error {
		return cl.Create(ctx, &backupsv1.Plan{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%05d", i), Namespace: nsName(i)},
			Spec: backupsv1.PlanSpec{
				ApplicationRef:  corev1.TypedLocalObjectReference{APIGroup: ptr("apps.cozystack.io"), Kind: "VirtualMachine", Name: fmt.Sprintf("vm-%05d", i)},
				BackupClassName: "default",
				Schedule:        backupsv1.PlanSchedule{Cron: cron},
			},
		})
	}); err != nil {
		return err
	}
	if scaleVerified {
		if err := createScalePolicy(ctx, cl); err != nil {
			return err
		}
	}
	return run(scaleBackups, func(i int) error {
		b := scaleBackup(i, nsName)
		status := b.Status
		if err := cl.Create(ctx, b); err != nil {
			return err
		}
		b.Status = status
		if scaleVerified {
			if err := verifyScaleBackup(ctx, cl, b); err != nil {
				return err
			}
		}
		return cl.Status().Update(ctx, b)
	})
}

// scaleBackup is Backup i as a driver leaves a good one: Plan i%scalePlans's, taken on one of the
// last days, of the strategy kind COFFER_BENCH_SCALE_KIND names (asDriverLeavesIt).
func scaleBackup(i int, nsName func(int) string) *backupsv1.Backup {
	plan := i % scalePlans
	app := corev1.TypedLocalObjectReference{APIGroup: ptr("apps.cozystack.io"), Kind: "VirtualMachine", Name: fmt.Sprintf("vm-%05d", plan)}
	taken := metav1.NewTime(time.Now().Add(-time.Duration(i/scalePlans+1) * 24 * time.Hour).Truncate(time.Second))
	labels := backupsv1.ApplicationLabels(app)
	labels[backupsv1.LabelBackupJobUID] = fmt.Sprintf("%08x-0000-4000-8000-%012x", rand.Uint32(), i)
	labels[backupsv1.LabelManagedBy] = "toy"
	labels[backupsv1.LabelPlan] = backupsv1.PlanLabelValue(fmt.Sprintf("p-%05d", plan))
	name := fmt.Sprintf("p-%05d-%d", plan, taken.Unix())
	cond := func(t, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: reason, Message: msg, LastTransitionTime: taken}
	}
	return asDriverLeavesIt(i, &backupsv1.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nsName(plan), Labels: labels},
		Spec: backupsv1.BackupSpec{
			ApplicationRef: app, PlanRef: &corev1.LocalObjectReference{Name: fmt.Sprintf("p-%05d", plan)},
			StrategyRef: toyStrategy, TakenAt: taken,
			DriverMetadata: map[string]string{"toy.example.com/run": name, "toy.example.com/location": "default"},
		},
		Status: backupsv1.BackupStatus{
			Phase: backupsv1.BackupReady,
			Artifact: &backupsv1.BackupArtifact{URI: "s3://coffer/" + nsName(plan) + "/" + name + ".tar", SizeBytes: 1 << 30,
				Checksum: "sha256:" + strings.Repeat(strconv.FormatInt(int64(i%16), 16), 64)},
			Conditions: []metav1.Condition{
				cond(backupsv1.ConditionReady, "BackupSucceeded", "The backup completed and its artifact is stored"),
				cond(backupsv1.ConditionArtifactAvailable, "ArtifactFound", "The artifact was found in storage at the last check"),
				cond(backupsv1.ConditionVerified, backupsv1.ReasonRestoreVerified, "A full-restore verification restored the backup into a sandbox and matched every object"),
			},
		},
	})
}

// deploymentEnv is the literal environment (name and value, none read from a reference) of the
// manager container of deploy/<module>/manager/deployment.yaml.
func deploymentEnv(root, module string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(root, "deploy", module, "manager", "deployment.yaml"))
	if err != nil {
		return nil, err
	}
	d := &appsv1.Deployment{}
	if err := yaml.UnmarshalStrict(data, d); err != nil {
		return nil, fmt.Errorf("deploy/%s/manager/deployment.yaml: %w", module, err)
	}
	var env []string
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if c.Name == "manager" && e.ValueFrom == nil && e.Value != "" {
				env = append(env, e.Name+"="+e.Value)
			}
		}
	}
	return env, nil
}

// waitDrained waits until a component has worked off what its start queued: its work queues are
// empty and took nothing new for 10 s, having taken something (a component whose controllers have
// nothing to queue, the verifier without runs or policies, is given a minute to list). It keeps
// the component's peak RSS in *peak as it goes.
func waitDrained(ctx context.Context, comp *components.Component, peak *int64) error {
	started := time.Now()
	quiet, adds, last := 0, -1.0, ""
	err := wait.PollUntilContextTimeout(ctx, 5*time.Second, 20*time.Minute, true, func(context.Context) (bool, error) {
		if comp.Exited() {
			return false, fmt.Errorf("%s exited:\n%s", comp.Binary, comp.Tail())
		}
		if p, err := comp.PeakRSSBytes(); err == nil {
			*peak = p
		}
		m, err := comp.Metrics()
		if err != nil {
			quiet, last = 0, err.Error()
			return false, nil
		}
		a, depth := metricSum(m, "workqueue_adds_total"), metricSum(m, "workqueue_depth")
		last = fmt.Sprintf("%.0f added, depth %.0f", a, depth)
		if depth == 0 && a == adds && (a > 0 || time.Since(started) > time.Minute) {
			quiet++
		} else {
			quiet = 0
		}
		adds = a
		return quiet >= 2, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s to drain its queues (%s): %w", comp.Binary, last, err)
	}
	return nil
}

// metricSum sums every sample of a metric (all its label sets) in a Prometheus text exposition.
func metricSum(metrics, name string) float64 {
	sum := 0.0
	sc := bufio.NewScanner(strings.NewReader(metrics))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}
