package thirdparty

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/components"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
)

// The toy's kinds, as the e2e module sees them: it does not import the toy's own module.
const (
	shopAPIVersion = "apps.cozystack.io/v1alpha1"
	toyGroup       = "toy.example.com"
	toyStrategy    = "ConfigMapStrategy"
	toyArtifactKey = "spec.json" // where the toy keeps the application's spec in its ConfigMap
)

// The sandboxes of the two full-restores.
const (
	goodSandbox     = "toy-good-bvsandbox"
	tamperedSandbox = "toy-tampered-bvsandbox"
)

// TestToyBackupsPassFullRestoreVerification proves that the backup verifier verifies a third-party
// driver's Backups by full restore through the driver contract, knowing nothing of the driver. On
// a local cluster (kube-apiserver, etcd, kube-controller-manager) with what deploy/core-controller
// and deploy/verifier ship apart from their Deployments (RBAC, the admission policies
// coffer-restore-target and coffer-verifier-confinement), and without Velero, the toy driver
// (built from its own module, outside the workspace) and the verifier (built from its module, run
// as its ServiceAccount ugallu-system/coffer-verifier with deploy/'s flags) run as processes:
//
//   - checksum-only of a toy Backup (artifact configmap://...) cannot be carried out (the verifier
//     reads only s3:// artifacts, or Velero's): the run ends BackupVerifyFailed, saying so, and no
//     verdict is written on the Backup;
//   - full-restore of a toy Backup succeeds: the verifier's inert RestoreJob is run by the toy,
//     which restores the Shop into the sandbox and nowhere else (the original is untouched); the
//     run ends BackupVerifyCompleted with a restore-succeeded finding, the Backup turns
//     Verified=True (RestoreVerified), and the RestoreJob and the sandbox are deleted;
//   - full-restore of a toy Backup whose ConfigMap was changed after it turned Ready fails: the toy
//     refuses to restore it (ChecksumMismatch), the run ends BackupVerifyMismatch with a
//     restore-failed finding and its SecurityEvent, and the Backup turns Verified=False
//     (RestoreMismatch).
func TestToyBackupsPassFullRestoreVerification(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if _, err := cluster.AssetsDir(); err != nil {
		t.Fatal(err)
	}
	root, err := manifests.RepoRoot()
	require.NoError(t, err)
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	require.NoError(t, os.MkdirAll(bin, 0o755))

	// The binaries build while the cluster starts.
	var builds sync.WaitGroup
	var verifierErr, toyErr error
	builds.Add(2)
	go func() {
		defer builds.Done()
		_, verifierErr = components.Build(root, "verifier", "verifier", bin)
	}()
	toyBin := filepath.Join(bin, "toydriver")
	go func() {
		defer builds.Done()
		_, toyErr = goRun("build", "-o", toyBin, "./cmd/toydriver")
	}()
	t.Cleanup(builds.Wait) // never leave a build writing into the removed temp dir

	log, err := os.Create(filepath.Join(dir, "control-plane.log"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = log.Close() })
	c, err := cluster.Start(ctx, cluster.Options{ControllerManager: true, Output: log, CRDDirectoryPaths: []string{
		filepath.Join(root, "deploy", "core-controller", "crd"),     // Coffer's kinds
		filepath.Join(root, "deploy", "verifier", "crd"),            // the verifier's kinds
		filepath.Join(root, "deploy", "verifier", "securityevents"), // ugallu's SecurityEvent
		filepath.Join(toy, "crd"),                                   // the toy's strategy kind
		filepath.Join(root, "e2e", "harness", "testdata"),           // the Shop application kind
	}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop() })
	cl, err := client.NewWithWatch(c.Config, client.Options{Scheme: cluster.Scheme})
	require.NoError(t, err)

	// What deploy/ ships that a cluster without nodes can take.
	var install []*unstructured.Unstructured
	for _, comp := range []string{"core-controller", "verifier"} {
		objs, err := manifests.Render(filepath.Join(root, "deploy", comp))
		require.NoError(t, err)
		take, skipped := manifests.Nodeless(objs)
		t.Logf("deploy/%s: installing %d objects, not %v", comp, len(take), skipped)
		install = append(install, take...)
	}
	require.NoError(t, manifests.Apply(ctx, cl, install))
	for _, name := range []string{backupsv1.RestoreTargetPolicy, "coffer-verifier-confinement"} {
		require.NoError(t, cl.Get(ctx, client.ObjectKey{Name: name}, &admissionregistrationv1.ValidatingAdmissionPolicy{}), "policy %s", name)
		require.NoError(t, cl.Get(ctx, client.ObjectKey{Name: name}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}), "binding %s", name)
	}
	_, err = cl.RESTMapper().RESTMapping(schema.GroupKind{Group: "velero.io", Kind: "Backup"})
	require.True(t, meta.IsNoMatchError(err), "Velero is not installed on this cluster: %v", err)

	builds.Wait()
	require.NoError(t, verifierErr, "building the verifier")
	require.NoError(t, toyErr, "building the toy driver")

	// The toy driver, as an administrator would run a third party's driver: with its own
	// credentials (here the admin's), knowing nothing of the verifier.
	port, err := cluster.FreePort()
	require.NoError(t, err)
	toyProc, err := components.Start(toyBin, "--kubeconfig="+c.Kubeconfig,
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(port), "--health-probe-bind-address=0")
	require.NoError(t, err)
	t.Cleanup(func() {
		toyProc.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("toydriver log (tail):\n%s", toyProc.Tail())
		}
	})
	// The verifier as deploy/verifier runs it, as its ServiceAccount.
	snapshots := filepath.Join(dir, "etcd-snapshots")
	require.NoError(t, os.MkdirAll(snapshots, 0o700))
	verifier, err := components.Launch(root, bin, c.Kubeconfig, components.Spec{Module: "verifier", Binary: "verifier", Namespace: "ugallu-system",
		Args: []string{"--cluster-id=thirdparty", "--cluster-name=coffer-thirdparty", "--etcd-snapshot-dir=" + snapshots}})
	require.NoError(t, err)
	t.Cleanup(func() { components.StopAndCheck(t, verifier) })

	// The application and its two Backups, taken by the toy.
	ns, err := c.Namespace(ctx, "toyshop")
	require.NoError(t, err)
	shop := newShop(ns, "shop", map[string]any{"items": []any{"tea", "cake"}, "owner": ns})
	require.NoError(t, cl.Create(ctx, shop))
	strategy := &unstructured.Unstructured{}
	strategy.SetAPIVersion(toyGroup + "/v1alpha1")
	strategy.SetKind(toyStrategy)
	strategy.SetGenerateName("toy-")
	require.NoError(t, cl.Create(ctx, strategy))
	app := corev1.TypedLocalObjectReference{APIGroup: ptr.To("apps.cozystack.io"), Kind: "Shop", Name: shop.GetName()}
	class := &backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{GenerateName: "toy-"}, Spec: backupsv1.BackupClassSpec{
		Strategies: []backupsv1.BackupClassStrategy{{
			Application: backupsv1.ApplicationSelector{APIGroup: app.APIGroup, Kind: app.Kind},
			StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr.To(toyGroup), Kind: toyStrategy, Name: strategy.GetName()},
		}}}}
	require.NoError(t, cl.Create(ctx, class))
	good := takeBackup(ctx, t, cl, toyProc, ns, "good", class.Name, app)
	tampered := takeBackup(ctx, t, cl, toyProc, ns, "tampered", class.Name, app)

	// Tamper with the second Backup's artifact after it turned Ready: same shape, other content.
	// (The toy reads ConfigMaps from its informer cache; its RestoreJob comes several API round
	// trips later, after the checksum-only run and the sandbox, by which time the cache has it.)
	cm := &corev1.ConfigMap{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: tampered.Spec.DriverMetadata["configMap"]}, cm))
	require.Contains(t, cm.Data, toyArtifactKey, "the toy's artifact ConfigMap")
	cm.Data[toyArtifactKey] = `{"items":["poison"],"owner":"mallory"}`
	require.NoError(t, cl.Update(ctx, cm))
	got := &backupsv1.Backup{}
	require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(tampered), got))
	require.Equal(t, backupsv1.BackupReady, got.Status.Phase, "the driver does not notice the tampering")
	require.Equal(t, tampered.Status.Artifact, got.Status.Artifact)

	// Everything that happens to Shops and RestoreJobs from here on, anywhere in the cluster.
	require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(shop), shop))
	shopWatch := watchAll(ctx, t, cl, newShopList())
	restoreWatch := watchAll(ctx, t, cl, &backupsv1.RestoreJobList{})

	t.Run("checksum-only cannot read the toy's ConfigMap artifact and records no verdict", func(t *testing.T) {
		run := newRun(ctx, t, cl, ns, "toy-checksum", good, securityv1.ModeChecksumOnly, "")
		waitRuns(ctx, t, cl, run)
		assertRunEnded(t, run, securityv1.RunFailed, securityv1.EventBackupVerifyFailed)
		assert.Contains(t, run.Status.Message, "the verification could not be carried out")
		assert.Contains(t, run.Status.Message, "s3://")
		assert.Contains(t, run.Status.Message, good.Status.Artifact.URI)
		res := result(ctx, t, cl, run)
		assert.Equal(t, securityv1.ModeChecksumOnly, res.Spec.Mode)
		assert.Empty(t, res.Spec.Findings, "nothing is claimed about the Backup")
		assert.Contains(t, res.Spec.Details["failure"], good.Status.Artifact.URI)
		ev := securityEvents(ctx, t, cl, run)
		assert.Len(t, ev[securityv1.EventBackupVerifyFailed], 1, "events: %v", ev)
		assert.Empty(t, ev[securityv1.EventBackupVerifyCompleted])
		assert.Empty(t, ev[securityv1.EventBackupVerifyMismatch])
		b := getBackup(ctx, t, cl, good)
		assert.Nil(t, b.Status.Verification, "no verdict for a run that could not be carried out")
		assert.Nil(t, meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionVerified))
	})

	// Both full-restores at once: each takes at least one of the verifier's 10 s polls.
	goodRun := newRun(ctx, t, cl, ns, "toy-restore", good, securityv1.ModeFullRestore, goodSandbox)
	tamperedRun := newRun(ctx, t, cl, ns, "toy-restore-tampered", tampered, securityv1.ModeFullRestore, tamperedSandbox)
	waitRuns(ctx, t, cl, goodRun, tamperedRun)
	for _, sandbox := range []string{goodSandbox, tamperedSandbox} {
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			err := cl.Get(ctx, client.ObjectKey{Name: sandbox}, &corev1.Namespace{})
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
		assert.NoError(t, err, "the sandbox %s is deleted after the run", sandbox)
	}
	shopEvents, restoreEvents := shopWatch.stop(t), restoreWatch.stop(t)
	restoreJobs := restoreJobsByRun(t, restoreEvents)

	t.Run("full-restore of a sound Backup passes through the toy", func(t *testing.T) {
		run := goodRun
		assertRunEnded(t, run, securityv1.RunSucceeded, securityv1.EventBackupVerifyCompleted)
		assert.Equal(t, securityv1.SeverityInfo, run.Status.WorstSeverity)

		rj := restoreJobs[run.UID]
		require.NotNil(t, rj, "the run's RestoreJob was seen; RestoreJobs seen: %v", restoreJobs)
		assertVerifierRestoreJob(ctx, t, cl, rj, good, goodSandbox)
		assert.Equal(t, backupsv1.RestoreJobSucceeded, rj.Status.Phase, rj.Status.Message)
		assert.Equal(t, "toydriver", rj.ClaimedBy())
		ready := meta.FindStatusCondition(rj.Status.Conditions, backupsv1.ConditionReady)
		if assert.NotNil(t, ready, "conditions: %v", rj.Status.Conditions) {
			assert.Equal(t, metav1.ConditionTrue, ready.Status)
			assert.Contains(t, ready.Message, "Restored Shop "+goodSandbox+"/shop", "the toy says it restored into the sandbox")
		}
		require.NotNil(t, rj.Status.Items)
		assert.Equal(t, backupsv1.RestoreItems{Restored: 1}, *rj.Status.Items)

		res := result(ctx, t, cl, run)
		assert.Equal(t, securityv1.BackendCoffer, res.Spec.Backend)
		assert.Equal(t, securityv1.ModeFullRestore, res.Spec.Mode)
		assert.Equal(t, run.UID, res.Spec.RunRef.UID)
		require.Equal(t, []string{securityv1.CodeRestoreSucceeded}, codes(res.Spec.Findings), "findings: %+v", res.Spec.Findings)
		f := res.Spec.Findings[0]
		assert.Equal(t, "backups.cozystack.io/RestoreJob "+ns+"/"+rj.Name, f.Object)
		assert.Contains(t, f.Message, goodSandbox)
		assert.Equal(t, "1", res.Spec.Details["itemsRestored"])
		assert.Equal(t, "0", res.Spec.Details["itemsFailed"])
		assert.Empty(t, res.Spec.Details["failure"])

		ev := securityEvents(ctx, t, cl, run)
		require.Len(t, ev[securityv1.EventBackupVerifyCompleted], 1, "events: %v", ev)
		assert.Equal(t, securityv1.ClassCompliance, ev[securityv1.EventBackupVerifyCompleted][0].Spec.Class)
		assert.Empty(t, ev[securityv1.EventBackupVerifyMismatch])
		assert.Empty(t, ev[securityv1.EventBackupVerifyFailed])

		b := getBackup(ctx, t, cl, good)
		assert.True(t, b.RestoreVerified(), "conditions: %v", b.Status.Conditions)
		assertVerified(t, b, run, metav1.ConditionTrue, backupsv1.ReasonRestoreVerified, backupsv1.VerificationPassed)
		assert.Equal(t, good.Status.Artifact, b.Status.Artifact, "the driver's part of the status is as it was")
	})

	t.Run("full-restore of a tampered Backup fails with the toy's ChecksumMismatch", func(t *testing.T) {
		run := tamperedRun
		assertRunEnded(t, run, securityv1.RunSucceeded, securityv1.EventBackupVerifyMismatch)
		assert.Equal(t, securityv1.SeverityCritical, run.Status.WorstSeverity)

		rj := restoreJobs[run.UID]
		require.NotNil(t, rj, "the run's RestoreJob was seen; RestoreJobs seen: %v", restoreJobs)
		assertVerifierRestoreJob(ctx, t, cl, rj, tampered, tamperedSandbox)
		assert.Equal(t, backupsv1.RestoreJobFailed, rj.Status.Phase, rj.Status.Message)
		ready := meta.FindStatusCondition(rj.Status.Conditions, backupsv1.ConditionReady)
		require.NotNil(t, ready, "conditions: %v", rj.Status.Conditions)
		assert.Equal(t, "ChecksumMismatch", ready.Reason, ready.Message)

		res := result(ctx, t, cl, run)
		require.Equal(t, []string{securityv1.CodeRestoreFailed}, codes(res.Spec.Findings), "findings: %+v", res.Spec.Findings)
		assert.Equal(t, securityv1.SeverityCritical, res.Spec.Findings[0].Severity)
		assert.Contains(t, res.Spec.Findings[0].Message, "ChecksumMismatch")
		assert.Equal(t, securityv1.SeverityCritical, res.Status.WorstSeverity)

		ev := securityEvents(ctx, t, cl, run)
		require.Len(t, ev[securityv1.EventBackupVerifyMismatch], 1, "events: %v", ev)
		mm := ev[securityv1.EventBackupVerifyMismatch][0]
		assert.Equal(t, securityv1.ClassDetection, mm.Spec.Class)
		assert.Equal(t, securityv1.SeverityCritical, mm.Spec.Severity)
		assert.Equal(t, securityv1.CodeRestoreFailed, mm.Spec.Signals["findings.top.code"])
		assert.Equal(t, tampered.Name, mm.Spec.Signals["backup.refName"])
		assert.Equal(t, string(run.UID), mm.Spec.Signals["run.uid"])
		assert.Empty(t, ev[securityv1.EventBackupVerifyCompleted])
		assert.Empty(t, ev[securityv1.EventBackupVerifyFailed])

		b := getBackup(ctx, t, cl, tampered)
		assert.False(t, b.IsGood(), "a Backup that failed its verification is not good")
		assertVerified(t, b, run, metav1.ConditionFalse, backupsv1.ReasonRestoreMismatch, backupsv1.VerificationFailed)
	})

	t.Run("the toy restored into the sound Backup's sandbox and nowhere else", func(t *testing.T) {
		// Every Shop that appeared while the verifier ran: the original (listed when the watch
		// started) and the restored one in the sandbox, with the backed-up spec.
		added := map[string]*unstructured.Unstructured{}
		for _, ev := range shopEvents {
			if ev.Type == watch.Added {
				u := ev.Object.(*unstructured.Unstructured)
				key := u.GetNamespace() + "/" + u.GetName()
				assert.Nil(t, added[key], "Shop %s added twice", key)
				added[key] = u
			}
		}
		assert.ElementsMatch(t, []string{ns + "/shop", goodSandbox + "/shop"}, keys(added))
		if restored := added[goodSandbox+"/shop"]; assert.NotNil(t, restored) {
			assert.Equal(t, shop.Object["spec"], restored.Object["spec"], "the sandbox holds the backed-up spec")
		}

		// The original is untouched: not even written (its resourceVersion), and it is the only
		// Shop left.
		now := newShop(ns, "shop", nil)
		require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(now), now))
		assert.Equal(t, shop.GetResourceVersion(), now.GetResourceVersion())
		assert.Equal(t, shop.Object["spec"], now.Object["spec"])
		all := newShopList()
		require.NoError(t, cl.List(ctx, all))
		var left []string
		for _, u := range all.Items {
			left = append(left, u.GetNamespace()+"/"+u.GetName())
		}
		assert.Equal(t, []string{ns + "/shop"}, left)

		// The only RestoreJobs were the two full-restores', and they are gone.
		assert.Len(t, restoreJobs, 2, "RestoreJobs seen: %v", restoreJobs)
		list := &backupsv1.RestoreJobList{}
		require.NoError(t, cl.List(ctx, list))
		assert.Empty(t, list.Items)
	})

	assert.False(t, verifier.Exited(), "the verifier runs without Velero")
	assert.False(t, toyProc.Exited(), "the toy driver keeps running")
}

// takeBackup runs a BackupJob of app through the toy and returns its Ready Backup.
func takeBackup(ctx context.Context, t *testing.T, cl client.Client, toyProc *components.Process, ns, name, class string, app corev1.TypedLocalObjectReference) *backupsv1.Backup {
	t.Helper()
	job := &backupsv1.BackupJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: backupsv1.BackupJobSpec{ApplicationRef: app, BackupClassName: class}}
	require.NoError(t, cl.Create(ctx, job))
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := cl.Get(ctx, client.ObjectKeyFromObject(job), job)
		return job.Status.Phase.IsTerminal(), err
	})
	require.NoError(t, err, "BackupJob %s did not end: %+v\ntoydriver log:\n%s", name, job.Status, toyProc.Tail())
	require.Equal(t, backupsv1.BackupJobSucceeded, job.Status.Phase, job.Status.Message)
	require.NotNil(t, job.Status.BackupRef)
	b := &backupsv1.Backup{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: job.Status.BackupRef.Name}, b))
	require.Equal(t, backupsv1.BackupReady, b.Status.Phase)
	require.NotNil(t, b.Status.Artifact)
	require.Regexp(t, `^configmap://`+ns+`/`, b.Status.Artifact.URI, "the toy's artifact")
	return b
}

func newShop(ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": shopAPIVersion, "kind": "Shop",
		"metadata": map[string]any{"name": name, "namespace": ns}}}
	if spec != nil {
		u.Object["spec"] = spec
	}
	return u
}

func newShopList() *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetAPIVersion(shopAPIVersion)
	l.SetKind("ShopList")
	return l
}

// newRun creates a BackupVerifyRun of the coffer backend for Backup b, as a user or a
// BackupVerifyPolicy does (labelled with the Backup's UID).
func newRun(ctx context.Context, t *testing.T, cl client.Client, ns, name string, b *backupsv1.Backup, mode securityv1.Mode, sandbox string) *securityv1.BackupVerifyRun {
	t.Helper()
	run := &securityv1.BackupVerifyRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{securityv1.LabelBackupUID: string(b.UID)}},
		Spec: securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendCoffer, BackupRef: securityv1.BackupRef{Name: b.Name}, Mode: mode,
			SandboxNamespace: sandbox, Timeout: &metav1.Duration{Duration: 3 * time.Minute}}}
	require.NoError(t, cl.Create(ctx, run))
	return run
}

// waitRuns polls the runs until every one is terminal.
func waitRuns(ctx context.Context, t *testing.T, cl client.Client, runs ...*securityv1.BackupVerifyRun) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, run := range runs {
			if err := cl.Get(ctx, client.ObjectKeyFromObject(run), run); err != nil {
				return false, err
			}
			if !run.Status.Phase.IsTerminal() {
				return false, nil
			}
		}
		return true, nil
	})
	for _, run := range runs {
		require.NoError(t, err, "run %s: %s %v", run.Name, run.Status.Phase, run.Status.Conditions)
	}
}

// assertRunEnded checks a run's terminal phase and its Ready condition's reason (its terminal
// SecurityEvent).
func assertRunEnded(t *testing.T, run *securityv1.BackupVerifyRun, phase securityv1.RunPhase, reason string) {
	t.Helper()
	assert.Equal(t, phase, run.Status.Phase, run.Status.Message)
	ready := meta.FindStatusCondition(run.Status.Conditions, "Ready")
	if assert.NotNil(t, ready, "conditions: %v", run.Status.Conditions) {
		assert.Equal(t, reason, ready.Reason, ready.Message)
		want := metav1.ConditionFalse // Ready is True for a backup verified clean only
		if reason == securityv1.EventBackupVerifyCompleted {
			want = metav1.ConditionTrue
		}
		assert.Equal(t, want, ready.Status)
	}
	assert.Equal(t, securityv1.ResultName(run.Name), run.Status.ResultName(), "named as ugallu names it")
}

// assertVerifierRestoreJob checks the verifier's RestoreJob as it was last seen, and that it is
// gone.
func assertVerifierRestoreJob(ctx context.Context, t *testing.T, cl client.Client, rj *backupsv1.RestoreJob, b *backupsv1.Backup, sandbox string) {
	t.Helper()
	assert.Equal(t, b.Namespace, rj.Namespace, "in the Backup's namespace")
	assert.Equal(t, b.Name, rj.Spec.BackupRef.Name)
	assert.Nil(t, rj.Spec.TargetApplicationRef)
	require.NotNil(t, rj.Spec.Options)
	assert.JSONEq(t, `{"targetNamespace": "`+sandbox+`", "inert": "true"}`, string(rj.Spec.Options.Raw))
	err := cl.Get(ctx, client.ObjectKeyFromObject(rj), &backupsv1.RestoreJob{})
	assert.True(t, apierrors.IsNotFound(err), "RestoreJob %s is deleted after the run: %v", rj.Name, err)
}

// assertVerified checks the full-restore verdict of run on Backup b, and that no checksum verdict
// was made up.
func assertVerified(t *testing.T, b *backupsv1.Backup, run *securityv1.BackupVerifyRun, status metav1.ConditionStatus, reason string, result backupsv1.VerificationResult) {
	t.Helper()
	c := meta.FindStatusCondition(b.Status.Conditions, backupsv1.ConditionVerified)
	if assert.NotNil(t, c, "conditions: %v", b.Status.Conditions) {
		assert.Equal(t, status, c.Status, c.Message)
		assert.Equal(t, reason, c.Reason, c.Message)
	}
	if !assert.NotNil(t, b.Status.Verification) {
		return
	}
	assert.Nil(t, b.Status.Verification.Checksum, "the checksum-only run recorded no verdict")
	v := b.Status.Verification.FullRestore
	if assert.NotNil(t, v) {
		assert.Equal(t, result, v.Result)
		assert.Equal(t, &backupsv1.VerificationResultRef{Namespace: run.Namespace, Name: run.Status.ResultName()}, v.ResultRef)
	}
}

func getBackup(ctx context.Context, t *testing.T, cl client.Client, b *backupsv1.Backup) *backupsv1.Backup {
	t.Helper()
	out := &backupsv1.Backup{}
	require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(b), out))
	return out
}

func result(ctx context.Context, t *testing.T, cl client.Client, run *securityv1.BackupVerifyRun) *securityv1.BackupVerifyResult {
	t.Helper()
	res := &securityv1.BackupVerifyResult{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: run.Status.ResultName()}, res))
	require.Equal(t, run.UID, res.Spec.RunRef.UID)
	return res
}

// securityEvents lists the SecurityEvents of a run by type.
func securityEvents(ctx context.Context, t *testing.T, cl client.Client, run *securityv1.BackupVerifyRun) map[string][]securityv1.SecurityEvent {
	t.Helper()
	list := &securityv1.SecurityEventList{}
	require.NoError(t, cl.List(ctx, list, client.MatchingLabels{securityv1.LabelRunUID: string(run.UID)}))
	out := map[string][]securityv1.SecurityEvent{}
	for _, e := range list.Items {
		out[e.Spec.Type] = append(out[e.Spec.Type], e)
	}
	return out
}

func codes(fs []securityv1.Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Code)
	}
	return out
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// restoreJobsByRun is the last state seen of each RestoreJob, by the UID of the verifier's run
// it carries. A RestoreJob that is not a run's, or two of one run, fail the test.
func restoreJobsByRun(t *testing.T, events []watch.Event) map[types.UID]*backupsv1.RestoreJob {
	t.Helper()
	out := map[types.UID]*backupsv1.RestoreJob{}
	for _, ev := range events {
		rj := ev.Object.(*backupsv1.RestoreJob)
		uid := types.UID(rj.Labels[securityv1.LabelRunUID])
		if uid == "" {
			t.Errorf("RestoreJob %s/%s is not a verification's", rj.Namespace, rj.Name)
			continue
		}
		if prev := out[uid]; prev != nil && prev.UID != rj.UID {
			t.Errorf("run %s has two RestoreJobs: %s and %s", uid, prev.Name, rj.Name)
		}
		out[uid] = rj // events come in order; a deletion's carries the last state
	}
	return out
}

// watcher records every event of a watch until stopped.
type watcher struct {
	w       watch.Interface
	mu      sync.Mutex
	events  []watch.Event
	stopped atomic.Bool
	early   atomic.Bool // the watch ended before stop
	done    chan struct{}
}

// watchAll watches list's kind in every namespace; it starts with an Added event of each object
// that exists.
func watchAll(ctx context.Context, t *testing.T, cl client.WithWatch, list client.ObjectList) *watcher {
	t.Helper()
	w, err := cl.Watch(ctx, list)
	require.NoError(t, err)
	r := &watcher{w: w, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error && r.stopped.Load() {
				continue // the client closing the stream, not the server's trouble
			}
			r.mu.Lock()
			r.events = append(r.events, ev)
			r.mu.Unlock()
		}
		r.early.Store(!r.stopped.Load())
	}()
	t.Cleanup(r.w.Stop)
	return r
}

// stop ends the watch and returns its events; a watch that ended early or reported an error fails
// the test, since it may have missed something.
func (r *watcher) stop(t *testing.T) []watch.Event {
	t.Helper()
	r.stopped.Store(true)
	r.w.Stop()
	<-r.done
	require.False(t, r.early.Load(), "the watch ended early")
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range r.events {
		if ev.Type == watch.Error {
			b, _ := json.Marshal(ev.Object)
			t.Fatalf("the watch reported an error: %s", b)
		}
	}
	return r.events
}
