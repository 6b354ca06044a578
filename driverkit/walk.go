package driverkit

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// EachCached calls fn with every object of obj's kind that the cache c holds, as it holds it: the
// cache's own object, which fn must neither change nor keep (DeepCopy what it keeps). fn returning
// false ends the walk. A cache of the whole cluster is walked in its informer's store, copying
// nothing: a pass over 100,000 cached Backups allocates the store's slice of pointers (1.6 MB),
// where a List, even with UnsafeDisableDeepCopy, copies every object's struct into its Items (44
// MB, measured in driver-job's every-minute pass over its Backups at that size). A cache of a few
// namespaces, whose informer has no single store, is listed into list (an empty list of obj's
// kind) instead. The informer of obj's kind is started if it was not, and synced before the walk.
func EachCached(ctx context.Context, c cache.Cache, obj client.Object, list client.ObjectList, fn func(client.Object) bool) error {
	inf, err := c.GetInformer(ctx, obj, cache.BlockUntilSynced(true))
	if err != nil {
		return err
	}
	if s, ok := inf.(interface{ GetStore() toolscache.Store }); ok {
		for _, o := range s.GetStore().List() {
			if co, ok := o.(client.Object); ok && !fn(co) {
				return nil
			}
		}
		return nil
	}
	if err := c.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	err = meta.EachListItem(list, func(o runtime.Object) error {
		if co, ok := o.(client.Object); ok && !fn(co) {
			return errStopWalk
		}
		return nil
	})
	if errors.Is(err, errStopWalk) {
		return nil
	}
	return err
}

var errStopWalk = errors.New("the walk ends")
