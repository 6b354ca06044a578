package backupjob

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// A RestoreJob nobody claims is flagged after the claim timeout, with BackupNotFound when its
// Backup does not exist and NoDriverClaimed naming the strategy kind when it does; claimed and
// terminal ones are left alone, and a second pass writes nothing.
func TestUnclaimedRestoreJobs(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	clk := clocktesting.NewFakeClock(time.Now())
	rec := events.NewFakeRecorder(10)
	r := &RestoreReconciler{Client: env.Client, Clock: clk, Recorder: rec, ClaimTimeout: time.Minute}
	backup := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b1", Namespace: ns}, Spec: backupsv1.BackupSpec{
		ApplicationRef: corev1.TypedLocalObjectReference{Kind: "VirtualMachine", Name: "vm1"}, TakenAt: metav1.Now(),
		StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr("velerodriver.backups.cozystack.io"), Kind: "VeleroBackupStrategy", Name: "s"}}}
	require.NoError(t, env.Client.Create(ctx, backup))
	restore := func(name, backupName string) *backupsv1.RestoreJob {
		rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: backupName}}}
		require.NoError(t, env.Client.Create(ctx, rj))
		return rj
	}
	run := func(rj *backupsv1.RestoreJob) reconcile.Result {
		res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(rj)})
		require.NoError(t, err)
		require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(rj), rj))
		return res
	}
	missing, orphan, claimed := restore("missing", "no-such-backup"), restore("orphan", "b1"), restore("claimed", "b1")
	claimed.MarkRunning(metav1.Now(), "coffer-driver-velero")
	require.NoError(t, env.Client.Status().Update(ctx, claimed))
	clk.SetTime(missing.CreationTimestamp.Time)

	res := run(missing)
	require.Equal(t, time.Minute, res.RequeueAfter, "waits for the claim timeout, precisely")
	require.Nil(t, meta.FindStatusCondition(missing.Status.Conditions, backupsv1.ConditionAccepted))

	clk.Step(time.Minute)
	run(missing)
	c := meta.FindStatusCondition(missing.Status.Conditions, backupsv1.ConditionAccepted)
	require.NotNil(t, c)
	require.Equal(t, metav1.ConditionFalse, c.Status)
	require.Equal(t, backupsv1.ReasonBackupNotFound, c.Reason)
	require.Contains(t, c.Message, `Backup "no-such-backup" does not exist`)
	require.Equal(t, backupsv1.RestoreJobPending, missing.Status.Phase, "not failed: the Backup may still appear")

	run(orphan)
	c = meta.FindStatusCondition(orphan.Status.Conditions, backupsv1.ConditionAccepted)
	require.Equal(t, backupsv1.ReasonNoDriverClaimed, c.Reason)
	require.Contains(t, c.Message, "VeleroBackupStrategy")

	rv := claimed.ResourceVersion
	run(claimed)
	require.Equal(t, rv, claimed.ResourceVersion, "a claimed RestoreJob is the driver's")
	rv = missing.ResourceVersion
	run(missing)
	require.Equal(t, rv, missing.ResourceVersion, "said once")
	require.Len(t, rec.Events, 2, "one Warning per flagged RestoreJob")
}
