package velerocheck

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	velerodriverv1 "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/velerokit/download"
	"github.com/coffer-backup/coffer/verifier/internal/artifact"
	"github.com/coffer-backup/coffer/verifier/internal/backend"
	"github.com/coffer-backup/coffer/verifier/internal/sandbox"
)

// ArtifactReader reads the artifacts of driver-velero's Backups for the coffer backend: the
// Velero backup each records (driverMetadata), read as the velero backend reads it (the tarball
// through a DownloadRequest), and its content compared with a restore into a sandbox by the
// velero backend's diff. It is the Registry's reader of velerodriver.backups.cozystack.io.
type ArtifactReader struct {
	Checker *Checker
}

var (
	_ artifact.Comparer      = (*ArtifactReader)(nil)
	_ artifact.VolumeChecker = (*ArtifactReader)(nil)
	_ artifact.Cleaner       = (*ArtifactReader)(nil)
	_ artifact.Starter       = (*ArtifactReader)(nil)
)

// Digest reads the tarball of the Velero backup that Backup b records.
func (a *ArtifactReader) Digest(ctx context.Context, run *securityv1.BackupVerifyRun, b *backupsv1.Backup) (download.Digest, error) {
	vrun, err := veleroRun(run, b)
	if err != nil {
		return download.Digest{}, err
	}
	vout, _, _, err := a.Checker.checksumTarball(ctx, vrun)
	if err != nil {
		return download.Digest{}, err
	}
	if vout.ComputedChecksum == "" {
		// The Velero backup or its tarball is gone: what the velero backend found says where.
		if err := veleroMissing(b, vout); err != nil {
			return download.Digest{}, err
		}
		for _, f := range vout.Findings {
			if f.Severity.AtLeast(securityv1.SeverityHigh) {
				return download.Digest{}, artifact.Missing(f.Message)
			}
		}
		return download.Digest{}, reconcile.TerminalError(fmt.Errorf("the Velero backup %s could not be read", vrun.Spec.BackupRef.Name))
	}
	return download.Digest{SizeBytes: vout.SizeBytes, SHA256: strings.TrimPrefix(vout.ComputedChecksum, "sha256:")}, nil
}

// CheckVolumes reads the volume data of the Velero backup Backup b records (volumes.go), of b's
// namespace only.
func (a *ArtifactReader) CheckVolumes(ctx context.Context, run *securityv1.BackupVerifyRun, b *backupsv1.Backup, out *backend.Outcome) error {
	vrun, err := veleroRun(run, b)
	if err != nil {
		return err
	}
	var located backend.Outcome
	vb, bsl, err := a.Checker.locate(ctx, vrun, &located)
	if err != nil {
		return err
	}
	if vb == nil {
		// Gone since its tarball was read: what was found says why.
		out.Findings = append(out.Findings, located.Findings...)
		return nil
	}
	seen, err := a.Checker.checkVolumes(ctx, vb, bsl, b.Namespace, out)
	if err != nil || seen == nil {
		return err
	}
	// What the Backup records and Velero holds no record of here (Velero's storage sync does not
	// bring DataUploads along) was not read: the verdict says so.
	data, _, err := velerodriverv1.VolumeDataOf(b.Status.UnderlyingResources)
	if err != nil {
		out.Add(securityv1.CodeVolumeDataNotRead, securityv1.SeverityMedium, "backups.cozystack.io/Backup "+b.Namespace+"/"+b.Name,
			"the Backup's record of its volume data does not parse, so what Velero holds here was not compared with it: "+err.Error())
		return nil
	}
	for _, v := range data.Volumes {
		if v.SnapshotID != "" && !seen[v.SnapshotID] {
			out.Add(securityv1.CodeVolumeDataNotRead, securityv1.SeverityMedium, "backups.cozystack.io/Backup "+b.Namespace+"/"+b.Name,
				fmt.Sprintf("the Backup records the data of a volume of namespace %s (%s, kopia snapshot %s), and Velero holds no record of it here (PodVolumeBackup or DataUpload of backup %s): it was not read",
					v.Namespace, v.Method, v.SnapshotID, vb.Name))
		}
	}
	return nil
}

// CompareRestore diffs sandbox with the Velero backup Backup b records: the Backup's namespace,
// restored into the sandbox as through Velero's namespaceMapping, leaving out what driver-velero's
// inert restore leaves out and what no sandbox may hold.
func (a *ArtifactReader) CompareRestore(ctx context.Context, run *securityv1.BackupVerifyRun, b *backupsv1.Backup, sandboxNS string) (backend.Outcome, string, error) {
	vrun, err := veleroRun(run, b)
	if err != nil {
		return backend.Outcome{}, "", err
	}
	excluded := velerodriverv1.InertExcluded()
	maps.Copy(excluded, sandbox.NeverInSandbox)
	vout, restored, err := a.Checker.CompareRestore(ctx, vrun, b.Namespace, sandboxNS, excluded)
	if err != nil {
		return vout, "", err
	}
	if err := veleroMissing(b, vout); err != nil {
		return vout, "", err
	}
	ref := vrun.Spec.BackupRef.Namespace + "/" + vrun.Spec.BackupRef.Name
	vout.Detail(artifact.DetailContentDiff, "Velero backup "+ref)
	compared := vout.Details[DetailObjectsCompared]
	if compared == "" {
		compared = "0"
	}
	var msg string
	if len(vout.Findings) > 0 {
		msg = fmt.Sprintf("compared with Velero backup %s: %s object(s) compared by content, %d finding(s)", ref, compared, len(vout.Findings))
	} else {
		msg = fmt.Sprintf("compared with Velero backup %s: all %d object(s) of namespace %s it restores are in the sandbox, %s of them compared by content and identical",
			ref, vout.ObjectsExpected, b.Namespace, compared)
	}
	if n := vout.Details[DetailVolumesRestored]; n != "" && n != "0" {
		msg += fmt.Sprintf("; %s volume(s) restored into a volume sandbox and compared with the repository file by file (%s file(s))", n, vout.Details[DetailVolumeFilesCompared])
	}
	if volumes := unverifiedVolumes(b, restored); volumes != "" {
		vout.Add(securityv1.CodeVolumeDataNotVerified, securityv1.SeverityInfo, "backups.cozystack.io/Backup "+b.Namespace+"/"+b.Name,
			"the Backup records volume data that this verification neither restored nor compared: "+volumes)
		msg += "; its volume data was not verified"
	}
	return vout, msg, nil
}

// StartRestore starts the restore of the volume data of Backup b's namespace (CompareRestore's
// volume phase) beside the driver's restore of its objects (startVolumes).
func (a *ArtifactReader) StartRestore(ctx context.Context, run *securityv1.BackupVerifyRun, b *backupsv1.Backup) {
	vrun, err := veleroRun(run, b)
	if err != nil {
		return
	}
	c, out := a.Checker, backend.Outcome{}
	vb, bsl, err := c.locate(ctx, vrun, &out)
	if err != nil || vb == nil {
		return
	}
	objects, _, err := c.backupObjects(ctx, vrun, vb, bsl, &out)
	if err != nil || objects == nil {
		return
	}
	c.startVolumes(ctx, vrun, vb, bsl, objects, []string{b.Namespace})
}

// RestoreOptions asks driver-velero to restore the claims into the object sandbox without their
// data: the volume phase restores the data into a volume sandbox, where readers compare it; in the
// object sandbox nothing would read it, and a data mover's restore would move it twice.
func (a *ArtifactReader) RestoreOptions() map[string]string {
	return map[string]string{velerodriverv1.OptionVolumeData: "false"}
}

// Cleanup ends what the volume phase of a coffer run's full-restore made in Velero's namespace
// (the volume Restore, labelled with the run's UID): it deletes the run's Restores that ended and,
// while one has not (Velero would re-create a deleted sandbox), says so with a cleanup-deferred
// finding: the caller then keeps the run's sandboxes, and the Sweeper deletes them once it ended.
func (a *ArtifactReader) Cleanup(ctx context.Context, run *securityv1.BackupVerifyRun) []securityv1.Finding {
	a.Checker.forgetRead(run)
	hold, err := a.Checker.RestoreHold(ctx, run.UID)
	switch {
	case err != nil:
		return []securityv1.Finding{{Code: securityv1.CodeCleanupDeferred, Severity: securityv1.SeverityInfo, Object: "velero.io/Restore",
			Message: "the run's Velero Restores could not be read, so its sandboxes are kept, confined, until the sweeper finds them ended: " + err.Error()}}
	case hold:
		return []securityv1.Finding{{Code: securityv1.CodeCleanupDeferred, Severity: securityv1.SeverityInfo, Object: "velero.io/Restore",
			Message: "Velero is still restoring the volume data: the run's Restore and its sandboxes are kept, confined, and deleted once it ends"}}
	}
	return nil
}

// unverifiedVolumes lists the volumes whose data Backup b records (driver-velero's
// VeleroVolumeData) that the full-restore did not restore (restored: the kopia snapshots it did):
// any Velero holds no complete kopia record of; "" when none.
func unverifiedVolumes(b *backupsv1.Backup, restored []string) string {
	data, _, err := velerodriverv1.VolumeDataOf(b.Status.UnderlyingResources)
	if err != nil {
		return "its record of them does not parse: " + err.Error()
	}
	var names []string
	for _, v := range data.Volumes {
		if v.SnapshotID != "" && slices.Contains(restored, v.SnapshotID) {
			continue
		}
		name := v.Namespace + "/" + v.PersistentVolumeClaim
		if v.Pod != "" {
			name = v.Namespace + "/" + v.Pod + "/" + v.PodVolume
		}
		snapshot := v.SnapshotID
		if snapshot == "" {
			snapshot = "none"
		}
		names = append(names, fmt.Sprintf("%s (%s, snapshot %s, %d bytes)", name, v.Method, snapshot, v.Bytes))
	}
	if len(names) == 0 {
		return ""
	}
	return backend.Truncate(fmt.Sprintf("%d volume(s): %s", len(names), strings.Join(names, ", ")), 2048)
}

// veleroRun is run with its backupRef turned to the Velero backup that driver-velero recorded for
// Backup b.
func veleroRun(run *securityv1.BackupVerifyRun, b *backupsv1.Backup) (*securityv1.BackupVerifyRun, error) {
	vrun := run.DeepCopy()
	vrun.Spec.BackupRef = securityv1.BackupRef{Name: b.Spec.DriverMetadata[velerodriverv1.MetaBackupName], Namespace: b.Spec.DriverMetadata[velerodriverv1.MetaNamespace]}
	if vrun.Spec.BackupRef.Namespace == "" {
		vrun.Spec.BackupRef.Namespace = velerodriverv1.DefaultVeleroNamespace
	}
	if vrun.Spec.BackupRef.Name == "" {
		return nil, reconcile.TerminalError(fmt.Errorf("Backup %s of driver %s records no Velero backup (driverMetadata.%s)", client.ObjectKeyFromObject(b), velerodriverv1.Group, velerodriverv1.MetaBackupName))
	}
	return vrun, nil
}

// veleroMissing is the error of a reading of Velero-made Backup b that found Velero not installed
// where the verifier runs: that says nothing about the Backup, so no verdict (above all no failed
// one) is recorded.
func veleroMissing(b *backupsv1.Backup, vout backend.Outcome) error {
	for _, f := range vout.Findings {
		if f.Code == securityv1.CodeVeleroCRDMissing {
			return reconcile.TerminalError(fmt.Errorf("Backup %s was made by %s, but %s: it cannot be read through Velero",
				client.ObjectKeyFromObject(b), velerodriverv1.Group, f.Message))
		}
	}
	return nil
}
