package driver

import (
	"context"
	"fmt"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/driverkit"
)

var _ driverkit.RunFinisher = (*Driver)(nil)

// waitingFor says what an unfinished Velero backup or restore (kind) waits for; the kit quotes it
// when the run misses its deadline. One without a phase (or New) was never picked up: no Velero
// server watches its namespace, or the server is down.
func waitingFor(kind, ns, name, phase string) string {
	if phase == "" || phase == string(velerov1.BackupPhaseNew) {
		return fmt.Sprintf("velero %s %s/%s had not been picked up by a Velero server (check that the velero server of namespace %s runs)", kind, ns, name, ns)
	}
	return fmt.Sprintf("velero %s %s/%s is still %s", kind, ns, name, phase)
}

// RunFinished cancels what a failed run left for Velero to do: its Velero backup or restore, when
// Velero has not picked it up (no phase, or New), is deleted, so that it does not run after the
// run said it failed (a Velero server away past the run's deadline comes back and would run
// it; a restore would then write into the application's namespace). The delete is conditional on
// the object being unchanged since it was read: one Velero has just started is left to finish.
func (d *Driver) RunFinished(ctx context.Context, obj client.Object) error {
	var list client.ObjectList
	var label, kind, reason string
	switch run := obj.(type) {
	case *backupsv1.BackupJob:
		if run.Status.Phase != backupsv1.BackupJobFailed {
			return nil
		}
		list, label, kind, reason = &velerov1.BackupList{}, backupsv1.LabelBackupJobUID, "backup", "VeleroBackupCancelled"
	case *backupsv1.RestoreJob:
		if run.Status.Phase != backupsv1.RestoreJobFailed {
			return nil
		}
		list, label, kind, reason = &velerov1.RestoreList{}, backupsv1.LabelRestoreJobUID, "restore", "VeleroRestoreCancelled"
	default:
		return nil
	}
	if err := d.Client.List(ctx, list, client.MatchingLabels{label: string(obj.GetUID())}); err != nil {
		return fmt.Errorf("listing the velero %ss of a failed run: %w", kind, err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return err
	}
	for _, it := range items {
		o := it.(client.Object)
		if started(o) {
			continue
		}
		uid, rv := o.GetUID(), o.GetResourceVersion()
		err := d.Client.Delete(ctx, o, client.Preconditions{UID: &uid, ResourceVersion: &rv})
		if err = client.IgnoreNotFound(err); err != nil {
			// Changed meanwhile (Velero picked it up, say): the next look decides again.
			return fmt.Errorf("cancelling velero %s %s of a failed run: %w", kind, client.ObjectKeyFromObject(o), err)
		}
		ctrl.LoggerFrom(ctx).Info("Cancelled the Velero object of a failed run, which Velero had not started", "kind", kind, "velero", klog.KObj(o))
		d.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, reason, "Cancel",
			"Deleted velero %s %s, which Velero had not started, so that it does not run after the run failed", kind, client.ObjectKeyFromObject(o))
	}
	return nil
}

// started reports whether Velero has picked a backup or restore up.
func started(o client.Object) bool {
	switch v := o.(type) {
	case *velerov1.Backup:
		return v.Status.Phase != "" && v.Status.Phase != velerov1.BackupPhaseNew
	case *velerov1.Restore:
		return v.Status.Phase != "" && v.Status.Phase != velerov1.RestorePhaseNew
	}
	return true
}
