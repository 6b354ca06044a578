// Package policy runs BackupVerifyPolicies: for the Backups of the Plans a policy selects (backend
// coffer), Velero's own backups (backend velero) or the etcd snapshots of the verifier's snapshot
// directory (backend etcd-snapshot), it creates BackupVerifyRuns (checksum-only for every new
// backup, full-restore for every Nth), under names derived from the backup so that no crash,
// restart or second replica creates two runs for one backup and mode, within the policy's
// concurrency limit; and it deletes the runs of backups that are gone, with their Results (owned by
// the run) and SecurityEvents.
package policy

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/verifier/internal/metrics"
)

// +kubebuilder:rbac:groups=security.ugallu.io,resources=backupverifypolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=security.ugallu.io,resources=backupverifypolicies/status,verbs=patch
// +kubebuilder:rbac:groups=security.ugallu.io,resources=backupverifyruns,verbs=create;delete
// +kubebuilder:rbac:groups=security.ugallu.io,resources=securityevents,verbs=deletecollection
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=plans,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=watch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backups,verbs=get;list;watch

// BackupPlanIndex indexes Backups by spec.planRef.name.
const BackupPlanIndex = "spec.planRef.name"

// Resync is how often every policy is looked at without an event (namespace labels, for one).
const Resync = 10 * time.Minute

// Reconciler runs BackupVerifyPolicies.
type Reconciler struct {
	Client client.Client
	// Reader lists the policy's runs uncached: the runs in flight bound the next ones, and a cache
	// that has not yet seen the runs just created would let a policy exceed maxConcurrentRuns.
	// Nil means Client (SetupWithManager sets the manager's API reader).
	Reader   client.Reader
	Clock    clock.PassiveClock
	Recorder events.EventRecorder
	// Coffer says whether the cluster serves Coffer's CRDs (the verifier looks at its start):
	// without them coffer policies are not Ready, and nothing watches Backups or Plans.
	Coffer bool
	// SnapshotDir is the verifier's --etcd-snapshot-dir; empty: etcd-snapshot policies are not
	// Ready.
	SnapshotDir string
	// Lister lists each node's snapshot directory (--etcd-check-pods); nil: an etcd-snapshot
	// policy lists SnapshotDir itself.
	Lister SnapshotLister

	mu       sync.Mutex
	listings map[string]listed
}

// Poll is how often a velero or etcd-snapshot policy looks for new backups (nothing notifies it:
// the verifier watches neither Velero's backups, which may not be installed, nor a directory).
const Poll = time.Minute

func (r *Reconciler) reader() client.Reader {
	if r.Reader != nil {
		return r.Reader
	}
	return r.Client
}

// Reconcile creates the runs a policy asks for and prunes those of deleted Backups.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pol := &securityv1.BackupVerifyPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, pol); err != nil {
		if apierrors.IsNotFound(err) {
			metrics.PolicyPending.DeleteLabelValues(req.Name)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	log := ctrl.LoggerFrom(ctx).WithValues("policy", pol.Name)
	ctx = ctrl.LoggerInto(ctx, log)
	orig := pol.DeepCopy()
	var wants []want
	var err error
	var etcd etcdPass
	next := Resync
	switch pol.Spec.Backend {
	case securityv1.BackendVelero:
		next = Poll
		wants, err = r.velero(ctx, pol)
	case securityv1.BackendEtcdSnapshot:
		etcd, err = r.etcd(ctx, pol)
		wants, next = etcd.wants, etcd.next
		if next == 0 { // not Ready before it listed
			next = Poll
		}
	default:
		wants, err = r.coffer(ctx, pol)
	}
	// A policy not Ready may still ask for runs (the etcd snapshots of the nodes it could list).
	var notReady notReadyError
	if err == nil || errors.As(err, &notReady) && len(wants) > 0 {
		if cerr := r.createRuns(ctx, pol, wants); cerr != nil {
			err = cerr
		}
	}
	switch {
	case errors.As(err, &notReady):
		r.setReady(pol, metav1.ConditionFalse, notReady.reason, notReady.Error())
	case err != nil:
		return reconcile.Result{}, err
	case pol.Spec.Backend == securityv1.BackendVelero:
		r.setReady(pol, metav1.ConditionTrue, securityv1.ReasonActive, fmt.Sprintf("verifying %d Velero backup(s)", pol.Status.Backups))
	case pol.Spec.Backend == securityv1.BackendEtcdSnapshot:
		r.setReady(pol, metav1.ConditionTrue, securityv1.ReasonActive, etcd.ready)
	default:
		r.setReady(pol, metav1.ConditionTrue, securityv1.ReasonActive, fmt.Sprintf("verifying the Backups of %d Plan(s)", pol.Status.Plans))
	}
	pol.Status.ObservedGeneration = pol.Generation
	if err := r.Client.Status().Patch(ctx, pol, client.MergeFrom(orig)); err != nil {
		return reconcile.Result{}, fmt.Errorf("writing BackupVerifyPolicy status: %w", err)
	}
	return reconcile.Result{RequeueAfter: next}, nil
}

// notReadyError is a policy that cannot act as it is (a selector that does not parse, a backend
// this cluster or verifier lacks): its Ready condition says why, with reason.
type notReadyError struct {
	reason string
	error
}

func selector(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return labels.Everything(), nil
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return nil, notReadyError{securityv1.ReasonInvalidSelector, err}
	}
	return sel, nil
}

func (r *Reconciler) setReady(pol *securityv1.BackupVerifyPolicy, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&pol.Status.Conditions, metav1.Condition{Type: securityv1.ConditionReady, Status: status, Reason: reason,
		Message: msg, ObservedGeneration: pol.Generation, LastTransitionTime: metav1.NewTime(r.Clock.Now())})
}

// want is one run the policy asks for: its name and namespace, the backup's identity label, the
// spec, and when the backup was taken (newest first).
type want struct {
	namespace, name string
	labels          map[string]string
	spec            securityv1.BackupVerifyRunSpec
	takenAt         time.Time
	backup          string
}

func (w want) mode() securityv1.Mode { return w.spec.Mode }

// inFlight selects the runs that have not ended (status.phase is a selectable field of the
// BackupVerifyRun CRD): the API server filters them, so a policy with 100,000 ended runs reads the
// few in flight, not the 100,000.
var inFlight = fields.AndSelectors(
	fields.OneTermNotEqualSelector(securityv1.FieldRunPhase, string(securityv1.RunSucceeded)),
	fields.OneTermNotEqualSelector(securityv1.FieldRunPhase, string(securityv1.RunFailed)))

// listRuns counts the policy's runs in flight into its status, read uncached, and prunes its ended
// runs whose backups are gone, read from the cache: an ended run never changes again, so a cache
// that lags misses at most a run that ended since, pruned at the next pass.
//
// present, when set, holds the UIDs of Backups known to exist (those the pass just read): their
// runs are kept without a lookup.
func (r *Reconciler) listRuns(ctx context.Context, pol *securityv1.BackupVerifyPolicy, seen *etcdSeen, present map[types.UID]bool) error {
	ofPolicy := client.MatchingLabels{securityv1.LabelPolicy: backupsv1.BoundedName(63, pol.Name)}
	live := &securityv1.BackupVerifyRunList{}
	err := r.reader().List(ctx, live, ofPolicy, client.MatchingFieldsSelector{Selector: inFlight})
	if apierrors.IsBadRequest(err) {
		// A BackupVerifyRun CRD without the selectable field (an older install): every run.
		err = r.reader().List(ctx, live, ofPolicy)
	}
	if err != nil {
		return fmt.Errorf("listing the policy's runs in flight: %w", err)
	}
	pol.Status.ActiveRuns = 0
	for i := range live.Items {
		if !live.Items[i].Status.Phase.IsTerminal() {
			pol.Status.ActiveRuns++
		}
	}
	runs := &securityv1.BackupVerifyRunList{}
	if err := r.Client.List(ctx, runs, ofPolicy, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing the policy's runs: %w", err)
	}
	return r.prune(ctx, runs.Items, seen, present)
}

func (r *Reconciler) coffer(ctx context.Context, pol *securityv1.BackupVerifyPolicy) ([]want, error) {
	if !r.Coffer {
		return nil, notReadyError{securityv1.ReasonCofferNotInstalled,
			errors.New("the cluster served no backups.cozystack.io when the verifier started: install Coffer, then restart the verifier")}
	}
	nsSel, err := selector(pol.Spec.NamespaceSelector)
	if err != nil {
		return nil, err
	}
	planSel, err := selector(pol.Spec.PlanSelector)
	if err != nil {
		return nil, err
	}
	var namespaces map[string]bool
	if pol.Spec.NamespaceSelector != nil {
		if namespaces, err = r.namespaces(ctx, nsSel); err != nil {
			return nil, err
		}
	}
	plans := &backupsv1.PlanList{}
	if err := r.Client.List(ctx, plans, client.MatchingLabelsSelector{Selector: planSel}); err != nil {
		return nil, fmt.Errorf("listing Plans: %w", err)
	}
	var wants []want
	covered := int32(0)
	present := map[types.UID]bool{}
	for i := range plans.Items {
		p := &plans.Items[i]
		if namespaces != nil && !namespaces[p.Namespace] {
			continue
		}
		covered++
		backups := &backupsv1.BackupList{}
		// Read only (the cache's own copies): nothing here changes a Backup.
		if err := r.Client.List(ctx, backups, client.InNamespace(p.Namespace), client.MatchingFields{BackupPlanIndex: p.Name}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("listing the Backups of Plan %s/%s: %w", p.Namespace, p.Name, err)
		}
		var fresh []*backupsv1.Backup
		for j := range backups.Items {
			b := &backups.Items[j]
			present[b.UID] = true
			if b.Status.Phase != backupsv1.BackupReady || b.Status.Artifact == nil || !b.DeletionTimestamp.IsZero() || b.CreationTimestamp.Before(&pol.CreationTimestamp) {
				continue
			}
			fresh = append(fresh, b)
		}
		sort.Slice(fresh, func(a, c int) bool { return fresh[a].Spec.TakenAt.After(fresh[c].Spec.TakenAt.Time) }) // newest first
		if fr := pol.Spec.FullRestore; fr != nil && len(fresh) > 0 {
			// The newest Backup is restored when none of the Plan's last `every` Backups was (so
			// one in `every`), or when no Backup of the Plan kept so far was.
			since := 0
			for _, b := range fresh {
				if ok, err := r.done(ctx, b, securityv1.ModeFullRestore); err != nil {
					return nil, err
				} else if ok {
					break
				}
				if since++; since >= int(fr.Every) {
					break
				}
			}
			if since >= int(fr.Every) || since == len(fresh) {
				wants = append(wants, cofferWant(pol, fresh[0], p.Name, securityv1.ModeFullRestore))
			}
		}
		if checksumOnly(pol) {
			for _, b := range fresh {
				if ok, err := r.done(ctx, b, securityv1.ModeChecksumOnly); err != nil {
					return nil, err
				} else if !ok {
					wants = append(wants, cofferWant(pol, b, p.Name, securityv1.ModeChecksumOnly))
				}
			}
		}
	}
	pol.Status.Plans = covered
	if err := r.listRuns(ctx, pol, nil, present); err != nil {
		return nil, err
	}
	return wants, nil
}

// done reports whether Backup b was verified in mode m, or is being: it records a verdict of the
// mode (by this policy's run, another's or one made by hand), or a run exists under the name this
// policy gives its run (made by any policy, or by hand). Only a Backup without a verdict is looked
// up by run name, so a pass over 100,000 verified Backups reads no run.
func (r *Reconciler) done(ctx context.Context, b *backupsv1.Backup, m securityv1.Mode) (bool, error) {
	if hasVerdict(b, m) {
		return true, nil
	}
	return r.exists(ctx, b.Namespace, securityv1.PolicyRunName(b, m))
}

// hasVerdict reports whether Backup b records a verdict of mode m (status.verification, which the
// verifier's cache keeps: TrimCachedBackup).
func hasVerdict(b *backupsv1.Backup, m securityv1.Mode) bool {
	v := b.Status.Verification
	if v == nil {
		return false
	}
	if m == securityv1.ModeFullRestore {
		return v.FullRestore != nil
	}
	return v.Checksum != nil
}

// cofferWant is the run of Coffer Backup b (of Plan plan) in mode m, in b's namespace.
func cofferWant(pol *securityv1.BackupVerifyPolicy, b *backupsv1.Backup, plan string, m securityv1.Mode) want {
	w := want{namespace: b.Namespace, name: securityv1.PolicyRunName(b, m), takenAt: b.Spec.TakenAt.Time, backup: b.Namespace + "/" + b.Name,
		labels: map[string]string{securityv1.LabelBackupUID: string(b.UID), securityv1.LabelPlan: backupsv1.LabelValue(plan)},
		spec: securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendCoffer, BackupRef: securityv1.BackupRef{Name: b.Name, Namespace: b.Namespace},
			Mode: m, Timeout: pol.Spec.RunTimeout}}
	if m == securityv1.ModeFullRestore {
		w.spec.SandboxNamespace = securityv1.PolicySandboxName(b)
	}
	return w
}

// createRuns creates the runs wanted, full-restores first, then checksums, newest backups first
// within each, while fewer than maxConcurrentRuns of the policy's runs are in flight.
func (r *Reconciler) createRuns(ctx context.Context, pol *securityv1.BackupVerifyPolicy, wants []want) error {
	log := ctrl.LoggerFrom(ctx)
	sort.SliceStable(wants, func(a, c int) bool {
		if wants[a].mode() != wants[c].mode() {
			return wants[a].mode() == securityv1.ModeFullRestore
		}
		return wants[a].takenAt.After(wants[c].takenAt)
	})
	limit := int32(2)
	if pol.Spec.MaxConcurrentRuns != nil {
		limit = *pol.Spec.MaxConcurrentRuns
	}
	pending := int32(0)
	for _, w := range wants {
		if pol.Status.ActiveRuns >= limit {
			pending++
			continue
		}
		created, err := r.create(ctx, pol, w)
		if err != nil {
			return err
		}
		if created {
			pol.Status.ActiveRuns++
			log.Info("Created a verification run", "run", klog.KRef(w.namespace, w.name), "mode", w.mode(), "backend", w.spec.Backend, "backup", w.backup)
		}
	}
	pol.Status.PendingBackups = pending
	metrics.PolicyPending.WithLabelValues(pol.Name).Set(float64(pending))
	return nil
}

func (r *Reconciler) namespaces(ctx context.Context, sel labels.Selector) (map[string]bool, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind("NamespaceList"))
	list.APIVersion = "v1"
	if err := r.Client.List(ctx, list, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	out := map[string]bool{}
	for _, ns := range list.Items {
		out[ns.Name] = true
	}
	return out, nil
}

// exists reports whether the run named name exists in namespace ns (made by this policy, another
// one, or by hand under the same name).
func (r *Reconciler) exists(ctx context.Context, ns, name string) (bool, error) {
	run := &securityv1.BackupVerifyRun{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, run)
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("reading run %s/%s: %w", ns, name, err)
}

// create makes the run; AlreadyExists is success (a crash after the create, or a second replica).
func (r *Reconciler) create(ctx context.Context, pol *securityv1.BackupVerifyPolicy, w want) (bool, error) {
	run := &securityv1.BackupVerifyRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.namespace, Name: w.name, Labels: map[string]string{
			securityv1.LabelPolicy: backupsv1.BoundedName(63, pol.Name),
		}},
		Spec: w.spec,
	}
	for k, v := range w.labels {
		run.Labels[k] = v
	}
	if err := r.Client.Create(ctx, run); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return false, nil
		}
		return false, fmt.Errorf("creating run %s/%s: %w", run.Namespace, run.Name, err)
	}
	return true, nil
}

// prune deletes the policy's terminal runs whose Backup is gone: first their SecurityEvents, then
// the run (its Result goes with it, by ownerReference). A run still running is left to end.
func (r *Reconciler) prune(ctx context.Context, runs []securityv1.BackupVerifyRun, seen *etcdSeen, present map[types.UID]bool) error {
	for i := range runs {
		run := &runs[i]
		if !run.Status.Phase.IsTerminal() {
			continue
		}
		if present[types.UID(run.Labels[securityv1.LabelBackupUID])] {
			continue
		}
		if gone, err := r.backupGone(ctx, run, seen); err != nil || !gone {
			if err != nil {
				return err
			}
			continue
		}
		if err := deleteRun(ctx, r.Client, run); err != nil {
			return err
		}
		ctrl.LoggerFrom(ctx).Info("Deleted the run of a Backup that is gone, with its Result and SecurityEvents", "run", klog.KObj(run))
	}
	return nil
}

// backupGone reports whether the backup of a policy's run is gone (deleted, or another one under
// its name). A backend this verifier cannot look at (no Coffer, no Velero, no snapshot directory)
// keeps its runs.
func (r *Reconciler) backupGone(ctx context.Context, run *securityv1.BackupVerifyRun, seen *etcdSeen) (bool, error) {
	uid := run.Labels[securityv1.LabelBackupUID]
	ref := run.Spec.BackupRef
	switch run.Spec.Backend {
	case securityv1.BackendCoffer:
		if uid == "" || !r.Coffer {
			return false, nil
		}
		b := &backupsv1.Backup{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: ref.Name}, b)
		if err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("reading Backup %s/%s: %w", run.Namespace, ref.Name, err)
		}
		return err != nil || string(b.UID) != uid, nil
	case securityv1.BackendVelero:
		if uid == "" {
			return false, nil
		}
		vb := &velerov1.Backup{}
		err := r.reader().Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, vb)
		if meta.IsNoMatchError(err) {
			return false, nil
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("reading Velero backup %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		return err != nil || string(vb.UID) != uid, nil
	case securityv1.BackendEtcdSnapshot:
		return r.etcdGone(run, seen)
	}
	return false, nil
}

// SetupWithManager registers the reconciler: a policy is looked at when it changes, when a Backup
// or Plan changes (every policy: there are few), when one of its runs changes, and every Resync.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.Reader == nil {
		r.Reader = mgr.GetAPIReader()
	}
	if r.Coffer {
		if err := mgr.GetFieldIndexer().IndexField(ctx, &backupsv1.Backup{}, BackupPlanIndex, func(o client.Object) []string {
			if p := o.(*backupsv1.Backup).Spec.PlanRef; p != nil {
				return []string{p.Name}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	all := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		list := &securityv1.BackupVerifyPolicyList{}
		if err := r.Client.List(ctx, list); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing BackupVerifyPolicies")
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for _, p := range list.Items {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
		}
		return out
	})
	ofRun := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if p := o.GetLabels()[securityv1.LabelPolicy]; p != "" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: p}}}
		}
		return nil
	})
	b := ctrl.NewControllerManagedBy(mgr).
		Named("backupverifypolicy").
		For(&securityv1.BackupVerifyPolicy{}).
		// An ended run that leaves the cache (settled, or deleted) changes nothing a policy counts.
		Watches(&securityv1.BackupVerifyRun{}, ofRun, builder.WithPredicates(predicate.Funcs{DeleteFunc: func(e event.DeleteEvent) bool {
			run, ok := e.Object.(*securityv1.BackupVerifyRun)
			return !ok || !run.Status.Phase.IsTerminal()
		}}))
	if r.Coffer {
		b = b.Watches(&backupsv1.Backup{}, all).Watches(&backupsv1.Plan{}, all)
	}
	return b.Complete(r)
}
