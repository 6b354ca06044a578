package cluster

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Parallel calls do(i) for every i in [0, n), workers calls at a time, and returns the first
// error; once a call fails, its worker makes no more calls (the others finish theirs).
func Parallel(n, workers int, do func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := do(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// CachedBytes measures what an informer holds per object: it starts a cache of cfg with opts,
// waits (at most five minutes) until list, read through it with opts..., holds want objects, and
// returns the live heap the cache added (heap after collections, before and with it) over want.
// The cache is stopped before it returns, so that measurements made one after the other do not
// count each other.
func CachedBytes(ctx context.Context, cfg *rest.Config, opts cache.Options, list client.ObjectList, want int, listOpts ...client.ListOption) (float64, error) {
	ctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	defer func() { cancel(); <-stopped }()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	c, err := cache.New(cfg, opts)
	if err != nil {
		close(stopped)
		return 0, err
	}
	go func() { _ = c.Start(ctx); close(stopped) }()
	listOpts = append(listOpts, client.UnsafeDisableDeepCopy)
	deadline := time.Now().Add(5 * time.Minute)
	for {
		err := c.List(ctx, list, listOpts...)
		if err == nil && meta.LenList(list) == want {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the cache holds %d objects, not %d, after five minutes (%v)", meta.LenList(list), want, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = meta.SetList(list, nil)
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(c)
	return float64(after.HeapAlloc-min(after.HeapAlloc, before.HeapAlloc)) / float64(want), nil
}
