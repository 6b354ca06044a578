package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	velerov1 "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/kubectl-coffer/internal/view"
)

// jobRunUIDLabel is the label driver-job puts on the batch/v1 Jobs of a run: the run's UID.
const jobRunUIDLabel = jobv1.Group + "/run-uid"

// jobControllerUIDLabel is the label the Job controller puts on a Job's pods: the Job's UID.
const jobControllerUIDLabel = "batch.kubernetes.io/controller-uid"

// Run kinds describe accepts.
const (
	kindBackupJob  = "BackupJob"
	kindRestoreJob = "RestoreJob"
)

// runKinds are the names a user may give a run kind with, as kubectl takes them.
var runKinds = map[string]string{
	"backupjob": kindBackupJob, "backupjobs": kindBackupJob, "bj": kindBackupJob,
	"backupjob.backups.cozystack.io": kindBackupJob, "backupjobs.backups.cozystack.io": kindBackupJob,
	"restorejob": kindRestoreJob, "restorejobs": kindRestoreJob, "rj": kindRestoreJob,
	"restorejob.backups.cozystack.io": kindRestoreJob, "restorejobs.backups.cozystack.io": kindRestoreJob,
}

// parseRun reads "NAME" (kind "", to be looked up) or "KIND/NAME".
func parseRun(arg string) (kind, name string, err error) {
	k, n, ok := strings.Cut(arg, "/")
	if !ok {
		return "", arg, nil
	}
	if kind = runKinds[strings.ToLower(k)]; kind == "" {
		return "", "", fmt.Errorf("%q is not a run kind: use backupjob (bj) or restorejob (rj)", k)
	}
	if n == "" || strings.Contains(n, "/") {
		return "", "", fmt.Errorf("%q is not KIND/NAME", arg)
	}
	return kind, n, nil
}

func newDescribeCommand(o *Options) *cobra.Command {
	out := &output{}
	var tail int64 = 20
	cmd := &cobra.Command{
		Use:   "describe RUN",
		Short: "Show what happened to a BackupJob or RestoreJob",
		Long: `Show a BackupJob or RestoreJob (NAME, or KIND/NAME when both kinds have the name): its phase and
why, its conditions and events, and what its driver made for it: for driver-velero the Velero Backup
or Restore and its phase, for driver-job the batch/v1 Jobs, their pods and the tail of their logs.`,
		Example: `  kubectl coffer describe shop-nightly-29623800 -n shop
  kubectl coffer describe rj/shop-nightly-29623800-restore-x7k2p -n shop`,
		Args: cobra.ExactArgs(1),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
			jobs, d := o.completeNames(cmd, args, &backupsv1.BackupJobList{})
			restores, _ := o.completeNames(cmd, args, &backupsv1.RestoreJobList{})
			return append(jobs, restores...), d
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			kind, name, err := parseRun(args[0])
			if err != nil {
				return err
			}
			c, ns, err := o.clientAndNamespace()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			run, err := findRun(ctx, c, ns, kind, name)
			if err != nil {
				return err
			}
			if out.objects() {
				return out.printer().PrintObj(run, o.Out)
			}
			var d *view.Description
			switch r := run.(type) {
			case *backupsv1.BackupJob:
				d = o.describeBackupJob(ctx, c, r, tail)
			case *backupsv1.RestoreJob:
				d = o.describeRestoreJob(ctx, c, r, tail)
			}
			d.Events, err = events(ctx, c, run)
			if err != nil {
				d.Notes = append(d.Notes, "events not shown: "+err.Error())
			}
			return view.WriteDescribe(o.Out, d, o.Clock.Now())
		},
	}
	cmd.Flags().Int64Var(&tail, "tail", tail, "Lines of each driver-job pod's log to show.")
	out.addFlag(cmd)
	return cmd
}

// findRun reads the run of that kind, or of either kind when kind is empty.
func findRun(ctx context.Context, c client.Client, ns, kind, name string) (client.Object, error) {
	key := types.NamespacedName{Namespace: ns, Name: name}
	var found []client.Object
	for _, obj := range []client.Object{&backupsv1.BackupJob{}, &backupsv1.RestoreJob{}} {
		k := kindBackupJob
		if _, ok := obj.(*backupsv1.RestoreJob); ok {
			k = kindRestoreJob
		}
		if kind != "" && kind != k {
			continue
		}
		err := c.Get(ctx, key, obj)
		switch {
		case err == nil:
			found = append(found, obj)
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading %s %s: %w", k, key, err)
		}
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) > 1:
		return nil, fmt.Errorf("both a BackupJob and a RestoreJob are named %q in namespace %s: say which, as backupjob/%s or restorejob/%s", name, ns, name, name)
	case kind != "":
		return nil, fmt.Errorf("%s %q not found in namespace %s", kind, name, ns)
	}
	return nil, fmt.Errorf("no BackupJob or RestoreJob %q in namespace %s", name, ns)
}

func (o *Options) describeBackupJob(ctx context.Context, c client.Client, j *backupsv1.BackupJob, tail int64) *view.Description {
	d := &view.Description{Kind: kindBackupJob, Namespace: j.Namespace, Name: j.Name, State: view.BackupJobState(j),
		Created: j.CreationTimestamp, Started: j.Status.StartedAt, Completed: j.Status.CompletedAt, Conditions: j.Status.Conditions}
	plan := "- (ad hoc)"
	if j.Spec.PlanRef != nil {
		plan = j.Spec.PlanRef.Name
		if j.Annotations[backupsv1.AnnotationScheduledTime] == "" {
			plan += " (on demand)"
		} else {
			plan += " (tick " + j.Annotations[backupsv1.AnnotationScheduledTime] + ")"
		}
	}
	d.Fields = append(d.Fields,
		view.Field{Name: "Plan", Value: plan},
		view.Field{Name: "Application", Value: typedRef(j.Spec.ApplicationRef)},
		view.Field{Name: "Class", Value: j.Spec.BackupClassName})
	var strategy *corev1.TypedLocalObjectReference
	if s := j.Status.Strategy; s != nil {
		strategy = &s.StrategyRef
		d.Fields = append(d.Fields, view.Field{Name: "Strategy", Value: typedRef(s.StrategyRef)})
	}
	if by := j.ClaimedBy(); by != "" {
		d.Fields = append(d.Fields, view.Field{Name: "Claimed by", Value: by})
	}
	if ref := j.Status.BackupRef; ref != nil {
		d.Fields = append(d.Fields, view.Field{Name: "Backup", Value: ref.Name + " (" + readBackup(ctx, c, j.Namespace, ref.Name) + ")"})
	}
	o.driverObjects(ctx, c, d, strategy, string(j.UID), schema.GroupVersionKind{Group: "velero.io", Version: "v1", Kind: "BackupList"}, backupsv1.LabelBackupJobUID, tail)
	return d
}

func (o *Options) describeRestoreJob(ctx context.Context, c client.Client, r *backupsv1.RestoreJob, tail int64) *view.Description {
	d := &view.Description{Kind: kindRestoreJob, Namespace: r.Namespace, Name: r.Name, State: view.RestoreJobState(r),
		Created: r.CreationTimestamp, Started: r.Status.StartedAt, Completed: r.Status.CompletedAt, Conditions: r.Status.Conditions}
	var strategy *corev1.TypedLocalObjectReference
	b := &backupsv1.Backup{}
	backup := r.Spec.BackupRef.Name
	switch err := c.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: backup}, b); {
	case err == nil:
		strategy = &b.Spec.StrategyRef
		backup += " (" + backupSummary(b) + ")"
	case apierrors.IsNotFound(err):
		backup += " (not found)"
	default:
		backup += " (unreadable: " + err.Error() + ")"
	}
	d.Fields = append(d.Fields, view.Field{Name: "Backup", Value: backup},
		view.Field{Name: "Target namespace", Value: r.TargetNamespace()})
	if t := r.Spec.TargetApplicationRef; t != nil {
		d.Fields = append(d.Fields, view.Field{Name: "Target application", Value: typedRef(*t)})
	}
	if strategy != nil {
		d.Fields = append(d.Fields, view.Field{Name: "Strategy", Value: typedRef(*strategy)})
	}
	if by := r.ClaimedBy(); by != "" {
		d.Fields = append(d.Fields, view.Field{Name: "Claimed by", Value: by})
	}
	if i := r.Status.Items; i != nil {
		d.Fields = append(d.Fields, view.Field{Name: "Items", Value: items(i)})
	}
	o.driverObjects(ctx, c, d, strategy, string(r.UID), schema.GroupVersionKind{Group: "velero.io", Version: "v1", Kind: "RestoreList"}, backupsv1.LabelRestoreJobUID, tail)
	return d
}

// driverObjects adds what the run's driver made for it, best effort: the Velero object labelled
// with the run's UID for a Velero strategy, the Jobs (their pods and logs) for a Job strategy.
func (o *Options) driverObjects(ctx context.Context, c client.Client, d *view.Description, strategy *corev1.TypedLocalObjectReference,
	uid string, veleroList schema.GroupVersionKind, uidLabel string, tail int64) {
	switch {
	case strategy == nil:
	case backupsv1.StrategyIs(*strategy, velerov1.Group, velerov1.Kind):
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(veleroList)
		if err := c.List(ctx, list, client.MatchingLabels{uidLabel: uid}); err != nil {
			if meta.IsNoMatchError(err) {
				err = fmt.Errorf("Velero's CRDs are not installed")
			}
			d.Notes = append(d.Notes, "Velero objects not shown: "+err.Error())
			return
		}
		kind := "velero.io " + strings.TrimSuffix(veleroList.Kind, "List")
		for _, v := range list.Items {
			d.Driver = append(d.Driver, view.DriverObject{Kind: kind, Namespace: v.GetNamespace(), Name: v.GetName(), Status: veleroStatus(&v)})
		}
		if len(list.Items) == 0 {
			d.Notes = append(d.Notes, "no "+kind+" carries this run's UID (label "+uidLabel+")")
		}
	case backupsv1.StrategyIs(*strategy, jobv1.Group, jobv1.Kind):
		o.jobObjects(ctx, c, d, uid, tail)
	}
}

// veleroStatus is a Velero Backup's or Restore's phase, with its error and warning counts and
// failure reason when it has them.
func veleroStatus(u *unstructured.Unstructured) string {
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	var extra []string
	for _, f := range []string{"errors", "warnings"} {
		if n, _, _ := unstructured.NestedInt64(u.Object, "status", f); n > 0 {
			extra = append(extra, fmt.Sprintf("%d %s", n, f))
		}
	}
	if r, _, _ := unstructured.NestedString(u.Object, "status", "failureReason"); r != "" {
		extra = append(extra, r)
	}
	if len(extra) > 0 {
		phase += " (" + strings.Join(extra, ", ") + ")"
	}
	return phase
}

// jobObjects adds the run's batch/v1 Jobs, their pods and the tail of each container's log.
func (o *Options) jobObjects(ctx context.Context, c client.Client, d *view.Description, uid string, tail int64) {
	jobs := &batchv1.JobList{}
	if err := c.List(ctx, jobs, client.InNamespace(d.Namespace), client.MatchingLabels{jobRunUIDLabel: uid}); err != nil {
		d.Notes = append(d.Notes, "Jobs not shown: "+err.Error())
		return
	}
	if len(jobs.Items) == 0 {
		d.Notes = append(d.Notes, "no batch/v1 Job carries this run's UID (label "+jobRunUIDLabel+")")
	}
	for _, j := range jobs.Items {
		d.Driver = append(d.Driver, view.DriverObject{Kind: "batch/v1 Job", Namespace: j.Namespace, Name: j.Name, Status: jobStatus(&j)})
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(j.Namespace), client.MatchingLabels{jobControllerUIDLabel: string(j.UID)}); err != nil {
			d.Notes = append(d.Notes, "pods of Job "+j.Name+" not shown: "+err.Error())
			continue
		}
		for _, p := range pods.Items {
			for _, ctr := range p.Spec.Containers {
				d.Driver = append(d.Driver, view.DriverObject{Kind: "Pod", Name: p.Name + " container " + ctr.Name,
					Status: string(p.Status.Phase), Log: o.podLog(ctx, &p, ctr.Name, tail), Indent: true})
			}
		}
	}
}

// podLog is the tail of a container's log, or why it cannot be read.
func (o *Options) podLog(ctx context.Context, p *corev1.Pod, container string, tail int64) string {
	cs, err := o.Clientset()
	if err != nil {
		return "(log unavailable: " + err.Error() + ")"
	}
	rc, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: container, TailLines: &tail}).Stream(ctx)
	if err != nil {
		return "(log unavailable: " + err.Error() + ")"
	}
	defer func() { _ = rc.Close() }()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, io.LimitReader(rc, 64<<10)); err != nil {
		return "(log unavailable: " + err.Error() + ")"
	}
	if buf.Len() == 0 {
		return "(log empty)"
	}
	return buf.String()
}

// jobStatus is a Job's terminal condition, or its counts while it runs.
func jobStatus(j *batchv1.Job) string {
	for _, cond := range j.Status.Conditions {
		if cond.Status != corev1.ConditionTrue {
			continue
		}
		switch cond.Type {
		case batchv1.JobComplete:
			return "Complete"
		case batchv1.JobFailed:
			return strings.TrimSpace(fmt.Sprintf("Failed (%s: %s)", cond.Reason, cond.Message))
		}
	}
	return fmt.Sprintf("active %d, succeeded %d, failed %d", j.Status.Active, j.Status.Succeeded, j.Status.Failed)
}

// events are the Kubernetes Events about obj.
func events(ctx context.Context, c client.Client, obj client.Object) ([]view.Event, error) {
	list := &corev1.EventList{}
	if err := c.List(ctx, list, client.InNamespace(obj.GetNamespace()),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("involvedObject.uid", string(obj.GetUID()))}); err != nil {
		return nil, err
	}
	out := make([]view.Event, 0, len(list.Items))
	for _, e := range list.Items {
		from := e.Source.Component
		if from == "" {
			from = e.ReportingController
		}
		count := e.Count
		if e.Series != nil && e.Series.Count > count {
			count = e.Series.Count
		}
		last := e.LastTimestamp.Time
		switch {
		case e.Series != nil && !e.Series.LastObservedTime.IsZero():
			last = e.Series.LastObservedTime.Time
		case last.IsZero() && !e.EventTime.IsZero():
			last = e.EventTime.Time
		case last.IsZero():
			last = e.CreationTimestamp.Time
		}
		out = append(out, view.Event{Type: e.Type, Reason: e.Reason, From: from, Message: e.Message, Count: count, Last: last})
	}
	return out, nil
}

// readBackup is a Backup's summary, or why it cannot be shown.
func readBackup(ctx context.Context, c client.Client, ns, name string) string {
	b := &backupsv1.Backup{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, b); err != nil {
		if apierrors.IsNotFound(err) {
			return "deleted"
		}
		return "unreadable: " + err.Error()
	}
	return backupSummary(b)
}

// typedRef is "Kind name (group)".
func typedRef(ref corev1.TypedLocalObjectReference) string {
	group := ""
	if ref.APIGroup != nil {
		group = *ref.APIGroup
	}
	if group == "" {
		return ref.Kind + " " + ref.Name
	}
	return ref.Kind + " " + ref.Name + " (" + group + ")"
}

// clientGVK is the group, version and kind of a typed object.
func clientGVK(obj client.Object) (schema.GroupVersionKind, error) {
	return apiutil.GVKForObject(obj, Scheme)
}
