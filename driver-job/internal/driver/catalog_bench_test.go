package driver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-job/internal/agent"
	"github.com/coffer-backup/coffer/driver-job/internal/driver"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

// BenchmarkCatalogSync: a recovery cluster's first catalog sync of a bucket holding N Backups of
// another cluster (list, read every record, create and complete N Backups on the real API server),
// and the next sync, which finds nothing new. N is 1,000, or COFFER_BENCH_CATALOG_RECORDS (the
// scale goal is 100,000 within 10 minutes). The catalog's client has the driver's default budget
// (100 QPS, burst 200), or COFFER_BENCH_QPS / COFFER_BENCH_BURST, and reads Backups through the
// driver's own cache (driver.CacheOptions). It reports the seconds of each sync, the first's
// records per second, the live heap at its peak during each sync and after the second (the
// driver's cache of the N Backups and the catalog's memory of the records, by ETag, so that the
// next sync reads only what changed), and the catalog's memory alone.
func BenchmarkCatalogSync(b *testing.B) {
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("COFFER_BENCH_CATALOG_RECORDS")); err == nil && v > 0 {
		n = v
	}
	qps, burst := 100.0, 200
	if v, err := strconv.ParseFloat(os.Getenv("COFFER_BENCH_QPS"), 64); err == nil && v > 0 {
		qps = v
	}
	if v, err := strconv.Atoi(os.Getenv("COFFER_BENCH_BURST")); err == nil && v > 0 {
		burst = v
	}
	b.Run(fmt.Sprintf("records=%d/qps=%g", n, qps), func(b *testing.B) { catalogSync(b, n, qps, burst) })
}

func catalogSync(b *testing.B, n int, qps float64, burst int) {
	cfg := rest.CopyConfig(restConfig)
	cfg.QPS, cfg.Burst = float32(qps), burst
	budgeted, err := client.New(cfg, client.Options{Scheme: sch})
	require.NoError(b, err)
	b.StopTimer()
	ctx := context.Background()
	var first, again time.Duration
	var peak, nextPeak, retained, catalogHeap uint64
	for i := range b.N {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "catalog-bench-"}}
		require.NoError(b, cl.Create(ctx, ns))
		stack := s3(b)
		bucket := fmt.Sprintf("catalog-bench-%d-%d", time.Now().UnixNano()%1e9, i)
		require.NoError(b, stack.S3.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: "us-east-1"}))
		keys := make(chan int)
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range keys {
					name := fmt.Sprintf("nightly-%06d", k)
					key := fmt.Sprintf("%s/web/%s.tar", ns.Name, name)
					r := foreignRecord(ns.Name, name, bucket, key)
					data, _ := json.Marshal(r)
					for _, o := range []struct {
						key  string
						data []byte
					}{{key, []byte("12345")}, {agent.RecordKey(key), data}} {
						if _, err := stack.S3.PutObject(ctx, bucket, o.key, bytes.NewReader(o.data), int64(len(o.data)), minio.PutObjectOptions{}); err != nil {
							panic(err)
						}
					}
				}
			}()
		}
		for k := range n {
			keys <- k
		}
		close(keys)
		wg.Wait()
		driverNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "coffer-system-"}}
		require.NoError(b, cl.Create(ctx, driverNS))
		require.NoError(b, cl.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: driverNS.Name},
			Data: map[string][]byte{agent.EnvAccessKeyID: []byte(velerostack.AccessKey), agent.EnvSecretAccessKey: []byte(velerostack.SecretKey)}}))
		strat := &jobapi.JobBackupStrategy{ObjectMeta: metav1.ObjectMeta{Name: ns.Name},
			Spec: jobapi.JobBackupStrategySpec{Template: agentTemplate(), Catalog: &jobapi.CatalogSource{Endpoint: "http://" + stack.S3Endpoint,
				Bucket: bucket, CredentialsSecretName: "creds", IntervalSeconds: ptr.To[int32](60)}}}
		require.NoError(b, cl.Create(ctx, strat))

		// The driver's cache, of the Backups of its kind (trimmed). The strategy is read uncached:
		// the second sync must not find the strategy as it was before the first sync's report.
		cacheCtx, stopCache := context.WithCancel(ctx)
		opts := driver.CacheOptions()
		opts.Scheme = sch
		informers, err := cache.New(cfg, opts)
		require.NoError(b, err)
		go func() { _ = informers.Start(cacheCtx) }()
		require.True(b, informers.WaitForCacheSync(cacheCtx))
		cached, err := client.New(cfg, client.Options{Scheme: sch, Cache: &client.CacheOptions{Reader: informers, DisableFor: []client.Object{&jobapi.JobBackupStrategy{}}}})
		require.NoError(b, err)
		require.NoError(b, cached.List(ctx, &backupsv1.BackupList{}, client.InNamespace(ns.Name))) // the Backups' informer, started
		kit := driver.New(&driver.Driver{Client: cached, Live: budgeted, Scheme: sch}, nil)
		cat := &driver.Catalog{Client: cached, Cache: informers, Live: budgeted, Recorder: events.NewFakeRecorder(100), Clock: clock.RealClock{}, Namespace: driverNS.Name, Kit: kit}
		req := reconcile.Request{NamespacedName: client.ObjectKey{Name: strat.Name}}

		runtime.GC()
		before := liveHeap()
		b.StartTimer()
		start := time.Now()
		top := highestHeap(func() { _, err = cat.Reconcile(ctx, req) })
		first += time.Since(start)
		b.StopTimer()
		peak = max(peak, top-min(before, top))
		require.NoError(b, err)
		// The cache holds every Backup made before the next sync (in the driver, long before).
		require.Eventually(b, func() bool {
			list := &backupsv1.BackupList{}
			return cached.List(ctx, list, client.InNamespace(ns.Name), client.UnsafeDisableDeepCopy) == nil && len(list.Items) == n
		}, 5*time.Minute, 100*time.Millisecond)
		b.StartTimer()
		start = time.Now()
		top = highestHeap(func() { _, err = cat.Reconcile(ctx, req) })
		again += time.Since(start)
		b.StopTimer()
		nextPeak = max(nextPeak, top-min(before, top))
		require.NoError(b, err)
		runtime.GC()
		withCatalog := liveHeap()
		retained = max(retained, withCatalog-min(before, withCatalog))
		runtime.KeepAlive(cat) // then the catalog's memory of the records goes; the cache stays
		runtime.GC()
		catalogHeap = max(catalogHeap, withCatalog-min(liveHeap(), withCatalog))
		runtime.KeepAlive(informers)
		stopCache()
		list := &backupsv1.BackupList{}
		require.NoError(b, cl.List(ctx, list, client.InNamespace(ns.Name)))
		require.Len(b, list.Items, n)
	}
	b.ReportMetric(first.Seconds()/float64(b.N), "first-sync-s")
	b.ReportMetric(again.Seconds()/float64(b.N), "next-sync-s")
	b.ReportMetric(float64(n*b.N)/first.Seconds(), "records/s")
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(nextPeak)/(1<<20), "next-peak-heap-MiB")
	b.ReportMetric(float64(retained)/(1<<20), "retained-heap-MiB")
	b.ReportMetric(float64(catalogHeap)/(1<<20), "catalog-heap-MiB")
}

// highestHeap runs f and returns the live heap at its highest meanwhile (sampled after each GC,
// every 20 ms). COFFER_BENCH_HEAP_PROFILE names a file to which it writes the heap profile at
// each new highest (the profile of the peak, once f returns).
func highestHeap(f func()) uint64 {
	done := make(chan struct{})
	sampled := make(chan uint64)
	go func() {
		top := uint64(0)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if h := liveHeap(); h > top {
				top = h
				if name := os.Getenv("COFFER_BENCH_HEAP_PROFILE"); name != "" {
					if w, err := os.Create(name); err == nil {
						_ = pprof.Lookup("heap").WriteTo(w, 0)
						_ = w.Close()
					}
				}
			}
			select {
			case <-t.C:
			case <-done:
				sampled <- top
				return
			}
		}
	}()
	f()
	close(done)
	return <-sampled
}

// liveHeap is the heap the last GC found live.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
