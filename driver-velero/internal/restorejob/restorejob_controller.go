// Package restorejob runs the RestoreJobs whose Backup was made with a VeleroBackupStrategy: one
// velero.io/v1 Restore per run, restricted to the application's namespace, into that namespace or,
// only through spec.options.targetNamespace, into another one mapped exactly.
package restorejob

import (
	"context"
	"fmt"
	"strings"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/apis/strategy"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/internal/backupjob"
	"github.com/coffer-backup/coffer/driver-velero/internal/metrics"
	"github.com/coffer-backup/coffer/driver-velero/internal/names"
	"github.com/coffer-backup/coffer/driver-velero/internal/resolve"
)

// Restore options read from spec.options.
const (
	// OptionTargetNamespace restores into another namespace, mapped exactly from the backup's.
	OptionTargetNamespace = "targetNamespace"
	// OptionAllowExistingTarget ("true") allows a restore into a namespace that already holds the
	// target application.
	OptionAllowExistingTarget = "allowExistingTarget"
)

// Reconciler runs one RestoreJob through Velero.
type Reconciler struct {
	Client   client.Client
	Clock    clock.PassiveClock
	Recorder events.EventRecorder
}

// Reconcile drives one RestoreJob; its status is written once, at the end.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, retErr error) {
	rj := &backupsv1.RestoreJob{}
	if err := r.Client.Get(ctx, req.NamespacedName, rj); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if rj.IsTerminal() || !rj.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	backup := &backupsv1.Backup{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: rj.Namespace, Name: rj.Spec.BackupRef.Name}, backup); err != nil {
		// Without the Backup nobody can tell which driver owns the restore: leave it untouched.
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !resolve.Ours(backup.Spec.StrategyRef) {
		return reconcile.Result{}, nil
	}
	if !rj.ClaimableBy(backupjob.DriverName) {
		return reconcile.Result{}, nil // claimed by another driver: theirs
	}
	now := metav1.NewTime(r.Clock.Now())
	if rj.Status.Phase != backupsv1.RestoreJobRunning {
		claim := rj.DeepCopy()
		rj.MarkRunning(now, backupjob.DriverName)
		if err := r.Client.Status().Patch(ctx, rj, client.MergeFromWithOptions(claim, client.MergeFromWithOptimisticLock{})); err != nil {
			return reconcile.Result{}, fmt.Errorf("claiming RestoreJob: %w", err)
		}
	}
	orig := rj.DeepCopy()
	defer func() {
		if apiequality.Semantic.DeepEqual(orig.Status, rj.Status) {
			return
		}
		err := r.Client.Status().Patch(ctx, rj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		if err != nil && retErr == nil {
			res, retErr = reconcile.Result{}, fmt.Errorf("patching RestoreJob status: %w", err)
			return
		}
		if err == nil && rj.IsTerminal() {
			metrics.Finished("restore", string(rj.Status.Phase), rj.Status.CompletedAt.Sub(rj.Status.StartedAt.Time).Seconds())
		}
	}()
	res, err := r.run(ctx, rj, backup, now)
	if f, ok := resolve.AsFailure(err); ok {
		rj.MarkFailed(now, f.Reason, f.Error())
		r.Recorder.Eventf(rj, nil, corev1.EventTypeWarning, f.Reason, "Restore", "%s", f.Error())
		return reconcile.Result{}, nil
	}
	return res, err
}

func (r *Reconciler) run(ctx context.Context, rj *backupsv1.RestoreJob, backup *backupsv1.Backup, now metav1.Time) (reconcile.Result, error) {
	strat, err := resolve.Strategy(ctx, r.Client, backup.Spec.StrategyRef)
	if err != nil {
		return reconcile.Result{}, err
	}
	vr, err := r.ensureRestore(ctx, rj, backup, strat)
	if err != nil {
		return reconcile.Result{}, err
	}
	switch vr.Status.Phase {
	case velerov1.RestorePhaseCompleted:
		rj.MarkSucceeded(now, fmt.Sprintf("Velero restore %s/%s completed", vr.Namespace, vr.Name))
		return reconcile.Result{}, nil
	case velerov1.RestorePhasePartiallyFailed:
		msg := fmt.Sprintf("Velero restore %s/%s completed with %d error(s) and %d warning(s); see `velero restore describe %s --details`",
			vr.Namespace, vr.Name, vr.Status.Errors, vr.Status.Warnings, vr.Name)
		rj.MarkSucceeded(now, msg)
		r.Recorder.Eventf(rj, nil, corev1.EventTypeWarning, backupsv1.ReasonCompletedWithErrors, "Restore", "%s", msg)
		return reconcile.Result{}, nil
	case velerov1.RestorePhaseFailed:
		return reconcile.Result{}, &resolve.Failure{Reason: backupsv1.ReasonFailed,
			Err: fmt.Errorf("velero restore %s/%s failed: %s", vr.Namespace, vr.Name, vr.Status.FailureReason)}
	case velerov1.RestorePhaseFailedValidation:
		return reconcile.Result{}, &resolve.Failure{Reason: backupsv1.ReasonFailed,
			Err: fmt.Errorf("velero restore %s/%s failed validation: %s", vr.Namespace, vr.Name, strings.Join(vr.Status.ValidationErrors, "; "))}
	}
	deadline := backupjob.DefaultDeadline
	if strat.Spec.Deadline != nil {
		deadline = strat.Spec.Deadline.Duration
	}
	left := rj.Status.StartedAt.Add(deadline).Sub(now.Time)
	if left <= 0 {
		return reconcile.Result{}, &resolve.Failure{Reason: backupsv1.ReasonDeadlineExceeded,
			Err: fmt.Errorf("velero restore %s/%s is still %s after the strategy's deadline of %s", vr.Namespace, vr.Name, vr.Status.Phase, deadline)}
	}
	return reconcile.Result{RequeueAfter: left}, nil
}

// ensureRestore finds the run's velero.io Restore or creates it. The restore is confined to the
// application's namespace whatever the template says: includedNamespaces is that namespace only,
// a different target is an exact namespaceMapping, and cluster-scoped resources are excluded.
func (r *Reconciler) ensureRestore(ctx context.Context, rj *backupsv1.RestoreJob, backup *backupsv1.Backup, strat *veleroapi.VeleroBackupStrategy) (*velerov1.Restore, error) {
	veleroNS := backup.Spec.DriverMetadata[names.MetaNamespace]
	veleroBackup := backup.Spec.DriverMetadata[names.MetaBackupName]
	if veleroNS == "" || veleroBackup == "" {
		return nil, &resolve.Failure{Reason: backupsv1.ReasonArtifactReportInvalid,
			Err: fmt.Errorf("Backup %s lacks the driver metadata %s and %s", backup.Name, names.MetaNamespace, names.MetaBackupName)}
	}
	key := client.ObjectKey{Namespace: veleroNS, Name: names.VeleroRestore(rj)}
	vr := &velerov1.Restore{}
	err := r.Client.Get(ctx, key, vr)
	if err == nil {
		if vr.Labels[backupsv1.LabelRestoreJobUID] != string(rj.UID) {
			return nil, &resolve.Failure{Reason: backupsv1.ReasonFailed,
				Err: fmt.Errorf("velero restore %s exists and belongs to another run; it was not adopted", key)}
		}
		return vr, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}

	source := backup.Namespace
	target := rj.Namespace
	if t := rj.Spec.Options[OptionTargetNamespace]; t != "" {
		target = t
	}
	app := backup.Spec.ApplicationRef
	if rj.Spec.TargetApplicationRef != nil {
		app = *rj.Spec.TargetApplicationRef
	}
	if target != source && rj.Spec.Options[OptionAllowExistingTarget] != "true" {
		_, err := resolve.Application(ctx, r.Client, target, app)
		if err == nil {
			return nil, &resolve.Failure{Reason: backupsv1.ReasonFailed,
				Err: fmt.Errorf("namespace %s already holds %s %s; set spec.options.%s: \"true\" to restore over it", target, app.Kind, app.Name, OptionAllowExistingTarget)}
		}
		if _, isFailure := resolve.AsFailure(err); !isFailure {
			return nil, err
		}
	}

	spec := velerov1.RestoreSpec{}
	if strat.Spec.RestoreTemplate != nil {
		appObj := map[string]any{"metadata": map[string]any{"name": app.Name, "namespace": target}}
		if live, err := resolve.Application(ctx, r.Client, source, backup.Spec.ApplicationRef); err == nil {
			appObj = live.Object
		}
		backupObj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(backup)
		if err != nil {
			return nil, err
		}
		params := map[string]string{}
		for k, v := range backup.Spec.DriverMetadata {
			params[k] = v
		}
		ctxData := strategy.Context{Application: appObj, Parameters: params, Mode: strategy.ModeRestore, Backup: backupObj}
		if err := strategy.Render(strat.Spec.RestoreTemplate.Spec, ctxData, &spec); err != nil {
			return nil, &resolve.Failure{Reason: backupsv1.ReasonTemplateRenderFailed,
				Err: fmt.Errorf("VeleroBackupStrategy %s restoreTemplate: %w", strat.Name, err)}
		}
	}
	spec.BackupName = veleroBackup
	spec.ScheduleName = ""
	spec.IncludedNamespaces = []string{source}
	spec.NamespaceMapping = nil
	if target != source {
		spec.NamespaceMapping = map[string]string{source: target}
	}
	noCluster := false
	spec.IncludeClusterResources = &noCluster

	vr = &velerov1.Restore{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: veleroNS, Labels: names.RestoreLabels(rj),
			Annotations: map[string]string{names.AnnotationRun: rj.Namespace + "/" + rj.Name}},
		Spec: spec,
	}
	if err := r.Client.Create(ctx, vr); err != nil {
		return nil, fmt.Errorf("creating velero restore %s: %w", key, err)
	}
	r.Recorder.Eventf(rj, nil, corev1.EventTypeNormal, "VeleroRestoreCreated", "Restore",
		"Created velero restore %s of backup %s from namespace %s into %s", key, veleroBackup, source, target)
	return vr, nil
}

// SetupWithManager registers the reconciler: RestoreJobs, and the Velero Restores made for them.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("velero-restorejob").
		For(&backupsv1.RestoreJob{}).
		Watches(&velerov1.Restore{}, handler.EnqueueRequestsFromMapFunc(names.RunOf)).
		Complete(r)
}
