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

// EachBackup calls fn with each Backup that r, a client reading the cache c, holds and opts select
// (a label selector; a namespace): the cache's own objects, which fn must neither change nor keep.
// They are walked in c's store when c is set (EachCached), listed from r otherwise.
func EachBackup(ctx context.Context, c cache.Cache, r client.Reader, fn func(*backupsv1.Backup), opts ...client.ListOption) error {
	if c != nil {
		o := (&client.ListOptions{}).ApplyOptions(opts)
		return EachCached(ctx, c, &backupsv1.Backup{}, &backupsv1.BackupList{}, func(obj client.Object) bool {
			b, ok := obj.(*backupsv1.Backup)
			if ok && (o.LabelSelector == nil || o.LabelSelector.Matches(labels.Set(b.Labels))) && (o.Namespace == "" || o.Namespace == b.Namespace) {
				fn(b)
			}
			return true
		})
	}
	list := &backupsv1.BackupList{}
	if err := r.List(ctx, list, append(opts, client.UnsafeDisableDeepCopy)...); err != nil {
		return err
	}
	for i := range list.Items {
		fn(&list.Items[i])
	}
	return nil
}
