// Package simulation runs deploy/samples for a simulated month on real parts: a real
// kube-apiserver and etcd with deploy/ installed, a real Velero server and MinIO, and driver-velero
// as its own process under its shipped ServiceAccount. Core's controllers run in the test process
// with an injected clock (controllers.Options.Clock) that the test moves from one night to the
// next, so the sample Plan's nightly ticks fire one after the other. After each night the test
// waits for retention to settle and checks the promise of the samples: no Ready Backup lacks its
// artifact, and no artifact outlives its Backup.
//
// The Backups' takenAt comes from Velero (the real time of the backup), so retention's calendar
// rules see backups taken minutes apart; the keep rules over real days, weeks and months are the
// retention package's table tests. What this suite proves is that the samples agree with each
// other (the strategy's Velero ttl outlives the Plan's retention, every run claimed and ended) and
// that the catalog and the bucket never disagree while retention prunes night after night, also
// after an artifact vanishes behind Coffer's back.
package simulation

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	velerodriverv1 "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/core-controller/internal/controllers"
	"github.com/coffer-backup/coffer/core-controller/internal/plan"
	"github.com/coffer-backup/coffer/core-controller/internal/retention"
	"github.com/coffer-backup/coffer/core-controller/internal/testenv"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/components"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

const (
	namespace = "tenant-demo" // deploy/samples' namespace
	planName  = "vm1-nightly"
	nights    = 31
	// vanishNight is the night after which one kept Velero backup is deleted behind Coffer's
	// back, as Velero's garbage collection or an administrator would.
	vanishNight = 15
	// settleTimeout bounds one night: the tick's backup, retention, the pruned Backups' deletion.
	settleTimeout = 3 * time.Minute
)

func init() { utilruntime.Must(velerov1.AddToScheme(cluster.Scheme)) }

type month struct {
	t     *testing.T
	ctx   context.Context
	cl    client.Client
	s3    *minio.Client
	clock *clocktesting.FakeClock
	loc   *time.Location
	plan  *backupsv1.Plan
	// seen counts every Backup the Plan made; pruned those retention deleted.
	seen, pruned map[string]bool
	// veleroName is the Velero backup of each Backup the Plan made.
	veleroName map[string]string
	driver     *components.Component
}

func TestSamplesForASimulatedMonth(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	began := time.Now()
	t.Cleanup(func() { t.Logf("torn down %s after the start", time.Since(began).Round(time.Second)) })
	root, err := manifests.RepoRoot()
	require.NoError(t, err)
	lc, err := cluster.Start(ctx, cluster.Options{CRDDirectoryPaths: []string{filepath.Join(root, "e2e", "harness", "testdata")}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lc.Stop() })
	cl, err := client.NewWithWatch(lc.Config, client.Options{Scheme: cluster.Scheme})
	require.NoError(t, err)
	require.NoError(t, manifests.InstallNodeless(ctx, cl, root), "installing deploy/")
	stack, err := velerostack.Start(ctx, lc)
	require.NoError(t, err)
	t.Cleanup(stack.Stop)

	bin := t.TempDir()
	driver, err := components.Launch(root, bin, lc.Kubeconfig, components.Spec{Module: "driver-velero", Binary: "driver-velero", Namespace: "coffer-system",
		// A vanished backup counts once Velero's next sync (a minute apart) confirms it.
		Args: []string{"--artifact-confirm-delay=5s"}})
	require.NoError(t, err)
	t.Cleanup(func() { components.StopAndCheck(t, driver) })

	t.Logf("cluster, deploy/, Velero, MinIO and driver-velero up in %s", time.Since(began).Round(time.Second))
	m := &month{t: t, ctx: ctx, cl: cl, s3: stack.S3, seen: map[string]bool{}, pruned: map[string]bool{}, veleroName: map[string]string{}, driver: driver}
	m.loc, err = time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)

	// The application the sample Plan names, with something in its namespace to back up.
	samples, err := manifests.Render(filepath.Join(root, "deploy", "samples"))
	require.NoError(t, err)
	require.NoError(t, manifests.Apply(ctx, cl, kinds(samples, "Namespace")))
	vm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "VirtualMachine",
		"metadata": map[string]any{"name": "vm1", "namespace": namespace}, "spec": map[string]any{"cpus": int64(2)}}}
	require.NoError(t, cl.Create(ctx, vm))
	for i := range 3 {
		require.NoError(t, cl.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("vm1-config-%d", i), Namespace: namespace},
			Data: map[string]string{"boot": strings.Repeat("x", 100*(i+1))}}))
	}

	// Every sample at once, as `kubectl apply -k deploy/samples` does. Core starts on the injected
	// clock, at the Plan's creation; its claim timeout of a year keeps the clock's jumps from
	// failing a run before the driver has had a real moment to claim it.
	require.NoError(t, manifests.Apply(ctx, cl, samples))
	m.plan = &backupsv1.Plan{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: namespace, Name: planName}, m.plan))
	m.clock = clocktesting.NewFakeClock(m.plan.CreationTimestamp.Add(time.Second))
	m.startCore(lc.Config)
	m.waitPlan(func(p *backupsv1.Plan) bool {
		return meta.IsStatusConditionTrue(p.Status.Conditions, backupsv1.ConditionReady) && p.Status.NextScheduleTime != nil
	}, "Ready, its class resolving for VirtualMachine vm1, with its next tick announced")

	var kept []int
	days := map[string]bool{}
	for night := 1; night <= nights; night++ {
		tick := m.plan.Status.NextScheduleTime.Time
		local := tick.In(m.loc)
		require.Contains(t, []int{2, 3}, local.Hour(), "the sample Plan fires at 02:00 Berlin time (03:00 on the night the clocks spring forward): %s", local)
		require.False(t, days[local.Format(time.DateOnly)], "one tick per night: %s fired twice", local.Format(time.DateOnly))
		days[local.Format(time.DateOnly)] = true

		m.clock.SetTime(tick.Add(30 * time.Second))
		began := time.Now()
		m.poke(night)
		m.waitRun(backupsv1.PlanBackupJobName(planName, tick))
		ran := time.Now()
		if night == vanishNight {
			m.vanish()
		}
		kept = append(kept, m.settle(night))
		settled := time.Now()
		m.waitPlan(func(p *backupsv1.Plan) bool {
			return p.Status.NextScheduleTime != nil && p.Status.NextScheduleTime.After(tick)
		}, "announcing the tick after "+tick.String())
		m.t.Logf("night %d (%s): backup %s, retention settled %s later, next tick announced %s later", night, local.Format(time.DateOnly),
			ran.Sub(began).Round(100*time.Millisecond), settled.Sub(ran).Round(100*time.Millisecond), time.Since(settled).Round(100*time.Millisecond))
	}

	// The Plan missed nothing; every Backup it made but the kept ones was pruned, artifact and all.
	require.Zero(t, m.plan.Status.SkippedTicks, "no tick was missed")
	require.Len(t, m.seen, nights, "one Backup per night")
	require.Len(t, m.pruned, nights-kept[len(kept)-1], "every Backup retention does not keep was pruned")
	require.Greater(t, len(m.pruned), nights/2, "retention pruned night after night")
	m.checkSampleRuns()
	t.Logf("the month took %s after the start", time.Since(began).Round(time.Second))
	t.Logf("%d nights: %d Backups made, %d pruned (one after its artifact vanished), Backups kept after each night %v",
		nights, len(m.seen), len(m.pruned), kept)
}

// kinds are the objects of the given kind.
func kinds(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// startCore runs core's controllers in this process as core-controller's ServiceAccount, with the
// injected clock.
func (m *month) startCore(admin *rest.Config) {
	cfg := rest.CopyConfig(admin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: testenv.ServiceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:coffer-system", "system:authenticated"}}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: cluster.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0"})
	require.NoError(m.t, err)
	require.NoError(m.t, controllers.Setup(m.ctx, mgr, controllers.Options{ClaimTimeout: 365 * 24 * time.Hour, PlanWorkers: 1, Clock: m.clock}))
	// Stopped before the API server is (cleanups run last in, first out), whose shutdown
	// otherwise waits out the manager's open watches.
	ctx, stop := context.WithCancel(m.ctx)
	done := make(chan struct{})
	m.t.Cleanup(func() {
		stopping := time.Now()
		stop()
		<-done
		m.t.Logf("core's manager stopped in %s", time.Since(stopping).Round(100*time.Millisecond))
	})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			m.t.Errorf("core's manager: %v", err)
		}
	}()
}

// poke makes core reconcile the Plan now that the clock moved (its requeue waits real time).
func (m *month) poke(night int) {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"simulation.coffer.test/night":"%d"}}}`, night)
	require.NoError(m.t, m.cl.Patch(m.ctx, m.plan, client.RawPatch("application/merge-patch+json", []byte(patch))))
}

func (m *month) waitPlan(cond func(*backupsv1.Plan) bool, what string) {
	m.t.Helper()
	err := wait.PollUntilContextTimeout(m.ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := m.cl.Get(ctx, client.ObjectKeyFromObject(m.plan), m.plan); err != nil {
			return false, err
		}
		return cond(m.plan), nil
	})
	require.NoError(m.t, err, "Plan %s not %s: %+v", planName, what, m.plan.Status)
}

// waitRun waits for the tick's BackupJob to end, and requires it Succeeded with a Ready Backup.
func (m *month) waitRun(name string) {
	m.t.Helper()
	job := &backupsv1.BackupJob{}
	err := wait.PollUntilContextTimeout(m.ctx, 200*time.Millisecond, settleTimeout, true, func(ctx context.Context) (bool, error) {
		err := m.cl.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, job)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && job.Status.Phase.IsTerminal(), err
	})
	require.NoError(m.t, err, "BackupJob %s did not end: %+v\ndriver-velero:\n%s", name, job.Status, m.driver.Tail())
	require.Equal(m.t, backupsv1.BackupJobSucceeded, job.Status.Phase, "BackupJob %s: %s", name, job.Status.Message)
	require.NotNil(m.t, job.Status.BackupRef, "BackupJob %s names its Backup", name)
	b := &backupsv1.Backup{}
	require.NoError(m.t, m.cl.Get(m.ctx, client.ObjectKey{Namespace: namespace, Name: job.Status.BackupRef.Name}, b))
	require.Equal(m.t, backupsv1.BackupReady, b.Status.Phase, "the Backup of BackupJob %s", name)
	m.seen[b.Name], m.veleroName[b.Name] = true, b.Spec.DriverMetadata[velerodriverv1.MetaBackupName]
}

// vanish deletes the oldest kept Velero backup of the Plan behind Coffer's back (a
// DeleteBackupRequest, as `velero backup delete` or Velero's expiry of it would), then waits for
// the driver to say so on the Backup, or for retention to have let it go already.
func (m *month) vanish() {
	m.t.Helper()
	bs := m.planBackups()
	require.GreaterOrEqual(m.t, len(bs), 2, "a kept Backup to lose besides the newest")
	victim := bs[0]
	vb := victim.Spec.DriverMetadata[velerodriverv1.MetaBackupName]
	require.NoError(m.t, m.cl.Create(m.ctx, &velerov1.DeleteBackupRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: velerostack.Namespace, Name: "vanish-" + vb, Labels: map[string]string{velerov1.BackupNameLabel: vb}},
		Spec:       velerov1.DeleteBackupRequestSpec{BackupName: vb}}))
	err := wait.PollUntilContextTimeout(m.ctx, 200*time.Millisecond, settleTimeout, true, func(ctx context.Context) (bool, error) {
		b := &backupsv1.Backup{}
		err := m.cl.Get(ctx, client.ObjectKeyFromObject(&victim), b)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && (b.ArtifactMissing() || !b.DeletionTimestamp.IsZero()), err
	})
	require.NoError(m.t, err, "Backup %s still says its artifact is there after Velero backup %s was deleted", victim.Name, vb)
	m.t.Logf("Velero backup %s of Backup %s deleted behind Coffer's back", vb, victim.Name)
}

// planBackups are the Plan's Backups that are not being deleted, oldest first.
func (m *month) planBackups() []backupsv1.Backup {
	list := &backupsv1.BackupList{}
	require.NoError(m.t, m.cl.List(m.ctx, list, client.InNamespace(namespace)))
	var out []backupsv1.Backup
	for _, b := range list.Items {
		if b.Spec.PlanRef != nil && b.Spec.PlanRef.Name == planName && b.DeletionTimestamp.IsZero() && m.seen[b.Name] {
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Spec.TakenAt.Before(&out[j].Spec.TakenAt) })
	return out
}

// settle waits until retention has nothing left to prune, no Backup is being deleted and the Velero
// backups are exactly those of the Backups; then it checks the samples' promise. It returns how
// many of the Plan's Backups are kept.
func (m *month) settle(night int) int {
	m.t.Helper()
	var why string
	err := wait.PollUntilContextTimeout(m.ctx, 200*time.Millisecond, settleTimeout, true, func(ctx context.Context) (bool, error) {
		all := &backupsv1.BackupList{}
		if err := m.cl.List(ctx, all, client.InNamespace(namespace)); err != nil {
			return false, err
		}
		var items []retention.Item
		want := map[string]bool{}
		for i := range all.Items {
			b := &all.Items[i]
			if !b.DeletionTimestamp.IsZero() {
				why = "Backup " + b.Name + " is being deleted"
				return false, nil
			}
			if b.Spec.PlanRef != nil && b.Spec.PlanRef.Name == planName {
				items = append(items, plan.RetentionItem(b))
			}
			if b.Status.Phase == backupsv1.BackupReady && !b.ArtifactMissing() {
				want[b.Spec.DriverMetadata[velerodriverv1.MetaBackupName]] = true
			}
		}
		if due := retention.Select(items, m.plan.Spec.Retention, nil, m.loc, m.clock.Now()); len(due) > 0 {
			why = fmt.Sprintf("retention has yet to prune %v", due)
			return false, nil
		}
		vbs := &velerov1.BackupList{}
		if err := m.cl.List(ctx, vbs, client.InNamespace(velerostack.Namespace)); err != nil {
			return false, err
		}
		have := map[string]bool{}
		for _, vb := range vbs.Items {
			have[vb.Name] = true
		}
		if !maps.Equal(have, want) {
			why = fmt.Sprintf("Velero backups %v, Ready Backups' %v", slices.Sorted(maps.Keys(have)), slices.Sorted(maps.Keys(want)))
			return false, nil
		}
		return true, nil
	})
	require.NoError(m.t, err, "night %d did not settle: %s\ndriver-velero:\n%s", night, why, m.driver.Tail())

	span := m.plan.Spec.Retention.Span()
	require.True(m.t, span.Bounded, "the sample Plan's retention is bounded")
	all := &backupsv1.BackupList{}
	require.NoError(m.t, m.cl.List(m.ctx, all, client.InNamespace(namespace)))
	live := map[string]bool{}
	for _, b := range all.Items {
		live[b.Name] = true
		if b.Status.Phase != backupsv1.BackupReady {
			continue
		}
		// No Ready Backup lacks its artifact: the Velero backup, complete, and its tarball in the
		// bucket with the size the Backup records.
		require.False(m.t, b.ArtifactMissing(), "night %d: Backup %s is Ready with its artifact known missing; retention should have let it go", night, b.Name)
		vb := &velerov1.Backup{}
		name := b.Spec.DriverMetadata[velerodriverv1.MetaBackupName]
		require.NoError(m.t, m.cl.Get(m.ctx, client.ObjectKey{Namespace: velerostack.Namespace, Name: name}, vb), "night %d: Backup %s", night, b.Name)
		require.Equal(m.t, velerov1.BackupPhaseCompleted, vb.Status.Phase, "night %d: Velero backup %s", night, name)
		info, err := m.s3.StatObject(m.ctx, velerostack.Bucket, velerostack.ObjectKey(name), minio.StatObjectOptions{})
		require.NoError(m.t, err, "night %d: the tarball of Backup %s", night, b.Name)
		require.NotNil(m.t, b.Status.Artifact)
		require.Equal(m.t, b.Status.Artifact.SizeBytes, info.Size, "night %d: Backup %s records the tarball's size", night, b.Name)
		// Velero's own expiry never takes an artifact retention may still keep.
		require.GreaterOrEqual(m.t, vb.Spec.TTL.Duration, span.Duration, "night %d: Velero backup %s expires (ttl %s) before retention (%s) lets Backup %s go",
			night, name, vb.Spec.TTL.Duration, span.Rule, b.Name)
	}
	// No artifact outlives its Backup.
	for name := range m.seen {
		if live[name] {
			continue
		}
		m.pruned[name] = true
	}
	for name := range m.pruned {
		vb := m.veleroName[name]
		_, err := m.s3.StatObject(m.ctx, velerostack.Bucket, velerostack.ObjectKey(vb), minio.StatObjectOptions{})
		require.Equal(m.t, "NoSuchKey", minio.ToErrorResponse(err).Code, "night %d: the tarball of pruned Backup %s is still in the bucket", night, name)
	}
	return len(m.planBackups())
}

// checkSampleRuns: the samples' ad-hoc BackupJob made a Ready Backup, and their RestoreJob (of the
// sample Backup, which has no artifact) failed saying so.
func (m *month) checkSampleRuns() {
	m.t.Helper()
	job := &backupsv1.BackupJob{}
	require.NoError(m.t, m.cl.Get(m.ctx, client.ObjectKey{Namespace: namespace, Name: "vm1-adhoc"}, job))
	require.Equal(m.t, backupsv1.BackupJobSucceeded, job.Status.Phase, "the sample BackupJob: %s", job.Status.Message)
	rj := &backupsv1.RestoreJob{}
	err := wait.PollUntilContextTimeout(m.ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := m.cl.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "vm1-restore"}, rj)
		return err == nil && rj.Status.Phase.IsTerminal(), err
	})
	require.NoError(m.t, err, "the sample RestoreJob did not end: %+v", rj.Status)
	require.Equal(m.t, backupsv1.RestoreJobFailed, rj.Status.Phase)
	ready := meta.FindStatusCondition(rj.Status.Conditions, backupsv1.ConditionReady)
	require.NotNil(m.t, ready)
	require.Equal(m.t, backupsv1.ReasonArtifactMissing, ready.Reason, "the sample RestoreJob names a Backup without an artifact: %s", ready.Message)
}
