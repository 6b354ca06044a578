package realstack

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/internal/names"
)

// TestVeleroBackupGoneForAMomentIsNotLost deletes the velero.io Backup object behind a Ready
// Backup the way a reinstall or a re-created CRD does (a plain delete: its data stay in storage).
// Velero's storage sync brings it back; meanwhile the Backup is never marked missing (which
// retention would prune), only ArtifactAvailable=Unknown (ArtifactAbsenceUnconfirmed), and it
// ends True again.
func TestVeleroBackupGoneForAMomentIsNotLost(t *testing.T) {
	ctx := context.Background()
	job, vbKey := succeededRun(t, "vanishing-1")
	vb := &velerov1.Backup{}
	require.NoError(t, cl.Get(ctx, vbKey, vb))
	require.Equal(t, "true", vb.Labels[names.LabelSettled], "the running driver settled it")
	b := &backupsv1.Backup{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: managedNS, Name: job.Name}, b))
	found := meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionArtifactAvailable)
	require.NotNil(t, found)
	require.Equal(t, metav1.ConditionTrue, found.Status)
	require.NoError(t, cl.Delete(ctx, vb))

	waitFor(t, "the Backup to find its artifact again", 3*time.Minute, func(ctx context.Context) (bool, error) {
		b := &backupsv1.Backup{}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: managedNS, Name: job.Name}, b); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionArtifactAvailable)
		require.NotNil(t, c)
		require.NotEqual(t, metav1.ConditionFalse, c.Status, "an absence for a moment is never a missing artifact: %s", c.Message)
		if c.Status == metav1.ConditionUnknown {
			require.Equal(t, backupsv1.ReasonArtifactAbsenceUnconfirmed, c.Reason)
		}
		// True again, after a transition since (through Unknown: never False). Velero syncs
		// a minute apart, so the sighting and the return are seconds apart at least.
		return c.Status == metav1.ConditionTrue && c.LastTransitionTime.After(found.LastTransitionTime.Time), nil
	})
	require.NoError(t, cl.Get(ctx, vbKey, &velerov1.Backup{}), "Velero's sync brought the backup back from storage")
	// Brought back without the label (storage holds the backup as Velero completed it), it is
	// settled again.
	waitFor(t, "the backup brought back to be settled again", time.Minute, func(ctx context.Context) (bool, error) {
		err := cl.Get(ctx, vbKey, vb)
		return vb.Labels[names.LabelSettled] == "true", err
	})
}
