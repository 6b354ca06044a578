package realstack

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/internal/names"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

// TestRestoresUnbindClaims: a restore of a Backup that records volume data, in a Velero namespace
// without the claims modifier, fails ClaimsModifierMissing before anything is created; an inert
// restore of it (a verification's: no pod runs, and its objects are compared with the backup's as
// they were) proceeds unmodified; once the modifier exists, a restore applies it, and an inert one
// still does not. The restores are not served by a Velero server (their namespace has none): the
// test calls the reconciler and looks at what it created. e2e/volumes restores volumes for real.
func TestRestoresUnbindClaims(t *testing.T) {
	ctx := context.Background()
	suffix := time.Now().Format("150405")
	ns, veleroNS := "claims-"+suffix, "claims-velero-"+suffix
	for _, n := range []string{ns, veleroNS} {
		require.NoError(t, cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}))
	}
	shop(t, ns, "shop")
	ref := corev1.TypedLocalObjectReference{APIGroup: ptr(veleroapi.Group), Kind: veleroapi.Kind, Name: ns}
	require.NoError(t, cl.Create(ctx, &veleroapi.VeleroBackupStrategy{ObjectMeta: metav1.ObjectMeta{Name: ns}, Spec: veleroapi.VeleroBackupStrategySpec{
		VeleroNamespace: veleroNS,
		BackupTemplate:  veleroapi.VeleroTemplate{Spec: k8sruntime.RawExtension{Raw: []byte(`{"includedNamespaces": ["{{ .Application.metadata.namespace }}"]}`)}},
	}}))
	volumes, err := veleroapi.VolumeData{Volumes: []veleroapi.VolumeRecord{{Method: veleroapi.VolumeMethodFileSystem, Namespace: ns, Pod: "shop", PodVolume: "data",
		Uploader: "kopia", StorageLocation: velerostack.BSLName, SnapshotID: "3862bcd83f5c2fa5b9b0339af4b29033", Bytes: 4096, Phase: "Completed", Source: "shop-x"}}}.Raw()
	require.NoError(t, err)
	b := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "with-volumes", Namespace: ns}, Spec: backupsv1.BackupSpec{
		ApplicationRef: corev1.TypedLocalObjectReference{APIGroup: ptr(backupsv1.DefaultApplicationAPIGroup), Kind: "Shop", Name: "shop"},
		StrategyRef:    ref, TakenAt: metav1.Now(),
		DriverMetadata: map[string]string{names.MetaNamespace: veleroNS, names.MetaBackupName: "with-volumes", names.MetaStorageLocation: velerostack.BSLName},
	}}
	require.NoError(t, cl.Create(ctx, b))
	b.Status.Phase = backupsv1.BackupReady
	b.Status.Artifact = &backupsv1.BackupArtifact{URI: "s3://coffer/velero/backups/with-volumes/with-volumes.tar.gz"}
	b.Status.UnderlyingResources = volumes
	require.NoError(t, cl.Status().Update(ctx, b))

	restores := newKit(cl, events.NewFakeRecorder(100)).RestoreJobReconciler()
	var restoreWith func(t *testing.T, name string, options map[string]string) (*backupsv1.RestoreJob, *velerov1.Restore)
	// restore reconciles a RestoreJob of b (inert or not) once and returns it with its Velero
	// Restore, nil when none was created.
	restore := func(t *testing.T, name string, inert bool) (*backupsv1.RestoreJob, *velerov1.Restore) {
		t.Helper()
		if inert {
			return restoreWith(t, name, map[string]string{backupsv1.OptionInert: "true"})
		}
		return restoreWith(t, name, nil)
	}
	restoreWith = func(t *testing.T, name string, options map[string]string) (*backupsv1.RestoreJob, *velerov1.Restore) {
		t.Helper()
		rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: b.Name},
			Options: backupsv1.StringOptions(options)}}
		require.NoError(t, cl.Create(ctx, rj))
		_, err := restores.Reconcile(ctx, requestFor(rj))
		require.NoError(t, err)
		require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(rj), rj))
		vr := &velerov1.Restore{}
		err = cl.Get(ctx, client.ObjectKey{Namespace: veleroNS, Name: names.VeleroRestore(rj)}, vr)
		if apierrors.IsNotFound(err) {
			return rj, nil
		}
		require.NoError(t, err)
		return rj, vr
	}

	t.Run("without the modifier a restore of volume data fails at once", func(t *testing.T) {
		rj, vr := restore(t, "unconfigured", false)
		require.Equal(t, backupsv1.RestoreJobFailed, rj.Status.Phase, rj.Status.Message)
		assert.Equal(t, "ClaimsModifierMissing", meta.FindStatusCondition(rj.Status.Conditions, backupsv1.ConditionReady).Reason)
		assert.Contains(t, rj.Status.Message, "Backup with-volumes holds the data of 1 volume(s)")
		assert.Contains(t, rj.Status.Message, "create ConfigMap coffer-restore-claims in namespace "+veleroNS)
		assert.Nil(t, vr, "no Velero Restore is created")
	})
	// A Backup without a record of its volume data (imported from another cluster's record, which
	// is written before Velero backs the volumes up): the volume records Velero keeps of its backup
	// (a storage sync brings them along) decide.
	t.Run("without a record, Velero's volume records decide", func(t *testing.T) {
		for _, tt := range []struct {
			name    string
			volumes int
		}{{"imported-with-volumes", 1}, {"imported-without", 0}} {
			vb := &velerov1.Backup{ObjectMeta: metav1.ObjectMeta{Name: tt.name, Namespace: veleroNS}, Spec: velerov1.BackupSpec{IncludedNamespaces: []string{ns}}}
			require.NoError(t, cl.Create(ctx, vb))
			for i := range tt.volumes {
				require.NoError(t, cl.Create(ctx, &velerov1.PodVolumeBackup{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", tt.name, i), Namespace: veleroNS,
					Labels: map[string]string{velerov1.BackupUIDLabel: string(vb.UID)}},
					Spec:   velerov1.PodVolumeBackupSpec{Pod: corev1.ObjectReference{Namespace: ns, Name: "shop"}, Volume: "data", UploaderType: "kopia"},
					Status: velerov1.PodVolumeBackupStatus{Phase: velerov1.PodVolumeBackupPhaseCompleted, SnapshotID: "3862bcd83f5c2fa5b9b0339af4b29033"}}))
			}
			imported := b.DeepCopy()
			imported.ObjectMeta = metav1.ObjectMeta{Name: tt.name, Namespace: ns}
			imported.Spec.DriverMetadata = map[string]string{names.MetaNamespace: veleroNS, names.MetaBackupName: tt.name, names.MetaStorageLocation: velerostack.BSLName}
			require.NoError(t, cl.Create(ctx, imported))
			imported.Status = backupsv1.BackupStatus{Phase: backupsv1.BackupReady, Artifact: b.Status.Artifact}
			require.NoError(t, cl.Status().Update(ctx, imported))

			rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: tt.name, Namespace: ns}, Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: tt.name}}}
			require.NoError(t, cl.Create(ctx, rj))
			_, err := restores.Reconcile(ctx, requestFor(rj))
			require.NoError(t, err)
			require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(rj), rj))
			if tt.volumes > 0 {
				require.Equal(t, backupsv1.RestoreJobFailed, rj.Status.Phase, rj.Status.Message)
				assert.Contains(t, rj.Status.Message, "Backup "+tt.name+" holds the data of 1 volume(s)")
			} else {
				assert.Equal(t, backupsv1.RestoreJobRunning, rj.Status.Phase, "a Velero backup without volume data restores as it is: %s", rj.Status.Message)
			}
		}
	})
	t.Run("an inert restore proceeds unmodified", func(t *testing.T) {
		rj, vr := restore(t, "inert-unconfigured", true)
		require.Equal(t, backupsv1.RestoreJobRunning, rj.Status.Phase, rj.Status.Message)
		require.NotNil(t, vr)
		assert.Nil(t, vr.Spec.ResourceModifier)
	})

	require.NoError(t, cl.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: veleroapi.RestoreClaimsModifier, Namespace: veleroNS},
		Data: map[string]string{veleroapi.RestoreClaimsModifierKey: veleroapi.RestoreClaimsModifierRules}}))
	t.Run("with the modifier a restore applies it", func(t *testing.T) {
		rj, vr := restore(t, "configured", false)
		require.Equal(t, backupsv1.RestoreJobRunning, rj.Status.Phase, rj.Status.Message)
		require.NotNil(t, vr)
		require.NotNil(t, vr.Spec.ResourceModifier)
		assert.Equal(t, corev1.TypedLocalObjectReference{Kind: "ConfigMap", Name: veleroapi.RestoreClaimsModifier}, *vr.Spec.ResourceModifier)
	})
	t.Run("an inert restore still does not", func(t *testing.T) {
		rj, vr := restore(t, "inert-configured", true)
		require.Equal(t, backupsv1.RestoreJobRunning, rj.Status.Phase, rj.Status.Message)
		require.NotNil(t, vr)
		assert.Nil(t, vr.Spec.ResourceModifier)
	})
	// A verification's inert restore that restores the volumes on its own (the verifier's volume
	// phase) asks for the claims without their data; any other value fails before a Restore exists.
	t.Run("volumeData false restores the claims without their data", func(t *testing.T) {
		for _, tt := range []struct {
			name, value string
			restorePVs  *bool
		}{{"with-data", "", nil}, {"with-data-said", "true", nil}, {"without-data", "false", ptr(false)}} {
			opts := map[string]string{backupsv1.OptionInert: "true"}
			if tt.value != "" {
				opts[veleroapi.OptionVolumeData] = tt.value
			}
			rj, vr := restoreWith(t, tt.name, opts)
			require.Equal(t, backupsv1.RestoreJobRunning, rj.Status.Phase, rj.Status.Message)
			require.NotNil(t, vr)
			assert.Equal(t, tt.restorePVs, vr.Spec.RestorePVs, tt.name)
		}
		rj, vr := restoreWith(t, "data-maybe", map[string]string{backupsv1.OptionInert: "true", veleroapi.OptionVolumeData: "maybe"})
		require.Equal(t, backupsv1.RestoreJobFailed, rj.Status.Phase, rj.Status.Message)
		assert.Equal(t, backupsv1.ReasonInvalidOption, meta.FindStatusCondition(rj.Status.Conditions, backupsv1.ConditionReady).Reason)
		assert.Contains(t, rj.Status.Message, `spec.options.volumeData is "maybe"; it must be "true" or "false"`)
		assert.Nil(t, vr, "no Velero Restore is created")
	})
}
