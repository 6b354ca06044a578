// Package fairqueue is the work queue of Coffer's controllers. It hands a controller's requests
// out by namespace in turn: a tenant that floods a kind (10,000 RestoreJobs in its namespace) has
// one of them worked off per turn of the namespaces with work waiting, so another tenant's run
// waits for at most one request of each namespace, not for the flood.
//
// It is client-go's work queue (a request is queued once however often it is added, one worker
// holds it at a time, retries come back after the controller's rate limiter), with the order of
// its waiting requests changed: client-go's FIFO becomes a FIFO per namespace, served in turn.
package fairqueue

import (
	"container/list"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// NewQueue is a controller's queue (controller.Options.NewQueue): requests served by namespace in
// turn, each namespace's in the order they came; delays and retries as client-go's rate-limited
// queue. Its metrics are client-go's work queue metrics under the controller's name.
func NewQueue(name string, rateLimiter workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[reconcile.Request]{
		Name:  name,
		Queue: ByKey(func(r reconcile.Request) string { return r.Namespace }),
	})
	return workqueue.NewTypedRateLimitingQueueWithConfig(rateLimiter, workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{
		Name:          name,
		DelayingQueue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[reconcile.Request]{Name: name, Queue: q}),
	})
}

// ByKey is the storage of a work queue's waiting items (workqueue.Queue) that pops them by key in
// turn: the oldest item of the key whose turn it is, then the next key's. A key joins the turn at
// its end when its first item comes, and leaves it when its last item is popped. Push and Pop take
// constant time; it holds one FIFO per key with items waiting. Like every workqueue.Queue, it is
// called by one goroutine at a time (under the work queue's lock).
func ByKey[T comparable](key func(T) string) workqueue.Queue[T] {
	return &byKey[T]{key: key, fifos: map[string]*list.Element{}, turn: list.New()}
}

type byKey[T comparable] struct {
	key   func(T) string
	fifos map[string]*list.Element // key → its element in turn, whose Value is its *fifo[T]
	turn  *list.List               // the keys with items waiting, the next to pop first
	n     int
}

// fifo is one key's items in the order they came.
type fifo[T any] struct {
	key   string
	items []T
	head  int
}

func (q *byKey[T]) Touch(T) {}

func (q *byKey[T]) Push(item T) {
	k := q.key(item)
	e, ok := q.fifos[k]
	if !ok {
		e = q.turn.PushBack(&fifo[T]{key: k})
		q.fifos[k] = e
	}
	f := e.Value.(*fifo[T])
	f.items = append(f.items, item)
	q.n++
}

func (q *byKey[T]) Len() int { return q.n }

// Pop returns the oldest item of the key whose turn it is; the work queue calls it only when Len
// is not 0.
func (q *byKey[T]) Pop() T {
	e := q.turn.Front()
	f := e.Value.(*fifo[T])
	item := f.items[f.head]
	var zero T
	f.items[f.head] = zero
	f.head++
	q.n--
	switch {
	case f.head == len(f.items):
		q.turn.Remove(e)
		delete(q.fifos, f.key)
	default:
		if f.head > 64 && f.head*2 > len(f.items) {
			f.items = append(f.items[:0:0], f.items[f.head:]...)
			f.head = 0
		}
		q.turn.MoveToBack(e)
	}
	return item
}
