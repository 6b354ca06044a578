package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/components"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

// The RestoreJobs of BenchmarkControllerRSS: as large as admission lets a tenant make them. Options
// at their bounds, and annotations filling what the API server leaves of metadata (256 KiB in
// all). COFFER_BENCH_RJ_OPTIONS, COFFER_BENCH_RJ_OPTION_BYTES and COFFER_BENCH_RJ_ANNOTATION_BYTES
// override them (e.g. 32 options of 44,000 bytes and no annotations: the 1.4 MB RestoreJobs the
// CRD admitted before options were bounded).
var (
	rjCount           = envInt("COFFER_BENCH_RJ_N", 150)
	rjOptions         = envInt("COFFER_BENCH_RJ_OPTIONS", backupsv1.MaxOptions)
	rjOptionBytes     = envInt("COFFER_BENCH_RJ_OPTION_BYTES", backupsv1.MaxOptionValueLength)
	rjAnnotationBytes = envInt("COFFER_BENCH_RJ_ANNOTATION_BYTES", 255<<10)
)

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v >= 0 {
		return v
	}
	return def
}

// BenchmarkControllerRSS measures the memory of the controllers that cache every RestoreJob of the
// cluster (core-controller, driver-velero, driver-job), each its own binary run as a separate
// process under its shipped RBAC against a real API server, when 150 RestoreJobs as large as
// admission allows exist: the RestoreJobs are created first, then the controllers start, so their
// initial list (as after a restart) holds all of them. Once every controller has queued every
// RestoreJob (its workqueue metrics), it reports each one's peak RSS (VmHWM) in MiB. Run it with
// -benchtime=1x.
func BenchmarkControllerRSS(b *testing.B) {
	for range b.N {
		controllerRSS(b)
	}
}

func controllerRSS(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	root, c, cl, veleroErr := nodelessCluster(ctx, b)
	ns, err := c.Namespace(ctx, "tenant")
	if err != nil {
		b.Fatal(err)
	}
	size := createRestoreJobs(ctx, b, cl, ns)

	bin := filepath.Join(c.Dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		b.Fatal(err)
	}
	specs := []components.Spec{
		// The RestoreJobs name no Backup: a claim timeout longer than the benchmark keeps core from
		// failing them meanwhile.
		{Module: "core-controller", Binary: "core-controller", Namespace: "coffer-system", Args: []string{"--driver-claim-timeout=1h"}},
		{Module: "driver-job", Binary: "driver-job", Namespace: "coffer-system"},
	}
	if veleroErr == nil {
		specs = append(specs, components.Spec{Module: "driver-velero", Binary: "driver-velero", Namespace: "coffer-system"})
	} else {
		b.Logf("driver-velero not measured, without Velero's CRDs: %v", veleroErr)
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
	for _, comp := range comps {
		// Each controller has listed every RestoreJob once it has queued them all.
		err := wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(context.Context) (bool, error) {
			if comp.Exited() {
				return false, fmt.Errorf("%s exited:\n%s", comp.Binary, comp.Tail())
			}
			m, err := comp.Metrics()
			return err == nil && restoreJobAdds(m) >= rjCount, nil
		})
		if err != nil {
			b.Fatalf("waiting for %s to queue %d RestoreJobs: %v", comp.Binary, rjCount, err)
		}
	}
	time.Sleep(5 * time.Second) // let the reconciles that the queues hold run
	b.StopTimer()
	row := fmt.Sprintf("| %d | %d B |", rjCount, size)
	for _, comp := range comps {
		rss, err := comp.PeakRSSBytes()
		if err != nil {
			b.Fatal(err)
		}
		mib := float64(rss) / (1 << 20)
		b.ReportMetric(mib, comp.Binary+"-peak-RSS-MiB")
		row += fmt.Sprintf(" %.0f MiB |", mib)
	}
	fmt.Fprintln(os.Stdout, row)
}

// nodelessCluster starts a local API server with deploy/ installed (CRDs, RBAC, admission
// policies) and Velero's CRDs when they can be had (make bench sets COFFER_VELERO_ASSETS;
// veleroErr says why not, and driver-velero, which watches Velero's kinds, is then left out),
// and returns the repository root, the cluster (stopped at the end of the benchmark) and an
// unthrottled admin client.
func nodelessCluster(ctx context.Context, b *testing.B) (root string, c *cluster.Cluster, cl client.Client, veleroErr error) {
	root, err := manifests.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	assets, veleroErr := velerostack.Assets()
	c, err = cluster.Start(ctx, cluster.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Stop() })
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = -1, 0
	cl, err = client.New(cfg, client.Options{Scheme: cluster.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	if veleroErr == nil {
		veleroErr = velerostack.InstallCRDs(ctx, cl, filepath.Join(assets, "velero"))
	}
	if err := manifests.InstallNodeless(ctx, cl, root); err != nil {
		b.Fatal(err)
	}
	return root, c, cl, veleroErr
}

// createRestoreJobs creates rjCount RestoreJobs of the configured size in ns and returns the size
// of one as the API server stores it (JSON).
func createRestoreJobs(ctx context.Context, b *testing.B, cl client.Client, ns string) int {
	options := map[string]string{}
	for i := range rjOptions {
		options[fmt.Sprintf("k%0*d", backupsv1.MaxOptionKeyLength-1, i)] = strings.Repeat("v", rjOptionBytes)
	}
	annotations := map[string]string{}
	if rjAnnotationBytes > 0 {
		const key = "tenant.example/notes"
		annotations[key] = strings.Repeat("a", rjAnnotationBytes-len(key))
	}
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	size := 0
	for i := range rjCount {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("r-%04d", i), Namespace: ns, Annotations: annotations},
				Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: "nightly"}, Options: backupsv1.StringOptions(options)}}
			err := cl.Create(ctx, rj)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			if data, jerr := json.Marshal(rj); err == nil && jerr == nil && size == 0 {
				size = len(data)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	return size
}

// restoreJobAdds sums, in a component's metrics, the RestoreJobs its RestoreJob controller queued
// (workqueue_adds_total of the controller named "...-restorejob").
func restoreJobAdds(metrics string) int {
	n := 0
	sc := bufio.NewScanner(strings.NewReader(metrics))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "workqueue_adds_total{") || !strings.Contains(line, `name="`) {
			continue
		}
		_, name, _ := strings.Cut(line, `name="`)
		name, _, _ = strings.Cut(name, `"`)
		if !strings.HasSuffix(name, "-restorejob") {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			n += int(v)
		}
	}
	return n
}
