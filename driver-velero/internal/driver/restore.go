package driver

import (
	"context"
	"fmt"
	"io"
	"strings"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/apis/strategy"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/internal/names"
	"github.com/coffer-backup/coffer/driverkit"
	"github.com/coffer-backup/coffer/velerokit/download"
)

// Restore options read from spec.options.
const (
	// OptionTargetNamespace restores into another namespace, mapped exactly from the backup's: the
	// contract's standard option, authorized at admission.
	OptionTargetNamespace = backupsv1.OptionTargetNamespace
	// OptionAllowExistingTarget ("true") allows a restore into a namespace that already holds the
	// target application.
	OptionAllowExistingTarget = "allowExistingTarget"
	// OptionVolumeData ("false") restores the claims without their data (veleroapi.OptionVolumeData).
	OptionVolumeData = veleroapi.OptionVolumeData
)

// RestoreOptions are the restore options driver-velero takes beyond the standard ones.
type RestoreOptions struct {
	AllowExistingTarget string `json:"allowExistingTarget,omitempty"`
	VolumeData          string `json:"volumeData,omitempty"`
}

// NewRestoreOptions implements driverkit.RestoreOptioner.
func (d *Driver) NewRestoreOptions() any { return &RestoreOptions{} }

// Restore starts the run's Velero restore or observes it.
func (d *Driver) Restore(ctx context.Context, run *driverkit.RestoreRun[Strategy]) (driverkit.RestoreOutcome, error) {
	vr, err := d.ensureRestore(ctx, run)
	if err != nil {
		return driverkit.RestoreOutcome{}, err
	}
	switch vr.Status.Phase {
	case velerov1.RestorePhaseCompleted:
		items, failed := d.restoredItems(ctx, vr, run.Backup.Spec.DriverMetadata[names.MetaStorageLocation], true)
		return driverkit.RestoreOutcome{Done: true, Message: fmt.Sprintf("Velero restore %s/%s completed; %s", vr.Namespace, vr.Name, rbacNote(run.RestoreJob)) + failed,
			Items: items}, nil
	case velerov1.RestorePhasePartiallyFailed:
		items, failed := d.restoredItems(ctx, vr, run.Backup.Spec.DriverMetadata[names.MetaStorageLocation], false)
		msg := fmt.Sprintf("Velero restore %s/%s completed with %d error(s) and %d warning(s); see `velero restore describe %s --details`; %s",
			vr.Namespace, vr.Name, vr.Status.Errors, vr.Status.Warnings, vr.Name, rbacNote(run.RestoreJob)) + failed
		return driverkit.RestoreOutcome{Done: true, Message: msg, Warning: msg, Items: items}, nil
	case velerov1.RestorePhaseFailed:
		return driverkit.RestoreOutcome{}, driverkit.Failf(backupsv1.ReasonFailed,
			"velero restore %s/%s failed: %s", vr.Namespace, vr.Name, orUnknown(vr.Status.FailureReason))
	case velerov1.RestorePhaseFailedValidation:
		return driverkit.RestoreOutcome{}, driverkit.Failf(backupsv1.ReasonFailed,
			"velero restore %s/%s failed validation: %s", vr.Namespace, vr.Name, orUnknown(strings.Join(vr.Status.ValidationErrors, "; ")))
	}
	return driverkit.RestoreOutcome{Waiting: waitingFor("restore", vr.Namespace, vr.Name, string(vr.Status.Phase))}, nil
}

// ensureRestore finds the run's velero.io Restore or creates it. The restore is confined to the
// application's namespace whatever the template says: includedNamespaces is that namespace only,
// a different target is an exact namespaceMapping, and cluster-scoped resources are excluded.
func (d *Driver) ensureRestore(ctx context.Context, run *driverkit.RestoreRun[Strategy]) (*velerov1.Restore, error) {
	rj, backup, strat := run.RestoreJob, run.Backup, run.Strategy
	if err := sameApplication(rj, backup); err != nil {
		return nil, err
	}
	veleroNS := backup.Spec.DriverMetadata[names.MetaNamespace]
	veleroBackup := backup.Spec.DriverMetadata[names.MetaBackupName]
	if veleroNS == "" || veleroBackup == "" {
		return nil, driverkit.Failf(backupsv1.ReasonArtifactReportInvalid,
			"Backup %s lacks the driver metadata %s and %s", backup.Name, names.MetaNamespace, names.MetaBackupName)
	}
	key := client.ObjectKey{Namespace: veleroNS, Name: names.VeleroRestore(rj)}
	vr := &velerov1.Restore{}
	err := d.Client.Get(ctx, key, vr)
	if err == nil {
		if vr.Labels[backupsv1.LabelRestoreJobUID] != string(rj.UID) {
			return nil, driverkit.Failf(backupsv1.ReasonNameConflict, "velero restore %s exists and belongs to another run; it was not adopted", key)
		}
		return vr, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}

	// The namespace the Velero backup holds: the Backup's own, unless it was imported into another
	// (contract BK-12), whose catalog wrote the original in the driver metadata.
	source := backup.Namespace
	if ns := backup.Spec.DriverMetadata[names.MetaSourceNamespace]; ns != "" && backup.Imported() {
		source = ns
	}
	target := rj.TargetNamespace()
	app := backup.Spec.ApplicationRef // the target application too: sameApplication refused any other
	if target != backup.Namespace && !rj.Spec.IsTrue(OptionAllowExistingTarget) {
		_, err := driverkit.Application(ctx, d.Client, target, app)
		if err == nil {
			return nil, driverkit.Failf(backupsv1.ReasonFailed,
				"namespace %s already holds %s %s; set spec.options.%s: \"true\" to restore over it", target, app.Kind, app.Name, OptionAllowExistingTarget)
		}
		if _, isFailure := driverkit.AsFailure(err); !isFailure {
			return nil, err
		}
	}

	spec := velerov1.RestoreSpec{}
	if strat.Spec.RestoreTemplate != nil {
		appObj := map[string]any{"metadata": map[string]any{"name": app.Name, "namespace": target}}
		if live, err := driverkit.Application(ctx, d.Client, backup.Namespace, backup.Spec.ApplicationRef); err == nil {
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
		data := strategy.Context{Application: appObj, Parameters: params, Mode: strategy.ModeRestore, Backup: backupObj}
		if err := strategy.Render(strat.Spec.RestoreTemplate.Spec, data, &spec); err != nil {
			return nil, driverkit.Failf(backupsv1.ReasonTemplateRenderFailed, "VeleroBackupStrategy %s restoreTemplate: %v", strat.Name, err)
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
	withinDeadline(&spec.ItemOperationTimeout, run.Deadline.Sub(run.Now)) // as a backup's
	// An inert restore (a verification's) runs no pod, so no claim of it is ever used, and its
	// objects are compared with the backup's as they were: it is restored unmodified.
	if spec.ResourceModifier == nil && !rj.Spec.IsTrue(backupsv1.OptionInert) {
		if err := d.unbindClaims(ctx, veleroNS, backup, &spec); err != nil {
			return nil, err
		}
	}
	// Backups made before a kind joined the list may hold it.
	spec.ExcludedResources = appendMissing(spec.ExcludedResources, names.ExcludedResources...)
	if rj.Spec.IsTrue(backupsv1.OptionInert) {
		// Nothing that runs (contract RJ-12): bare Pods are left out too, and RBAC.
		spec.ExcludedResources = appendMissing(spec.ExcludedResources, veleroapi.Resources(veleroapi.InertExcluded())...)
	}
	withRBAC, err := restoresRBAC(rj)
	if err != nil {
		return nil, err
	}
	withData, err := restoresVolumeData(rj)
	if err != nil {
		return nil, err
	}
	if !withData {
		noData := false
		spec.RestorePVs = &noData
	}
	if !withRBAC {
		// Velero creates them with its own rights: only coffer-restore-rbac, at admission, weighed
		// the requester's (contract RJ-14).
		spec.ExcludedResources = appendMissing(spec.ExcludedResources, veleroapi.Resources(veleroapi.RBAC())...)
	}

	vr = &velerov1.Restore{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: veleroNS, Labels: names.RestoreLabels(rj),
			Annotations: map[string]string{names.AnnotationRun: rj.Namespace + "/" + rj.Name}},
		Spec: spec,
	}
	if err := d.Client.Create(ctx, vr); err != nil {
		return nil, fmt.Errorf("creating velero restore %s: %w", key, err)
	}
	note := rbacNote(rj)
	if !withData {
		note += "; the volumes' data left out, their claims restored empty (spec.options." + OptionVolumeData + ")"
	}
	d.Recorder.Eventf(rj, nil, corev1.EventTypeNormal, "VeleroRestoreCreated", "Restore",
		"Created velero restore %s of backup %s from namespace %s into %s; %s", key, veleroBackup, source, target, note)
	return vr, nil
}

// restoresRBAC says whether the run restores the backup's Roles, RoleBindings and ServiceAccounts:
// only with spec.options.restoreRBAC "true", which driverkit ran only once the admission policy
// coffer-restore-rbac had checked the requester (contract RJ-14), and never in an inert restore. A
// value other than "true" or "false" fails the run InvalidOption before anything is created.
func restoresRBAC(rj *backupsv1.RestoreJob) (bool, error) {
	want, err := rj.RestoresRBAC()
	if err != nil {
		return false, driverkit.Failf(backupsv1.ReasonInvalidOption, "%v; nothing was restored", err)
	}
	return want && !rj.Spec.IsTrue(backupsv1.OptionInert), nil
}

// restoresVolumeData says whether the run restores the data of the backup's volumes: unless
// spec.options.volumeData is "false". Another value than "true" or "false" fails the run
// InvalidOption before anything is created.
func restoresVolumeData(rj *backupsv1.RestoreJob) (bool, error) {
	v, _, err := rj.Spec.StringOption(OptionVolumeData)
	switch {
	case err != nil:
		return false, driverkit.Failf(backupsv1.ReasonInvalidOption, "%v; nothing was restored", err)
	case v != "" && v != "true" && v != "false":
		return false, driverkit.Failf(backupsv1.ReasonInvalidOption, "spec.options.%s is %.64q; it must be \"true\" or \"false\"; nothing was restored", OptionVolumeData, v)
	}
	return v != "false", nil
}

// rbacNote says in the run's event and Ready message whether the backup's Roles, RoleBindings and
// ServiceAccounts were restored, so that their absence surprises nobody.
func rbacNote(rj *backupsv1.RestoreJob) string {
	if ok, _ := restoresRBAC(rj); ok {
		return fmt.Sprintf("Roles, RoleBindings and ServiceAccounts restored as requested (spec.options.%s, admitted by %s)",
			backupsv1.OptionRestoreRBAC, backupsv1.RestoreRBACPolicy)
	}
	if rj.Spec.IsTrue(backupsv1.OptionInert) {
		return "Roles, RoleBindings and ServiceAccounts left out (inert restore)"
	}
	return fmt.Sprintf("Roles, RoleBindings and ServiceAccounts left out: set spec.options.%s: \"true\" to restore them, which needs the right to create, bind and escalate Roles in namespace %s",
		backupsv1.OptionRestoreRBAC, rj.TargetNamespace())
}

// sameApplication refuses a restore whose targetApplicationRef names another application than the
// Backup's (contract RJ-11). A Velero backup holds the objects of the application it was taken of,
// under their names: restored, they are that application again, whatever the RestoreJob calls its
// target.
func sameApplication(rj *backupsv1.RestoreJob, backup *backupsv1.Backup) error {
	t, src := rj.Spec.TargetApplicationRef, backup.Spec.ApplicationRef
	if t == nil || backupsv1.ApplicationAPIGroup(*t) == backupsv1.ApplicationAPIGroup(src) && t.Kind == src.Kind && t.Name == src.Name {
		return nil
	}
	return driverkit.Failf(backupsv1.ReasonTargetApplicationUnsupported,
		"the Velero driver restores a Backup only into the application it was taken of (%s %s), in its own namespace or, with spec.options.%s, under the same name in another namespace; it cannot restore into %s %s and restored nothing: create a RestoreJob without targetApplicationRef",
		src.Kind, src.Name, OptionTargetNamespace, t.Kind, t.Name)
}

// restoredItems counts the restore's items by what Velero did with them (its RestoreResourceList),
// best effort: nil when the list cannot be read. Velero lists as failed both the items it could not
// create (errors) and those it found already there with other content and left as they were
// (warnings; in a namespace restored into, the API server's own kube-root-ca.crt, say). When the
// restore completed without errors (completed), every such item is of the second sort and counts as
// skipped; the message names them either way.
func (d *Driver) restoredItems(ctx context.Context, vr *velerov1.Restore, location string, completed bool) (_ *backupsv1.RestoreItems, failed string) {
	var counts map[string]int64
	var failedItems []string
	err := d.fetch(ctx, vr.Namespace, backupsv1.BoundedName(backupsv1.MaxGeneratedNameLength, vr.Name, "resources"), location,
		velerov1.DownloadTarget{Kind: velerov1.DownloadTargetKindRestoreResourceList, Name: vr.Name}, func(r io.Reader) (err error) {
			counts, failedItems, err = download.ResourceListFailed(r, 5)
			return err
		})
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("Velero's restore resource list could not be read", "error", err.Error())
		return nil, ""
	}
	items := &backupsv1.RestoreItems{Restored: counts["created"] + counts["updated"], Skipped: counts["skipped"], Failed: counts["failed"]}
	if n := counts["failed"]; n > 0 {
		failed = "; not restored: "
		if completed {
			items.Skipped, items.Failed = items.Skipped+n, 0
			failed = "; left as found (already there with other content): "
		}
		failed += strings.Join(failedItems, ", ")
		if n > int64(len(failedItems)) {
			failed += fmt.Sprintf(" and %d more", n-int64(len(failedItems)))
		}
	}
	return items, failed
}

// unbindClaims makes a restore that is not inert apply the claims modifier
// (veleroapi.RestoreClaimsModifier) when Velero's namespace holds it: cluster-scoped resources are never restored, so a restored claim
// must not name the volume it had. A Backup that records volume data cannot be restored without
// it (its claims would wait for their old volumes until the run's deadline): the run fails
// ClaimsModifierMissing, saying how to create it. A Backup without recorded volume data is
// restored as it is.
func (d *Driver) unbindClaims(ctx context.Context, veleroNS string, backup *backupsv1.Backup, spec *velerov1.RestoreSpec) error {
	err := d.uncached().Get(ctx, client.ObjectKey{Namespace: veleroNS, Name: veleroapi.RestoreClaimsModifier}, &corev1.ConfigMap{})
	switch {
	case err == nil:
		spec.ResourceModifier = &corev1.TypedLocalObjectReference{Kind: "ConfigMap", Name: veleroapi.RestoreClaimsModifier}
		return nil
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading the restore's claims modifier %s/%s: %w", veleroNS, veleroapi.RestoreClaimsModifier, err)
	}
	n, err := d.volumesOf(ctx, veleroNS, backup)
	if err != nil || n == 0 {
		return err
	}
	return driverkit.Failf(ReasonClaimsModifierMissing,
		"Backup %s holds the data of %d volume(s), and their claims need new volumes: create ConfigMap %s in namespace %s with key %s as docs/driver-velero.md shows (Velero's resource modifier that unbinds restored claims), or name a resourceModifier in the strategy's restoreTemplate; nothing was created",
		backup.Name, n, veleroapi.RestoreClaimsModifier, veleroNS, veleroapi.RestoreClaimsModifierKey)
}

// volumesOf counts the volumes whose data Backup backup holds: its record
// (status.underlyingResources) when it has one, else, for a Backup that has none (imported from
// another cluster's record, which is written before Velero backs the volumes up, or made before
// the driver recorded them), the volume records Velero keeps of its backup (a storage sync brings
// a location's file-system backups along with its backups). A Velero backup that is gone counts
// none: the restore fails on it, saying so.
func (d *Driver) volumesOf(ctx context.Context, veleroNS string, backup *backupsv1.Backup) (int, error) {
	data, ok, _ := veleroapi.VolumeDataOf(backup.Status.UnderlyingResources)
	if ok {
		return len(data.Volumes), nil
	}
	vb := &velerov1.Backup{}
	err := d.uncached().Get(ctx, client.ObjectKey{Namespace: veleroNS, Name: backup.Spec.DriverMetadata[names.MetaBackupName]}, vb)
	switch {
	case apierrors.IsNotFound(err):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("reading velero backup %s/%s: %w", veleroNS, backup.Spec.DriverMetadata[names.MetaBackupName], err)
	}
	data, err = d.volumeRecords(ctx, vb)
	return len(data.Volumes), err
}

// ReasonClaimsModifierMissing (a failed RestoreJob): the Backup holds volume data, and the Velero
// namespace lacks the resource modifier that lets restored claims get new volumes.
const ReasonClaimsModifierMissing = "ClaimsModifierMissing"
