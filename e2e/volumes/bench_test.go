//go:build e2e

package volumes

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/csidir"
	"github.com/coffer-backup/coffer/e2e/harness/node"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

// benchVolumeBytes is the volume the full-restore bench restores: half random, half compressible.
const benchVolumeBytes = 1 << 30

// BenchmarkFullRestoreOfAVolume: on the real node, a pod's 1 GiB volume backed up by Velero's
// file-system backup; then, in one run, the verifier's full-restore of that backup (objects
// restored into a sandbox and compared, the volume restored into a volume sandbox, every file
// read back by the reader and compared with the repository's record of it) side by side with a
// bare Velero restore of the same backup into a new namespace (the pod, the claim and the data).
// Both are timed from the creation of their object until it is seen ended (polled every 200 ms
// and 100 ms). A second verification of the same backup follows the first: it compares with the
// snapshot's record the first read whole (velerocheck's remembered records), as the verification
// after a Plan's checksum-only does.
// The goal (issue 33): the verification at most 1.3× the bare restore. It runs in `make bench`
// (as root; skipped otherwise): go test -tags e2e -run '^$' -bench FullRestoreOfAVolume ./volumes/
func BenchmarkFullRestoreOfAVolume(b *testing.B) {
	benchFullRestore(b, false)
}

// BenchmarkFullRestoreOfAMovedVolume is BenchmarkFullRestoreOfAVolume with the claim of the
// node's CSI driver, backed up as a CSI snapshot whose data Velero's data mover moves (Cozystack's
// default): the verification's volume sandbox gets the claim from the data mover and a reader pod
// of the verifier's.
func BenchmarkFullRestoreOfAMovedVolume(b *testing.B) {
	benchFullRestore(b, true)
}

func benchFullRestore(b *testing.B, moved bool) {
	node.Require(b)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	e := start(b, ctx)
	e.deployVerifier(b)
	require.NoError(b, e.cl.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: veleroapi.RestoreClaimsModifier, Namespace: velerostack.Namespace},
		Data: map[string]string{veleroapi.RestoreClaimsModifierKey: veleroapi.RestoreClaimsModifierRules}}))
	ns := e.namespace(b, "bench")
	class, spec := "", map[string]any{"includedNamespaces": []any{ns}, "defaultVolumesToFsBackup": true, "storageLocation": velerostack.BSLName, "ttl": "2h0m0s"}
	if moved {
		class = csidir.StorageClass
		spec["defaultVolumesToFsBackup"], spec["snapshotVolumes"], spec["snapshotMoveData"] = false, true, true
	}
	shop(b, ctx, e.cl, ns, "shop", "data", class)
	// The claim asks for 256 MiB; the provisioners' directory volumes hold what is written.
	dir := e.volumeDir(b, ns, "data")
	const files = 32
	random := make([]byte, benchVolumeBytes/files)
	for i := range files {
		line := []byte(fmt.Sprintf("GET /orders/%d 200 12ms\n", i))
		data := bytes.Repeat(line, len(random)/len(line)+1)[:len(random)]
		if i%2 == 0 {
			_, _ = rand.Read(random)
			data = random
		}
		require.NoError(b, os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(i)), data, 0o644))
	}
	vb := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "velero.io/v1", "kind": "Backup",
		"metadata": map[string]any{"name": ns, "namespace": velerostack.Namespace}, "spec": spec}}
	require.NoError(b, e.cl.Create(ctx, vb))
	phase := e.until(b, vb, "Completed", "PartiallyFailed", "Failed", "FailedValidation")
	require.Equal(b, "Completed", phase, "the backup of %d bytes", benchVolumeBytes)

	for range b.N {
		// The verification first: what it leaves in the page cache can only help the bare restore.
		restores := e.watchRestores(b)
		pvrs := e.watchVelero(b, schema.GroupVersionResource{Group: "velero.io", Version: "v1", Resource: "podvolumerestores"})
		// verify runs a full-restore verification of the backup, timed.
		verify := func(name, sandbox string) (*securityv1.BackupVerifyRun, *securityv1.BackupVerifyResult, time.Duration) {
			began := time.Now()
			run, res := e.verifyRun(b, ns, name, securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendVelero,
				BackupRef: securityv1.BackupRef{Name: ns, Namespace: velerostack.Namespace}, Mode: securityv1.ModeFullRestore,
				SandboxNamespace: sandbox + securityv1.SandboxSuffix})
			return run, res, time.Since(began)
		}
		run, res, verified := verify("bench", "bench-verify")
		require.Equal(b, "1", res.Spec.Details["volumesRestored"], "%+v", res.Spec.Findings)
		require.Equal(b, strconv.Itoa(files), res.Spec.Details["volumeFilesCompared"])
		require.Equal(b, "1", res.Spec.Details["volumeSnapshotsRead"], "the first verification reads the snapshot")
		e.sandboxesGone(b, run)
		logRun := func(run *securityv1.BackupVerifyRun) {
			// Where the verification's time went, by the API server's clock (whole seconds).
			for _, r := range restores.of(run) {
				b.Logf("Restore %s: created %s, started %s, completed %s", r.GetName(), r.GetCreationTimestamp().Format(time.TimeOnly),
					nestedString(r, "status", "startTimestamp"), nestedString(r, "status", "completionTimestamp"))
				logVolumeRestores(b, pvrs, r.GetName())
			}
			b.Logf("run %s: created %s, completed %s", run.Name, run.CreationTimestamp.Format(time.TimeOnly), run.Status.CompletionTime.Format(time.TimeOnly))
		}
		logRun(run)
		// The next verification of the same backup by the same verifier (as after the Plan's
		// checksum-only): the record of the snapshot, read whole by the first, is not read again.
		run, res, again := verify("bench-again", "bench-again")
		require.Equal(b, strconv.Itoa(files), res.Spec.Details["volumeFilesCompared"], "%+v", res.Spec.Findings)
		require.Equal(b, "1", res.Spec.Details["volumeRecordsRemembered"], "the snapshot's record is remembered")
		e.sandboxesGone(b, run)
		logRun(run)

		target := ns + "-restored"
		r := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "velero.io/v1", "kind": "Restore",
			"metadata": map[string]any{"name": target, "namespace": velerostack.Namespace},
			"spec": map[string]any{"backupName": ns, "includedNamespaces": []any{ns}, "namespaceMapping": map[string]any{ns: target},
				"resourceModifier": map[string]any{"kind": "ConfigMap", "name": veleroapi.RestoreClaimsModifier}}}}
		began := time.Now()
		require.NoError(b, e.cl.Create(ctx, r))
		phase := e.until(b, r, "Completed", "PartiallyFailed", "Failed", "FailedValidation")
		restored := time.Since(began)
		require.Equal(b, "Completed", phase)
		b.Logf("bare Restore %s: created %s, started %s, completed %s", r.GetName(), r.GetCreationTimestamp().Format(time.TimeOnly),
			nestedString(r, "status", "startTimestamp"), nestedString(r, "status", "completionTimestamp"))
		logVolumeRestores(b, pvrs, r.GetName())
		into := e.volumeDir(b, target, "data")
		var size int64
		for i := range files {
			fi, err := os.Stat(filepath.Join(into, "f"+strconv.Itoa(i)))
			require.NoError(b, err)
			size += fi.Size()
		}
		require.Equal(b, int64(benchVolumeBytes), size, "every byte restored")

		b.ReportMetric(verified.Seconds(), "verify-s")
		b.ReportMetric(again.Seconds(), "verify-again-s")
		b.ReportMetric(restored.Seconds(), "velero-restore-s")
		b.ReportMetric(verified.Seconds()/restored.Seconds(), "verify/restore")
		b.ReportMetric(again.Seconds()/restored.Seconds(), "verify-again/restore")
		b.Logf("1 GiB volume: full-restore verification %s (the snapshot read), the next one %s (its record remembered), bare Velero restore %s: %.2fx, %.2fx",
			verified.Round(100*time.Millisecond), again.Round(100*time.Millisecond), restored.Round(100*time.Millisecond),
			verified.Seconds()/restored.Seconds(), again.Seconds()/restored.Seconds())
	}
}

// until polls o every 100 ms until its status.phase is one of ends, and returns it.
func (e *env) until(tb testing.TB, o *unstructured.Unstructured, ends ...string) string {
	var got string
	require.NoError(tb, wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, 20*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			return false, err
		}
		got = nestedString(o, "status", "phase")
		return slices.Contains(ends, got), nil
	}), "%s %s/%s did not end", o.GetKind(), o.GetNamespace(), o.GetName())
	return got
}

// logVolumeRestores logs when the node agent's restores of Velero Restore restore (its
// PodVolumeRestores, as pvrs saw them) began and ended, by the API server's clock.
func logVolumeRestores(b *testing.B, pvrs *restoreWatch, restore string) {
	pvrs.mu.Lock()
	defer pvrs.mu.Unlock()
	for _, o := range pvrs.seen {
		if o.GetLabels()["velero.io/restore-name"] == restore {
			b.Logf("  PodVolumeRestore %s: created %s, started %s, completed %s", o.GetName(), o.GetCreationTimestamp().Format(time.TimeOnly),
				nestedString(o, "status", "startTimestamp"), nestedString(o, "status", "completionTimestamp"))
		}
	}
}
