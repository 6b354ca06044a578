package realstack

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/internal/driver"
	"github.com/coffer-backup/coffer/driver-velero/internal/names"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

// TestSettledVeleroBackups: the Velero backup of a finished run is settled and leaves the running
// driver's cache, while its Backup stays ArtifactAvailable=True; a pass over the settled backups
// finds the Ready Backup whose Velero backup went while nothing watched (and not the one whose
// backup is settled); the watch of the settled backups wakes the Backup of one that changes.
// (That the woken check reads the backup from the API server and sees it going is
// TestArtifactExpiredOutsideCoffer's.)
func TestSettledVeleroBackups(t *testing.T) {
	ctx := context.Background()
	job, vbKey := succeededRun(t, "settled-1")
	vb := &velerov1.Backup{}
	require.NoError(t, cl.Get(ctx, vbKey, vb))
	assert.Equal(t, "true", vb.Labels[names.LabelSettled], "a completed and measured Velero backup is settled")
	waitFor(t, "the running driver's cache to let the settled backup go", 30*time.Second, func(ctx context.Context) (bool, error) {
		err := running.Client.Get(ctx, vbKey, &velerov1.Backup{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	own := &backupsv1.Backup{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: managedNS, Name: job.Name}, own))
	available := func() *metav1.Condition {
		b := &backupsv1.Backup{}
		require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(own), b))
		return meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionArtifactAvailable)
	}
	before := available()
	require.NotNil(t, before)
	require.Equal(t, metav1.ConditionTrue, before.Status, before.Message)

	// A Ready Backup whose Velero backup is gone, in a namespace the running driver does not
	// watch: as if it went while the driver was down.
	elsewhere := "settled-" + strings.ToLower(time.Now().Format("150405"))
	require.NoError(t, cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: elsewhere}}))
	forged := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "went", Namespace: elsewhere}, Spec: *own.Spec.DeepCopy()}
	forged.Spec.DriverMetadata[names.MetaBackupName] = "went-while-nothing-watched"
	require.NoError(t, cl.Create(ctx, forged))
	forged.Status = *own.Status.DeepCopy()
	require.NoError(t, cl.Status().Update(ctx, forged))

	watcher, err := client.NewWithWatch(c.Config, client.Options{Scheme: sch})
	require.NoError(t, err)
	d := &driver.Driver{Client: cl, Live: cl, Watcher: watcher, Recorder: &events.FakeRecorder{}, HTTP: http.DefaultClient, DownloadTimeout: time.Minute}
	driver.New(d)
	var suspects []reconcile.Request
	require.NoError(t, d.SettledPass(ctx, func(r reconcile.Request) { suspects = append(suspects, r) }))
	assert.Contains(t, suspects, requestFor(forged), "the Backup whose Velero backup went is suspect")
	assert.NotContains(t, suspects, requestFor(own), "a Backup whose Velero backup is settled is not")

	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	require.NoError(t, d.SettledSource().Start(wctx, q))
	// The pass the source starts with suspects the forged Backup again; then a change of the
	// settled backup wakes its Backup.
	waitFor(t, "the source's pass", 30*time.Second, func(context.Context) (bool, error) { return q.Len() > 0, nil })
	orig := vb.DeepCopy()
	vb.Annotations["coffer-test/touched"] = "yes"
	require.NoError(t, cl.Patch(ctx, vb, client.MergeFrom(orig)))
	seen := map[reconcile.Request]bool{}
	waitFor(t, "the watch to wake the changed backup's Backup", 30*time.Second, func(context.Context) (bool, error) {
		for q.Len() > 0 {
			r, _ := q.Get()
			seen[r] = true
			q.Done(r)
		}
		return seen[requestFor(own)], nil
	})
	assert.True(t, seen[requestFor(forged)])

}

// TestCrashAfterSettling: the driver settles a Velero backup (the patch that also records its
// checksum) and dies before it creates the Backup. The restarted driver's cache holds no settled
// backup; the run reads it from the API server and finishes with exactly one Velero backup and
// one Backup, instead of failing to create the Velero backup again until its deadline.
func TestCrashAfterSettling(t *testing.T) {
	ctx := context.Background()
	ns := "settle-crash-" + strings.ToLower(time.Now().Format("150405"))
	require.NoError(t, cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	shop(t, ns, "shop")
	job := backupJob(ns, "settled-then-killed", "velero", "Shop")
	require.NoError(t, cl.Create(ctx, job))

	// The cache of a driver that settles: the settled Velero backups are not in it.
	uncachedSettled := func(c client.WithWatch) client.WithWatch {
		return interceptor.NewClient(c, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			if vb, ok := obj.(*velerov1.Backup); ok && vb.Labels[names.LabelSettled] == "true" {
				return apierrors.NewNotFound(velerov1.Resource("backups"), key.Name)
			}
			return nil
		}})
	}
	watcher, err := client.NewWithWatch(c.Config, client.Options{Scheme: sch})
	require.NoError(t, err)
	settling := func(c client.Client) reconcile.Reconciler {
		return driver.New(&driver.Driver{Client: c, Live: cl, Watcher: watcher, Recorder: &events.FakeRecorder{}, HTTP: http.DefaultClient,
			DownloadTimeout: time.Minute}).BackupJobReconciler()
	}

	// First life: it runs the backup to its end, settles the Velero backup and dies as it creates
	// the Backup.
	killed := errors.New("killed before creating the Backup")
	dying := interceptor.NewClient(uncachedSettled(cl), interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if _, ok := obj.(*backupsv1.Backup); ok {
			return killed
		}
		return c.Create(ctx, obj, opts...)
	}})
	r := settling(dying)
	waitFor(t, "the first life to settle the Velero backup and die", 3*time.Minute, func(ctx context.Context) (bool, error) {
		_, err := r.Reconcile(ctx, requestFor(job))
		if errors.Is(err, killed) {
			return true, nil
		}
		return false, err
	})
	vbs := &velerov1.BackupList{}
	require.NoError(t, cl.List(ctx, vbs, client.InNamespace(velerostack.Namespace), client.MatchingLabels{backupsv1.LabelBackupJobUID: string(job.UID)}))
	require.Len(t, vbs.Items, 1)
	assert.Equal(t, "true", vbs.Items[0].Labels[names.LabelSettled], "settled before the crash")
	assert.True(t, apierrors.IsNotFound(cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: job.Name}, &backupsv1.Backup{})), "no Backup yet")

	// Second life.
	r = settling(uncachedSettled(cl))
	waitFor(t, "the restarted run to finish", 3*time.Minute, func(ctx context.Context) (bool, error) {
		if _, err := r.Reconcile(ctx, requestFor(job)); err != nil {
			return false, err
		}
		return job.IsTerminal(), cl.Get(ctx, client.ObjectKeyFromObject(job), job)
	})
	require.Equal(t, backupsv1.BackupJobSucceeded, job.Status.Phase, job.Status.Message)
	require.NoError(t, cl.List(ctx, vbs, client.InNamespace(velerostack.Namespace), client.MatchingLabels{backupsv1.LabelBackupJobUID: string(job.UID)}))
	assert.Len(t, vbs.Items, 1, "exactly one Velero backup for the run")
	backups := &backupsv1.BackupList{}
	require.NoError(t, cl.List(ctx, backups, client.InNamespace(ns)))
	require.Len(t, backups.Items, 1, "exactly one Backup for the run")
	assert.Equal(t, backupsv1.BackupReady, backups.Items[0].Status.Phase)
	assert.Equal(t, vbs.Items[0].Name, backups.Items[0].Spec.DriverMetadata[names.MetaBackupName])
	assert.Equal(t, vbs.Items[0].Annotations[backupsv1.AnnotationChecksum], backups.Items[0].Status.Artifact.Checksum)
}
