package realstack

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/internal/driver"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

// TestCatalogRefusesWhatItMustNotImport: Velero backups in the catalog's location whose records
// must not become Backups here (not a record, this cluster's own, a record naming another namespace
// than the backup holds, a backup Velero has not completed) are skipped and counted, none is
// imported; a tarball that cannot be read is StorageUnreadable, and nothing is imported from it.
// The Velero backups are made as Velero's sync would make them (Completed, in a location of their
// own, which this suite's Velero does not serve).
func TestCatalogRefusesWhatItMustNotImport(t *testing.T) {
	ctx := context.Background()
	const location = "catalog-probe"
	kubeSystem := &corev1.Namespace{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Name: "kube-system"}, kubeSystem))
	record := func(cluster, ns string) string {
		r := &backupsv1.ArtifactRecord{APIVersion: backupsv1.RecordAPIVersion, Kind: backupsv1.RecordKind, Format: backupsv1.RecordFormat,
			SourceCluster: backupsv1.SourceCluster{ID: cluster}, Namespace: ns, Name: "forged",
			Spec: backupsv1.BackupSpec{ApplicationRef: corev1.TypedLocalObjectReference{APIGroup: ptr("apps.cozystack.io"), Kind: "Shop", Name: "shop"},
				StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr(veleroapi.Group), Kind: veleroapi.Kind, Name: "namespace"}, TakenAt: metav1.Now()}}
		text, err := json.Marshal(r)
		require.NoError(t, err)
		return string(text)
	}
	veleroBackup := func(name, rec, holds string, phase velerov1.BackupPhase) *velerov1.Backup {
		return &velerov1.Backup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: velerostack.Namespace, Annotations: map[string]string{veleroapi.AnnotationRecord: rec}},
			Spec:   velerov1.BackupSpec{StorageLocation: location, IncludedNamespaces: []string{holds}},
			Status: velerov1.BackupStatus{Phase: phase, StartTimestamp: &metav1.Time{Time: time.Now()}}}
	}
	for _, vb := range []*velerov1.Backup{
		veleroBackup("probe-not-a-record", `{"kind":"Something"}`, managedNS, velerov1.BackupPhaseCompleted),
		veleroBackup("probe-own", record(string(kubeSystem.UID), managedNS), managedNS, velerov1.BackupPhaseCompleted),
		veleroBackup("probe-other-namespace", record("another-cluster", targetNS), managedNS, velerov1.BackupPhaseCompleted),
		veleroBackup("probe-in-progress", record("another-cluster", managedNS), managedNS, velerov1.BackupPhaseInProgress),
	} {
		require.NoError(t, cl.Create(ctx, vb))
		t.Cleanup(func() { _ = cl.Delete(context.Background(), vb) })
	}
	strat := &veleroapi.VeleroBackupStrategy{ObjectMeta: metav1.ObjectMeta{Name: "catalog-probe"}, Spec: veleroapi.VeleroBackupStrategySpec{
		VeleroNamespace: velerostack.Namespace,
		BackupTemplate:  veleroapi.VeleroTemplate{Spec: k8sruntime.RawExtension{Raw: []byte(`{}`)}},
		Catalog:         &veleroapi.VeleroCatalog{StorageLocation: location},
	}}
	require.NoError(t, cl.Create(ctx, strat))
	t.Cleanup(func() { _ = cl.Delete(context.Background(), strat) })

	d := &driver.Driver{Client: cl, Recorder: &events.FakeRecorder{}, HTTP: http.DefaultClient, DownloadTimeout: 3 * time.Second}
	driver.New(d)
	sync := func() {
		t.Helper()
		_, err := (&driver.Catalog{Driver: d, Clock: clock.RealClock{}}).Reconcile(ctx, requestFor(strat))
		require.NoError(t, err)
		require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(strat), strat))
	}
	imported := func() int {
		list := &backupsv1.BackupList{}
		require.NoError(t, cl.List(ctx, list, client.MatchingLabels{backupsv1.LabelCatalog: strat.Name}))
		return len(list.Items)
	}

	sync()
	c := meta.FindStatusCondition(strat.Status.Conditions, backupsv1.ConditionCatalogSynced)
	require.NotNil(t, c)
	assert.Equal(t, metav1.ConditionTrue, c.Status, c.Message)
	if assert.NotNil(t, strat.Status.Catalog) {
		assert.Equal(t, backupsv1.CatalogStatus{LastSyncTime: strat.Status.Catalog.LastSyncTime, Records: 4, Own: 1, Skipped: 3}, *strat.Status.Catalog)
	}
	for _, why := range []string{"is  Something, not " + backupsv1.RecordAPIVersion, "holds [" + managedNS + "]", "InProgress, not Completed"} {
		assert.Contains(t, c.Message, why)
	}
	assert.Zero(t, imported(), "nothing imported")

	// A valid record of another cluster whose tarball cannot be read: reported, not imported.
	unreadable := veleroBackup("probe-unreadable", record("another-cluster", managedNS), managedNS, velerov1.BackupPhaseCompleted)
	require.NoError(t, cl.Create(ctx, unreadable))
	t.Cleanup(func() { _ = cl.Delete(context.Background(), unreadable) })
	sync()
	c = meta.FindStatusCondition(strat.Status.Conditions, backupsv1.ConditionCatalogSynced)
	require.NotNil(t, c)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, backupsv1.ReasonCatalogUnreadable, c.Reason)
	assert.True(t, strings.Contains(c.Message, "probe-unreadable"), c.Message)
	assert.Zero(t, imported(), "nothing imported from an unreadable tarball")
}
