package realstack

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
	bvsandbox "github.com/coffer-backup/coffer/verifier/internal/sandbox"
	"github.com/coffer-backup/coffer/verifier/internal/velerocheck"
)

// asVerifier is a client authenticated as the verifier's ServiceAccount (API-server
// impersonation, as e2e/golden runs the components): it has exactly the RBAC deploy/verifier
// ships, and the admission policies deploy/verifier ships apply to it.
func asVerifier(t *testing.T) client.WithWatch {
	t.Helper()
	cfg := rest.CopyConfig(lc.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + verifierSA.Namespace + ":" + verifierSA.Name,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + verifierSA.Namespace, "system:authenticated"},
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: cluster.Scheme})
	require.NoError(t, err)
	return c
}

// productionWorkloads creates, in ns, workloads that would run as soon as they exist: a Deployment
// of two replicas and a Job whose containers would write to the object store with the
// namespace's credentials, a CronJob, a StatefulSet and a DaemonSet.
func productionWorkloads(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": "writer"}
	pod := corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{Name: "writer", Image: "writer:1",
			Command: []string{"sh", "-c", "wget -q -O- --post-data=pwned http://" + stack.S3Endpoint + "/" + velerostack.Bucket + "/sandbox-wrote-this"},
			EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s3-credentials"}}}}}},
	}
	always := *pod.DeepCopy()
	always.RestartPolicy = corev1.RestartPolicyAlways
	template := func(p corev1.PodSpec) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: p}
	}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3-credentials", Namespace: ns},
			StringData: map[string]string{"AWS_ACCESS_KEY_ID": velerostack.AccessKey, "AWS_SECRET_ACCESS_KEY": velerostack.SecretKey}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "writer", Namespace: ns}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template(always)}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "store", Namespace: ns}, Spec: appsv1.StatefulSetSpec{
			Replicas: ptr(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template(always)}},
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns}, Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template(always)}},
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "upload", Namespace: ns}, Spec: batchv1.JobSpec{Template: template(pod)}},
		&batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: ns}, Spec: batchv1.CronJobSpec{Schedule: "0 0 1 1 *",
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: template(pod)}}}},
	} {
		require.NoError(t, cl.Create(ctx, o))
	}
}

func podsIn(t *testing.T, ns string) []corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	require.NoError(t, cl.List(context.Background(), pods, client.InNamespace(ns)))
	return pods.Items
}

// TestInertSandboxUnderShippedRBAC restores running workloads into a sandbox with the verifier
// acting as its ServiceAccount under the shipped RBAC and admission policies. In the source
// namespace kube-controller-manager starts Pods for them (nothing schedules them here, but they
// exist, as they would run on a cluster with nodes); in the sandbox nothing does: Pod Security
// "restricted" and a deny-all NetworkPolicy are in place before the Restore, the Deployment and
// StatefulSet come back with replicas 0, the Job and CronJob suspended, the DaemonSet and Pods are
// left out, and the diff reports none of that as a finding.
func TestInertSandboxUnderShippedRBAC(t *testing.T) {
	ctx := context.Background()
	ns := uniq("in")
	productionWorkloads(t, ns)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return len(podsIn(t, ns)) >= 4, nil // two of the Deployment, one each of the StatefulSet and the Job
	}), "kube-controller-manager starts the workloads' Pods in the source namespace: %d", len(podsIn(t, ns)))
	vb := veleroBackup(t, ns, true, ns)

	sa := asVerifier(t)
	h := newHarness(t)
	h.r = h.reconciler(sa)
	h.r.Client = sa
	sandbox := ns + "-bvsandbox"
	run := veleroRun(t, "fr-inert", vb.Name, securityv1.ModeFullRestore, sandbox)
	h.step(run) // the sandbox, confined and inert, then the Restore

	sb := &corev1.Namespace{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Name: sandbox}, sb))
	for k, v := range bvsandbox.PodSecurityLabels {
		assert.Equal(t, v, sb.Labels[k], "Pod Security label %s", k)
	}
	assert.Equal(t, string(run.UID), sb.Labels[securityv1.LabelRunUID])
	np := &networkingv1.NetworkPolicy{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: sandbox, Name: bvsandbox.NetworkPolicy}, np))
	assert.Empty(t, np.Spec.PodSelector.MatchLabels, "every pod of the sandbox")
	assert.ElementsMatch(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, np.Spec.PolicyTypes)
	assert.Empty(t, np.Spec.Ingress, "no ingress allowed")
	assert.Empty(t, np.Spec.Egress, "no egress allowed")
	rb := &rbacv1.RoleBinding{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: sandbox, Name: bvsandbox.Role}, rb))
	assert.Equal(t, bvsandbox.Role, rb.RoleRef.Name)
	assert.Equal(t, []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: verifierSA.Namespace, Name: verifierSA.Name}}, rb.Subjects)

	vr := &velerov1.Restore{}
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := cl.Get(ctx, client.ObjectKey{Namespace: velerostack.Namespace, Name: velerocheck.RestoreName(run)}, vr)
		return err == nil && vr.Status.Phase == velerov1.RestorePhaseCompleted, client.IgnoreNotFound(err)
	}), "restore %s: %s\n%s", vr.Name, vr.Status.Phase, stack.VeleroLog())
	require.NotNil(t, vr.Spec.ResourceModifier, "the Restore applies the sandbox's resource modifiers")
	assert.Equal(t, velerocheck.SandboxModifiers, vr.Spec.ResourceModifier.Name)
	assert.Subset(t, vr.Spec.ExcludedResources, []string{"pods", "daemonsets.apps"}, "Velero adds its own")

	d := &appsv1.Deployment{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: sandbox, Name: "writer"}, d))
	assert.Equal(t, int32(0), *d.Spec.Replicas, "the Deployment is restored scaled to zero")
	st := &appsv1.StatefulSet{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: sandbox, Name: "store"}, st))
	assert.Equal(t, int32(0), *st.Spec.Replicas)
	job := &batchv1.Job{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: sandbox, Name: "upload"}, job))
	assert.True(t, *job.Spec.Suspend, "the Job is restored suspended")
	cj := &batchv1.CronJob{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: sandbox, Name: "nightly"}, cj))
	assert.True(t, *cj.Spec.Suspend, "the CronJob is restored suspended")
	assert.True(t, apierrors.IsNotFound(cl.Get(ctx, client.ObjectKey{Namespace: sandbox, Name: "agent"}, &appsv1.DaemonSet{})), "the DaemonSet is left out")
	// kube-controller-manager made the source's Pods within a second or two; give it longer here.
	time.Sleep(5 * time.Second)
	assert.Empty(t, podsIn(t, sandbox), "no Pod exists in the sandbox")
	rss := &appsv1.ReplicaSetList{}
	require.NoError(t, cl.List(ctx, rss, client.InNamespace(sandbox)))
	for _, rs := range rss.Items {
		assert.Equal(t, int32(0), *rs.Spec.Replicas, "ReplicaSet %s", rs.Name)
	}

	h.finish(run)
	require.Equal(t, securityv1.RunSucceeded, run.Status.Phase, run.Status.Message)
	r := result(t, run)
	assert.Equal(t, []string{securityv1.CodeChecksumMatch}, codes(r.Spec.Findings), "no finding about replicas, suspension or left-out kinds: %v", r.Spec.Findings)
	assert.Equal(t, r.Spec.ObjectsExpected, r.Spec.ObjectsRestored)
	excluded, err := strconv.Atoi(r.Spec.Details[velerocheck.DetailObjectsExcluded])
	require.NoError(t, err, "details: %v", r.Spec.Details)
	assert.GreaterOrEqual(t, excluded, 5, "four Pods and the DaemonSet are counted, not expected: %v", r.Spec.Details)
	scaled, err := strconv.Atoi(r.Spec.Details[velerocheck.DetailScaledToZero])
	require.NoError(t, err, "details: %v", r.Spec.Details)
	assert.GreaterOrEqual(t, scaled, 3, "the Deployment, its ReplicaSet and the StatefulSet: %v", r.Spec.Details)
	assert.Equal(t, "2", r.Spec.Details[velerocheck.DetailSuspended], "the Job and the CronJob")
	_, err = stack.S3.StatObject(ctx, velerostack.Bucket, "sandbox-wrote-this", minio.StatObjectOptions{})
	assert.Equal(t, "NoSuchKey", minio.ToErrorResponse(err).Code, "nothing wrote to the object store")
}

// TestVerifierConfinedToSandboxes: as its ServiceAccount, under the shipped RBAC and admission
// policies, the verifier reads no Secret outside its sandboxes, creates and deletes only its own
// labelled -bvsandbox namespaces (Pod Security "restricted"), and binds only ClusterRole
// coffer-verifier-sandbox, only to itself, only in them.
func TestVerifierConfinedToSandboxes(t *testing.T) {
	ctx := context.Background()
	sa := asVerifier(t)
	prod := uniq("prod")
	require.NoError(t, cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: prod}}))
	require.NoError(t, cl.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: prod}, StringData: map[string]string{"password": "x"}}))

	for _, key := range []client.ObjectKey{{Namespace: "kube-system", Name: "any"}, {Namespace: prod, Name: "db"}} {
		err := sa.Get(ctx, key, &corev1.Secret{})
		assert.True(t, apierrors.IsForbidden(err), "get Secret %s: %v", key, err)
	}
	err := sa.Get(ctx, client.ObjectKey{Namespace: prod, Name: "db"}, &corev1.ConfigMap{})
	assert.True(t, apierrors.IsForbidden(err), "no read outside sandboxes at all: %v", err)

	labels := map[string]string{securityv1.LabelRunUID: "0000-test"}
	for k, v := range bvsandbox.PodSecurityLabels {
		labels[k] = v
	}
	own := uniq("own") + securityv1.SandboxSuffix
	waitForConfinement(t, sa)
	refusedByPolicy(t, func() error {
		return sa.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: prod}})
	}, "delete namespace "+prod)
	refusedByPolicy(t, func() error {
		return sa.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: uniq("evil"), Labels: labels}})
	}, "create a namespace without the suffix")
	refusedByPolicy(t, func() error {
		return sa.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: own, Labels: map[string]string{securityv1.LabelRunUID: "0000-test"}}})
	}, "create a sandbox without Pod Security")
	refusedByPolicy(t, func() error {
		return sa.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: own}})
	}, "create a sandbox without a run's UID")
	foreign := uniq("foreign") + securityv1.SandboxSuffix
	require.NoError(t, cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: foreign}}))
	refusedByPolicy(t, func() error {
		return sa.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: foreign}})
	}, "delete a -bvsandbox namespace the verifier did not create")

	require.NoError(t, sa.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: own, Labels: labels}}), "its own sandbox")
	binding := func(ns, role string, subject rbacv1.Subject) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: ns},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}, Subjects: []rbacv1.Subject{subject}}
	}
	self := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: verifierSA.Namespace, Name: verifierSA.Name}
	refusedByPolicy(t, func() error { return sa.Create(ctx, binding(prod, bvsandbox.Role, self)) },
		"bind itself outside its sandboxes")
	refusedByPolicy(t, func() error { return sa.Create(ctx, binding(foreign, bvsandbox.Role, self)) },
		"bind itself in a -bvsandbox namespace without a run's UID")
	refusedByPolicy(t, func() error {
		return sa.Create(ctx, binding(own, bvsandbox.Role, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: own, Name: "default"}))
	}, "bind another subject")
	for _, role := range []string{"admin", "cluster-admin", "coffer-verifier"} {
		err := sa.Create(ctx, binding(own, role, self))
		assert.True(t, apierrors.IsForbidden(err), "bind ClusterRole %s in its sandbox: %v", role, err)
	}
	require.NoError(t, sa.Create(ctx, binding(own, bvsandbox.Role, self)), "its own binding in its own sandbox")
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		err := sa.Get(ctx, client.ObjectKey{Namespace: own, Name: "kube-root-ca.crt"}, &corev1.ConfigMap{})
		return err == nil || apierrors.IsNotFound(err), nil
	}), "the binding gives it read access in its sandbox")

	// Pods in its sandbox: only a reader of a restored claim (velerocheck's moverReader, which
	// e2e/volumes runs through this policy), nothing else.
	reader := func(change func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "coffer-reader-", Namespace: own, Labels: map[string]string{securityv1.LabelRunUID: "0000-test"}},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: ptr(false),
				SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr(true), RunAsUser: ptr(int64(1001)), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
				Volumes:         []corev1.Volume{{Name: "claim", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "db", ReadOnly: true}}}},
				Containers: []corev1.Container{{Name: velerocheck.ReaderContainer, Image: "coffer/verifier:dev", Args: []string{velerocheck.ReadVolumesCommand},
					SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
					VolumeMounts:    []corev1.VolumeMount{{Name: "claim", MountPath: "/restores/claim", ReadOnly: true}}}}}}
		if change != nil {
			change(p)
		}
		return p
	}
	for what, change := range map[string]func(*corev1.Pod){
		"a pod without a run's UID":              func(p *corev1.Pod) { p.Labels = nil },
		"a pod running another command":          func(p *corev1.Pod) { p.Spec.Containers[0].Command = []string{"sh"} },
		"a pod with other arguments":             func(p *corev1.Pod) { p.Spec.Containers[0].Args = []string{"read-volumes", "--all"} },
		"a pod with a container of another name": func(p *corev1.Pod) { p.Spec.Containers[0].Name = "app" },
		"a pod with a second container": func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, *p.Spec.Containers[0].DeepCopy())
			p.Spec.Containers[1].Name = "second"
		},
		"a pod with an init container": func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{*p.Spec.Containers[0].DeepCopy()}
			p.Spec.InitContainers[0].Name = "init"
		},
		"a pod with a ServiceAccount token": func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = nil },
		"a pod writing to a claim": func(p *corev1.Pod) {
			p.Spec.Volumes[0].PersistentVolumeClaim.ReadOnly = false
			p.Spec.Containers[0].VolumeMounts[0].ReadOnly = false
		},
		"a pod mounting a claim writable": func(p *corev1.Pod) { p.Spec.Containers[0].VolumeMounts[0].ReadOnly = false },
		"a pod with a volume not a claim": func(p *corev1.Pod) {
			p.Spec.Volumes[0].VolumeSource = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
		},
	} {
		refusedByPolicy(t, func() error { return sa.Create(ctx, reader(change)) }, what)
	}
	admittedReader := reader(nil)
	require.NoError(t, sa.Create(ctx, admittedReader), "a reader of a restored claim in its own sandbox")
	require.NoError(t, cl.Delete(ctx, admittedReader))

	// RestoreJobs (the coffer backend's full-restore): only into a -bvsandbox namespace, inert,
	// labelled with a run's UID; never a restore into a tenant's namespace.
	restoreJob := func(target string, inert bool, labelled bool) *backupsv1.RestoreJob {
		rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{GenerateName: "bvr-probe-", Namespace: prod},
			Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: "any"}, Options: backupsv1.StringOptions(map[string]string{backupsv1.OptionTargetNamespace: target})}}
		if inert {
			rj.Spec.SetOption(backupsv1.OptionInert, "true")
		}
		if labelled {
			rj.Labels = map[string]string{securityv1.LabelRunUID: "0000-test"}
		}
		return rj
	}
	refusedByPolicy(t, func() error { return sa.Create(ctx, restoreJob(prod, true, true)) }, "restore into a tenant's namespace")
	refusedByPolicy(t, func() error {
		rj := restoreJob(own, true, true)
		rj.Spec.Options = backupsv1.StringOptions(map[string]string{backupsv1.OptionInert: "true"})
		return sa.Create(ctx, rj)
	}, "restore in place")
	refusedByPolicy(t, func() error { return sa.Create(ctx, restoreJob(own, false, true)) }, "restore into its sandbox, not inert")
	refusedByPolicy(t, func() error { return sa.Create(ctx, restoreJob(own, true, false)) }, "restore into its sandbox without a run's UID")
	admitted := restoreJob(own, true, true)
	require.NoError(t, sa.Create(ctx, admitted), "an inert restore into its own sandbox")
	require.NoError(t, sa.Delete(ctx, admitted), "it deletes its RestoreJob")

	require.NoError(t, sa.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: own}}), "it deletes its own sandbox")
}

// waitForConfinement returns once the API server enforces the confinement policy, which takes
// effect asynchronously after it is created: a harmless namespace the verifier may not create is
// refused (and deleted again while it is admitted).
func waitForConfinement(t *testing.T, sa client.Client) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		probe := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: uniq("confinement-probe")}}
		if last = sa.Create(ctx, probe); last == nil {
			return false, cl.Delete(ctx, probe)
		}
		return strings.Contains(last.Error(), "coffer-verifier-confinement"), nil
	})
	require.NoError(t, err, "the policy coffer-verifier-confinement never took effect: %v", last)
}

// refusedByPolicy expects do to be denied by the verifier's confinement policy.
func refusedByPolicy(t *testing.T, do func() error, what string) {
	t.Helper()
	err := do()
	require.Error(t, err, "%s was admitted", what)
	assert.True(t, apierrors.IsForbidden(err), "%s: %v", what, err)
	assert.Contains(t, err.Error(), "coffer-verifier-confinement", "%s: denied by the policy", what)
}

// TestSandboxNeverRunsWithoutModifiers: the verifier restores only with the shipped resource
// modifiers and checks their effect. Modifiers that leave a Deployment's replicas alone end the run
// as not carried out (and its cleanup deletes the sandbox at once); without the ConfigMap, Velero
// refuses the Restore and the run says to apply deploy/verifier/velero. Neither is a finding about
// the backup.
func TestSandboxNeverRunsWithoutModifiers(t *testing.T) {
	ctx := context.Background()
	ns := uniq("nm")
	productionWorkloads(t, ns)
	vb := veleroBackup(t, ns, true, ns)
	key := client.ObjectKey{Namespace: velerostack.Namespace, Name: velerocheck.SandboxModifiers}
	shipped := &corev1.ConfigMap{}
	require.NoError(t, cl.Get(ctx, key, shipped))
	t.Cleanup(func() { require.NoError(t, installVerifier(context.Background())) })

	t.Run("modifiers that leave replicas", func(t *testing.T) {
		cm := shipped.DeepCopy()
		for k := range cm.Data {
			cm.Data[k] = "version: v1\nresourceModifierRules:\n- conditions: {groupResource: jobs.batch}\n  mergePatches:\n  - patchData: '{\"spec\":{\"suspend\":true}}'\n"
		}
		require.NoError(t, cl.Update(ctx, cm))
		h := newHarness(t)
		run := veleroRun(t, "fr-live", vb.Name, securityv1.ModeFullRestore, ns+"-a-bvsandbox")
		h.finish(run)
		assertVerifyFailed(t, run)
		assert.Contains(t, run.Status.Message, "the sandbox is not inert")
		assert.Contains(t, run.Status.Message, "apps/Deployment "+ns+"-a-bvsandbox/writer: spec.replicas is 2")
		sb := &corev1.Namespace{}
		err := cl.Get(ctx, client.ObjectKey{Name: ns + "-a-bvsandbox"}, sb)
		assert.True(t, apierrors.IsNotFound(err) || !sb.DeletionTimestamp.IsZero(), "the sandbox is being deleted")
	})
	t.Run("no modifiers", func(t *testing.T) {
		require.NoError(t, cl.Delete(ctx, shipped.DeepCopy()))
		h := newHarness(t)
		run := veleroRun(t, "fr-nomod", vb.Name, securityv1.ModeFullRestore, ns+"-b-bvsandbox")
		h.finish(run)
		assertVerifyFailed(t, run)
		assert.Contains(t, run.Status.Message, "apply deploy/verifier/velero")
		assert.Empty(t, podsIn(t, ns+"-b-bvsandbox"))
	})
}
