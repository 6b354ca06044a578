package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/apis/strategy"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/internal/names"
	"github.com/coffer-backup/coffer/driverkit"
	"github.com/coffer-backup/coffer/velerokit/download"
)

// ReasonNamespaceNotAllowed fails a run whose template names a namespace other than the run's own.
const ReasonNamespaceNotAllowed = "NamespaceNotAllowed"

// Backup starts the run's Velero backup or observes it; once Velero has stored it, it measures the
// tarball once and reports the artifact.
func (d *Driver) Backup(ctx context.Context, run *driverkit.BackupRun[Strategy]) (driverkit.BackupOutcome, error) {
	vb, err := d.ensureVeleroBackup(ctx, run)
	if err != nil {
		return driverkit.BackupOutcome{}, err
	}
	switch vb.Status.Phase {
	case velerov1.BackupPhaseCompleted, velerov1.BackupPhasePartiallyFailed:
		res, err := d.complete(ctx, run, vb)
		return driverkit.BackupOutcome{Result: res}, err
	case velerov1.BackupPhaseFailed:
		return driverkit.BackupOutcome{}, driverkit.Failf(backupsv1.ReasonFailed,
			"velero backup %s/%s failed: %s", vb.Namespace, vb.Name, orUnknown(vb.Status.FailureReason))
	case velerov1.BackupPhaseFailedValidation:
		return driverkit.BackupOutcome{}, driverkit.Failf(backupsv1.ReasonFailed,
			"velero backup %s/%s failed validation: %s", vb.Namespace, vb.Name, orUnknown(strings.Join(vb.Status.ValidationErrors, "; ")))
	}
	// Velero Backup changes wake the run through the watch.
	return driverkit.BackupOutcome{Waiting: waitingFor("backup", vb.Namespace, vb.Name, string(vb.Status.Phase))}, nil
}

// ensureVeleroBackup finds the run's velero.io Backup or creates it from the rendered template.
// The backup holds the BackupJob's namespace only: a template may name that namespace (or "*"),
// never another one. Its ttl must outlast the retention of the run's Plan (checkTTL); a Velero
// Backup that exists already (a crash after its creation) is adopted without that check.
func (d *Driver) ensureVeleroBackup(ctx context.Context, run *driverkit.BackupRun[Strategy]) (*velerov1.Backup, error) {
	job, strat := run.Job, run.Strategy
	key := client.ObjectKey{Namespace: veleroNamespace(strat), Name: names.VeleroBackup(job)}
	vb := &velerov1.Backup{}
	err := d.Client.Get(ctx, key, vb)
	if apierrors.IsNotFound(err) && d.settles() {
		// The cache holds no settled Velero backup (settle.go): a run whose backup was settled
		// before a crash (between the settle patch and its Backup's creation) finds it here,
		// rather than failing to create it again until its deadline.
		err = d.Live.Get(ctx, key, vb)
	}
	if err == nil {
		if vb.Labels[backupsv1.LabelBackupJobUID] != string(job.UID) {
			return nil, driverkit.Failf(backupsv1.ReasonNameConflict,
				"velero backup %s exists and belongs to another run (labels %v); it was not adopted", key, vb.Labels)
		}
		return vb, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	app, err := driverkit.Application(ctx, d.Client, job.Namespace, job.Spec.ApplicationRef)
	if err != nil {
		return nil, err
	}
	spec := velerov1.BackupSpec{}
	data := strategy.Context{Application: app.Object, Parameters: run.Resolved.Parameters, Mode: strategy.ModeBackup}
	if err := strategy.Render(strat.Spec.BackupTemplate.Spec, data, &spec); err != nil {
		return nil, driverkit.Failf(backupsv1.ReasonTemplateRenderFailed, "VeleroBackupStrategy %s backupTemplate: %v", strat.Name, err)
	}
	for _, ns := range spec.IncludedNamespaces {
		if ns != job.Namespace && ns != "*" {
			return nil, driverkit.Failf(ReasonNamespaceNotAllowed,
				"VeleroBackupStrategy %s includes namespace %q in the backup of a BackupJob in %s; a backup holds its BackupJob's namespace only: fix the template's includedNamespaces",
				strat.Name, ns, job.Namespace)
		}
	}
	spec.IncludedNamespaces = []string{job.Namespace}
	spec.ExcludedNamespaces = nil
	if spec.StorageLocation == "" {
		spec.StorageLocation = run.Resolved.Parameters[names.ParamStorageLocation]
	}
	spec.ExcludedResources = appendMissing(spec.ExcludedResources, names.ExcludedResources...)
	// Velero's own waits (a CSI snapshot becoming ready; asynchronous item operations such as
	// moving a snapshot's data, 4h by Velero's default) end by the run's deadline: a run that
	// fails at its deadline leaves no data movement running for hours after.
	withinDeadline(&spec.CSISnapshotTimeout, run.Deadline.Sub(run.Now))
	withinDeadline(&spec.ItemOperationTimeout, run.Deadline.Sub(run.Now))
	if err := d.checkTTL(ctx, job, strat, &spec); err != nil {
		return nil, err
	}
	// The record of the Backup this run makes (contract BK-11) rides with the Velero backup's
	// metadata into the storage location, and back into any cluster whose Velero syncs it.
	record, err := d.kit.RecordTemplate(ctx, run, veleroMetadata(key, spec.StorageLocation))
	if err != nil {
		return nil, err
	}
	text, err := json.Marshal(record)
	if err != nil {
		return nil, err
	}
	vb = &velerov1.Backup{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: names.JobLabels(job),
		Annotations: map[string]string{names.AnnotationRun: job.Namespace + "/" + job.Name, veleroapi.AnnotationRecord: string(text)}}, Spec: spec}
	if err := d.Client.Create(ctx, vb); err != nil {
		if apierrors.IsAlreadyExists(err) { // a stale cache: the next reconcile adopts it
			return nil, fmt.Errorf("velero backup %s appeared concurrently: %w", key, err)
		}
		return nil, fmt.Errorf("creating velero backup %s: %w", key, err)
	}
	ctrl.LoggerFrom(ctx).Info("Created Velero Backup", "veleroBackup", klog.KObj(vb))
	d.Recorder.Eventf(job, nil, corev1.EventTypeNormal, "VeleroBackupCreated", "Backup", "Created velero backup %s", key)
	return vb, nil
}

// complete measures the tarball once (or reuses the artifact recorded before a crash), records the
// checksum on the Velero Backup and describes the result.
func (d *Driver) complete(ctx context.Context, run *driverkit.BackupRun[Strategy], vb *velerov1.Backup) (*driverkit.BackupResult, error) {
	var artifact *backupsv1.BackupArtifact
	if run.Backup != nil && run.Backup.Status.Artifact != nil {
		artifact = run.Backup.Status.Artifact
	} else {
		var err error
		if artifact, err = d.measure(ctx, vb); err != nil {
			return nil, err
		}
	}
	// Its volume data, read before it is settled: nothing that can fail comes between settling
	// it and the Backup that records it.
	volumes, err := d.volumeData(ctx, vb)
	if err != nil {
		return nil, err
	}
	// Measured, the Velero backup is settled (settle.go) with the same write: the Backup made
	// from it next needs nothing more of it than a watch of its going.
	if settle := d.settles() && vb.Labels[names.LabelSettled] != "true"; settle || vb.Annotations[backupsv1.AnnotationChecksum] != artifact.Checksum {
		orig := vb.DeepCopy()
		if vb.Annotations == nil {
			vb.Annotations = map[string]string{}
		}
		vb.Annotations[backupsv1.AnnotationChecksum] = artifact.Checksum
		if settle {
			markSettled(vb)
		}
		if err := d.Client.Patch(ctx, vb, client.MergeFrom(orig)); err != nil {
			return nil, fmt.Errorf("recording the checksum on velero backup %s: %w", vb.Name, err)
		}
	}
	partial := metav1.Condition{Type: backupsv1.ConditionPartiallyFailed, Status: metav1.ConditionFalse,
		Reason: backupsv1.ReasonSucceeded, Message: "Velero completed without errors"}
	if vb.Status.Phase == velerov1.BackupPhasePartiallyFailed {
		partial.Status, partial.Reason = metav1.ConditionTrue, backupsv1.ReasonCompletedWithErrors
		partial.Message = fmt.Sprintf("Velero completed backup %s/%s with %d error(s) and %d warning(s)%s",
			vb.Namespace, vb.Name, vb.Status.Errors, vb.Status.Warnings, reasonSuffix(vb.Status.FailureReason))
		if details := d.results(ctx, vb); len(details) > 0 {
			partial.Message += ":\n" + strings.Join(details, "\n")
		}
	}
	_ = download.Cleanup(ctx, d.Client, vb.Namespace, names.Download(vb.Name))
	var takenAt *metav1.Time
	if vb.Status.StartTimestamp != nil {
		takenAt = vb.Status.StartTimestamp
	}
	return &driverkit.BackupResult{
		Artifact:       *artifact,
		TakenAt:        takenAt,
		DriverMetadata: veleroMetadata(client.ObjectKeyFromObject(vb), vb.Spec.StorageLocation),
		Finalize:       true,
		Location:       fmt.Sprintf("Velero backup %s/%s is stored in location %s", vb.Namespace, vb.Name, vb.Spec.StorageLocation),
		Conditions:     []metav1.Condition{partial},
		// Volume data: what each volume's snapshot is, for verifiers and restores.
		UnderlyingResources: volumes,
	}, nil
}

// veleroMetadata is the driver metadata of a Backup of the Velero backup key, stored in location.
func veleroMetadata(key client.ObjectKey, location string) map[string]string {
	return map[string]string{names.MetaBackupName: key.Name, names.MetaNamespace: key.Namespace, names.MetaStorageLocation: location}
}

// measure streams the backup tarball once through a DownloadRequest and returns its artifact. An
// object store that does not answer is a transient fault: retried until the run's deadline, then
// reported as ObjectStoreUnavailable.
func (d *Driver) measure(ctx context.Context, vb *velerov1.Backup) (*backupsv1.BackupArtifact, error) {
	bsl := &velerov1.BackupStorageLocation{}
	if err := d.Client.Get(ctx, client.ObjectKey{Namespace: vb.Namespace, Name: vb.Spec.StorageLocation}, bsl); err != nil {
		return nil, fmt.Errorf("reading BackupStorageLocation %s/%s: %w", vb.Namespace, vb.Spec.StorageLocation, err)
	}
	httpc, err := d.httpFor(bsl)
	if err != nil {
		return nil, driverkit.Failf(backupsv1.ReasonFailed, "BackupStorageLocation %s/%s: %v", bsl.Namespace, bsl.Name, err)
	}
	if d.HTTP == nil {
		defer httpc.CloseIdleConnections()
	}
	url, err := download.Request(ctx, d.Client, d.Client, vb.Namespace, names.Download(vb.Name),
		velerov1.DownloadTarget{Kind: velerov1.DownloadTargetKindBackupContents, Name: vb.Name}, d.DownloadTimeout)
	if err != nil {
		return nil, driverkit.Transientf(driverkit.ReasonObjectStoreUnavailable,
			"Velero did not hand out the tarball of backup %s/%s: %v; check the velero server and its BackupStorageLocation", vb.Namespace, vb.Name, download.Redact(err))
	}
	dg, err := download.HashURL(ctx, httpc, url)
	if err != nil {
		return nil, driverkit.Transientf(driverkit.ReasonObjectStoreUnavailable,
			"reading the tarball of velero backup %s/%s from the object store: %v; check the object store and its credentials", vb.Namespace, vb.Name, download.Redact(err))
	}
	return &backupsv1.BackupArtifact{URI: artifactURI(bsl, vb), SizeBytes: dg.SizeBytes, Checksum: dg.Checksum()}, nil
}

// httpFor is the HTTP client for a storage location's presigned URLs: d.HTTP when set, else one
// with timeouts that trusts the location's caCert.
func (d *Driver) httpFor(bsl *velerov1.BackupStorageLocation) (*http.Client, error) {
	if d.HTTP != nil {
		return d.HTTP, nil
	}
	var ca []byte
	if bsl.Spec.ObjectStorage != nil {
		ca = bsl.Spec.ObjectStorage.CACert
	}
	return download.NewHTTPClient(ca)
}

// artifactURI locates the tarball in the storage location: <provider>://<bucket>/<prefix>/backups/<name>/<name>.tar.gz.
func artifactURI(bsl *velerov1.BackupStorageLocation, vb *velerov1.Backup) string {
	scheme := bsl.Spec.Provider
	if scheme == "aws" || scheme == "velero.io/aws" {
		scheme = "s3"
	}
	var bucket, prefix string
	if bsl.Spec.ObjectStorage != nil {
		bucket, prefix = bsl.Spec.ObjectStorage.Bucket, strings.Trim(bsl.Spec.ObjectStorage.Prefix, "/")
	}
	path := strings.Join([]string{"backups", vb.Name, vb.Name + ".tar.gz"}, "/")
	if prefix != "" {
		path = prefix + "/" + path
	}
	return fmt.Sprintf("%s://%s/%s", scheme, bucket, path)
}

// results lists Velero's errors and warnings of a backup (best effort: on failure, a line saying so).
func (d *Driver) results(ctx context.Context, vb *velerov1.Backup) []string {
	var lines []string
	err := d.fetch(ctx, vb.Namespace, backupsv1.BoundedName(backupsv1.MaxGeneratedNameLength, vb.Name, "results"), vb.Spec.StorageLocation,
		velerov1.DownloadTarget{Kind: velerov1.DownloadTargetKindBackupResults, Name: vb.Name}, func(r io.Reader) error {
			errs, warns, err := download.Results(r, 10)
			lines = append(prefix("error: ", errs), prefix("warning: ", warns)...)
			return err
		})
	if err != nil {
		return []string{"Velero's error and warning messages could not be read: " + err.Error()}
	}
	return lines
}

// fetch streams one file of a Velero backup or restore (target) through the DownloadRequest name
// in ns to read, with the HTTP client of the storage location (its caCert trusted), and deletes
// the DownloadRequest afterwards. Errors carry no presigned URL.
func (d *Driver) fetch(ctx context.Context, ns, name, location string, target velerov1.DownloadTarget, read func(io.Reader) error) error {
	defer func() { _ = download.Cleanup(context.WithoutCancel(ctx), d.Client, ns, name) }()
	bsl := &velerov1.BackupStorageLocation{}
	if err := d.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: location}, bsl); err != nil {
		return fmt.Errorf("reading BackupStorageLocation %s/%s: %w", ns, location, err)
	}
	httpc, err := d.httpFor(bsl)
	if err != nil {
		return err
	}
	if d.HTTP == nil {
		defer httpc.CloseIdleConnections()
	}
	url, err := download.Request(ctx, d.Client, d.Client, ns, name, target, d.DownloadTimeout)
	if err != nil {
		return download.Redact(err)
	}
	body, err := download.Open(ctx, httpc, url)
	if err != nil {
		return err
	}
	defer body.Close()
	return download.Redact(read(body))
}

func prefix(p string, lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = p + l
	}
	return out
}

func reasonSuffix(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

func appendMissing(list []string, items ...string) []string {
	for _, it := range items {
		if !slices.Contains(list, it) {
			list = append(list, it)
		}
	}
	return list
}

// withinDeadline lowers a Velero timeout to left, the time until the run's deadline, when it is
// unset (Velero's default) or longer.
func withinDeadline(timeout *metav1.Duration, left time.Duration) {
	if left > 0 && (timeout.Duration <= 0 || timeout.Duration > left) {
		timeout.Duration = left.Round(time.Second)
	}
}
