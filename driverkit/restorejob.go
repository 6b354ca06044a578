package driverkit

import (
	"context"
	"fmt"
	"slices"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// restoreScope is one reconcile of a RestoreJob.
type restoreScope struct {
	rj, orig *backupsv1.RestoreJob
	backup   *backupsv1.Backup // nil when it is gone
	now      metav1.Time
	deadline time.Time // known once the strategy is read
}

// reconcileRestoreJob drives one RestoreJob; its status is written once, at the end.
func (k *Kit[S]) reconcileRestoreJob(ctx context.Context, req reconcile.Request) (res reconcile.Result, retErr error) {
	rj := &backupsv1.RestoreJob{}
	if err := k.Client.Get(ctx, req.NamespacedName, rj); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	log := ctrl.LoggerFrom(ctx).WithValues("restoreJob", klog.KObj(rj))
	ctx = ctrl.LoggerInto(ctx, log)
	if !rj.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	if rj.IsTerminal() {
		return reconcile.Result{}, k.finished(ctx, rj, rj.ClaimedBy())
	}
	if !rj.ClaimableBy(k.Name) {
		return reconcile.Result{}, nil // claimed by another driver: theirs
	}
	backup := &backupsv1.Backup{}
	if err := k.Client.Get(ctx, client.ObjectKey{Namespace: rj.Namespace, Name: rj.Spec.BackupRef.Name}, backup); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, err
		}
		backup = nil
	}
	switch {
	case backup == nil && rj.ClaimedBy() != k.Name:
		return reconcile.Result{}, nil // whose it is cannot be told: core reports BackupNotFound
	case backup != nil && !k.Strategy.Owns(backup.Spec.StrategyRef):
		return reconcile.Result{}, nil
	case backup != nil:
		// The driver restores from the Backup as the API server holds it: the cached copy may
		// be trimmed (TrimBackup). A run reconciles a few times, so is it read.
		live, err := k.live(ctx, client.ObjectKeyFromObject(backup))
		if err != nil {
			return reconcile.Result{}, err
		}
		if live != nil && !k.Strategy.Owns(live.Spec.StrategyRef) {
			return reconcile.Result{}, nil
		}
		if backup = live; backup == nil && rj.ClaimedBy() != k.Name {
			return reconcile.Result{}, nil
		}
	}
	s := &restoreScope{rj: rj, backup: backup, now: metav1.NewTime(k.Clock.Now())}
	if rj.Status.Phase != backupsv1.RestoreJobRunning {
		claim := rj.DeepCopy()
		rj.MarkRunning(s.now, k.Name)
		if _, err := PatchStatus(ctx, k.Client, rj, claim); err != nil {
			return reconcile.Result{}, fmt.Errorf("claiming RestoreJob: %w", err)
		}
		if backup != nil {
			log.Info("Claimed RestoreJob", "backup", klog.KObj(backup))
			k.Recorder.Eventf(rj, nil, corev1.EventTypeNormal, "Started", "Restore", "Restoring Backup %s with %s", backup.Name, describe(backup.Spec.StrategyRef))
		}
	}
	s.orig = rj.DeepCopy()
	defer k.writeRunStatus(ctx, "restore", s.rj, s.orig, &res, &retErr)
	res, err := k.runRestore(ctx, s)
	return k.settle(ctx, err, res, func() time.Time { return s.deadline }, func(reason, msg string) {
		s.rj.MarkFailed(s.now, reason, msg)
		k.Recorder.Eventf(s.rj, nil, corev1.EventTypeWarning, reason, "Restore", "%s", msg)
	})
}

func (k *Kit[S]) runRestore(ctx context.Context, s *restoreScope) (reconcile.Result, error) {
	// Overwritten once the strategy is read; until then an unreadable strategy or policy binding
	// still ends the run.
	s.deadline = s.rj.Status.StartedAt.Add(UnreadableStrategyDeadline)
	b := s.backup
	switch {
	case b == nil:
		return reconcile.Result{}, Failf(backupsv1.ReasonBackupNotFound,
			"Backup %s was deleted while the restore ran (retention or a user); the restore did not complete: create a RestoreJob of another Backup", s.rj.Spec.BackupRef.Name)
	case !b.DeletionTimestamp.IsZero():
		return reconcile.Result{}, Failf(backupsv1.ReasonBackupNotFound,
			"Backup %s is being deleted and its artifact with it; the restore did not complete: create a RestoreJob of another Backup", b.Name)
	case b.Status.Phase != backupsv1.BackupReady || b.Status.Artifact == nil:
		return reconcile.Result{}, Failf(backupsv1.ReasonArtifactMissing, "Backup %s is %q and has no artifact to restore", b.Name, b.Status.Phase)
	}
	if c := meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionArtifactAvailable); c != nil && c.Status == metav1.ConditionFalse {
		return reconcile.Result{}, Failf(backupsv1.ReasonArtifactMissing, "Backup %s cannot be restored: %s", b.Name, c.Message)
	}
	if err := k.optionsTaken(s.rj); err != nil {
		return reconcile.Result{}, err
	}
	if err := k.targetAdmitted(ctx, s.rj); err != nil {
		return reconcile.Result{}, err
	}
	if err := k.rbacAdmitted(ctx, s.rj); err != nil {
		return reconcile.Result{}, err
	}
	strat, err := GetStrategy(ctx, k.Client, b.Spec.StrategyRef, k.NewStrategy())
	if err != nil {
		return reconcile.Result{}, err
	}
	s.deadline = s.rj.Status.StartedAt.Add(k.Driver.Deadline(strat))
	dctx, cancel := context.WithDeadline(ctx, s.deadline.Add(MaxRetryDelay))
	defer cancel()
	ctrl.LoggerFrom(ctx).V(1).Info("Observing restore", "backup", klog.KObj(b))
	out, err := k.Driver.Restore(dctx, &RestoreRun[S]{RestoreJob: s.rj, Backup: b, Strategy: strat, Now: s.now.Time, Deadline: s.deadline})
	if err != nil {
		return reconcile.Result{}, err
	}
	if !out.Done {
		return k.waiting(s.now.Time, s.deadline, out.Waiting, out.RequeueAfter)
	}
	msg := out.Message
	if it := out.Items; it != nil {
		s.rj.Status.Items = it.DeepCopy()
		msg += fmt.Sprintf(" (%d item(s) restored, %d skipped, %d failed", it.Restored, it.Skipped, it.Failed)
		if it.Compared > 0 {
			msg += fmt.Sprintf("; %d compared by content with the backup's record of them", it.Compared)
		}
		msg += ")"
		if it.Restored == 0 && it.Skipped > 0 {
			msg += "; nothing was restored: every item already existed, so the restore changed nothing. Delete what should be replaced, or restore into another application or namespace"
			if out.Warning == "" {
				out.Warning = msg
			}
		}
	}
	s.rj.MarkSucceeded(s.now, msg)
	if out.Warning != "" {
		k.Recorder.Eventf(s.rj, nil, corev1.EventTypeWarning, backupsv1.ReasonCompletedWithErrors, "Restore", "%s", out.Warning)
	} else {
		k.Recorder.Eventf(s.rj, nil, corev1.EventTypeNormal, "Succeeded", "Restore", "%s", msg)
	}
	return reconcile.Result{}, nil
}

// ReasonTargetNotAuthorized fails a restore into another namespace that the admission policy did
// not authorize.
const ReasonTargetNotAuthorized = "TargetNotAuthorized"

// targetAdmitted refuses at run time a restore into another namespace that the admission policy
// coffer-restore-target would refuse, as defense in depth: such a RestoreJob is run only when the
// policy's binding existed when it was created, so the API server checked its creator's right to
// create RestoreJobs in the target namespace (contract RJ-9).
func (k *Kit[S]) targetAdmitted(ctx context.Context, rj *backupsv1.RestoreJob) error {
	target := rj.TargetNamespace()
	if target == rj.Namespace {
		return nil
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	err := k.Client.Get(ctx, client.ObjectKey{Name: backupsv1.RestoreTargetPolicy}, binding)
	switch {
	case apierrors.IsNotFound(err):
		return Failf(ReasonTargetNotAuthorized, "a restore into namespace %s (spec.options.%s) needs the admission policy %s, which is not installed: install deploy/core-controller, then create the RestoreJob again",
			target, backupsv1.OptionTargetNamespace, backupsv1.RestoreTargetPolicy)
	case err != nil:
		return err
	case !binding.DeletionTimestamp.IsZero() || binding.Spec.PolicyName != backupsv1.RestoreTargetPolicy || !slices.Contains(binding.Spec.ValidationActions, admissionregistrationv1.Deny):
		return Failf(ReasonTargetNotAuthorized, "a restore into namespace %s needs the admission policy binding %s to deny what its policy refuses; it does not: reinstall deploy/core-controller",
			target, backupsv1.RestoreTargetPolicy)
	case rj.CreationTimestamp.Before(&binding.CreationTimestamp):
		return Failf(ReasonTargetNotAuthorized, "this RestoreJob was created before the admission policy %s was installed, so nobody checked that its creator may restore into namespace %s: create it again",
			backupsv1.RestoreTargetPolicy, target)
	}
	return nil
}

// optionsTaken refuses a restore with an option the driver does not take, or of another type
// (RestoreOptioner): the standard options are strings, the driver's typed as it declares them.
// The admission policy coffer-restore-options refuses most such RestoreJobs at creation; this
// holds where the policy is not installed, and for options only the driver knows.
func (k *Kit[S]) optionsTaken(rj *backupsv1.RestoreJob) error {
	for _, key := range []string{backupsv1.OptionTargetNamespace, backupsv1.OptionRestoreRBAC, backupsv1.OptionInert} {
		if _, _, err := rj.Spec.StringOption(key); err != nil {
			return Failf(backupsv1.ReasonInvalidOption, "%v; nothing was restored", err)
		}
	}
	var into any = &struct{}{}
	if o, ok := k.Driver.(RestoreOptioner); ok {
		into = o.NewRestoreOptions()
	}
	if err := rj.Spec.DecodeOptions(into); err != nil {
		return Failf(backupsv1.ReasonInvalidOption, "%v; nothing was restored: create the RestoreJob again without it", err)
	}
	return nil
}

// ReasonRBACNotAuthorized fails a restore asking for the backup's Roles, RoleBindings and
// ServiceAccounts (spec.options.restoreRBAC) that the admission policy coffer-restore-rbac did not
// authorize.
const ReasonRBACNotAuthorized = "RBACNotAuthorized"

// rbacAdmitted refuses at run time what the admission policy coffer-restore-rbac would refuse
// (contract RJ-14): a value of spec.options.restoreRBAC other than "true" or "false" fails the run
// InvalidOption, and "true" runs only when the policy's binding existed when the RestoreJob was
// created, so the API server checked that its creator may create, bind and escalate roles in the
// target namespace. A driver creates what it restores with its own rights, which the API server's
// escalation check never weighs against the requester's.
func (k *Kit[S]) rbacAdmitted(ctx context.Context, rj *backupsv1.RestoreJob) error {
	want, err := rj.RestoresRBAC()
	if err != nil {
		return Failf(backupsv1.ReasonInvalidOption, "%v; nothing was restored: create the RestoreJob again without it, or with \"true\" to restore the backup's Roles, RoleBindings and ServiceAccounts", err)
	}
	if !want {
		return nil
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	err = k.Client.Get(ctx, client.ObjectKey{Name: backupsv1.RestoreRBACPolicy}, binding)
	switch {
	case apierrors.IsNotFound(err):
		return Failf(ReasonRBACNotAuthorized, "restoring Roles, RoleBindings and ServiceAccounts (spec.options.%s) needs the admission policy %s, which is not installed: install deploy/core-controller, then create the RestoreJob again",
			backupsv1.OptionRestoreRBAC, backupsv1.RestoreRBACPolicy)
	case err != nil:
		return err
	case !binding.DeletionTimestamp.IsZero() || binding.Spec.PolicyName != backupsv1.RestoreRBACPolicy || !slices.Contains(binding.Spec.ValidationActions, admissionregistrationv1.Deny):
		return Failf(ReasonRBACNotAuthorized, "restoring Roles, RoleBindings and ServiceAccounts needs the admission policy binding %s to deny what its policy refuses; it does not: reinstall deploy/core-controller",
			backupsv1.RestoreRBACPolicy)
	case rj.CreationTimestamp.Before(&binding.CreationTimestamp):
		return Failf(ReasonRBACNotAuthorized, "this RestoreJob was created before the admission policy %s was installed, so nobody checked that its creator may create and bind Roles in namespace %s (spec.options.%s): create it again",
			backupsv1.RestoreRBACPolicy, rj.TargetNamespace(), backupsv1.OptionRestoreRBAC)
	}
	return nil
}

func readyMessage(conds []metav1.Condition) string {
	if c := meta.FindStatusCondition(conds, backupsv1.ConditionReady); c != nil {
		return c.Message
	}
	return ""
}
