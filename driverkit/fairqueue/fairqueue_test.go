package fairqueue_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/coffer-backup/coffer/driverkit/fairqueue"
)

func req(ns, name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
}

// drain gets every request waiting, marking each done, in the order the queue hands them out.
func drain(q workqueue.TypedRateLimitingInterface[reconcile.Request]) []string {
	var got []string
	for q.Len() > 0 {
		r, shutdown := q.Get()
		if shutdown {
			break
		}
		got = append(got, r.String())
		q.Done(r)
	}
	return got
}

// A tenant's flood is served one request per turn of the namespaces with work waiting: a request of
// another namespace added after the flood is handed out second, not after it.
func TestAFloodOfOneNamespaceIsServedInTurn(t *testing.T) {
	q := fairqueue.NewQueue(t.Name(), workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Millisecond, time.Second))
	defer q.ShutDown()
	for i := range 1000 {
		q.Add(req("flood", fmt.Sprintf("rj-%04d", i)))
	}
	q.Add(req("quiet", "rj"))
	q.Add(req("other", "a"))
	q.Add(req("other", "b"))
	require.Equal(t, 1003, q.Len())
	got := drain(q)
	require.Len(t, got, 1003)
	require.Equal(t, []string{"flood/rj-0000", "quiet/rj", "other/a", "flood/rj-0001", "other/b", "flood/rj-0002", "flood/rj-0003"}, got[:7])
	// Each namespace's requests keep the order they came in.
	for i, r := range got[7:] {
		require.Equal(t, fmt.Sprintf("flood/rj-%04d", i+4), r)
	}
}

// The queue keeps client-go's work queue guarantees: a request waiting is queued once however
// often it is added; one added while a worker holds it comes back once that worker is done, in
// its namespace's turn; a delayed request comes back after its delay.
func TestTheQueueKeepsWorkQueueGuarantees(t *testing.T) {
	q := fairqueue.NewQueue(t.Name(), workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Millisecond, time.Second))
	defer q.ShutDown()
	q.Add(req("a", "1"))
	q.Add(req("a", "1"))
	q.Add(req("b", "1"))
	require.Equal(t, 2, q.Len())

	held, _ := q.Get()
	require.Equal(t, req("a", "1"), held)
	q.Add(held) // added again while held: not handed out until done
	require.Equal(t, 1, q.Len())
	next, _ := q.Get()
	require.Equal(t, req("b", "1"), next)
	q.Done(next)
	require.Equal(t, 0, q.Len())
	q.Done(held)
	require.Equal(t, []string{"a/1"}, drain(q))

	q.AddAfter(req("c", "1"), 20*time.Millisecond)
	require.Equal(t, 0, q.Len())
	r, _ := q.Get() // blocks until the delay passed
	require.Equal(t, req("c", "1"), r)
	q.Done(r)
}

// A namespace leaves the turn when its last request is handed out and joins at the end when it
// has work again; the FIFO of a namespace that was served for long is compacted, not lost.
func TestANamespaceRejoinsTheTurnAtItsEnd(t *testing.T) {
	s := fairqueue.ByKey(func(s string) string { return s[:1] })
	for i := range 200 {
		s.Push(fmt.Sprintf("a%03d", i))
	}
	s.Push("b0")
	require.Equal(t, "a000", s.Pop())
	require.Equal(t, "b0", s.Pop())
	s.Push("c0")
	s.Push("b1")
	var got []string
	for s.Len() > 0 {
		got = append(got, s.Pop())
	}
	require.Len(t, got, 201)
	require.Equal(t, []string{"a001", "c0", "b1", "a002", "a003"}, got[:5])
	for i, v := range got[3:] {
		require.Equal(t, fmt.Sprintf("a%03d", i+2), v)
	}
}

// BenchmarkQueue adds requests of 1,000 namespaces to a queue and works them off, as a controller's
// workers do: the fair queue side by side with client-go's first-come queue (what controller-runtime
// builds without its priority queue) and controller-runtime's default priority queue.
func BenchmarkQueue(b *testing.B) {
	limiter := func() workqueue.TypedRateLimiter[reconcile.Request] {
		return workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Millisecond, time.Second)
	}
	var reqs []reconcile.Request
	for i := range 10_000 {
		reqs = append(reqs, req(fmt.Sprintf("tenant-%03d", i%1000), fmt.Sprintf("rj-%d", i)))
	}
	for _, q := range []struct {
		name string
		new  func(name string) workqueue.TypedRateLimitingInterface[reconcile.Request]
	}{
		{"fair", func(name string) workqueue.TypedRateLimitingInterface[reconcile.Request] {
			return fairqueue.NewQueue(name, limiter())
		}},
		{"first-come", func(name string) workqueue.TypedRateLimitingInterface[reconcile.Request] {
			return workqueue.NewTypedRateLimitingQueueWithConfig(limiter(), workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{Name: name})
		}},
		{"priority", func(name string) workqueue.TypedRateLimitingInterface[reconcile.Request] {
			return priorityqueue.New[reconcile.Request](name, func(o *priorityqueue.Opts[reconcile.Request]) { o.RateLimiter = limiter() })
		}},
	} {
		b.Run(q.name, func(b *testing.B) {
			queue := q.new(b.Name())
			defer queue.ShutDown()
			b.ReportAllocs()
			for b.Loop() {
				for _, r := range reqs {
					queue.Add(r)
				}
				for range reqs {
					r, _ := queue.Get()
					queue.Done(r)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(reqs)), "ns/request")
		})
	}
}
