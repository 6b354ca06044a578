// Package jobs creates the batch/v1 Jobs the driver runs and reads their outcome. Every Job serves
// one object (a BackupJob, a RestoreJob, a Backup being deleted, or a Backup whose artifact is
// checked): its name is derived from that
// object's name and UID, its labels carry the UID, and a Job of that name without that UID is never
// adopted.
package jobs

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	"github.com/coffer-backup/coffer/apis/strategy"
	"github.com/coffer-backup/coffer/driver-job/internal/names"
	"github.com/coffer-backup/coffer/driverkit"
)

const (
	// AnnotationRun names the object a Job serves, as namespace/name.
	AnnotationRun = "jobdriver.backups.cozystack.io/run"
	// AnnotationTTL holds the strategy's ttlSecondsAfterFinished. The driver copies it into the Job's
	// spec only after it has recorded the Job's outcome, so a Job is never collected unread.
	AnnotationTTL = "jobdriver.backups.cozystack.io/ttl-seconds-after-finished"
)

// Defaults of a JobBackupStrategy's Job settings.
const (
	DefaultBackoffLimit          int32 = 0
	DefaultActiveDeadlineSeconds int64 = 3600
)

// Run says which Job serves which object.
type Run struct {
	// Object is the BackupJob, RestoreJob or Backup the Job serves.
	Object client.Object
	// Kind is names.KindBackupJob, KindRestoreJob, KindBackup or KindBackupCheck.
	Kind string
	// Own makes Object the Job's controller owner, so deleting it deletes the Job.
	Own bool
	// Dependent makes Object an owner of the Job that does not block its own deletion (no
	// blockOwnerDeletion, which would need the right to update its finalizers): the garbage
	// collector deletes the Job once Object is gone.
	Dependent bool
}

// Name is the Job's name.
func (r Run) Name() string { return names.Job(r.Kind, r.Object.GetName(), r.Object.GetUID()) }

// Key is the Job's namespace and name.
func (r Run) Key() client.ObjectKey {
	return client.ObjectKey{Namespace: r.Object.GetNamespace(), Name: r.Name()}
}

// Get returns the run's Job, or nil when there is none. A Job of that name that serves another
// object fails the run with NameConflict.
func Get(ctx context.Context, c client.Reader, run Run) (*batchv1.Job, error) {
	job := &batchv1.Job{}
	if err := c.Get(ctx, run.Key(), job); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	if job.Labels[names.LabelRunUID] != string(run.Object.GetUID()) || job.Labels[names.LabelRunKind] != run.Kind {
		return nil, driverkit.Failf(backupsv1.ReasonNameConflict,
			"Job %s exists but was not created for %s %s (its labels: %v); it was not adopted: delete or rename it",
			run.Key(), run.Kind, run.Object.GetName(), job.Labels)
	}
	return job, nil
}

// Create builds the Job from a rendered pod template and the strategy's settings, injecting env into
// every container, and creates it. Invalid Jobs fail the run with the API server's message. When
// the name is taken, live (an uncached reader) tells a foreign Job, which the driver's
// label-filtered cache cannot see, from its own Job not yet in the cache.
func Create(ctx context.Context, c client.Client, live client.Reader, scheme *runtime.Scheme, run Run, strat *jobapi.JobBackupStrategy, pod corev1.PodTemplateSpec, env []corev1.EnvVar) (*batchv1.Job, error) {
	labels := names.Labels(run.Kind, run.Object.GetName(), run.Object.GetUID())
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	for k, v := range labels {
		pod.Labels[k] = v
	}
	if pod.Spec.RestartPolicy == "" {
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	}
	for i := range pod.Spec.InitContainers {
		pod.Spec.InitContainers[i].Env = withEnv(pod.Spec.InitContainers[i].Env, env)
	}
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].Env = withEnv(pod.Spec.Containers[i].Env, env)
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: run.Name(), Namespace: run.Object.GetNamespace(), Labels: labels,
			Annotations: map[string]string{AnnotationRun: run.Object.GetNamespace() + "/" + run.Object.GetName()},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr.To(ptr.Deref(strat.Spec.BackoffLimit, DefaultBackoffLimit)),
			ActiveDeadlineSeconds: ptr.To(ptr.Deref(strat.Spec.ActiveDeadlineSeconds, DefaultActiveDeadlineSeconds)),
			Template:              pod,
		},
	}
	if ttl := strat.Spec.TTLSecondsAfterFinished; ttl != nil {
		job.Annotations[AnnotationTTL] = strconv.Itoa(int(*ttl))
	}
	switch {
	case run.Own:
		if err := controllerutil.SetControllerReference(run.Object, job, scheme); err != nil {
			return nil, err
		}
	case run.Dependent:
		if err := controllerutil.SetOwnerReference(run.Object, job, scheme); err != nil {
			return nil, err
		}
	}
	if err := c.Create(ctx, job); err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
			return nil, driverkit.Failf(backupsv1.ReasonTemplateRenderFailed,
				"the API server rejected Job %s rendered from JobBackupStrategy %s: %v", run.Key(), strat.Name, err)
		}
		if apierrors.IsAlreadyExists(err) {
			if _, gerr := Get(ctx, live, run); gerr != nil {
				return nil, gerr // a foreign Job: NameConflict
			}
			// This run's Job, not yet in the cache: the next reconcile adopts it.
		}
		return nil, fmt.Errorf("creating Job %s: %w", run.Key(), err)
	}
	return job, nil
}

// withEnv returns the container's variables with the driver's set last; a variable of the same
// name set by the template is replaced, so the contract values cannot be shadowed.
func withEnv(own, driver []corev1.EnvVar) []corev1.EnvVar {
	set := map[string]bool{}
	for _, e := range driver {
		set[e.Name] = true
	}
	out := make([]corev1.EnvVar, 0, len(own)+len(driver))
	for _, e := range own {
		if !set[e.Name] {
			out = append(out, e)
		}
	}
	return append(out, driver...)
}

// Env builds the contract variables (apis/jobdriver/v1alpha1) for a run. The run kind an agent
// sees is the kind of the object served: a check Job serves a Backup.
func Env(mode string, run Run, app corev1.TypedLocalObjectReference, params map[string]string) []corev1.EnvVar {
	kind := run.Kind
	if kind == names.KindBackupCheck {
		kind = names.KindBackup
	}
	env := []corev1.EnvVar{
		{Name: jobapi.EnvMode, Value: mode},
		{Name: jobapi.EnvRunKind, Value: kind},
		{Name: jobapi.EnvRunName, Value: run.Object.GetName()},
		{Name: jobapi.EnvRunNamespace, Value: run.Object.GetNamespace()},
		{Name: jobapi.EnvRunUID, Value: string(run.Object.GetUID())},
		{Name: jobapi.EnvApplicationAPIGroup, Value: backupsv1.ApplicationAPIGroup(app)},
		{Name: jobapi.EnvApplicationKind, Value: app.Kind},
		{Name: jobapi.EnvApplicationName, Value: app.Name},
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, corev1.EnvVar{Name: jobapi.ParamEnvName(k), Value: params[k]})
	}
	return env
}

// LockEnv tells a backup agent to lock what it stores for lock, in the strategy's object lock
// mode; nothing when the strategy locks nothing. The driver chooses lock from the run's Plan,
// within the strategy's retainFor (lockFor).
func LockEnv(strat *jobapi.JobBackupStrategy, lock time.Duration) []corev1.EnvVar {
	a := strat.Spec.Artifact
	if a == nil || a.ObjectLock == nil {
		return nil
	}
	mode := "COMPLIANCE"
	if a.ObjectLock.Mode == jobapi.ObjectLockGovernance {
		mode = "GOVERNANCE"
	}
	return []corev1.EnvVar{{Name: jobapi.EnvObjectLockMode, Value: mode}, {Name: jobapi.EnvRetainFor, Value: lock.String()}}
}

// FormatEnv passes a strategy's artifact options to an agent: the compression level to a backup,
// and the encryption Secret's name and keys. A backup gets the public keys (recipients) only, a
// restore the private keys (identities) only, a cleanup and a check neither. Keys are read from the Secret
// by secretKeyRef, never copied into the Job; optional, so that a missing Secret or key lets the
// agent start and fail with a message naming it, rather than leave the pod unable to start.
func FormatEnv(strat *jobapi.JobBackupStrategy, mode string) []corev1.EnvVar {
	a := strat.Spec.Artifact
	if a == nil {
		return nil
	}
	var env []corev1.EnvVar
	if mode == jobapi.ModeBackup && a.CompressionLevel != nil {
		env = append(env, corev1.EnvVar{Name: jobapi.EnvCompressionLevel, Value: strconv.Itoa(int(*a.CompressionLevel))})
	}
	// Maintenance may follow a Backup made before the strategy left the Chunked format.
	chunked := a.Format == jobapi.ArtifactFormatChunked && mode == jobapi.ModeBackup || mode == jobapi.ModeMaintain
	if chunked && mode == jobapi.ModeBackup {
		env = append(env, corev1.EnvVar{Name: jobapi.EnvArtifactFormat, Value: "chunked"})
	}
	if e := a.Encryption; e != nil && (mode == jobapi.ModeBackup || mode == jobapi.ModeRestore || mode == jobapi.ModeVerify || mode == jobapi.ModeMaintain) {
		env = append(env, corev1.EnvVar{Name: jobapi.EnvEncryptionSecret, Value: e.SecretName})
		if mode != jobapi.ModeMaintain { // maintenance opens no pack: the chunk key only
			name, key := jobapi.EnvAgeRecipients, jobapi.SecretKeyRecipients
			if mode != jobapi.ModeBackup {
				name, key = jobapi.EnvAgeIdentities, jobapi.SecretKeyIdentities
			}
			env = append(env, corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: e.SecretName}, Key: key, Optional: ptr.To(true),
			}}})
		}
		if chunked {
			env = append(env, corev1.EnvVar{Name: jobapi.EnvChunkKey, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: e.SecretName}, Key: jobapi.SecretKeyChunkKey, Optional: ptr.To(true),
			}}})
		}
	}
	return env
}

// ArtifactEnv describes a Backup's artifact to a restore, verify, cleanup or check Job.
func ArtifactEnv(b *backupsv1.Backup) []corev1.EnvVar {
	env := []corev1.EnvVar{{Name: jobapi.EnvBackupName, Value: b.Name}}
	if a := b.Status.Artifact; a != nil {
		env = append(env,
			corev1.EnvVar{Name: jobapi.EnvArtifactURI, Value: a.URI},
			corev1.EnvVar{Name: jobapi.EnvArtifactChecksum, Value: a.Checksum},
			corev1.EnvVar{Name: jobapi.EnvArtifactSizeBytes, Value: strconv.FormatInt(a.SizeBytes, 10)})
	}
	return env
}

// Outcome is what a Job came to.
type Outcome struct {
	// Finished is set once the Job is Complete or Failed.
	Finished, Succeeded bool
	// Reason and Message explain a failure: DeadlineExceeded or Failed, and what the pod said.
	Reason, Message string
	// Report is the succeeded pod's first non-empty termination message, and Pod that pod's name.
	Report, Pod string
}

// Terminal is the condition that ended a Job: Complete (preferred) or Failed, with status True;
// nil while it runs.
func Terminal(job *batchv1.Job) *batchv1.JobCondition {
	var failed *batchv1.JobCondition
	for i, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return &job.Status.Conditions[i]
		case batchv1.JobFailed:
			failed = &job.Status.Conditions[i]
		}
	}
	return failed
}

// Observe reads a Job's outcome; for a finished Job it lists the Job's pods (uncached: the driver
// does not watch pods) to read termination messages. Only a pod the Job controls (ControlledBy) is
// read: the controller-uid label is a selector anyone who may create pods in the namespace can
// put on a pod of her own.
func Observe(ctx context.Context, pods client.Reader, job *batchv1.Job) (Outcome, error) {
	end := Terminal(job)
	if end == nil {
		return Outcome{}, nil
	}
	labelled := &corev1.PodList{}
	if err := pods.List(ctx, labelled, client.InNamespace(job.Namespace),
		client.MatchingLabels{batchv1.ControllerUidLabel: string(job.UID)}); err != nil {
		return Outcome{}, fmt.Errorf("listing the pods of Job %s: %w", job.Name, err)
	}
	list := &corev1.PodList{}
	for i := range labelled.Items {
		if ControlledBy(&labelled.Items[i], job) {
			list.Items = append(list.Items, labelled.Items[i])
		}
	}
	sort.Slice(list.Items, func(i, j int) bool {
		return list.Items[i].CreationTimestamp.Before(&list.Items[j].CreationTimestamp) ||
			list.Items[i].CreationTimestamp.Equal(&list.Items[j].CreationTimestamp) && list.Items[i].Name < list.Items[j].Name
	})
	if end.Type == batchv1.JobComplete {
		out := Outcome{Finished: true, Succeeded: true}
		for i := range list.Items {
			p := &list.Items[i]
			if p.Status.Phase == corev1.PodSucceeded {
				out.Pod, out.Report = p.Name, firstMessage(p)
			}
		}
		return out, nil
	}
	out := Outcome{Finished: true, Reason: backupsv1.ReasonFailed}
	if end.Reason == batchv1.JobReasonDeadlineExceeded {
		out.Reason = backupsv1.ReasonDeadlineExceeded
	}
	out.Message = fmt.Sprintf("Job %s failed (%s): %s", job.Name, end.Reason, end.Message)
	for i := len(list.Items) - 1; i >= 0; i-- {
		if d := podFailure(&list.Items[i]); d != "" {
			out.Message += "; " + d
			break
		}
	}
	return out, nil
}

// ControlledBy reports whether the Job is the pod's controller: its controller ownerReference
// names apiVersion batch/v1, kind Job, and the Job's name and UID. The Job controller sets that
// reference on every pod it creates, and adopts no pod that has another controller.
func ControlledBy(p *corev1.Pod, job *batchv1.Job) bool {
	ref := metav1.GetControllerOfNoCopy(p)
	return ref != nil && ref.APIVersion == batchv1.SchemeGroupVersion.String() && ref.Kind == "Job" &&
		ref.Name == job.Name && ref.UID == job.UID && job.UID != ""
}

// firstMessage is the first non-empty termination message of a pod's containers, in spec order.
func firstMessage(p *corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		for _, s := range p.Status.ContainerStatuses {
			if s.Name == c.Name && s.State.Terminated != nil && strings.TrimSpace(s.State.Terminated.Message) != "" {
				return s.State.Terminated.Message
			}
		}
	}
	return ""
}

// podFailure says why a pod failed: each container that ended badly, with exit code, reason and
// message, or the pod's own reason (e.g. DeadlineExceeded, Evicted).
func podFailure(p *corev1.Pod) string {
	var parts []string
	for _, s := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		t := s.State.Terminated
		if t == nil || t.ExitCode == 0 {
			continue
		}
		d := fmt.Sprintf("pod %s container %s exited with code %d", p.Name, s.Name, t.ExitCode)
		if t.Reason != "" {
			d += " (" + t.Reason + ")"
		}
		if m := strings.TrimSpace(t.Message); m != "" {
			d += ": " + m
		}
		parts = append(parts, d)
	}
	if len(parts) == 0 && (p.Status.Reason != "" || p.Status.Message != "") {
		parts = append(parts, fmt.Sprintf("pod %s: %s %s", p.Name, p.Status.Reason, p.Status.Message))
	}
	return strings.Join(parts, "; ")
}

// Release applies the strategy's ttlSecondsAfterFinished to a finished run's Job, now that its
// outcome is recorded. A missing or foreign Job is left alone.
func Release(ctx context.Context, c client.Client, run Run) error {
	job, err := Get(ctx, c, run)
	if job == nil || err != nil {
		_, isFailure := driverkit.AsFailure(err)
		if isFailure {
			err = nil
		}
		return err
	}
	ttl, ok := job.Annotations[AnnotationTTL]
	if !ok || job.Spec.TTLSecondsAfterFinished != nil {
		return nil
	}
	n, err := strconv.ParseInt(ttl, 10, 32)
	if err != nil {
		return nil
	}
	orig := job.DeepCopy()
	job.Spec.TTLSecondsAfterFinished = ptr.To(int32(n))
	if err := c.Patch(ctx, job, client.MergeFrom(orig)); err != nil {
		return client.IgnoreNotFound(err)
	}
	return nil
}

// RunOf maps a Job to the object it serves, when it is of one of the given kinds.
func RunOf(kinds ...string) func(context.Context, client.Object) []reconcile.Request {
	return func(_ context.Context, o client.Object) []reconcile.Request {
		if !slices.Contains(kinds, o.GetLabels()[names.LabelRunKind]) {
			return nil
		}
		ns, name, ok := strings.Cut(o.GetAnnotations()[AnnotationRun], "/")
		if !ok {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
	}
}

// Render renders one of a strategy's pod templates (named which, for messages); it fails closed
// with TemplateRenderFailed.
func Render(strat *jobapi.JobBackupStrategy, which string, tmpl corev1.PodTemplateSpec, data strategy.Context) (corev1.PodTemplateSpec, error) {
	out := corev1.PodTemplateSpec{}
	if err := strategy.Render(tmpl, data, &out); err != nil {
		return out, driverkit.Failf(backupsv1.ReasonTemplateRenderFailed, "JobBackupStrategy %s %s: %v", strat.Name, which, err)
	}
	if len(out.Spec.Containers) == 0 {
		return out, driverkit.Failf(backupsv1.ReasonTemplateRenderFailed, "JobBackupStrategy %s %s has no containers", strat.Name, which)
	}
	return out, nil
}

// DeadlineGrace is how long after a Job's activeDeadlineSeconds the driver waits for the Job
// controller to report DeadlineExceeded before failing the run itself.
const DeadlineGrace = 2 * time.Minute

// Deadline is how long a run of the strategy may take: its Job's activeDeadlineSeconds and
// DeadlineGrace.
func Deadline(strat *jobapi.JobBackupStrategy) time.Duration {
	return time.Duration(ptr.Deref(strat.Spec.ActiveDeadlineSeconds, DefaultActiveDeadlineSeconds))*time.Second + DeadlineGrace
}

// Parameters are the BackupClass parameters a Backup was taken with, from its driverMetadata.
func Parameters(b *backupsv1.Backup) map[string]string {
	params := map[string]string{}
	for k, v := range b.Spec.DriverMetadata {
		if p, ok := strings.CutPrefix(k, names.MetaParamPrefix); ok {
			params[p] = v
		}
	}
	return params
}
