//go:build e2e

// Package deployments runs Coffer's four components on a real node as the Deployments that
// deploy/ ships, so that the manifests themselves are tested: images run as built, the probes
// gate readiness, every API call is made with the component's own ServiceAccount token (mounted
// by the kubelet, authorized by the shipped RBAC, no impersonation), each pod's metrics endpoint
// answers Prometheus's token over HTTPS and refuses a scrape without one, and leader election
// decides which replica works. The e2e overlay changes only the containers' imagePullPolicy (the images
// are imported, never pulled) and where they find the apiserver (the node's IP, as no
// kube-proxy routes the kubernetes Service). It needs root (see e2e/harness/node), KUBEBUILDER_ASSETS
// and COFFER_VELERO_ASSETS (for MinIO and Velero's CRDs): go test -tags e2e ./deployments/.
package deployments

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/components"
	"github.com/coffer-backup/coffer/e2e/harness/images"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
	"github.com/coffer-backup/coffer/e2e/harness/node"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

const (
	tag        = "dev" // the tag deploy/ names
	agentImage = "coffer/coffer-agent:" + tag
	agentUID   = 65532
	bucket     = "coffer"
	// controlPlaneLabel is the node role the verifier's Deployment prefers and its etcd-snapshot
	// policies list by default: etcd snapshots live on control-plane nodes, and this single node
	// is the control plane's.
	controlPlaneLabel = "node-role.kubernetes.io/control-plane"
	// snapshotDir is the verifier's --etcd-snapshot-dir, which its check and lister pods mount
	// (a hostPath of type Directory: etcdctl's, kubeadm's or k3s's own directory).
	snapshotDir = "/var/lib/etcd-snapshots"
	// runUIDLabel is the label by which driver-job marks a run's Job with the BackupJob's UID.
	runUIDLabel = "jobdriver.backups.cozystack.io/run-uid"
)

// leaseNames are the components' LeaderElectionIDs (their main packages); the Lease's namespace
// is the one the Deployment passes as --leader-election-namespace.
var leaseNames = map[string]string{
	"core-controller": "core-controller.backups.cozystack.io",
	"driver-velero":   "driver-velero.backups.cozystack.io",
	"driver-job":      "driver-job.backups.cozystack.io",
	"verifier":        "backup-verify.security.ugallu.io",
}

// component is one installed component: its Deployment, its ServiceAccount and its Lease.
type component struct {
	name           string
	deployment     types.NamespacedName
	serviceAccount string
	replicas       int32
	lease          types.NamespacedName
}

type env struct {
	ctx   context.Context
	cl    client.Client
	cs    kubernetes.Interface
	n     *node.Node
	s3    *velerostack.Stack
	data  string // host directory of the applications' volumes: <data>/<namespace>/<name>
	comps []*component
	// gone are the logs of deleted pods, by pod name, for the final forbidden check.
	gone map[string]string
}

func TestShippedDeployments(t *testing.T) {
	node.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 22*time.Minute)
	defer cancel()
	e := start(t, ctx)

	// Driver-velero and the verifier's Velero backend are only proven to run, Ready and elected:
	// no Velero server runs where their pods could reach it (velerostack's runs on the host
	// against loopback), so nothing they would reconcile can complete here. Their Velero CRDs are
	// installed, as their controllers watch those kinds. The verifier's etcd-snapshot backend
	// needs only the node's snapshot directory, and is run for real (verifySnapshots).
	reader, err := components.ServiceAccountToken(ctx, e.n.Cluster.Kubeconfig, components.MetricsReaderNamespace, components.MetricsReaderName)
	require.NoError(t, err)
	for _, c := range e.comps {
		e.checkPods(t, c)
		e.checkLease(t, c)
		e.checkMetrics(t, c, reader)
	}
	if t.Failed() {
		return
	}
	e.prometheusDiscovers(t, reader)
	e.verifySnapshots(t)
	e.verifySnapshotPolicy(t)

	ns, plan := e.scheduledBackups(t)
	if !t.Failed() {
		e.checkPlanSeries(t, reader, ns, plan)
		e.failover(t, ns, plan)
	}
	e.finalChecks(t)
}

func start(t *testing.T, ctx context.Context) *env {
	root, err := manifests.RepoRoot()
	require.NoError(t, err)
	work := t.TempDir()
	assets, err := velerostack.Assets()
	require.NoError(t, err)

	began := time.Now()
	built, err := images.BuildComponents(ctx, root, filepath.Join(work, "images"), tag, func(img *images.Image, took time.Duration) {
		t.Logf("built %s in %s", img.Name, took.Round(100*time.Millisecond))
	})
	require.NoError(t, err)
	var archives []string
	names := map[string]bool{}
	for _, img := range built {
		archives = append(archives, img.Archive)
		names[img.Name] = true
	}
	t.Logf("images built in %s", time.Since(began).Round(time.Second))

	// The snapshot directory, root's only, as etcd's tools leave it; removed afterwards if it did
	// not exist (and is empty again). Registered first, so it runs after the node stopped.
	if _, err := os.Stat(snapshotDir); os.IsNotExist(err) {
		require.NoError(t, os.Mkdir(snapshotDir, 0o700))
		t.Cleanup(func() {
			if err := os.Remove(snapshotDir); err != nil && !os.IsNotExist(err) {
				t.Logf("leaving %s: %v", snapshotDir, err)
			}
		})
	}

	n, err := node.Start(ctx, node.Options{Images: archives, ServeToPods: true, Logf: t.Logf,
		CRDDirectoryPaths: []string{filepath.Join(root, "e2e", "harness", "testdata")}, LogDir: os.Getenv("COFFER_NODE_LOGS")})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node diagnostics:\n%s", n.Diagnostics())
		}
		assert.NoError(t, n.Stop())
	})
	api, err := url.Parse(n.Cluster.Config.Host)
	require.NoError(t, err)
	require.Equal(t, n.IP, api.Hostname(), "the apiserver serves on the node's IP")

	s3, err := velerostack.StartMinIOOn(ctx, filepath.Join(work, "minio"), n.IP)
	require.NoError(t, err)
	t.Cleanup(s3.Stop)
	require.NoError(t, s3.S3.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}))

	cl, err := client.New(n.Cluster.Config, client.Options{Scheme: cluster.Scheme})
	require.NoError(t, err)
	cs, err := kubernetes.NewForConfig(n.Cluster.Config)
	require.NoError(t, err)
	e := &env{ctx: ctx, cl: cl, cs: cs, n: n, s3: s3, data: filepath.Join(work, "volumes"), gone: map[string]string{}}
	require.NoError(t, os.MkdirAll(e.data, 0o755))

	require.NoError(t, velerostack.InstallCRDs(ctx, cl, filepath.Join(assets, "velero")))

	began = time.Now()
	for _, comp := range manifests.Components {
		base, err := manifests.Render(filepath.Join(root, "deploy", comp))
		require.NoError(t, err)
		objs, text, err := manifests.Overlay(root, work, comp, n.IP, api.Port())
		require.NoError(t, err)
		if comp == manifests.Components[0] {
			t.Logf("overlay of deploy/%s (the others differ only in their base):\n%s", comp, text)
		}
		checkOverlay(t, base, objs, names)
		take, skipped := installable(t, cl, objs)
		for _, s := range skipped {
			t.Logf("deploy/%s: not installing %s", comp, s)
		}
		require.NoError(t, manifests.Apply(ctx, cl, take), "installing deploy/%s", comp)
		e.comps = append(e.comps, describe(t, comp, take))
		for _, x := range manifests.Extras[comp] { // a cluster without ugallu: its SecurityEvent CRD
			objs, err := manifests.Render(filepath.Join(root, "deploy", comp, x))
			require.NoError(t, err)
			require.NoError(t, manifests.Apply(ctx, cl, objs), "installing deploy/%s/%s", comp, x)
		}
	}
	e.waitRolledOut(t, 6*time.Minute)
	t.Logf("all Deployments rolled out (every replica Ready) %s after the install", time.Since(began).Round(time.Second))

	// Every component, the verifier included, ran on a cluster without control-plane nodes. The
	// node is the control plane's: label it so now (an etcd-snapshot policy lists such nodes).
	nd := &corev1.Node{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Name: n.Name}, nd))
	require.NotContains(t, nd.Labels, controlPlaneLabel)
	patch := client.MergeFrom(nd.DeepCopy())
	if nd.Labels == nil {
		nd.Labels = map[string]string{}
	}
	nd.Labels[controlPlaneLabel] = ""
	require.NoError(t, cl.Patch(ctx, nd, patch))
	return e
}

// describe finds a component's Deployment among its objects.
func describe(t *testing.T, comp string, objs []*unstructured.Unstructured) *component {
	var found *component
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		require.Nil(t, found, "deploy/%s ships more than one Deployment", comp)
		d := &appsv1.Deployment{}
		require.NoError(t, runtimeFromUnstructured(o, d))
		found = &component{name: comp, deployment: types.NamespacedName{Namespace: d.Namespace, Name: d.Name},
			serviceAccount: d.Spec.Template.Spec.ServiceAccountName, replicas: ptr.Deref(d.Spec.Replicas, 1),
			lease: types.NamespacedName{Namespace: d.Namespace, Name: leaseNames[comp]}}
		for _, a := range d.Spec.Template.Spec.Containers[0].Args {
			if v, ok := strings.CutPrefix(a, "--leader-election-namespace="); ok {
				found.lease.Namespace = v
			}
		}
	}
	require.NotNil(t, found, "deploy/%s ships no Deployment", comp)
	require.NotEmpty(t, found.serviceAccount, "deploy/%s: the Deployment names no ServiceAccount", comp)
	return found
}

// checkPods proves a component's pods run as shipped: under its ServiceAccount, with the
// kubelet-mounted token (the ServiceAccount admission plugin's projected volume), Ready.
func (e *env) checkPods(t *testing.T, c *component) {
	pods, err := e.pods(c)
	require.NoError(t, err)
	assert.Len(t, pods, int(c.replicas), "%s: one pod per replica", c.name)
	for _, p := range pods {
		assert.Equal(t, c.serviceAccount, p.Spec.ServiceAccountName, "%s", p.Name)
		assert.Equal(t, e.n.Name, p.Spec.NodeName, "%s", p.Name)
		mounted := false
		for _, m := range p.Spec.Containers[0].VolumeMounts {
			mounted = mounted || m.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount"
		}
		assert.True(t, mounted, "%s: the ServiceAccount token is mounted", p.Name)
	}
}

// leaseHolder returns the pod name holding a component's Lease (its identity is
// "<hostname>_<uuid>", the hostname being the pod's name) and whether the Lease is current.
func (e *env) leaseHolder(c *component) (string, bool, error) {
	l := &coordinationv1.Lease{}
	if err := e.cl.Get(e.ctx, c.lease, l); err != nil {
		return "", false, err
	}
	holder, _, _ := strings.Cut(ptr.Deref(l.Spec.HolderIdentity, ""), "_")
	current := l.Spec.RenewTime != nil && l.Spec.LeaseDurationSeconds != nil &&
		time.Since(l.Spec.RenewTime.Time) < time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second
	return holder, current, nil
}

// checkLease proves exactly one pod of a component leads: the Lease is current and held by one
// of its Ready pods, and exactly one pod's log says it acquired the Lease.
func (e *env) checkLease(t *testing.T, c *component) {
	var holder string
	err := wait.PollUntilContextTimeout(e.ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		h, current, err := e.leaseHolder(c)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		holder = h
		return current && h != "", err
	})
	require.NoError(t, err, "%s: Lease %s held and renewed\n%s", c.name, c.lease, e.podReport())
	pods, err := e.pods(c)
	require.NoError(t, err)
	acquired, names := 0, []string{}
	for _, p := range pods {
		names = append(names, p.Name)
		log, err := e.logs(p, false)
		require.NoError(t, err)
		if acquiredLease(log, c.lease) {
			acquired++
		}
	}
	assert.Contains(t, names, holder, "%s: the Lease is held by one of its pods", c.name)
	assert.Equal(t, 1, acquired, "%s: exactly one pod acquired the Lease", c.name)
	t.Logf("%s: %d replica(s), Lease %s held by %s", c.name, len(pods), c.lease, holder)
}

// checkMetrics scrapes every pod of a component as the ServiceMonitor does, on the container's
// port https: the component, with its kubelet-mounted token, asks the API server about each
// scrape. The token of Prometheus's ServiceAccount (bound to coffer-metrics-reader by deploy/)
// gets the metrics, the leader's with its controllers' series; no token gets 401.
func (e *env) checkMetrics(t *testing.T, c *component, token string) {
	holder, _, err := e.leaseHolder(c)
	require.NoError(t, err)
	pods, err := e.pods(c)
	require.NoError(t, err)
	for _, p := range pods {
		url := metricsURL(t, p)
		if url == "" {
			continue
		}
		code, body, err := components.Scrape(url, token)
		require.NoError(t, err, "%s: %s", p.Name, url)
		require.Equal(t, http.StatusOK, code, "%s: scraping %s as Prometheus: %s", p.Name, url, body)
		assert.Contains(t, body, "rest_client_requests_total", "%s", p.Name)
		if p.Name == holder {
			assert.Contains(t, body, "controller_runtime_reconcile_total", "%s (the leader)", p.Name)
		}
		code, body, err = components.Scrape(url, "")
		require.NoError(t, err, "%s: %s", p.Name, url)
		assert.Equal(t, http.StatusUnauthorized, code, "%s: scraping %s without a token: %s", p.Name, url, body)
	}
	t.Logf("%s: metrics served over HTTPS to Prometheus's token on %d pod(s), refused without one", c.name, len(pods))
}

// metricsURL is where a pod serves its metrics: the container's port named https ("" and a
// failed assertion when it has none).
func metricsURL(t *testing.T, p corev1.Pod) string {
	for _, cp := range p.Spec.Containers[0].Ports {
		if cp.Name == "https" {
			return "https://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(cp.ContainerPort))) + "/metrics"
		}
	}
	assert.Fail(t, "no metrics port", "%s: the container has no port named https", p.Name)
	return ""
}

// checkPlanSeries scrapes both core-controller replicas: the Lease holder exports the Plan's
// series (coffer_plan_*), the other replica none, so that each series reaches Prometheus once.
func (e *env) checkPlanSeries(t *testing.T, token, ns, plan string) {
	c := e.component("core-controller")
	holder, _, err := e.leaseHolder(c)
	require.NoError(t, err)
	pods, err := e.pods(c)
	require.NoError(t, err)
	running := 0
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			continue
		}
		running++
		url := metricsURL(t, p)
		if url == "" {
			continue
		}
		code, body, err := components.Scrape(url, token)
		require.NoError(t, err, "%s: %s", p.Name, url)
		require.Equal(t, http.StatusOK, code, "%s: %s", p.Name, body)
		var series []string
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "coffer_plan_") {
				series = append(series, line)
			}
		}
		if p.Name == holder {
			want := fmt.Sprintf(`coffer_plan_created_timestamp_seconds{namespace=%q,plan=%q}`, ns, plan)
			assert.True(t, slices.ContainsFunc(series, func(l string) bool { return strings.HasPrefix(l, want) }),
				"the leader %s exports %s: %v", p.Name, want, series)
		} else {
			assert.Empty(t, series, "%s, not the leader (%s), exports no Plan series", p.Name, holder)
		}
	}
	assert.Equal(t, 2, running, "two core-controller replicas were scraped")
	t.Logf("core-controller: the leader %s alone exports Plan %s/%s's series", holder, ns, plan)
}

// acquiredLease tells whether a log has client-go's line for acquiring the Lease (its words:
// "Successfully acquired lease", lock "<namespace>/<name>").
func acquiredLease(log string, lease types.NamespacedName) bool {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(strings.ToLower(line), "successfully acquired lease") && strings.Contains(line, lease.String()) {
			return true
		}
	}
	return false
}

func (e *env) component(name string) *component {
	for _, c := range e.comps {
		if c.name == name {
			return c
		}
	}
	panic("no component " + name)
}

// scheduledBackups is (a): a Plan fires every minute; the core-controller Deployment creates the
// BackupJob, the driver-job Deployment runs the agent's Job, which stores the application's
// files in MinIO; the Backup is Ready with the stored object's checksum.
func (e *env) scheduledBackups(t *testing.T) (string, string) {
	ctx := e.ctx
	ns, err := e.n.Cluster.Namespace(ctx, "shop")
	require.NoError(t, err)
	require.NoError(t, e.cl.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "coffer-s3", Namespace: ns},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": velerostack.AccessKey, "AWS_SECRET_ACCESS_KEY": velerostack.SecretKey}}))
	strat := e.strategy()
	require.NoError(t, e.cl.Create(ctx, strat))
	class := &backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{GenerateName: "shop-files-"}, Spec: backupsv1.BackupClassSpec{Strategies: []backupsv1.BackupClassStrategy{{
		Application: backupsv1.ApplicationSelector{Kind: "Shop"},
		StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr.To(jobapi.Group), Kind: jobapi.Kind, Name: strat.Name},
		Parameters:  map[string]string{"endpoint": "http://" + e.s3.S3Endpoint, "bucket": bucket, "credentialsSecret": "coffer-s3"},
	}}}}
	require.NoError(t, e.cl.Create(ctx, class))
	e.application(t, ns, "shop")

	plan := &backupsv1.Plan{ObjectMeta: metav1.ObjectMeta{Name: "every-minute", Namespace: ns}, Spec: backupsv1.PlanSpec{
		ApplicationRef:  corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"},
		BackupClassName: class.Name,
		Schedule:        backupsv1.PlanSchedule{Cron: "* * * * *"},
		// Allow: a tick is never skipped because the previous backup still runs, so every tick
		// must give exactly one BackupJob, across the failover too.
		ConcurrencyPolicy:          backupsv1.ConcurrencyAllow,
		SuccessfulJobsHistoryLimit: ptr.To[int32](50),
		FailedJobsHistoryLimit:     ptr.To[int32](50),
	}}
	require.NoError(t, e.cl.Create(ctx, plan))
	t.Logf("Plan %s/%s created at %s", ns, plan.Name, time.Now().UTC().Format(time.TimeOnly))

	var bj *backupsv1.BackupJob
	e.poll(t, "the Plan's first BackupJob", 3*time.Minute, func() (bool, error) {
		jobs, err := e.planJobs(ns, plan.Name)
		if len(jobs) > 0 {
			bj = &jobs[0]
		}
		return bj != nil, err
	})
	tick, err := time.Parse(time.RFC3339, bj.Annotations[backupsv1.AnnotationScheduledTime])
	require.NoError(t, err)
	t.Logf("tick %s fired: BackupJob %s created %s after the tick", tick.Format(time.TimeOnly), bj.Name, bj.CreationTimestamp.Sub(tick))
	assert.True(t, managedBy(bj.ManagedFields, "core-controller", ""), "the core-controller created the BackupJob: %v", managers(bj.ManagedFields))

	e.poll(t, "the BackupJob to finish", 4*time.Minute, func() (bool, error) {
		err := e.cl.Get(ctx, client.ObjectKeyFromObject(bj), bj)
		return bj.IsTerminal(), err
	})
	require.Equal(t, backupsv1.BackupJobSucceeded, bj.Status.Phase, bj.Status.Message)
	t.Logf("BackupJob %s Succeeded %s after the tick", bj.Name, bj.Status.CompletedAt.Sub(tick))

	jobs := &batchv1.JobList{}
	require.NoError(t, e.cl.List(ctx, jobs, client.InNamespace(ns), client.MatchingLabels{runUIDLabel: string(bj.UID)}))
	require.Len(t, jobs.Items, 1, "the driver ran one Job for the BackupJob")
	assert.True(t, managedBy(jobs.Items[0].ManagedFields, "driver-job", ""), "driver-job created the Job: %v", managers(jobs.Items[0].ManagedFields))
	assert.Equal(t, agentImage, jobs.Items[0].Spec.Template.Spec.Containers[0].Image)

	require.NotNil(t, bj.Status.BackupRef)
	b := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: bj.Status.BackupRef.Name, Namespace: ns}}
	e.poll(t, "the Backup to be Ready", 2*time.Minute, func() (bool, error) {
		err := e.cl.Get(ctx, client.ObjectKeyFromObject(b), b)
		return b.Status.Phase == backupsv1.BackupReady, err
	})
	require.NotNil(t, b.Status.Artifact)
	key, ok := strings.CutPrefix(b.Status.Artifact.URI, "s3://"+bucket+"/")
	require.True(t, ok, "artifact %s is in the bucket", b.Status.Artifact.URI)
	obj, err := e.s3.S3.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	require.NoError(t, err)
	stored, err := io.ReadAll(obj)
	require.NoError(t, err)
	sum := sha256.Sum256(stored)
	require.Equal(t, "sha256:"+hex.EncodeToString(sum[:]), b.Status.Artifact.Checksum, "the Backup's checksum is the stored object's")
	t.Logf("Backup %s Ready: %s, %d bytes, %s", b.Name, b.Status.Artifact.URI, len(stored), b.Status.Artifact.Checksum)
	return ns, plan.Name
}

// failover is (b): the core-controller's leader pod is deleted; the other replica takes the
// Lease over and the next tick fires exactly once.
func (e *env) failover(t *testing.T, ns, plan string) {
	ctx := e.ctx
	c := e.component("core-controller")
	leader, current, err := e.leaseHolder(c)
	require.NoError(t, err)
	require.True(t, current)
	pods, err := e.pods(c)
	require.NoError(t, err)
	require.Len(t, pods, 2)
	var victim corev1.Pod
	var others []string
	for _, p := range pods {
		if p.Name == leader {
			victim = p
		} else {
			others = append(others, p.Name)
		}
	}
	require.Equal(t, leader, victim.Name, "the leader is a pod of the Deployment")
	log, err := e.logs(victim, false)
	require.NoError(t, err)
	e.gone[victim.Name] = log

	// The node is cordoned while the leader goes, so that the deleted pod's replacement stays
	// Pending and the contest for the Lease is the surviving replica's alone (a replacement
	// started fast enough could otherwise win it, which proves less).
	e.cordon(t, true)
	deleted := time.Now()
	require.NoError(t, e.cl.Delete(ctx, &victim))
	t.Logf("deleted the leader %s at %s; the other replica is %v", leader, deleted.UTC().Format(time.TimeOnly), others)
	var holder string
	e.poll(t, "another pod to take the core-controller Lease over", 2*time.Minute, func() (bool, error) {
		h, current, err := e.leaseHolder(c)
		holder = h
		return err == nil && current && h != leader && h != "", err
	})
	tookOver := time.Now()
	e.cordon(t, false)
	require.Contains(t, others, holder, "the surviving replica took over")
	t.Logf("Lease taken over by the surviving replica %s %s after the deletion", holder, tookOver.Sub(deleted).Round(time.Second))

	// The first tick after the takeover fires exactly once (and no earlier tick twice, nor is
	// any skipped, the one that fell while no replica led included).
	next := tookOver.Truncate(time.Minute).Add(time.Minute)
	t.Logf("waiting for the tick of %s", next.UTC().Format(time.TimeOnly))
	e.poll(t, "the BackupJob of the tick after the failover", next.Sub(time.Now())+2*time.Minute, func() (bool, error) {
		jobs, err := e.planJobs(ns, plan)
		for _, j := range jobs {
			if j.Annotations[backupsv1.AnnotationScheduledTime] == next.UTC().Format(time.RFC3339) {
				return true, err
			}
		}
		return false, err
	})
	// Stop the Plan, let the controllers settle, then count.
	p := &backupsv1.Plan{}
	require.NoError(t, e.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: plan}, p))
	patch := client.MergeFrom(p.DeepCopy())
	p.Spec.Suspend = ptr.To(true)
	require.NoError(t, e.cl.Patch(ctx, p, patch))
	time.Sleep(5 * time.Second)
	jobs, err := e.planJobs(ns, plan)
	require.NoError(t, err)
	perTick := map[string]int{}
	var ticks []string
	for _, j := range jobs {
		at := j.Annotations[backupsv1.AnnotationScheduledTime]
		if perTick[at] == 0 {
			ticks = append(ticks, at)
		}
		perTick[at]++
	}
	t.Logf("BackupJobs per tick: %v", perTick)
	assert.Equal(t, 1, perTick[next.UTC().Format(time.RFC3339)], "the tick after the failover fired exactly once")
	first, _ := time.Parse(time.RFC3339, ticks[0])
	for at := first; !at.After(next); at = at.Add(time.Minute) {
		assert.Equal(t, 1, perTick[at.UTC().Format(time.RFC3339)], "tick %s fired exactly once", at.UTC().Format(time.TimeOnly))
	}
	require.NoError(t, e.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: plan}, p))
	assert.Zero(t, p.Status.SkippedTicks, "no tick skipped")

	// Every BackupJob completes, whichever replica created it.
	e.poll(t, "every BackupJob to finish", 4*time.Minute, func() (bool, error) {
		jobs, err := e.planJobs(ns, plan)
		for _, j := range jobs {
			if !j.IsTerminal() {
				return false, err
			}
		}
		return true, err
	})
	jobs, err = e.planJobs(ns, plan)
	require.NoError(t, err)
	for _, j := range jobs {
		assert.Equal(t, backupsv1.BackupJobSucceeded, j.Status.Phase, "BackupJob %s: %s", j.Name, j.Status.Message)
	}

	// The new leader's log says it acquired the Lease; the replacement pod runs and waits.
	np, err := e.cs.CoreV1().Pods(c.deployment.Namespace).Get(ctx, holder, metav1.GetOptions{})
	require.NoError(t, err)
	log, err = e.logs(*np, false)
	require.NoError(t, err)
	assert.True(t, acquiredLease(log, c.lease), "the new leader's log says it acquired the Lease")
	e.waitRolledOut(t, 3*time.Minute)
}

// cordon marks the node unschedulable, or schedulable again.
func (e *env) cordon(t *testing.T, on bool) {
	nd := &corev1.Node{}
	require.NoError(t, e.cl.Get(e.ctx, client.ObjectKey{Name: e.n.Name}, nd))
	patch := client.MergeFrom(nd.DeepCopy())
	nd.Spec.Unschedulable = on
	require.NoError(t, e.cl.Patch(e.ctx, nd, patch))
}

// finalChecks is (c): every component's pods never restarted, and no log says a request was
// forbidden (the shipped RBAC lets each component do all it does).
func (e *env) finalChecks(t *testing.T) {
	for _, c := range e.comps {
		pods, err := e.pods(c)
		require.NoError(t, err)
		for _, p := range pods {
			for _, s := range p.Status.ContainerStatuses {
				if !assert.Zero(t, s.RestartCount, "%s: container %s restarted", p.Name, s.Name) {
					if prev, err := e.logs(p, true); err == nil {
						t.Logf("%s: previous log:\n%s", p.Name, tailOf(prev, 3000))
					}
				}
			}
			log, err := e.logs(p, false)
			require.NoError(t, err)
			e.noForbidden(t, p.Name, log)
		}
	}
	for name, log := range e.gone {
		e.noForbidden(t, name+" (deleted)", log)
	}
}

func (e *env) noForbidden(t *testing.T, pod, log string) {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "is forbidden") {
			t.Errorf("%s: %s", pod, line)
		}
	}
}

func (e *env) planJobs(ns, plan string) ([]backupsv1.BackupJob, error) {
	list := &backupsv1.BackupJobList{}
	err := e.cl.List(e.ctx, list, client.InNamespace(ns), client.MatchingLabels{backupsv1.LabelPlan: backupsv1.PlanLabelValue(plan)})
	jobs := list.Items
	for i := 1; i < len(jobs); i++ {
		for j := i; j > 0 && jobs[j].Annotations[backupsv1.AnnotationScheduledTime] < jobs[j-1].Annotations[backupsv1.AnnotationScheduledTime]; j-- {
			jobs[j], jobs[j-1] = jobs[j-1], jobs[j]
		}
	}
	return jobs, err
}

func (e *env) poll(t *testing.T, what string, timeout time.Duration, done func() (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, 500*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return done()
	})
	require.NoError(t, err, "waiting for %s\n%s", what, e.podReport())
}

// managedBy tells whether a field manager of that name wrote the object (subresource "" is the
// object itself, as on its creation).
func managedBy(fields []metav1.ManagedFieldsEntry, manager, subresource string) bool {
	for _, f := range fields {
		if f.Manager == manager && f.Subresource == subresource {
			return true
		}
	}
	return false
}

func managers(fields []metav1.ManagedFieldsEntry) []string {
	var out []string
	for _, f := range fields {
		out = append(out, fmt.Sprintf("%s(%s)", f.Manager, f.Subresource))
	}
	return out
}

// strategy is the sample Job strategy with a hostPath volume (this node has no storage
// provisioner): <data>/<namespace>/<application name>, as e2e/jobdriver's.
func (e *env) strategy() *jobapi.JobBackupStrategy {
	pod := func(args ...string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext:              &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](agentUID), RunAsGroup: ptr.To[int64](agentUID)},
			Containers: []corev1.Container{{Name: "agent", Image: agentImage, ImagePullPolicy: corev1.PullNever, Args: args,
				EnvFrom:      []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "{{ .Parameters.credentialsSecret }}"}}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: e.data + "/{{ .Application.metadata.namespace }}/{{ .Application.metadata.name }}",
				Type: ptr.To(corev1.HostPathDirectory)}}}},
		}}
	}
	return &jobapi.JobBackupStrategy{ObjectMeta: metav1.ObjectMeta{GenerateName: "files-tar-"}, Spec: jobapi.JobBackupStrategySpec{
		Template: pod("--dir=/data", "--endpoint={{ .Parameters.endpoint }}", "--bucket={{ .Parameters.bucket }}",
			"--prefix={{ .Application.metadata.namespace }}/{{ .Application.metadata.name }}"),
		CleanupTemplate:       ptr.To(pod("--endpoint={{ .Parameters.endpoint }}")),
		ActiveDeadlineSeconds: ptr.To[int64](300),
	}}
}

// application creates a Shop and its volume directory with a few files, owned by the agent's user.
func (e *env) application(t *testing.T, ns, name string) {
	shop := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Shop",
		"metadata": map[string]any{"name": name, "namespace": ns}}}
	require.NoError(t, e.cl.Create(e.ctx, shop))
	d := filepath.Join(e.data, ns, name)
	files := map[string]string{"catalog.txt": "tea\ncoffee\ncocoa\n", "orders/2031/03.csv": "id,qty\n1,2\n2,5\n"}
	for p, s := range files {
		full := filepath.Join(d, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(s), 0o640))
	}
	require.NoError(t, filepath.Walk(d, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, agentUID, agentUID)
	}))
}
