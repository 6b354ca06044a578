package driverkit

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// EachCached calls fn with every object of obj's kind that the cache c holds and opts select (a
// namespace, a label selector; no field selector, which a walk cannot apply: refused), as it holds
// it: the cache's own object, which fn must neither change nor keep past the caller's use (DeepCopy
// what it keeps). fn returning false ends the walk. A cache of the whole cluster is walked in its
// informer's store, copying nothing: a pass over 100,000 cached Backups allocates the store's
// slice of pointers (1.6 MB), where a List, even with UnsafeDisableDeepCopy, copies every object's
// struct into its Items (44 MB, measured in driver-job's every-minute pass over its Backups at that
// size). A cache of a few namespaces, whose informer has no single store, is listed into list (an
// empty list of obj's kind) instead. The informer of obj's kind is started if it was not, and
// synced before the walk.
func EachCached(ctx context.Context, c cache.Cache, obj client.Object, list client.ObjectList, fn func(client.Object) bool, opts ...client.ListOption) error {
	o := (&client.ListOptions{}).ApplyOptions(opts)
	if o.FieldSelector != nil || o.Limit != 0 || o.Continue != "" {
		return errors.New("a walk of the cache selects by namespace and labels only")
	}
	inf, err := c.GetInformer(ctx, obj, cache.BlockUntilSynced(true))
	if err != nil {
		return err
	}
	if s, ok := inf.(interface{ GetStore() toolscache.Store }); ok {
		for _, it := range s.GetStore().List() {
			co, ok := it.(client.Object)
			if !ok || (o.Namespace != "" && co.GetNamespace() != o.Namespace) || (o.LabelSelector != nil && !o.LabelSelector.Matches(labels.Set(co.GetLabels()))) {
				continue
			}
			if !fn(co) {
				return nil
			}
		}
		return nil
	}
	return eachListed(ctx, c, list, fn, opts)
}

// eachListed lists into list what opts select from r (without deep copies) and calls fn with each
// item until it returns false.
func eachListed(ctx context.Context, r client.Reader, list client.ObjectList, fn func(client.Object) bool, opts []client.ListOption) error {
	if err := r.List(ctx, list, append(opts, client.UnsafeDisableDeepCopy)...); err != nil {
		return err
	}
	err := meta.EachListItem(list, func(o runtime.Object) error {
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

// Each calls fn with each object of obj's kind that r, a client reading the cache c, holds and
// opts select (EachCached: a namespace, a label selector), until fn returns false: walked in c's
// store when c is set, listed from r (into list) otherwise. fn must neither change the objects nor
// keep them past the caller's use.
func Each(ctx context.Context, c cache.Cache, r client.Reader, obj client.Object, list client.ObjectList, fn func(client.Object) bool, opts ...client.ListOption) error {
	if c != nil {
		return EachCached(ctx, c, obj, list, fn, opts...)
	}
	return eachListed(ctx, r, list, fn, opts)
}

// EachBackup is Each for Backups.
func EachBackup(ctx context.Context, c cache.Cache, r client.Reader, fn func(*backupsv1.Backup), opts ...client.ListOption) error {
	return Each(ctx, c, r, &backupsv1.Backup{}, &backupsv1.BackupList{}, func(o client.Object) bool {
		if b, ok := o.(*backupsv1.Backup); ok {
			fn(b)
		}
		return true
	}, opts...)
}
