//go:build e2e

package deployments

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/coffer-backup/coffer/e2e/harness/images"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
)

// checkOverlay compares the overlay's render with deploy/<comp>'s: the same objects, equal but
// for the Deployments' containers' imagePullPolicy and the overlay's environment variables; and
// every container image is one the test built.
func checkOverlay(t *testing.T, base, over []*unstructured.Unstructured, built map[string]bool) {
	t.Helper()
	key := func(o *unstructured.Unstructured) string {
		return o.GetAPIVersion() + "/" + o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
	}
	plain := map[string]*unstructured.Unstructured{}
	for _, o := range base {
		plain[key(o)] = o
	}
	require.Len(t, over, len(base), "the overlay adds or drops objects")
	for _, o := range over {
		b, ok := plain[key(o)]
		require.True(t, ok, "the overlay renders %s, which deploy/ does not", key(o))
		if o.GetKind() != "Deployment" {
			require.Equal(t, b.Object, o.Object, "the overlay changed %s", key(o))
			continue
		}
		var bd, od appsv1.Deployment
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(b.Object, &bd))
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &od))
		require.Len(t, od.Spec.Template.Spec.Containers, len(bd.Spec.Template.Spec.Containers), "%s: containers added", key(o))
		for i := range od.Spec.Template.Spec.Containers {
			c, bc := &od.Spec.Template.Spec.Containers[i], bd.Spec.Template.Spec.Containers[i]
			require.Equal(t, corev1.PullNever, c.ImagePullPolicy, "%s: container %s", key(o), c.Name)
			ref, err := images.Normalize(c.Image)
			require.NoError(t, err)
			require.True(t, built[ref], "%s: container %s runs %s, which the test did not build", key(o), c.Name, c.Image)
			c.ImagePullPolicy = bc.ImagePullPolicy
			var env []corev1.EnvVar
			for _, e := range c.Env {
				if !manifests.OverlayEnv[e.Name] {
					env = append(env, e)
				}
			}
			c.Env = env
		}
		require.True(t, reflect.DeepEqual(bd, od), "the overlay changed %s beyond images and the apiserver's address:\ndeploy/: %+v\noverlay: %+v", key(o), bd.Spec, od.Spec)
	}
}

// monitoringGroup is the Prometheus Operator's API group (ServiceMonitor, PrometheusRule).
const monitoringGroup = "monitoring.coreos.com"

// installable splits rendered objects into those the cluster can take and those of the
// Prometheus Operator's kinds when their CRDs are absent, with why.
func installable(t *testing.T, cl client.Client, objs []*unstructured.Unstructured) (take []*unstructured.Unstructured, skipped []string) {
	t.Helper()
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		if gvk.Group == monitoringGroup {
			_, err := cl.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
			if meta.IsNoMatchError(err) {
				skipped = append(skipped, fmt.Sprintf("%s %s/%s (the %s CRDs are not installed: no Prometheus Operator here)", gvk.Kind, o.GetNamespace(), o.GetName(), monitoringGroup))
				continue
			}
			require.NoError(t, err)
		}
		take = append(take, o)
	}
	return take, skipped
}

// waitRolledOut waits until every Deployment is ready (manifests.RolledOut).
func (e *env) waitRolledOut(t *testing.T, timeout time.Duration) {
	t.Helper()
	why := map[string]string{}
	err := wait.PollUntilContextTimeout(e.ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		all := true
		for _, c := range e.comps {
			d := &appsv1.Deployment{}
			if err := e.cl.Get(ctx, c.deployment, d); err != nil {
				return false, err
			}
			ok, w := manifests.RolledOut(d)
			why[c.name] = w
			all = all && ok
		}
		return all, nil
	})
	if err != nil {
		require.NoError(t, err, "waiting for the Deployments to roll out: %v\n%s", why, e.podReport())
	}
}

// podReport describes the components' pods (phase, conditions, container states), their
// namespaces' recent events and the containers' log tails, for a failure message.
func (e *env) podReport() string {
	var b strings.Builder
	seen := map[string]bool{}
	for _, c := range e.comps {
		pods, err := e.pods(c)
		if err != nil {
			fmt.Fprintf(&b, "%s: listing pods: %v\n", c.name, err)
			continue
		}
		for _, p := range pods {
			fmt.Fprintf(&b, "--- pod %s/%s: %s", p.Namespace, p.Name, p.Status.Phase)
			for _, cond := range p.Status.Conditions {
				fmt.Fprintf(&b, " %s=%s", cond.Type, cond.Status)
			}
			b.WriteString("\n")
			for _, cs := range p.Status.ContainerStatuses {
				fmt.Fprintf(&b, "    container %s ready=%v restarts=%d state=%+v last=%+v\n", cs.Name, cs.Ready, cs.RestartCount, cs.State, cs.LastTerminationState)
			}
			if log, err := e.logs(p, false); err == nil {
				fmt.Fprintf(&b, "    log tail:\n%s\n", tailOf(log, 1500))
			}
		}
		if !seen[c.deployment.Namespace] {
			seen[c.deployment.Namespace] = true
			evs := &corev1.EventList{}
			if err := e.cl.List(e.ctx, evs, client.InNamespace(c.deployment.Namespace)); err == nil {
				for _, ev := range evs.Items {
					if ev.Type != corev1.EventTypeNormal {
						fmt.Fprintf(&b, "event %s %s/%s: %s %s\n", ev.Type, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Reason, ev.Message)
					}
				}
			}
		}
	}
	return b.String()
}

// pods lists a component's pods (by its Deployment's selector), oldest first.
func (e *env) pods(c *component) ([]corev1.Pod, error) {
	d := &appsv1.Deployment{}
	if err := e.cl.Get(e.ctx, c.deployment, d); err != nil {
		return nil, err
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, err
	}
	list := &corev1.PodList{}
	if err := e.cl.List(e.ctx, list, client.InNamespace(d.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, err
	}
	pods := list.Items
	for i := 1; i < len(pods); i++ { // a handful: insertion sort by creation
		for j := i; j > 0 && pods[j].CreationTimestamp.Before(&pods[j-1].CreationTimestamp); j-- {
			pods[j], pods[j-1] = pods[j-1], pods[j]
		}
	}
	return pods, nil
}

// logs reads a pod's manager container log through the API (the kubelet serves it).
func (e *env) logs(p corev1.Pod, previous bool) (string, error) {
	b, err := e.cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "manager", Previous: previous}).DoRaw(e.ctx)
	return string(b), err
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func runtimeFromUnstructured(o *unstructured.Unstructured, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into)
}
