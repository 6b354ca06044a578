package admission

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/coffer-backup/coffer/e2e/harness/manifests"
)

// TestShippedNamespacesEnforcePodSecurity applies the Namespaces deploy/ ships to the real API
// server (its Pod Security admission) and creates, server-side dry run, a Pod of every shipped
// Deployment's template in its namespace: each is admitted. In coffer-system, which enforces
// restricted, a Pod asking for privilege is refused.
func TestShippedNamespacesEnforcePodSecurity(t *testing.T) {
	ctx := context.Background()
	for _, comp := range manifests.Components {
		objs, err := manifests.Render(filepath.Join(root, "deploy", comp, "manager"))
		require.NoError(t, err)
		var nss []*unstructured.Unstructured
		for _, o := range objs {
			if o.GetKind() == "Namespace" {
				nss = append(nss, o)
			}
		}
		require.NoError(t, manifests.Apply(ctx, cl, nss))
		for _, o := range objs {
			if o.GetKind() != "Deployment" {
				continue
			}
			d := &appsv1.Deployment{}
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d))
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "template-", Namespace: d.Namespace}, Spec: d.Spec.Template.Spec}
			pod.Spec.ServiceAccountName = ""
			assert.NoError(t, cl.Create(ctx, pod, client.DryRunAll), "%s: the shipped Deployment's pods meet its namespace's Pod Security level", d.Name)
		}
	}

	ns := &corev1.Namespace{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Name: "coffer-system"}, ns))
	assert.Equal(t, "restricted", ns.Labels["pod-security.kubernetes.io/enforce"])
	privileged := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "privileged-", Namespace: "coffer-system"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x",
			SecurityContext: &corev1.SecurityContext{Privileged: ptrTo(true)}}}}}
	err := cl.Create(ctx, privileged, client.DryRunAll)
	require.Error(t, err, "coffer-system refuses a privileged pod")
	assert.Contains(t, err.Error(), "violates PodSecurity")
}

func ptrTo[T any](v T) *T { return &v }

// TestManagedVerifierVariant: deploy/managed/verifier is deploy/verifier without the etcd-snapshot
// backend, for clusters whose control plane takes no pods: the same objects, a Deployment that
// neither prefers a control-plane node nor mounts a host path, and a namespace enforcing Pod
// Security restricted, which admits its pods and refuses the etcd check pods of the default
// install.
func TestManagedVerifierVariant(t *testing.T) {
	ctx := context.Background()
	base, err := manifests.Render(filepath.Join(root, "deploy", "verifier"))
	require.NoError(t, err)
	managed, err := manifests.Render(filepath.Join(root, "deploy", "managed", "verifier"))
	require.NoError(t, err)
	key := func(o *unstructured.Unstructured) string {
		return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
	}
	var baseKeys, managedKeys []string
	deployments := map[string]*appsv1.Deployment{}
	var labels map[string]string
	for name, objs := range map[string][]*unstructured.Unstructured{"base": base, "managed": managed} {
		for _, o := range objs {
			if name == "base" {
				baseKeys = append(baseKeys, key(o))
			} else {
				managedKeys = append(managedKeys, key(o))
			}
			switch o.GetKind() {
			case "Deployment":
				d := &appsv1.Deployment{}
				require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d))
				deployments[name] = d
			case "Namespace":
				if name == "managed" {
					labels = o.GetLabels()
				}
			}
		}
	}
	assert.ElementsMatch(t, baseKeys, managedKeys, "the same objects")
	m := deployments["managed"].Spec.Template.Spec
	assert.Empty(t, m.NodeSelector)
	assert.Nil(t, m.Affinity, "no preference for control-plane nodes")
	assert.Empty(t, m.Tolerations)
	// No host path: its one volume is the emptyDir at /tmp that checksum-only of Velero volume
	// data connects to kopia repositories through.
	require.Len(t, m.Volumes, 1)
	assert.Equal(t, "tmp", m.Volumes[0].Name)
	assert.NotNil(t, m.Volumes[0].EmptyDir)
	assert.Nil(t, m.Volumes[0].HostPath)
	assert.Equal(t, []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}}, m.Containers[0].VolumeMounts)
	assert.Empty(t, deployments["base"].Spec.Template.Spec.NodeSelector, "the default install schedules where control-plane nodes take no pods too")
	assert.Contains(t, m.Containers[0].Args, "--etcd-snapshot-dir=", "no etcd-snapshot backend")
	assert.Equal(t, "restricted", labels["pod-security.kubernetes.io/enforce"])

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "managed-verifier-", Labels: labels}}
	require.NoError(t, cl.Create(ctx, ns))
	pod := func(spec corev1.PodSpec) *corev1.Pod {
		spec.ServiceAccountName = ""
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "template-", Namespace: ns.Name}, Spec: spec}
	}
	assert.NoError(t, cl.Create(ctx, pod(m), client.DryRunAll), "the managed verifier's pods meet restricted")
	// What the default install's etcd-snapshot backend starts on a node (as its check and lister
	// pods are made): the namespace of the managed variant refuses it.
	check := m.DeepCopy()
	check.Volumes = []corev1.Volume{{Name: "snapshots", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/etcd-snapshots"}}}}
	c := &check.Containers[0]
	c.VolumeMounts = []corev1.VolumeMount{{Name: "snapshots", MountPath: "/snapshots", ReadOnly: true}}
	c.SecurityContext.RunAsUser, c.SecurityContext.RunAsNonRoot = ptrTo(int64(0)), ptrTo(false)
	c.SecurityContext.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"DAC_READ_SEARCH"}}
	err = cl.Create(ctx, pod(*check), client.DryRunAll)
	require.Error(t, err, "an etcd check pod (a hostPath, user 0, CAP_DAC_READ_SEARCH) does not")
	assert.Contains(t, err.Error(), "violates PodSecurity")
}
