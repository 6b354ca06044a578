package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
)

// BenchmarkCreateCeiling measures how fast the local API server accepts N BackupJob creates from
// an unthrottled client with 32 concurrent requests and nothing else running: the time the last
// create returns is a lower bound of the fire lag of ANY controller that must create N objects at
// one tick on this machine (before watch delivery is even counted).
func BenchmarkCreateCeiling(b *testing.B) { forSizes(b, createCeiling) }

func createCeiling(b *testing.B, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := manifests.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	c, err := cluster.Start(ctx, cluster.Options{CRDDirectoryPaths: []string{filepath.Join(root, "deploy", "core-controller", "crd")}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = c.Stop() }()
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = -1, 0
	cl, err := client.New(cfg, client.Options{Scheme: cluster.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	ns, err := c.Namespace(ctx, "ceiling")
	if err != nil {
		b.Fatal(err)
	}
	// Warm the connection pool and the API server's caches.
	job := func(i int) *backupsv1.BackupJob {
		return &backupsv1.BackupJob{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("j-%05d", i), Namespace: ns},
			Spec: backupsv1.BackupJobSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "VirtualMachine", Name: "vm"}, BackupClassName: "default"}}
	}
	for i := range 32 {
		if err := cl.Create(ctx, job(n+i)); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	done := make([]time.Duration, n)
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := cl.Create(ctx, job(i)); err != nil {
				b.Error(err)
			}
			done[i] = time.Since(start)
		}()
	}
	wg.Wait()
	total := time.Since(start)
	b.StopTimer()
	slices.Sort(done)
	b.ReportMetric(float64(n)/total.Seconds(), "creates/s")
	b.ReportMetric(quantile(done, 0.99).Seconds(), "p99-s")
	fmt.Fprintf(os.Stdout, "| %d | %.0f creates/s | last create returned after %s (p50 %s, p99 %s) |\n",
		n, float64(n)/total.Seconds(), total.Round(10*time.Millisecond), quantile(done, 0.5).Round(10*time.Millisecond), quantile(done, 0.99).Round(10*time.Millisecond))
}
