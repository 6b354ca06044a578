package driver

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/internal/names"
	"github.com/coffer-backup/coffer/driverkit"
)

// Settled Velero backups (docs/benchmarks.md, "driver-velero at 100,000 Backups"). A velero.io
// Backup costs the cache about 2.6 KB (its record annotation alone is about 1 KB), and one stays for
// every Backup: at 100,000 Backups the cache alone would pass the driver's memory limit. Once
// Velero completed a backup and the driver measured it, nothing about it changes but its going
// (Velero's TTL, a deletion, storage losing it), so the driver labels it settled
// (names.LabelSettled) and caches only the Velero backups without the label. What it learns of
// the settled ones comes from a watch that keeps nothing (SettledSource): a settled backup
// modified (Velero marks it Deleting) or gone makes its Backup suspect, and the Backup's next
// check reads the Velero backup from the API server. A Backup whose Velero backup is settled,
// not suspect, and whose ArtifactAvailable is True is left as it is by a check, without a request.

// settledPage is how many settled Velero backups one page of the settled pass lists.
const settledPage = 500

// settledSelector selects the settled Velero backups.
var settledSelector = labels.SelectorFromSet(labels.Set{names.LabelSettled: "true"})

// unsettledSelector selects the Velero backups the driver caches.
func unsettledSelector() labels.Selector {
	s, err := labels.Parse("!" + names.LabelSettled)
	if err != nil {
		panic(err)
	}
	return s
}

// settles reports whether the driver settles Velero backups: only when it watches the settled ones
// and reads what its cache lacks from the API server.
func (d *Driver) settles() bool { return d.Watcher != nil && d.Live != nil }

// suspects are the Backups whose settled Velero backup changed or went, by Backup key.
type suspects struct {
	mu   sync.Mutex
	keys map[types.NamespacedName]struct{}
}

func (s *suspects) add(k types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys == nil {
		s.keys = map[types.NamespacedName]struct{}{}
	}
	s.keys[k] = struct{}{}
}

func (s *suspects) has(k types.NamespacedName) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.keys[k]
	return ok
}

func (s *suspects) clear(k types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.keys, k)
}

// trustsAbsence reports whether a check of b may take its Velero backup's absence from the cache
// for a settled backup, without a request: the driver settles and watches settled backups, b is
// no imported Backup (the catalog's Velero backups are never settled), b's artifact was last seen
// present, and no change of its Velero backup was seen since (neither by the watch of the settled
// ones nor as an unsettled one leaving the cache: goneOrSettled).
func (d *Driver) trustsAbsence(b *backupsv1.Backup) bool {
	c := meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionArtifactAvailable)
	return d.settles() && !b.Imported() && c != nil && c.Status == metav1.ConditionTrue && !d.suspects.has(client.ObjectKeyFromObject(b))
}

// goneOrSettled wraps the handler of the cached Velero backups' events for the Backups: a backup
// that leaves the cache unsettled went (or its last state is unknown), and makes its Backup
// suspect; one that leaves it settled does not.
func (d *Driver) goneOrSettled(h handler.EventHandler) handler.EventHandler {
	return handler.Funcs{
		CreateFunc:  h.Create,
		UpdateFunc:  h.Update,
		GenericFunc: h.Generic,
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.Object != nil && e.Object.GetLabels()[names.LabelSettled] != "true" {
				for _, r := range names.RunOf(ctx, e.Object) {
					d.suspects.add(r.NamespacedName)
				}
			}
			h.Delete(ctx, e, q)
		},
	}
}

// unremarkable reports whether a look at Backup b would leave it as it is (Kit.Unremarkable): it is
// Ready and its check trusts the absence of its Velero backup from the cache (trustsAbsence). At
// start the settled pass makes suspect, and queues, those whose Velero backup went meanwhile.
// (A look at one whose Velero backup is cached, unsettled, would settle it: left to its next look.)
func (d *Driver) unremarkable(b *backupsv1.Backup) bool {
	return b.Status.Phase == backupsv1.BackupReady && d.trustsAbsence(b)
}

// settle labels vb settled, when the driver settles and vb is the completed backup of Ready Backup
// b, made by this driver for b (not a copy's, not an imported one's: a catalog reads those from
// the cache).
func (d *Driver) settle(ctx context.Context, b *backupsv1.Backup, vb *velerov1.Backup) error {
	if !d.settles() || vb.Labels[names.LabelSettled] == "true" || b.Imported() || b.Status.Phase != backupsv1.BackupReady ||
		vb.Annotations[names.AnnotationRun] != b.Namespace+"/"+b.Name ||
		(vb.Status.Phase != velerov1.BackupPhaseCompleted && vb.Status.Phase != velerov1.BackupPhasePartiallyFailed) {
		return nil
	}
	orig := vb.DeepCopy()
	markSettled(vb)
	if err := d.Client.Patch(ctx, vb, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("labelling velero backup %s settled: %w", client.ObjectKeyFromObject(vb), err)
	}
	return nil
}

func markSettled(vb *velerov1.Backup) {
	if vb.Labels == nil {
		vb.Labels = map[string]string{}
	}
	vb.Labels[names.LabelSettled] = "true"
}

// SettledSource is the source of the Backup controller's requests for the Backups whose settled
// Velero backup changed or went: a watch of the settled backups that keeps nothing and, once it
// runs, a pass that pages through them (metadata only) and compares them with the cached Backups
// (watchAndPass). A watch that ends (its resource version expired, the API server gone) is
// followed by another watch and pass. Nil when the driver does not settle.
func (d *Driver) SettledSource() source.Source {
	if !d.settles() {
		return nil
	}
	return settledSource{d}
}

type settledSource struct{ d *Driver }

// Start runs the pass and the watch until ctx ends.
func (s settledSource) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	go s.run(ctx, q)
	return nil
}

func (s settledSource) run(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	log := ctrl.Log.WithName(names.DriverName).WithName("settled")
	suspect := func(r reconcile.Request) {
		s.d.suspects.add(r.NamespacedName)
		q.Add(r)
	}
	const maxDelay = time.Minute
	delay := time.Second
	for {
		began := time.Now()
		err := s.d.watchAndPass(ctx, suspect)
		if time.Since(began) > maxDelay {
			delay = time.Second
		}
		if ctx.Err() != nil {
			return
		}
		log.Info("Watching settled Velero backups: listing them again", "reason", err.Error(), "after", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, maxDelay)
	}
}

// SettledPass lists the settled Velero backups a page at a time (a 64-bit hash of each one's
// namespace and name is kept: 100,000 of them in about 3 MB, where their names would take ten
// times that) and makes suspect every Ready Backup of the driver whose Velero backup is neither
// among them nor in the cache: one that went while nothing watched. (Two keys with one hash would
// let a Backup pass unsuspected this once; at 100,000 backups the odds are below one in 10^9.)
func (d *Driver) SettledPass(ctx context.Context, suspect func(reconcile.Request)) error {
	if d.Cache != nil && !d.Cache.WaitForCacheSync(ctx) {
		return ctx.Err()
	}
	seed := maphash.MakeSeed()
	settled := map[uint64]struct{}{}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(velerov1.SchemeGroupVersion.WithKind("BackupList"))
	for cont := ""; ; {
		opts := &client.ListOptions{LabelSelector: settledSelector, Limit: settledPage, Continue: cont}
		if err := d.Watcher.List(ctx, list, opts); err != nil {
			return fmt.Errorf("listing the settled Velero backups: %w", err)
		}
		for i := range list.Items {
			settled[keyHash(seed, list.Items[i].Namespace, list.Items[i].Name)] = struct{}{}
		}
		if cont = list.Continue; cont == "" {
			break
		}
	}
	return driverkit.EachBackup(ctx, d.Cache, d.Client, func(b *backupsv1.Backup) {
		key := veleroKey(b)
		if key.Name == "" || b.Status.Phase != backupsv1.BackupReady || !b.DeletionTimestamp.IsZero() {
			return
		}
		if _, ok := settled[keyHash(seed, key.Namespace, key.Name)]; ok {
			return
		}
		if err := d.Client.Get(ctx, key, &velerov1.Backup{}); !apierrors.IsNotFound(err) {
			return // cached (not settled), or the next pass decides
		}
		suspect(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(b)})
	})
}

// keyHash hashes a namespace and a name.
func keyHash(seed maphash.Seed, namespace, name string) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	h.WriteString(namespace)
	h.WriteByte('/')
	h.WriteString(name)
	return h.Sum64()
}

// watchAndPass watches the settled Velero backups from the current resource version and, once
// the watch runs, makes the pass (SettledPass) beside it: a backup gone before the watch began is
// missing from the pass's list, which is read after; one gone after is the watch's. (A pass
// first, then a watch from the pass's resource version, would need that version to be still
// served when a long pass ends: at 100,000 backups the pass takes minutes.) It returns when the
// watch ends or the pass fails.
func (d *Driver) watchAndPass(ctx context.Context, suspect func(reconcile.Request)) error {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(velerov1.SchemeGroupVersion.WithKind("BackupList"))
	if err := d.Watcher.List(ctx, list, &client.ListOptions{LabelSelector: settledSelector, Limit: 1}); err != nil {
		return fmt.Errorf("reading the settled Velero backups' resource version: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	passed := make(chan error, 1)
	return d.watchSettled(ctx, list.ResourceVersion, suspect, func() {
		go func() {
			passed <- d.SettledPass(ctx, suspect)
		}()
	}, passed)
}

// watchSettled watches the settled Velero backups from resource version rv until the watch ends
// or passed says the pass failed: the Backup of one modified or gone is suspect. started is called
// once the watch runs.
func (d *Driver) watchSettled(ctx context.Context, rv string, suspect func(reconcile.Request), started func(), passed <-chan error) error {
	lw := &toolscache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(velerov1.SchemeGroupVersion.WithKind("BackupList"))
		o.LabelSelector = settledSelector.String()
		return d.Watcher.Watch(ctx, list, &client.ListOptions{Raw: &o})
	}}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, rv, lw)
	if err != nil {
		return err
	}
	defer w.Stop()
	started()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-passed:
			if err != nil {
				return err
			}
		case <-w.Done():
			return errors.New("the watch ended")
		case ev, ok := <-w.ResultChan():
			if !ok {
				return errors.New("the watch ended")
			}
			switch ev.Type {
			case watch.Modified, watch.Deleted:
				if o, ok := ev.Object.(client.Object); ok {
					for _, r := range names.RunOf(ctx, o) {
						suspect(r)
					}
				}
			case watch.Error:
				return apierrors.FromObject(ev.Object)
			}
		}
	}
}

// veleroKey is where the Velero backup behind b is (its driver metadata; in the cache, the name
// may be read from its artifact: trimBackup).
func veleroKey(b *backupsv1.Backup) client.ObjectKey {
	name := b.Spec.DriverMetadata[names.MetaBackupName]
	if name == nameFromArtifact {
		name = ""
		if b.Status.Artifact != nil {
			name = nameInArtifact(b.Status.Artifact.URI)
		}
	}
	return client.ObjectKey{Namespace: b.Spec.DriverMetadata[names.MetaNamespace], Name: name}
}
