// Tests of the periodic artifact checks (check.go) on the real kube-apiserver of driver_test.go.
// StartDueChecks is called directly, as ArtifactChecks would on its ticker; the result of a check
// Job is read the way the kit does it, by reconciling the Backup (the kit's Backup reconciler
// calls CheckArtifact). The test plays the Job controller and the kubelet (fixture.finish).
//
// The checks compare the driver's clock with times the API server writes (a Backup's and a Job's
// creationTimestamp, a Job's completionTime), so these tests set the fake clock to the real time
// once, at the start, and move it only by fake steps from there.
package driver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-job/internal/driver"
	"github.com/coffer-backup/coffer/driver-job/internal/jobs"
	"github.com/coffer-backup/coffer/driver-job/internal/names"
)

// checkTemplate is a cleanupTemplate that shows the mode and the artifact it was rendered for.
func checkTemplate() *corev1.PodTemplateSpec {
	return ptr.To(agentTemplate("--mode={{ .Mode }}", "{{ .Backup.status.artifact.uri }}"))
}

// newCheckFixture is a fixture whose clock is the real time (see the package comment), with a
// cleanupTemplate unless mutate removes it.
func newCheckFixture(t *testing.T, mutate func(*jobapi.JobBackupStrategySpec)) *fixture {
	t.Helper()
	f := newFixture(t, func(s *jobapi.JobBackupStrategySpec) {
		s.CleanupTemplate = checkTemplate()
		if mutate != nil {
			mutate(s)
		}
	})
	f.clock.SetTime(time.Now().Truncate(time.Second))
	return f
}

// checker is the driver with artifact checks (the default period, at most maxJobs check Jobs).
// The checks list Jobs and Backups in the whole cluster, and the tests share one API server: the
// checker sees the fixture's namespace only, so each test's slots and due Backups are its own. Its
// client reads Backups as the driver's cache holds them, trimmed (driver.CacheTransform): the
// checks decide from that, and read uncached (Live) what they write from.
func (f *fixture) checker(maxJobs int) *driver.Driver {
	trim := func(obj runtime.Object) {
		if l, ok := obj.(*backupsv1.BackupList); ok {
			for i := range l.Items {
				_, _ = driver.CacheTransform(&l.Items[i])
			}
			return
		}
		_, _ = driver.CacheTransform(obj)
	}
	scoped := interceptor.NewClient(cl, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			trim(obj)
			return nil
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := c.List(ctx, list, append(opts, client.InNamespace(f.ns))...); err != nil {
				return err
			}
			trim(list)
			return nil
		},
	})
	return &driver.Driver{Client: scoped, Live: cl, Scheme: sch, Recorder: f.rec,
		CheckPeriod: driver.DefaultCheckPeriod, MaxCheckJobs: maxJobs, Clock: f.clock}
}

// backupReconcilerOf is the kit's Backup reconciler running d, which reads check Jobs.
func (f *fixture) backupReconcilerOf(d *driver.Driver) reconcile.Reconciler {
	return driver.New(d, f.clock).BackupReconciler()
}

func (f *fixture) startDueChecks(d *driver.Driver) {
	f.t.Helper()
	require.NoError(f.t, d.StartDueChecks(f.ctx))
}

// readyBackup creates a Ready Backup of the fixture's strategy, as the backup reconciler leaves it
// (a 4096-byte artifact, ArtifactAvailable=True), whose next check is due at next (none: the
// default, a period after its creation).
func (f *fixture) readyBackup(name string, next *time.Time) *backupsv1.Backup {
	f.t.Helper()
	b := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: backupsv1.BackupSpec{
			ApplicationRef: corev1.TypedLocalObjectReference{APIGroup: ptr.To("apps.cozystack.io"), Kind: "Shop", Name: "web"},
			StrategyRef:    corev1.TypedLocalObjectReference{APIGroup: ptr.To(jobapi.Group), Kind: jobapi.Kind, Name: f.strategy.Name},
			TakenAt:        metav1.NewTime(f.clock.Now()),
			DriverMetadata: map[string]string{"param.bucket": "coffer"},
		}}
	if next != nil {
		b.Annotations = map[string]string{names.AnnotationNextCheck: next.UTC().Format(time.RFC3339)}
	}
	require.NoError(f.t, cl.Create(f.ctx, b))
	b.Status = backupsv1.BackupStatus{Phase: backupsv1.BackupReady,
		Artifact: &backupsv1.BackupArtifact{URI: "s3://coffer/" + f.ns + "/" + name + ".tar", SizeBytes: 4096, Checksum: goodSum},
		Conditions: []metav1.Condition{{Type: backupsv1.ConditionArtifactAvailable, Status: metav1.ConditionTrue,
			Reason: backupsv1.ReasonArtifactPresent, Message: "stored", LastTransitionTime: metav1.NewTime(f.clock.Now())}}}
	require.NoError(f.t, cl.Status().Update(f.ctx, b))
	return b
}

// cached is b as the driver's cache holds it.
func cached(t *testing.T, b *backupsv1.Backup) *backupsv1.Backup {
	t.Helper()
	c := b.DeepCopy()
	_, err := driver.CacheTransform(c)
	require.NoError(t, err)
	return c
}

// TestUnremarkableBackupsAreLeftAsTheyAre: a Backup the driver does not queue when its cache
// starts (Kit.Unremarkable) is one a look leaves as it is: no write, no Job. One of another cluster
// or not Ready is queued.
func TestUnremarkableBackupsAreLeftAsTheyAre(t *testing.T) {
	f := newCheckFixture(t, nil)
	d := f.checker(2)
	b := f.readyBackup("unremarkable", nil)
	require.True(t, d.Unremarkable(cached(t, b)))
	reconcileOnce(t, f.backupReconcilerOf(d), b)
	require.Equal(t, b.ResourceVersion, get(t, b).ResourceVersion, "a look wrote nothing")
	require.Empty(t, f.jobsOf(names.KindBackupCheck))

	imported := cached(t, b)
	imported.Labels = map[string]string{backupsv1.LabelImported: "true"}
	require.True(t, imported.Imported())
	require.False(t, d.Unremarkable(imported), "an imported Backup's scope is its catalog's: queued")
	running := cached(t, b)
	running.Status.Phase = backupsv1.BackupPending
	require.False(t, d.Unremarkable(running))
}

// setNextCheck writes the Backup's next-check annotation, as a user asking for a check would.
func (f *fixture) setNextCheck(b *backupsv1.Backup, next time.Time) {
	f.t.Helper()
	orig := b.DeepCopy()
	if b.Annotations == nil {
		b.Annotations = map[string]string{}
	}
	b.Annotations[names.AnnotationNextCheck] = next.UTC().Format(time.RFC3339)
	require.NoError(f.t, cl.Patch(f.ctx, b, client.MergeFrom(orig)))
}

// checkJobOf is the Backup's check Job, or nil.
func (f *fixture) checkJobOf(b *backupsv1.Backup) *batchv1.Job {
	f.t.Helper()
	j := &batchv1.Job{}
	err := cl.Get(f.ctx, client.ObjectKey{Namespace: b.Namespace, Name: names.Job(names.KindBackupCheck, b.Name, b.UID)}, j)
	if apierrors.IsNotFound(err) {
		return nil
	}
	require.NoError(f.t, err)
	return j
}

// requireCheckJobGone waits until the check Job is deleted (the driver deletes it in the
// background; nothing runs the garbage collector here, so its pod stays).
func (f *fixture) requireCheckJobGone(b *backupsv1.Backup) {
	f.t.Helper()
	require.Eventually(f.t, func() bool { return f.checkJobOf(b) == nil }, 30*time.Second, 50*time.Millisecond, "the check Job is deleted")
}

func artifactCondition(b *backupsv1.Backup) *metav1.Condition {
	return meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionArtifactAvailable)
}

func nextCheckOf(t *testing.T, b *backupsv1.Backup) time.Time {
	t.Helper()
	v, ok := b.Annotations[names.AnnotationNextCheck]
	require.True(t, ok, "the Backup records its next check")
	next, err := time.Parse(time.RFC3339, v)
	require.NoError(t, err)
	return next.UTC()
}

// finishedAt is when the test's Job controller finished the Job.
func finishedAt(t *testing.T, j *batchv1.Job) time.Time {
	t.Helper()
	if j.Status.CompletionTime != nil {
		return j.Status.CompletionTime.UTC()
	}
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobFailed {
			return c.LastTransitionTime.UTC()
		}
	}
	t.Fatalf("Job %s has not finished", j.Name)
	return time.Time{}
}

// A Ready Backup whose check is due gets exactly one check Job: the strategy's cleanupTemplate in
// check mode, owned by the Backup without blocking its deletion, with no retry, a short deadline
// and no TTL. While it runs, looking at the Backup changes nothing and no second Job starts.
func TestArtifactCheckJobOfADueBackup(t *testing.T) {
	f := newCheckFixture(t, func(s *jobapi.JobBackupStrategySpec) {
		s.BackoffLimit, s.ActiveDeadlineSeconds, s.TTLSecondsAfterFinished = ptr.To[int32](3), ptr.To[int64](900), ptr.To[int32](30)
	})
	d := f.checker(0)
	b := f.succeededBackup()
	drain(f.rec)
	f.startDueChecks(d)
	require.Empty(t, f.jobsOf(names.KindBackupCheck), "a new Backup is not due")

	f.setNextCheck(b, f.clock.Now().Add(-time.Second))
	f.startDueChecks(d)
	checks := f.jobsOf(names.KindBackupCheck)
	require.Len(t, checks, 1)
	j := checks[0]
	require.Equal(t, names.Job(names.KindBackupCheck, b.Name, b.UID), j.Name)
	require.Equal(t, f.ns, j.Namespace)
	require.Equal(t, names.DriverName, j.Labels[backupsv1.LabelManagedBy])
	require.Equal(t, string(b.UID), j.Labels[names.LabelRunUID])
	require.Equal(t, f.ns+"/"+b.Name, j.Annotations[jobs.AnnotationRun])

	require.Len(t, j.OwnerReferences, 1)
	ref := j.OwnerReferences[0]
	require.Equal(t, "Backup", ref.Kind)
	require.Equal(t, backupsv1.GroupVersion.String(), ref.APIVersion)
	require.Equal(t, b.Name, ref.Name)
	require.Equal(t, b.UID, ref.UID)
	require.Nil(t, ref.BlockOwnerDeletion, "no blockOwnerDeletion: the driver may not update Backup finalizers")
	require.False(t, ptr.Deref(ref.Controller, false))

	require.Equal(t, int32(0), *j.Spec.BackoffLimit, "no retry: the next check is the retry")
	require.Equal(t, driver.CheckActiveDeadlineSeconds, *j.Spec.ActiveDeadlineSeconds, "the strategy's 900 s, bounded")
	require.LessOrEqual(t, *j.Spec.ActiveDeadlineSeconds, int64(300))
	require.Nil(t, j.Spec.TTLSecondsAfterFinished)
	require.NotContains(t, j.Annotations, jobs.AnnotationTTL, "the driver deletes the Job itself once read")

	c := j.Spec.Template.Spec.Containers[0]
	require.Equal(t, []string{"--mode=check", b.Status.Artifact.URI}, c.Args)
	e := env(c)
	require.Equal(t, jobapi.ModeCheck, e[jobapi.EnvMode], "the template cannot spoof the mode")
	require.Equal(t, names.KindBackup, e[jobapi.EnvRunKind], "a check Job serves a Backup")
	require.Equal(t, b.Name, e[jobapi.EnvRunName])
	require.Equal(t, f.ns, e[jobapi.EnvRunNamespace])
	require.Equal(t, string(b.UID), e[jobapi.EnvRunUID])
	require.Equal(t, b.Name, e[jobapi.EnvBackupName])
	require.Equal(t, b.Status.Artifact.URI, e[jobapi.EnvArtifactURI])
	require.Equal(t, goodSum, e[jobapi.EnvArtifactChecksum])
	require.Equal(t, "4096", e[jobapi.EnvArtifactSizeBytes])
	require.Equal(t, "coffer", e["COFFER_PARAM_BUCKET"])
	require.Equal(t, "me", e["KEEP"])

	// While it runs: no second Job, and the Backup is left as it is.
	rv := get(t, b).ResourceVersion
	f.startDueChecks(d)
	reconcileOnce(t, f.backupReconcilerOf(d), b)
	require.Len(t, f.jobsOf(names.KindBackupCheck), 1)
	require.Equal(t, j.UID, f.checkJobOf(b).UID)
	require.Equal(t, rv, get(t, b).ResourceVersion)
	require.Empty(t, drain(f.rec))
}

// A Backup is due a period after its creation, or at its annotation; a Backup that is not Ready,
// or has no artifact, is never checked.
func TestArtifactCheckOnlyWhenDue(t *testing.T) {
	t.Run("a period after creation", func(t *testing.T) {
		f := newCheckFixture(t, nil)
		d := f.checker(0)
		b := f.readyBackup("fresh", nil)
		f.clock.SetTime(b.CreationTimestamp.Add(driver.DefaultCheckPeriod - time.Second))
		f.startDueChecks(d)
		require.Nil(t, f.checkJobOf(b), "not due yet")
		f.clock.Step(time.Second)
		f.startDueChecks(d)
		require.NotNil(t, f.checkJobOf(b), "due a period after its creation")
		require.Len(t, f.jobsOf(names.KindBackupCheck), 1)
	})
	t.Run("annotation in the future", func(t *testing.T) {
		f := newCheckFixture(t, nil)
		d := f.checker(0)
		b := f.readyBackup("later", ptr.To(f.clock.Now().Add(time.Minute)))
		f.startDueChecks(d)
		require.Nil(t, f.checkJobOf(b))
		f.clock.Step(time.Minute)
		f.startDueChecks(d)
		require.NotNil(t, f.checkJobOf(b), "due at the annotation")
	})
	t.Run("not Ready", func(t *testing.T) {
		f := newCheckFixture(t, nil)
		d := f.checker(0)
		failed := f.readyBackup("failed", ptr.To(f.clock.Now().Add(-time.Hour)))
		failed.Status.Phase, failed.Status.Artifact = backupsv1.BackupFailed, nil
		require.NoError(t, cl.Status().Update(f.ctx, failed))
		pending := f.readyBackup("pending", ptr.To(f.clock.Now().Add(-time.Hour)))
		pending.Status.Phase = backupsv1.BackupPending
		require.NoError(t, cl.Status().Update(f.ctx, pending))
		f.startDueChecks(d)
		require.Empty(t, f.jobsOf(names.KindBackupCheck))
	})
}

// TestArtifactChecksWalkTheCache: on a manager, StartDueChecks walks the Backups in the cache's
// store (Driver.Cache; driverkit.EachCached) instead of listing copies of them, and decides
// alike: the due Backup gets its check Job; the fresh one and the failed one none.
func TestArtifactChecksWalkTheCache(t *testing.T) {
	f := newCheckFixture(t, nil)
	due := f.readyBackup("due", ptr.To(f.clock.Now().Add(-time.Hour)))
	fresh := f.readyBackup("fresh", nil)
	failed := f.readyBackup("failed", ptr.To(f.clock.Now().Add(-time.Hour)))
	failed.Status.Phase, failed.Status.Artifact = backupsv1.BackupFailed, nil
	require.NoError(t, cl.Status().Update(f.ctx, failed))

	// The driver's cache of the whole cluster (one store to walk), its Backups narrowed to this
	// test's namespace by one more field term: the API server is shared with other tests.
	opts := driver.CacheOptions()
	opts.Scheme = sch
	for o, by := range opts.ByObject {
		if _, ok := o.(*backupsv1.Backup); ok {
			by.Field = fields.AndSelectors(by.Field, fields.OneTermEqualSelector("metadata.namespace", f.ns))
			opts.ByObject[o] = by
		}
	}
	c, err := cache.New(restConfig, opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(f.ctx)
	stopped := make(chan struct{})
	t.Cleanup(func() { cancel(); <-stopped })
	go func() { _ = c.Start(ctx); close(stopped) }()
	require.Eventually(t, func() bool {
		list := &backupsv1.BackupList{}
		if c.List(ctx, list) != nil || len(list.Items) != 3 {
			return false
		}
		for _, b := range list.Items {
			if b.Name == "failed" && b.Status.Phase != backupsv1.BackupFailed {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "the cache holds the driver's three Backups as written")

	d := f.checker(0)
	d.Cache = c
	f.startDueChecks(d)
	require.NotNil(t, f.checkJobOf(due), "the due Backup is checked")
	require.Nil(t, f.checkJobOf(fresh))
	require.Nil(t, f.checkJobOf(failed))
	require.Len(t, f.jobsOf(names.KindBackupCheck), 1)
}

// At most MaxCheckJobs check Jobs run at once; the other due Backups wait, the longest overdue
// first. A finished check Job no longer takes a slot, but its Backup gets no second Job until it
// is read.
func TestArtifactCheckMaxCheckJobs(t *testing.T) {
	f := newCheckFixture(t, nil)
	d := f.checker(2)
	now := f.clock.Now()
	b1 := f.readyBackup("a-due-1h", ptr.To(now.Add(-time.Hour)))
	b2 := f.readyBackup("b-due-3h", ptr.To(now.Add(-3*time.Hour)))
	b3 := f.readyBackup("c-due-2h", ptr.To(now.Add(-2*time.Hour)))

	f.startDueChecks(d)
	require.Len(t, f.jobsOf(names.KindBackupCheck), 2)
	require.NotNil(t, f.checkJobOf(b2), "the longest overdue first")
	require.NotNil(t, f.checkJobOf(b3))
	require.Nil(t, f.checkJobOf(b1), "waits for a free slot")

	f.startDueChecks(d)
	require.Len(t, f.jobsOf(names.KindBackupCheck), 2, "both slots are still taken")
	require.Nil(t, f.checkJobOf(b1))

	j2 := f.checkJobOf(b2)
	f.finish(j2, 0, `{"exists":true,"sizeBytes":4096}`, "")
	f.startDueChecks(d)
	require.Len(t, f.jobsOf(names.KindBackupCheck), 3)
	require.NotNil(t, f.checkJobOf(b1), "the finished Job freed its slot")
	require.Equal(t, j2.UID, f.checkJobOf(b2).UID, "a Backup whose check is not read yet gets no second Job")
}

// A check Job that runs past its deadline (no Job controller finished it) is deleted, frees its
// slot, and its check is retried after the retry delay. The deadline is the strategy's when
// shorter than CheckActiveDeadlineSeconds.
func TestArtifactCheckStaleJob(t *testing.T) {
	f := newCheckFixture(t, func(s *jobapi.JobBackupStrategySpec) { s.ActiveDeadlineSeconds = ptr.To[int64](60) })
	d := f.checker(1)
	now := f.clock.Now()
	stuck := f.readyBackup("stuck", ptr.To(now.Add(-2*time.Hour)))
	next := f.readyBackup("next", ptr.To(now.Add(-time.Hour)))
	f.startDueChecks(d)
	j := f.checkJobOf(stuck)
	require.NotNil(t, j)
	require.Equal(t, int64(60), *j.Spec.ActiveDeadlineSeconds)
	require.Nil(t, f.checkJobOf(next))

	deadline := 60*time.Second + jobs.DeadlineGrace
	f.clock.SetTime(j.CreationTimestamp.Add(deadline))
	f.startDueChecks(d)
	require.Equal(t, j.UID, f.checkJobOf(stuck).UID, "still within its deadline")
	require.Nil(t, f.checkJobOf(next), "the running Job holds the only slot")

	f.clock.Step(time.Second)
	f.startDueChecks(d)
	f.requireCheckJobGone(stuck)
	require.Equal(t, f.clock.Now().Add(driver.CheckRetryDelay).UTC(), nextCheckOf(t, get(t, stuck)), "retried after the retry delay")
	require.NotNil(t, f.checkJobOf(next), "the slot is free")
	require.Equal(t, metav1.ConditionTrue, artifactCondition(get(t, stuck)).Status, "nothing was learnt")
}

// finishedCheck runs a due Backup's check Job to its end with the given agent outcome and returns
// the finished Job as the Job controller left it.
func (f *fixture) finishedCheck(d *driver.Driver, b *backupsv1.Backup, exitCode int32, message, jobReason string) *batchv1.Job {
	f.t.Helper()
	f.startDueChecks(d)
	j := f.checkJobOf(b)
	require.NotNil(f.t, j, "a check Job for the due Backup")
	f.finish(j, exitCode, message, jobReason)
	return get(f.t, j)
}

// A finished check Job that could tell sets ArtifactAvailable: True when the artifact is there
// with its size, False (ArtifactMissing) when it is gone or holds another size. The condition is
// written first, with the Job kept; the next look records the next check, a period after the Job
// finished, and deletes the Job.
func TestArtifactCheckResults(t *testing.T) {
	for _, tc := range []struct {
		name, report string
		status       metav1.ConditionStatus
		reason       string
		message      []string
	}{
		{name: "present", report: `{"exists":true,"sizeBytes":4096}`, status: metav1.ConditionTrue, reason: backupsv1.ReasonArtifactPresent,
			message: []string{"found the artifact", "(4096 bytes)"}},
		{name: "missing", report: `{"exists":false,"sizeBytes":0}`, status: metav1.ConditionFalse, reason: backupsv1.ReasonArtifactMissing,
			message: []string{"found no object at", "cannot be restored"}},
		{name: "another size", report: `{"exists":true,"sizeBytes":4095}`, status: metav1.ConditionFalse, reason: backupsv1.ReasonArtifactMissing,
			message: []string{"with 4095 bytes, not the 4096 bytes the backup stored"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newCheckFixture(t, nil)
			d := f.checker(0)
			b := f.readyBackup("checked", ptr.To(f.clock.Now().Add(-time.Minute)))
			j := f.finishedCheck(d, b, 0, tc.report, "")
			f.clock.Step(time.Minute)
			r := f.backupReconcilerOf(d)

			if tc.status == metav1.ConditionFalse {
				// One check is one sighting: ArtifactAvailable=Unknown, the Job read and deleted,
				// and a second check due a retry delay after the first finished.
				reconcileOnce(t, r, b)
				b = get(t, b)
				c := artifactCondition(b)
				require.Equal(t, metav1.ConditionUnknown, c.Status)
				require.Equal(t, backupsv1.ReasonArtifactAbsenceUnconfirmed, c.Reason)
				for _, m := range append(tc.message, j.Name) {
					require.Contains(t, c.Message, m)
				}
				require.Contains(t, strings.Join(drain(f.rec), "\n"), "Warning "+backupsv1.ReasonArtifactAbsenceUnconfirmed)
				reconcileOnce(t, r, b)
				b = get(t, b)
				require.Equal(t, finishedAt(t, j).Add(driver.CheckRetryDelay), nextCheckOf(t, b), "a second check a retry delay after the first")
				f.requireCheckJobGone(b)
				require.Equal(t, metav1.ConditionUnknown, artifactCondition(b).Status, "one check confirms nothing")
				require.True(t, b.WasGood(), "retention still counts on it")
				// The second check finds the same: confirmed, below.
				f.clock.Step(driver.CheckRetryDelay)
				// No garbage collector here: the first Job's pod goes by hand.
				require.NoError(t, cl.Delete(f.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: j.Namespace, Name: j.Name + "-x"}}))
				j = f.finishedCheck(d, b, 0, tc.report, "")
				f.clock.Step(time.Minute)
			}

			reconcileOnce(t, r, b)
			b = get(t, b)
			c := artifactCondition(b)
			require.Equal(t, tc.status, c.Status)
			require.Equal(t, tc.reason, c.Reason)
			for _, m := range append(tc.message, j.Name, b.Status.Artifact.URI) {
				require.Contains(t, c.Message, m)
			}
			if tc.status == metav1.ConditionFalse {
				require.Equal(t, f.clock.Now().UTC(), c.LastTransitionTime.UTC(), "the condition changed now")
				events := strings.Join(drain(f.rec), "\n")
				require.Contains(t, events, "Warning "+backupsv1.ReasonArtifactMissing)
			} else {
				require.Empty(t, drain(f.rec))
			}
			require.Equal(t, j.UID, f.checkJobOf(b).UID, "the Job is kept until the Backup shows its result")

			reconcileOnce(t, r, b)
			b = get(t, b)
			require.Equal(t, finishedAt(t, j).Add(driver.DefaultCheckPeriod), nextCheckOf(t, b), "the next check a period after this one finished")
			f.requireCheckJobGone(b)
			require.Equal(t, *c, *artifactCondition(b), "the condition stays")
			require.Empty(t, drain(f.rec), "said once")

			// Read and recorded: no further write, and the next check is a period away.
			rv := b.ResourceVersion
			reconcileOnce(t, r, b)
			require.Equal(t, rv, get(t, b).ResourceVersion)
			f.startDueChecks(d)
			require.Empty(t, f.jobsOf(names.KindBackupCheck))
		})
	}
}

// A check that could not tell (the Job failed, or reported nothing usable) changes no condition:
// a Warning says so, the Job is deleted, and the check is retried after the retry delay.
func TestArtifactCheckInconclusive(t *testing.T) {
	for _, tc := range []struct {
		name            string
		exitCode        int32
		report, reason  string
		messageContains string
	}{
		{name: "failed Job", exitCode: 1, report: "check failed: looking up s3://coffer/x: Access Denied", reason: batchv1.JobReasonBackoffLimitExceeded,
			messageContains: "Access Denied"},
		{name: "deadline exceeded", exitCode: 137, reason: batchv1.JobReasonDeadlineExceeded, messageContains: "DeadlineExceeded"},
		{name: "unparsable report", report: "it is there, I think", messageContains: "reported no usable check result"},
		{name: "empty report", messageContains: "the termination message is empty"},
		{name: "negative size", report: `{"exists":true,"sizeBytes":-1}`, messageContains: "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newCheckFixture(t, nil)
			d := f.checker(0)
			b := f.readyBackup("unsure", ptr.To(f.clock.Now().Add(-time.Minute)))
			before := *artifactCondition(b)
			j := f.finishedCheck(d, b, tc.exitCode, tc.report, tc.reason)
			r := f.backupReconcilerOf(d)

			reconcileOnce(t, r, b)
			b = get(t, b)
			require.Equal(t, before, *artifactCondition(b), "an inconclusive check changes no condition")
			retry := finishedAt(t, j).Add(driver.CheckRetryDelay)
			require.Equal(t, retry, nextCheckOf(t, b))
			f.requireCheckJobGone(b)
			events := drain(f.rec)
			require.Len(t, events, 1)
			require.True(t, strings.HasPrefix(events[0], "Warning "+driver.ReasonArtifactCheckInconclusive+" "), events[0])
			require.Contains(t, events[0], tc.messageContains)
			require.Contains(t, events[0], b.Status.Artifact.URI)
			require.Contains(t, events[0], retry.UTC().Format(time.RFC3339))

			// Not before the retry delay, and then again.
			f.clock.SetTime(retry.Add(-time.Second))
			f.startDueChecks(d)
			require.Nil(t, f.checkJobOf(b), "not retried before the delay")
			f.clock.Step(time.Second)
			f.startDueChecks(d)
			again := f.checkJobOf(b)
			require.NotNil(t, again, "retried after the delay")
			require.NotEqual(t, j.UID, again.UID)
		})
	}
}

// A strategy without cleanupTemplate cannot reach the store: its Backups get no check Job, and a
// Warning regarding the strategy says so once.
func TestArtifactCheckWithoutCleanupTemplate(t *testing.T) {
	f := newCheckFixture(t, func(s *jobapi.JobBackupStrategySpec) { s.CleanupTemplate = nil })
	d := f.checker(0)
	b := f.readyBackup("unreachable", ptr.To(f.clock.Now().Add(-time.Hour)))
	rv := b.ResourceVersion
	f.startDueChecks(d)
	require.Empty(t, f.jobsOf(names.KindBackupCheck))
	events := drain(f.rec)
	require.Len(t, events, 1)
	require.True(t, strings.HasPrefix(events[0], "Warning "+driver.ReasonArtifactsUncheckable+" "), events[0])
	require.Contains(t, events[0], f.strategy.Name)

	f.startDueChecks(d)
	require.Empty(t, f.jobsOf(names.KindBackupCheck))
	require.Empty(t, drain(f.rec), "said once per strategy generation")
	require.Equal(t, rv, get(t, b).ResourceVersion, "the Backup is left as it is")
}

// A cleanupTemplate that does not render in check mode cannot check: no Job, a Warning that the
// condition is unchanged, and a retry after the retry delay.
func TestArtifactCheckTemplateDoesNotRender(t *testing.T) {
	f := newCheckFixture(t, func(s *jobapi.JobBackupStrategySpec) {
		s.CleanupTemplate = ptr.To(agentTemplate("--flag={{ .Parameters.nothere }}"))
	})
	d := f.checker(0)
	b := f.readyBackup("unrenderable", ptr.To(f.clock.Now().Add(-time.Hour)))
	before := *artifactCondition(b)
	f.startDueChecks(d)
	require.Empty(t, f.jobsOf(names.KindBackupCheck))
	b = get(t, b)
	require.Equal(t, f.clock.Now().Add(driver.CheckRetryDelay).UTC(), nextCheckOf(t, b))
	require.Equal(t, before, *artifactCondition(b))
	events := drain(f.rec)
	require.Len(t, events, 1)
	require.True(t, strings.HasPrefix(events[0], "Warning "+driver.ReasonArtifactCheckInconclusive+" "), events[0])
	require.Contains(t, events[0], "cannot be checked")
	require.Contains(t, events[0], "nothere", "says what does not render")

	f.startDueChecks(d)
	require.Empty(t, drain(f.rec), "not again before the retry delay")
}

// A zero period disables the checks.
func TestArtifactChecksDisabled(t *testing.T) {
	f := newCheckFixture(t, nil)
	d := f.checker(0)
	d.CheckPeriod = 0
	f.readyBackup("overdue", ptr.To(f.clock.Now().Add(-time.Hour)))
	f.startDueChecks(d)
	require.Empty(t, f.jobsOf(names.KindBackupCheck))
}

// The runnable runs on the leader only, starts the due checks at once, and stops with its context.
func TestArtifactChecksRunnable(t *testing.T) {
	f := newCheckFixture(t, nil)
	d := f.checker(0)
	b := f.readyBackup("overdue", ptr.To(f.clock.Now().Add(-time.Hour)))
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	// The process stops as soon as the first round has created its Job.
	d.Client = interceptor.NewClient(d.Client.(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			err := c.Create(ctx, obj, opts...)
			if _, isJob := obj.(*batchv1.Job); isJob && err == nil {
				cancel()
			}
			return err
		},
	})
	r := driver.ArtifactChecks{Driver: d}
	require.True(t, r.NeedLeaderElection())
	require.NoError(t, r.Start(ctx), "returns when its context ends")
	require.NotNil(t, f.checkJobOf(b), "the first round runs before the first tick")
}
