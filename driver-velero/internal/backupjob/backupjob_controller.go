package backupjob

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/apis/strategy"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/internal/metrics"
	"github.com/coffer-backup/coffer/driver-velero/internal/names"
	"github.com/coffer-backup/coffer/driver-velero/internal/resolve"
	"github.com/coffer-backup/coffer/driver-velero/pkg/download"
)

// DriverName identifies this driver in conditions and events.
const DriverName = "coffer-driver-velero"

// DefaultDeadline bounds a run when its strategy sets no deadline.
const DefaultDeadline = time.Hour

// Reconciler runs one BackupJob through Velero.
type Reconciler struct {
	Client   client.Client
	Clock    clock.PassiveClock
	Recorder events.EventRecorder
	// HTTP downloads backup tarballs from the object store (presigned URLs).
	HTTP *http.Client
	// DownloadTimeout bounds the wait for Velero to answer a DownloadRequest.
	DownloadTimeout time.Duration
}

type scope struct {
	job      *backupsv1.BackupJob
	orig     *backupsv1.BackupJob
	now      metav1.Time
	resolved *backupsv1.ResolvedStrategy
}

// Reconcile drives one BackupJob; its status is written once, at the end.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, retErr error) {
	job := &backupsv1.BackupJob{}
	if err := r.Client.Get(ctx, req.NamespacedName, job); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if job.IsTerminal() || !job.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	resolved, err := resolve.Class(ctx, r.Client, job)
	if err != nil || resolved == nil {
		return reconcile.Result{}, err // not ours: untouched
	}
	if !job.ClaimableBy(DriverName) {
		return reconcile.Result{}, nil // claimed by another driver before its class changed: theirs
	}
	now := metav1.NewTime(r.Clock.Now())
	if job.Status.Phase != backupsv1.BackupJobRunning {
		// Claim before acting: of two drivers claiming one run (a class edited between their
		// caches), exactly one optimistic write succeeds.
		orig := job.DeepCopy()
		job.MarkRunning(now, DriverName)
		if err := r.Client.Status().Patch(ctx, job, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return reconcile.Result{}, fmt.Errorf("claiming BackupJob: %w", err)
		}
		r.Recorder.Eventf(job, nil, corev1.EventTypeNormal, "Started", "Backup", "Backing up with VeleroBackupStrategy %s", resolved.StrategyRef.Name)
	}
	s := &scope{job: job, orig: job.DeepCopy(), now: now, resolved: resolved}
	defer func() {
		if apiequality.Semantic.DeepEqual(s.orig.Status, s.job.Status) {
			return
		}
		err := r.Client.Status().Patch(ctx, s.job, client.MergeFromWithOptions(s.orig, client.MergeFromWithOptimisticLock{}))
		if err != nil && retErr == nil {
			res, retErr = reconcile.Result{}, fmt.Errorf("patching BackupJob status: %w", err)
			return
		}
		if err == nil && s.job.IsTerminal() {
			metrics.Finished("backup", string(s.job.Status.Phase), s.job.Status.CompletedAt.Sub(s.job.Status.StartedAt.Time).Seconds())
		}
	}()
	res, err = r.run(ctx, s)
	if f, ok := resolve.AsFailure(err); ok {
		r.fail(s, f.Reason, f.Error())
		return reconcile.Result{}, nil
	}
	return res, err
}

func (r *Reconciler) fail(s *scope, reason, msg string) {
	s.job.MarkFailed(s.now, reason, msg)
	r.Recorder.Eventf(s.job, nil, corev1.EventTypeWarning, reason, "Backup", "%s", msg)
}

func (r *Reconciler) run(ctx context.Context, s *scope) (reconcile.Result, error) {
	strat, err := resolve.Strategy(ctx, r.Client, s.resolved.StrategyRef)
	if err != nil {
		return reconcile.Result{}, err
	}
	vb, err := r.ensureVeleroBackup(ctx, s, strat)
	if err != nil {
		return reconcile.Result{}, err
	}
	switch vb.Status.Phase {
	case velerov1.BackupPhaseCompleted, velerov1.BackupPhasePartiallyFailed:
		return reconcile.Result{}, r.complete(ctx, s, strat, vb)
	case velerov1.BackupPhaseFailed:
		return reconcile.Result{}, &resolve.Failure{Reason: backupsv1.ReasonFailed,
			Err: fmt.Errorf("velero backup %s/%s failed: %s", vb.Namespace, vb.Name, orUnknown(vb.Status.FailureReason))}
	case velerov1.BackupPhaseFailedValidation:
		return reconcile.Result{}, &resolve.Failure{Reason: backupsv1.ReasonFailed,
			Err: fmt.Errorf("velero backup %s/%s failed validation: %s", vb.Namespace, vb.Name, orUnknown(strings.Join(vb.Status.ValidationErrors, "; ")))}
	}
	deadline := DefaultDeadline
	if strat.Spec.Deadline != nil {
		deadline = strat.Spec.Deadline.Duration
	}
	left := s.job.Status.StartedAt.Add(deadline).Sub(s.now.Time)
	if left <= 0 {
		return reconcile.Result{}, &resolve.Failure{Reason: backupsv1.ReasonDeadlineExceeded,
			Err: fmt.Errorf("velero backup %s/%s is still %s after the strategy's deadline of %s", vb.Namespace, vb.Name, orUnknown(string(vb.Status.Phase)), deadline)}
	}
	// Velero Backup changes wake us through the watch; this only enforces the deadline.
	return reconcile.Result{RequeueAfter: left}, nil
}

// ensureVeleroBackup finds the run's velero.io Backup or creates it from the rendered template.
func (r *Reconciler) ensureVeleroBackup(ctx context.Context, s *scope, strat *veleroapi.VeleroBackupStrategy) (*velerov1.Backup, error) {
	ns := veleroNamespace(strat)
	key := client.ObjectKey{Namespace: ns, Name: names.VeleroBackup(s.job)}
	vb := &velerov1.Backup{}
	err := r.Client.Get(ctx, key, vb)
	if err == nil {
		if vb.Labels[backupsv1.LabelBackupJobUID] != string(s.job.UID) {
			return nil, &resolve.Failure{Reason: backupsv1.ReasonFailed,
				Err: fmt.Errorf("velero backup %s exists and belongs to another run (labels %v); it was not adopted", key, vb.Labels)}
		}
		return vb, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	app, err := resolve.Application(ctx, r.Client, s.job.Namespace, s.job.Spec.ApplicationRef)
	if err != nil {
		return nil, err
	}
	spec := velerov1.BackupSpec{}
	ctxData := strategy.Context{Application: app.Object, Parameters: s.resolved.Parameters, Mode: strategy.ModeBackup}
	if err := strategy.Render(strat.Spec.BackupTemplate.Spec, ctxData, &spec); err != nil {
		return nil, &resolve.Failure{Reason: backupsv1.ReasonTemplateRenderFailed,
			Err: fmt.Errorf("VeleroBackupStrategy %s backupTemplate: %w", strat.Name, err)}
	}
	if spec.StorageLocation == "" {
		spec.StorageLocation = s.resolved.Parameters[names.ParamStorageLocation]
	}
	spec.ExcludedResources = appendMissing(spec.ExcludedResources, names.ExcludedResources...)
	vb = &velerov1.Backup{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: ns, Labels: names.JobLabels(s.job),
		Annotations: map[string]string{names.AnnotationRun: s.job.Namespace + "/" + s.job.Name}}, Spec: spec}
	if err := r.Client.Create(ctx, vb); err != nil {
		if apierrors.IsAlreadyExists(err) { // a stale cache: the next reconcile adopts it
			return nil, fmt.Errorf("velero backup %s appeared concurrently: %w", key, err)
		}
		return nil, fmt.Errorf("creating velero backup %s: %w", key, err)
	}
	ctrl.LoggerFrom(ctx).Info("Created Velero Backup", "veleroBackup", klog.KObj(vb))
	r.Recorder.Eventf(s.job, nil, corev1.EventTypeNormal, "VeleroBackupCreated", "Backup", "Created velero backup %s", key)
	return vb, nil
}

// complete hashes the tarball once, records the checksum on the Velero Backup, creates the Coffer
// Backup and marks the run Succeeded. Each step is idempotent, so a crash anywhere resumes here.
func (r *Reconciler) complete(ctx context.Context, s *scope, strat *veleroapi.VeleroBackupStrategy, vb *velerov1.Backup) error {
	backup := &backupsv1.Backup{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.job.Namespace, Name: s.job.Name}, backup)
	switch {
	case apierrors.IsNotFound(err):
		backup = nil
	case err != nil:
		return err
	case backup.Labels[backupsv1.LabelBackupJobUID] != string(s.job.UID):
		return &resolve.Failure{Reason: backupsv1.ReasonFailed,
			Err: fmt.Errorf("Backup %s exists and was not made by this run; it was not adopted", backup.Name)}
	}
	var artifact *backupsv1.BackupArtifact
	if backup != nil && backup.Status.Artifact != nil {
		artifact = backup.Status.Artifact
	} else {
		if artifact, err = r.measure(ctx, vb); err != nil {
			return err
		}
	}
	if vb.Annotations[backupsv1.AnnotationChecksum] != artifact.Checksum {
		orig := vb.DeepCopy()
		if vb.Annotations == nil {
			vb.Annotations = map[string]string{}
		}
		vb.Annotations[backupsv1.AnnotationChecksum] = artifact.Checksum
		if err := r.Client.Patch(ctx, vb, client.MergeFrom(orig)); err != nil {
			return fmt.Errorf("recording the checksum on velero backup %s: %w", vb.Name, err)
		}
	}
	if backup == nil {
		if backup, err = r.createBackup(ctx, s, vb); err != nil {
			return err
		}
	}
	var details []string
	if vb.Status.Phase == velerov1.BackupPhasePartiallyFailed {
		details = r.results(ctx, vb)
	}
	if err := r.setBackupStatus(ctx, backup, vb, artifact, details, s.now); err != nil {
		return err
	}
	_ = download.Cleanup(ctx, r.Client, vb.Namespace, names.Download(vb.Name))
	s.job.MarkSucceeded(s.now, backup.Name)
	r.Recorder.Eventf(s.job, backup, corev1.EventTypeNormal, "Succeeded", "Backup",
		"Backup %s is ready: %d bytes, %s", backup.Name, artifact.SizeBytes, artifact.Checksum)
	return nil
}

// measure streams the backup tarball once through a DownloadRequest and returns its artifact.
func (r *Reconciler) measure(ctx context.Context, vb *velerov1.Backup) (*backupsv1.BackupArtifact, error) {
	url, err := download.Request(ctx, r.Client, r.Client, vb.Namespace, names.Download(vb.Name),
		velerov1.DownloadTarget{Kind: velerov1.DownloadTargetKindBackupContents, Name: vb.Name}, r.DownloadTimeout)
	if err != nil {
		return nil, err
	}
	d, err := download.HashURL(ctx, r.HTTP, url)
	if err != nil {
		return nil, fmt.Errorf("hashing velero backup %s: %w", vb.Name, err)
	}
	metrics.ArtifactBytes.Add(float64(d.SizeBytes))
	uri, err := r.artifactURI(ctx, vb)
	if err != nil {
		return nil, err
	}
	return &backupsv1.BackupArtifact{URI: uri, SizeBytes: d.SizeBytes, Checksum: d.Checksum()}, nil
}

// artifactURI locates the tarball in the storage location: <provider>://<bucket>/<prefix>/backups/<name>/<name>.tar.gz.
func (r *Reconciler) artifactURI(ctx context.Context, vb *velerov1.Backup) (string, error) {
	bsl := &velerov1.BackupStorageLocation{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: vb.Namespace, Name: vb.Spec.StorageLocation}, bsl); err != nil {
		return "", fmt.Errorf("reading BackupStorageLocation %s/%s: %w", vb.Namespace, vb.Spec.StorageLocation, err)
	}
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
	return fmt.Sprintf("%s://%s/%s", scheme, bucket, path), nil
}

func (r *Reconciler) createBackup(ctx context.Context, s *scope, vb *velerov1.Backup) (*backupsv1.Backup, error) {
	takenAt := s.now
	if vb.Status.StartTimestamp != nil {
		takenAt = *vb.Status.StartTimestamp
	}
	labels := map[string]string{backupsv1.LabelBackupJobUID: string(s.job.UID)}
	if v, ok := s.job.Labels[backupsv1.LabelPlan]; ok {
		labels[backupsv1.LabelPlan] = v
	}
	backup := &backupsv1.Backup{
		ObjectMeta: metav1.ObjectMeta{
			Name: s.job.Name, Namespace: s.job.Namespace, Labels: labels,
			Finalizers: []string{names.Finalizer},
		},
		Spec: backupsv1.BackupSpec{
			ApplicationRef: backupsv1.NormalizeApplicationRef(s.job.Spec.ApplicationRef),
			PlanRef:        s.job.Spec.PlanRef,
			StrategyRef:    s.resolved.StrategyRef,
			TakenAt:        takenAt,
			DriverMetadata: map[string]string{
				names.MetaBackupName:      vb.Name,
				names.MetaNamespace:       vb.Namespace,
				names.MetaStorageLocation: vb.Spec.StorageLocation,
			},
		},
	}
	if err := r.Client.Create(ctx, backup); err != nil {
		return nil, fmt.Errorf("creating Backup %s: %w", backup.Name, err)
	}
	return backup, nil
}

// results lists Velero's errors and warnings of a backup (best effort: on failure, a line saying so).
func (r *Reconciler) results(ctx context.Context, vb *velerov1.Backup) []string {
	name := backupsv1.BoundedName(backupsv1.MaxGeneratedNameLength, vb.Name, "results")
	defer func() { _ = download.Cleanup(context.WithoutCancel(ctx), r.Client, vb.Namespace, name) }()
	url, err := download.Request(ctx, r.Client, r.Client, vb.Namespace, name,
		velerov1.DownloadTarget{Kind: velerov1.DownloadTargetKindBackupResults, Name: vb.Name}, r.DownloadTimeout)
	if err == nil {
		var body io.ReadCloser
		if body, err = download.Open(ctx, r.HTTP, url); err == nil {
			defer body.Close()
			errs, warns, err := download.Results(body, 10)
			if err == nil {
				return append(prefix("error: ", errs), prefix("warning: ", warns)...)
			}
		}
	}
	return []string{"Velero's error and warning messages could not be read: " + err.Error()}
}

func prefix(p string, lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = p + l
	}
	return out
}

func (r *Reconciler) setBackupStatus(ctx context.Context, backup *backupsv1.Backup, vb *velerov1.Backup, artifact *backupsv1.BackupArtifact, details []string, now metav1.Time) error {
	orig := backup.DeepCopy()
	backup.Status.Phase = backupsv1.BackupReady
	backup.Status.Artifact = artifact
	meta.SetStatusCondition(&backup.Status.Conditions, metav1.Condition{Type: backupsv1.ConditionArtifactAvailable,
		Status: metav1.ConditionTrue, Reason: backupsv1.ReasonArtifactPresent, LastTransitionTime: now,
		Message: fmt.Sprintf("Velero backup %s/%s is stored in location %s", vb.Namespace, vb.Name, vb.Spec.StorageLocation)})
	partial := metav1.Condition{Type: backupsv1.ConditionPartiallyFailed, Status: metav1.ConditionFalse,
		Reason: backupsv1.ReasonSucceeded, Message: "Velero completed without errors", LastTransitionTime: now}
	if vb.Status.Phase == velerov1.BackupPhasePartiallyFailed {
		partial.Status, partial.Reason = metav1.ConditionTrue, backupsv1.ReasonCompletedWithErrors
		partial.Message = fmt.Sprintf("Velero completed backup %s/%s with %d error(s) and %d warning(s)%s",
			vb.Namespace, vb.Name, vb.Status.Errors, vb.Status.Warnings, reasonSuffix(vb.Status.FailureReason))
		if len(details) > 0 {
			partial.Message += ":\n" + strings.Join(details, "\n")
		}
		if len(partial.Message) > 32000 {
			partial.Message = partial.Message[:32000]
		}
	}
	meta.SetStatusCondition(&backup.Status.Conditions, partial)
	if apiequality.Semantic.DeepEqual(orig.Status, backup.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, backup, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("writing Backup %s status: %w", backup.Name, err)
	}
	return nil
}

func veleroNamespace(s *veleroapi.VeleroBackupStrategy) string {
	if s.Spec.VeleroNamespace != "" {
		return s.Spec.VeleroNamespace
	}
	return veleroapi.DefaultVeleroNamespace
}

func orUnknown(s string) string {
	if s == "" {
		return "no reason given"
	}
	return s
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
