package policy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/verifier/internal/etcdsnap"
)

// +kubebuilder:rbac:groups=velero.io,resources=backups,verbs=list
// +kubebuilder:rbac:groups="",resources=nodes,verbs=list

// LabelVeleroSchedule is the label Velero puts on the backups of a Schedule.
const LabelVeleroSchedule = "velero.io/schedule-name"

// DefaultSettle is how long a snapshot file must be left unchanged before an etcd-snapshot policy
// verifies it.
const DefaultSettle = 2 * time.Minute

// velero lists the Velero backups a velero policy selects (uncached: one list per Poll) and
// returns the runs it asks for: a checksum-only run of each Completed backup taken since the
// policy exists, and a full-restore of the newest backup of each Schedule when none of the last
// `every` was restored.
func (r *Reconciler) velero(ctx context.Context, pol *securityv1.BackupVerifyPolicy) ([]want, error) {
	src := pol.Spec.Velero
	if src == nil {
		src = &securityv1.VeleroBackupSource{}
	}
	ns := src.Namespace
	if ns == "" {
		ns = "velero"
	}
	sel, err := selector(src.BackupSelector)
	if err != nil {
		return nil, err
	}
	list := &velerov1.BackupList{}
	if err := r.reader().List(ctx, list, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, notReadyError{securityv1.ReasonVeleroNotInstalled, fmt.Errorf("the cluster serves no velero.io Backups: %w", err)}
		}
		return nil, fmt.Errorf("listing Velero backups in %s: %w", ns, err)
	}
	// The runs of the backups just listed are kept without reading them again.
	present := make(map[types.UID]bool, len(list.Items))
	for i := range list.Items {
		present[list.Items[i].UID] = true
	}
	if err := r.listRuns(ctx, pol, nil, present); err != nil {
		return nil, err
	}
	// Newest first, by schedule.
	bySchedule := map[string][]*velerov1.Backup{}
	covered := int32(0)
	for i := range list.Items {
		vb := &list.Items[i]
		if vb.Status.Phase != velerov1.BackupPhaseCompleted || !vb.DeletionTimestamp.IsZero() || vb.CreationTimestamp.Before(&pol.CreationTimestamp) {
			continue
		}
		covered++
		s := vb.Labels[LabelVeleroSchedule]
		bySchedule[s] = append(bySchedule[s], vb)
	}
	pol.Status.Backups = covered
	var wants []want
	for _, fresh := range bySchedule {
		sort.Slice(fresh, func(a, c int) bool { return takenAt(fresh[a]).After(takenAt(fresh[c])) })
		restored := map[string]bool{}
		for _, vb := range fresh {
			if checksumOnly(pol) {
				m := securityv1.ModeChecksumOnly
				if ok, err := r.exists(ctx, pol.Spec.RunNamespace, securityv1.VeleroPolicyRunName(vb.Name, vb.UID, m)); err != nil {
					return nil, err
				} else if !ok {
					wants = append(wants, veleroWant(pol, vb, m))
				}
			}
			if pol.Spec.FullRestore != nil {
				ok, err := r.exists(ctx, pol.Spec.RunNamespace, securityv1.VeleroPolicyRunName(vb.Name, vb.UID, securityv1.ModeFullRestore))
				if err != nil {
					return nil, err
				}
				restored[string(vb.UID)] = ok
			}
		}
		if fr := pol.Spec.FullRestore; fr != nil && len(fresh) > 0 && !restored[string(fresh[0].UID)] {
			since := 0
			for _, vb := range fresh {
				if restored[string(vb.UID)] {
					break
				}
				since++
			}
			if since >= int(fr.Every) || since == len(fresh) {
				wants = append(wants, veleroWant(pol, fresh[0], securityv1.ModeFullRestore))
			}
		}
	}
	return wants, nil
}

// checksumOnly: the policy verifies every new backup checksum-only (the default).
func checksumOnly(pol *securityv1.BackupVerifyPolicy) bool {
	return pol.Spec.ChecksumOnly == nil || *pol.Spec.ChecksumOnly
}

func takenAt(vb *velerov1.Backup) time.Time {
	if vb.Status.StartTimestamp != nil {
		return vb.Status.StartTimestamp.Time
	}
	return vb.CreationTimestamp.Time
}

func veleroWant(pol *securityv1.BackupVerifyPolicy, vb *velerov1.Backup, m securityv1.Mode) want {
	w := want{namespace: pol.Spec.RunNamespace, name: securityv1.VeleroPolicyRunName(vb.Name, vb.UID, m), takenAt: takenAt(vb),
		backup: vb.Namespace + "/" + vb.Name, labels: map[string]string{securityv1.LabelBackupUID: string(vb.UID)},
		spec: securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendVelero, Mode: m, Timeout: pol.Spec.RunTimeout,
			BackupRef: securityv1.BackupRef{Name: vb.Name, Namespace: vb.Namespace, StorageLocation: vb.Spec.StorageLocation}}}
	if m == securityv1.ModeFullRestore {
		w.spec.SandboxNamespace = securityv1.VeleroPolicySandboxName(vb.Name, vb.UID)
	}
	return w
}

// SnapshotLister lists a node's snapshot directory for a policy (etcdsnap.PodBackend: a
// short-lived pod on the node): nil, and no error, until the listing is ready.
type SnapshotLister interface {
	List(ctx context.Context, policy types.UID, node, pattern string) (*etcdsnap.Listing, error)
}

// ListEvery is how often an etcd-snapshot policy lists each node's snapshot directory through a
// lister pod; between listings it acts on the last one.
const ListEvery = 5 * time.Minute

// MaxSnapshotNodes bounds the nodes an etcd-snapshot policy lists: an etcd cluster has a few
// members, and each listing is a pod.
const MaxSnapshotNodes = 16

// ControlPlaneLabel marks control-plane nodes: an etcd-snapshot policy's default nodeSelector.
const ControlPlaneLabel = "node-role.kubernetes.io/control-plane"

// listingWait is how soon a policy looks again at a lister pod it waits for.
const listingWait = 5 * time.Second

// etcdSeen is what an etcd-snapshot policy listed in this pass: the runs of snapshots a complete
// listing lacks are pruned.
type etcdSeen struct {
	pattern string
	// local is the verifier's own directory (--etcd-check-pods=false): looked at run by run.
	local  bool
	byNode map[string]*etcdsnap.Listing
}

// etcdPass is what a pass of an etcd-snapshot policy found: the runs it asks for, when to look
// again, and what its Ready condition says.
type etcdPass struct {
	wants []want
	next  time.Duration
	ready string
}

// etcd lists the snapshot directories (each selected node's through a lister pod, or the
// verifier's own) and asks for a checksum-only run of each snapshot file the policy selects that
// settled since the policy exists and has no run yet.
func (r *Reconciler) etcd(ctx context.Context, pol *securityv1.BackupVerifyPolicy) (etcdPass, error) {
	if r.SnapshotDir == "" {
		return etcdPass{}, notReadyError{securityv1.ReasonSnapshotDirNotConfigured,
			errors.New("this verifier has no --etcd-snapshot-dir (the install for managed clusters): it verifies no etcd snapshot")}
	}
	src := pol.Spec.EtcdSnapshots
	if src == nil {
		src = &securityv1.EtcdSnapshotSource{}
	}
	pattern := src.Pattern
	if pattern == "" {
		pattern = "*"
	}
	if _, err := path.Match(pattern, ""); err != nil {
		return etcdPass{}, notReadyError{securityv1.ReasonInvalidSelector, fmt.Errorf("etcdSnapshots.pattern %q: %w", pattern, err)}
	}
	settle := DefaultSettle
	if src.Settle != nil {
		settle = src.Settle.Duration
	}
	if r.Lister != nil {
		return r.etcdNodes(ctx, pol, src, pattern, settle)
	}
	l, err := etcdsnap.ListFiles(r.SnapshotDir, pattern)
	if err != nil {
		return etcdPass{}, notReadyError{securityv1.ReasonSnapshotDirUnreadable, fmt.Errorf("--etcd-snapshot-dir: %w", err)}
	}
	if err := r.listRuns(ctx, pol, &etcdSeen{pattern: pattern, local: true}, nil); err != nil {
		return etcdPass{}, err
	}
	wants, covered, err := r.etcdWants(ctx, pol, "", l, settle)
	pol.Status.Backups = covered
	return etcdPass{wants: wants, next: Poll, ready: fmt.Sprintf("verifying %d etcd snapshot(s) of %s", covered, r.SnapshotDir)}, err
}

// etcdNodes lists the snapshot directory of each node the policy selects, through lister pods,
// at most every ListEvery, and returns the runs of the snapshots they hold, each on its node. A
// node whose directory could not be listed makes the policy not Ready, naming it, while the
// snapshots of the others are verified.
func (r *Reconciler) etcdNodes(ctx context.Context, pol *securityv1.BackupVerifyPolicy, src *securityv1.EtcdSnapshotSource, pattern string, settle time.Duration) (etcdPass, error) {
	sel := labels.SelectorFromSet(nil)
	if src.NodeSelector == nil {
		req, err := labels.NewRequirement(ControlPlaneLabel, selection.Exists, nil)
		if err != nil {
			return etcdPass{}, err
		}
		sel = sel.Add(*req)
	} else {
		var err error
		if sel, err = selector(src.NodeSelector); err != nil {
			return etcdPass{}, err
		}
	}
	nodes := &metav1.PartialObjectMetadataList{}
	nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := r.reader().List(ctx, nodes, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return etcdPass{}, fmt.Errorf("listing the nodes of etcdSnapshots.nodeSelector: %w", err)
	}
	switch n := len(nodes.Items); {
	case n == 0:
		return etcdPass{}, notReadyError{securityv1.ReasonNoSnapshotNodes, fmt.Errorf("no node matches etcdSnapshots.nodeSelector (%s)", sel)}
	case n > MaxSnapshotNodes:
		return etcdPass{}, notReadyError{securityv1.ReasonTooManySnapshotNodes,
			fmt.Errorf("%d nodes match etcdSnapshots.nodeSelector (%s); a policy lists at most %d: select the nodes that save etcd snapshots", n, sel, MaxSnapshotNodes)}
	}
	names := make([]string, 0, len(nodes.Items))
	for _, n := range nodes.Items {
		names = append(names, n.Name)
	}
	sort.Strings(names)
	seen := &etcdSeen{pattern: pattern, byNode: map[string]*etcdsnap.Listing{}}
	next := Poll
	var failed, waiting []string
	for _, node := range names {
		l, err := r.listing(ctx, pol, node, pattern)
		switch {
		case err != nil:
			failed = append(failed, err.Error())
		case l == nil:
			next = listingWait
			waiting = append(waiting, node)
		default:
			seen.byNode[node] = l
		}
	}
	if err := r.listRuns(ctx, pol, seen, nil); err != nil {
		return etcdPass{}, err
	}
	var wants []want
	covered := int32(0)
	for _, node := range names {
		if l := seen.byNode[node]; l != nil {
			w, c, err := r.etcdWants(ctx, pol, node, l, settle)
			if err != nil {
				return etcdPass{}, err
			}
			wants, covered = append(wants, w...), covered+c
			// A snapshot that has not settled yet is looked at once it has, not a listing later.
			if due, ok := settling(pol, l, settle, r.Clock.Now()); ok {
				r.expire(listingKey(pol, node, pattern), due)
				next = min(next, max(listingWait, due.Sub(r.Clock.Now())))
			}
		}
	}
	pass := etcdPass{wants: wants, next: next,
		ready: fmt.Sprintf("verifying %d etcd snapshot(s) on node(s) %s", covered, strings.Join(names, ", "))}
	if len(waiting) == 0 {
		pol.Status.Backups = covered // every node listed
	} else {
		pass.ready = "listing the snapshot directories of node(s) " + strings.Join(waiting, ", ")
	}
	if len(failed) > 0 {
		return pass, notReadyError{securityv1.ReasonSnapshotDirUnreadable, errors.New(strings.Join(failed, "; "))}
	}
	return pass, nil
}

// listed is a node's last listing, when it was made, and until when it is acted on.
type listed struct {
	at, until time.Time
	l         *etcdsnap.Listing
}

// listingKey keys a node's listing for a policy: a policy changed lists again.
func listingKey(pol *securityv1.BackupVerifyPolicy, node, pattern string) string {
	return string(pol.UID) + "\x00" + strconv.FormatInt(pol.Generation, 10) + "\x00" + node + "\x00" + pattern
}

// listing returns node's listing for the policy: the last one until ListEvery after it was made
// (or a snapshot in it settles), else a new one from the lister (nil while it is not ready; the
// last one meanwhile, while it is younger than twice ListEvery).
func (r *Reconciler) listing(ctx context.Context, pol *securityv1.BackupVerifyPolicy, node, pattern string) (*etcdsnap.Listing, error) {
	key := listingKey(pol, node, pattern)
	now := r.Clock.Now()
	r.mu.Lock()
	last, ok := r.listings[key]
	r.mu.Unlock()
	if ok && now.Before(last.until) {
		return last.l, nil
	}
	l, err := r.Lister.List(ctx, pol.UID, node, pattern)
	if err != nil {
		return nil, err
	}
	if l == nil {
		if ok && now.Sub(last.at) < 2*ListEvery {
			return last.l, nil
		}
		return nil, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.listings == nil {
		r.listings = map[string]listed{}
	}
	for k, v := range r.listings { // those of policies gone, or of old patterns
		if now.Sub(v.at) > 4*ListEvery {
			delete(r.listings, k)
		}
	}
	r.listings[key] = listed{at: now, until: now.Add(ListEvery), l: l}
	return l, nil
}

// expire makes the listing of key be made again at t, if that is sooner.
func (r *Reconciler) expire(key string, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if last, ok := r.listings[key]; ok && t.Before(last.until) {
		last.until = t
		r.listings[key] = last
	}
}

// settling returns when the first snapshot of l the policy selects that has not yet settled by
// now will have.
func settling(pol *securityv1.BackupVerifyPolicy, l *etcdsnap.Listing, settle time.Duration, now time.Time) (time.Time, bool) {
	var due time.Time
	for _, f := range l.Files {
		at := f.Modified().Add(settle)
		if !f.Modified().Before(pol.CreationTimestamp.Time) && at.After(now) && (due.IsZero() || at.Before(due)) {
			due = at
		}
	}
	return due, !due.IsZero()
}

// etcdWants returns the runs of listing l's snapshots (on node; "" the verifier's own directory)
// that settled since the policy exists and have none yet, and how many snapshots it covers.
func (r *Reconciler) etcdWants(ctx context.Context, pol *securityv1.BackupVerifyPolicy, node string, l *etcdsnap.Listing, settle time.Duration) ([]want, int32, error) {
	now := r.Clock.Now()
	covered := int32(0)
	var wants []want
	for _, f := range l.Files {
		if f.Modified().Before(pol.CreationTimestamp.Time) || now.Sub(f.Modified()) < settle {
			continue
		}
		covered++
		id := f.ID()
		run := securityv1.EtcdNodePolicyRunName(node, f.Name, id)
		if ok, err := r.exists(ctx, pol.Spec.RunNamespace, run); err != nil {
			return nil, 0, err
		} else if ok || !checksumOnly(pol) {
			continue
		}
		backup := f.Name
		if node != "" {
			backup = node + ":" + f.Name
		}
		wants = append(wants, want{namespace: pol.Spec.RunNamespace, name: run, takenAt: f.Modified(), backup: backup,
			labels: map[string]string{securityv1.LabelBackupUID: id},
			spec: securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendEtcdSnapshot, Mode: securityv1.ModeChecksumOnly,
				Timeout: pol.Spec.RunTimeout, BackupRef: securityv1.BackupRef{Name: f.Name, Node: node}}})
	}
	return wants, covered, nil
}

// etcdGone reports whether the snapshot of an etcd-snapshot run is gone: by the file itself in
// the verifier's own directory, or by its node's complete listing of this pass that selects its
// name and lacks it. Without either, the run is kept.
func (r *Reconciler) etcdGone(run *securityv1.BackupVerifyRun, seen *etcdSeen) (bool, error) {
	uid, ref := run.Labels[securityv1.LabelBackupUID], run.Spec.BackupRef
	switch {
	case uid == "" || seen == nil:
		return false, nil
	case seen.local:
		if ref.Node != "" {
			return false, nil
		}
		id, err := snapshotID(r.SnapshotDir, ref.Name)
		return id != uid, err
	}
	l := seen.byNode[ref.Node]
	if ok, _ := path.Match(seen.pattern, ref.Name); !ok || l == nil || l.Omitted > 0 {
		return false, nil
	}
	return !l.Has(ref.Name, uid), nil
}

// snapshotID is the identity of snapshot ref of dir now, or "" when it is gone.
func snapshotID(dir, ref string) (string, error) {
	p, err := etcdsnap.Resolve(dir, ref)
	if err != nil {
		return "", nil // a ref that leaves dir names no snapshot of it
	}
	info, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading snapshot %s: %w", ref, err)
	}
	return etcdsnap.File{Size: info.Size(), ModTime: info.ModTime().UnixNano()}.ID(), nil
}
