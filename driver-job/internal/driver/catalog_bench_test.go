package driver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-job/internal/agent"
	"github.com/coffer-backup/coffer/driver-job/internal/driver"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

// BenchmarkCatalogSync1000: a recovery cluster's first catalog sync of a bucket holding 1,000
// Backups of another cluster (list, read every record, create and complete 1,000 Backups on the
// real API server), and the next sync, which finds nothing new. It reports the seconds of each:
// the time from a strategy with a catalog to a listed catalog of 1,000 Backups.
func BenchmarkCatalogSync1000(b *testing.B) {
	const n = 1000
	b.StopTimer()
	ctx := context.Background()
	var first, again time.Duration
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
					name := fmt.Sprintf("nightly-%04d", k)
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
		kit := driver.New(&driver.Driver{Client: cl, Live: cl, Scheme: sch}, nil)
		cat := &driver.Catalog{Client: cl, Live: cl, Recorder: events.NewFakeRecorder(100), Clock: clock.RealClock{}, Namespace: driverNS.Name, Kit: kit}
		req := reconcile.Request{NamespacedName: client.ObjectKey{Name: strat.Name}}

		b.StartTimer()
		start := time.Now()
		_, err := cat.Reconcile(ctx, req)
		first += time.Since(start)
		require.NoError(b, err)
		start = time.Now()
		_, err = cat.Reconcile(ctx, req)
		again += time.Since(start)
		b.StopTimer()
		require.NoError(b, err)
		list := &backupsv1.BackupList{}
		require.NoError(b, cl.List(ctx, list, client.InNamespace(ns.Name)))
		require.Len(b, list.Items, n)
	}
	b.ReportMetric(first.Seconds()/float64(b.N), "first-sync-s")
	b.ReportMetric(again.Seconds()/float64(b.N), "next-sync-s")
}
