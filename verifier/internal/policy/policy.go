// Package policy runs BackupVerifyPolicies: for the Backups of the Plans a policy selects, it
// creates BackupVerifyRuns of the coffer backend (checksum-only for every new Backup, full-restore
// for every Nth), under names derived from the Backup so that no crash, restart or second replica
// creates two runs for one Backup and mode, within the policy's concurrency limit; and it deletes
// the runs of Backups that are gone, with their Results (owned by the run) and SecurityEvents.
package policy

import (
	"context"
	"fmt"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
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
}

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
	nsSel, err := selector(pol.Spec.NamespaceSelector)
	if err == nil {
		var planSel labels.Selector
		if planSel, err = selector(pol.Spec.PlanSelector); err == nil {
			err = r.run(ctx, pol, nsSel, planSel)
		}
		if err != nil && !isSelectorError(err) {
			return reconcile.Result{}, err
		}
	}
	if err != nil {
		r.setReady(pol, metav1.ConditionFalse, securityv1.ReasonInvalidSelector, err.Error())
	} else {
		r.setReady(pol, metav1.ConditionTrue, securityv1.ReasonActive, fmt.Sprintf("verifying the Backups of %d Plan(s)", pol.Status.Plans))
	}
	pol.Status.ObservedGeneration = pol.Generation
	if err := r.Client.Status().Patch(ctx, pol, client.MergeFrom(orig)); err != nil {
		return reconcile.Result{}, fmt.Errorf("writing BackupVerifyPolicy status: %w", err)
	}
	return reconcile.Result{RequeueAfter: Resync}, nil
}

type selectorError struct{ error }

func isSelectorError(err error) bool { _, ok := err.(selectorError); return ok }

func selector(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return labels.Everything(), nil
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return nil, selectorError{err}
	}
	return sel, nil
}

func (r *Reconciler) setReady(pol *securityv1.BackupVerifyPolicy, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&pol.Status.Conditions, metav1.Condition{Type: securityv1.ConditionReady, Status: status, Reason: reason,
		Message: msg, ObservedGeneration: pol.Generation, LastTransitionTime: metav1.NewTime(r.Clock.Now())})
}

// want is one run the policy asks for.
type want struct {
	backup *backupsv1.Backup
	plan   string
	mode   securityv1.Mode
}

func (r *Reconciler) run(ctx context.Context, pol *securityv1.BackupVerifyPolicy, nsSel, planSel labels.Selector) error {
	log := ctrl.LoggerFrom(ctx)
	var namespaces map[string]bool
	if pol.Spec.NamespaceSelector != nil {
		var err error
		if namespaces, err = r.namespaces(ctx, nsSel); err != nil {
			return err
		}
	}
	plans := &backupsv1.PlanList{}
	if err := r.Client.List(ctx, plans, client.MatchingLabelsSelector{Selector: planSel}); err != nil {
		return fmt.Errorf("listing Plans: %w", err)
	}
	runs := &securityv1.BackupVerifyRunList{}
	if err := r.reader().List(ctx, runs, client.MatchingLabels{securityv1.LabelPolicy: pol.Name}); err != nil {
		return fmt.Errorf("listing the policy's runs: %w", err)
	}
	// Runs of any policy (or made by hand under the same names) count: they are found by name.
	done := map[string]bool{}
	active := int32(0)
	for i := range runs.Items {
		if !runs.Items[i].Status.Phase.IsTerminal() {
			active++
		}
	}
	if err := r.prune(ctx, runs.Items); err != nil {
		return err
	}

	var wants []want
	covered := int32(0)
	for i := range plans.Items {
		p := &plans.Items[i]
		if namespaces != nil && !namespaces[p.Namespace] {
			continue
		}
		covered++
		backups := &backupsv1.BackupList{}
		if err := r.Client.List(ctx, backups, client.InNamespace(p.Namespace), client.MatchingFields{BackupPlanIndex: p.Name}); err != nil {
			return fmt.Errorf("listing the Backups of Plan %s/%s: %w", p.Namespace, p.Name, err)
		}
		var fresh []*backupsv1.Backup
		for j := range backups.Items {
			b := &backups.Items[j]
			if b.Status.Phase != backupsv1.BackupReady || b.Status.Artifact == nil || !b.DeletionTimestamp.IsZero() || b.CreationTimestamp.Before(&pol.CreationTimestamp) {
				continue
			}
			fresh = append(fresh, b)
		}
		sort.Slice(fresh, func(a, c int) bool { return fresh[a].Spec.TakenAt.After(fresh[c].Spec.TakenAt.Time) }) // newest first
		for _, m := range []securityv1.Mode{securityv1.ModeChecksumOnly, securityv1.ModeFullRestore} {
			for _, b := range fresh {
				if ok, err := r.exists(ctx, b, m); err != nil {
					return err
				} else if ok {
					done[string(b.UID)+"/"+string(m)] = true
				}
			}
		}
		if fr := pol.Spec.FullRestore; fr != nil && len(fresh) > 0 && !done[string(fresh[0].UID)+"/"+string(securityv1.ModeFullRestore)] {
			// The newest Backup is restored when none of the Plan's last `every` Backups was (so
			// one in `every`), or when no Backup of the Plan kept so far was.
			since := 0
			for _, b := range fresh {
				if done[string(b.UID)+"/"+string(securityv1.ModeFullRestore)] {
					break
				}
				since++
			}
			if since >= int(fr.Every) || since == len(fresh) {
				wants = append(wants, want{backup: fresh[0], plan: p.Name, mode: securityv1.ModeFullRestore})
			}
		}
		if pol.Spec.ChecksumOnly == nil || *pol.Spec.ChecksumOnly {
			for _, b := range fresh {
				if !done[string(b.UID)+"/"+string(securityv1.ModeChecksumOnly)] {
					wants = append(wants, want{backup: b, plan: p.Name, mode: securityv1.ModeChecksumOnly})
				}
			}
		}
	}
	// Full-restores first, then checksums, newest Backups first within each.
	sort.SliceStable(wants, func(a, c int) bool {
		if wants[a].mode != wants[c].mode {
			return wants[a].mode == securityv1.ModeFullRestore
		}
		return wants[a].backup.Spec.TakenAt.After(wants[c].backup.Spec.TakenAt.Time)
	})
	limit := int32(2)
	if pol.Spec.MaxConcurrentRuns != nil {
		limit = *pol.Spec.MaxConcurrentRuns
	}
	pending := int32(0)
	for _, w := range wants {
		if active >= limit {
			pending++
			continue
		}
		created, err := r.create(ctx, pol, w)
		if err != nil {
			return err
		}
		if created {
			active++
			log.Info("Created a verification run", "run", klog.KRef(w.backup.Namespace, securityv1.PolicyRunName(w.backup, w.mode)), "mode", w.mode, "backup", klog.KObj(w.backup))
		}
	}
	pol.Status.Plans, pol.Status.ActiveRuns, pol.Status.PendingBackups = covered, active, pending
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

// exists reports whether the run for Backup b and mode m exists (made by this policy, another
// one, or by hand under the same name).
func (r *Reconciler) exists(ctx context.Context, b *backupsv1.Backup, m securityv1.Mode) (bool, error) {
	run := &securityv1.BackupVerifyRun{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: securityv1.PolicyRunName(b, m)}, run)
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("reading run %s/%s: %w", b.Namespace, securityv1.PolicyRunName(b, m), err)
}

// create makes the run; AlreadyExists is success (a crash after the create, or a second replica).
func (r *Reconciler) create(ctx context.Context, pol *securityv1.BackupVerifyPolicy, w want) (bool, error) {
	b := w.backup
	run := &securityv1.BackupVerifyRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: b.Namespace, Name: securityv1.PolicyRunName(b, w.mode), Labels: map[string]string{
			securityv1.LabelPolicy:    backupsv1.BoundedName(63, pol.Name),
			securityv1.LabelBackupUID: string(b.UID),
			securityv1.LabelPlan:      backupsv1.LabelValue(w.plan),
		}},
		Spec: securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendCoffer, BackupRef: securityv1.BackupRef{Name: b.Name, Namespace: b.Namespace},
			Mode: w.mode, Timeout: pol.Spec.RunTimeout},
	}
	if w.mode == securityv1.ModeFullRestore {
		run.Spec.SandboxNamespace = securityv1.PolicySandboxName(b)
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
func (r *Reconciler) prune(ctx context.Context, runs []securityv1.BackupVerifyRun) error {
	for i := range runs {
		run := &runs[i]
		uid := run.Labels[securityv1.LabelBackupUID]
		if uid == "" || !run.Status.Phase.IsTerminal() {
			continue
		}
		b := &backupsv1.Backup{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: run.Spec.BackupRef.Name}, b)
		switch {
		case err == nil && string(b.UID) == uid:
			continue
		case err != nil && !apierrors.IsNotFound(err):
			return fmt.Errorf("reading Backup %s/%s: %w", run.Namespace, run.Spec.BackupRef.Name, err)
		}
		if err := deleteRun(ctx, r.Client, run); err != nil {
			return err
		}
		ctrl.LoggerFrom(ctx).Info("Deleted the run of a Backup that is gone, with its Result and SecurityEvents", "run", klog.KObj(run))
	}
	return nil
}

// SetupWithManager registers the reconciler: a policy is looked at when it changes, when a Backup
// or Plan changes (every policy: there are few), when one of its runs changes, and every Resync.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.Reader == nil {
		r.Reader = mgr.GetAPIReader()
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &backupsv1.Backup{}, BackupPlanIndex, func(o client.Object) []string {
		if p := o.(*backupsv1.Backup).Spec.PlanRef; p != nil {
			return []string{p.Name}
		}
		return nil
	}); err != nil {
		return err
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
	return ctrl.NewControllerManagedBy(mgr).
		Named("backupverifypolicy").
		For(&securityv1.BackupVerifyPolicy{}).
		Watches(&backupsv1.Backup{}, all).
		Watches(&backupsv1.Plan{}, all).
		Watches(&securityv1.BackupVerifyRun{}, ofRun).
		Complete(r)
}
