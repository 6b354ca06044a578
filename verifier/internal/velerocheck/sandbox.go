package velerocheck

import (
	"fmt"
	"maps"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/verifier/internal/sandbox"
)

// A sandbox (package sandbox) is confined before anything is restored into it. What keeps the
// velero backend's own Restore into it inert is here: the Restore leaves out Pods and DaemonSets
// (excludedResources: ExcludedFromSandbox, which holds sandbox.NeverInSandbox too) and applies the
// resource modifiers of the ConfigMap SandboxModifiers (deploy/verifier/velero, in Velero's
// namespace): Deployments, StatefulSets, ReplicaSets and ReplicationControllers come back with
// replicas 0 (ScaledToZero), Jobs and CronJobs suspended (Suspended); a restored workload that is
// not (inert) ends the run. So no restored workload starts a pod.

// SandboxModifiers is the ConfigMap of Velero resource modifiers, in the namespace of the Velero
// backup (and so of the Restore), that makes restored workloads inert.
const SandboxModifiers = "coffer-verifier-sandbox"

// ExcludedFromSandbox are the kinds a verification Restore leaves out, with their Velero resource
// names: a bare Pod would run as soon as it is restored and a DaemonSet has no replica count to
// set to zero. Pods a controller owns are derived state its controller would make again (and, scaled
// to zero, does not). Coffer's run records and Plans and the verifier's own runs and Results are
// left out as driver-velero leaves them out (velerodriver.Excluded): restored into a sandbox, a
// BackupJob or BackupVerifyRun would run again there, and a Plan would fire. The diff counts such
// objects of the backup (details.objectsExcluded) instead of expecting them in the sandbox.
var ExcludedFromSandbox = func() map[schema.GroupKind]string {
	out := veleroapi.Excluded()
	out[schema.GroupKind{Kind: "Pod"}] = "pods"
	out[schema.GroupKind{Group: "apps", Kind: "DaemonSet"}] = "daemonsets.apps"
	maps.Copy(out, sandbox.NeverInSandbox)
	return out
}()

// ScaledToZero are the kinds the resource modifiers restore with spec.replicas 0, with their Velero
// group-resource names.
var ScaledToZero = map[schema.GroupKind]string{
	{Group: "apps", Kind: "Deployment"}:  "deployments.apps",
	{Group: "apps", Kind: "StatefulSet"}: "statefulsets.apps",
	{Group: "apps", Kind: "ReplicaSet"}:  "replicasets.apps",
	{Kind: "ReplicationController"}:      "replicationcontrollers",
}

// Suspended are the kinds the resource modifiers restore with spec.suspend true.
var Suspended = map[schema.GroupKind]string{
	{Group: "batch", Kind: "Job"}:     "jobs.batch",
	{Group: "batch", Kind: "CronJob"}: "cronjobs.batch",
}

// excludedResources is the Restore's excludedResources.
func excludedResources() []string {
	return veleroapi.Resources(ExcludedFromSandbox)
}

// inert reports why a restored object is not inert ("" when it is): a workload the resource
// modifiers should have scaled to zero or suspended. The diff reads every object anyway; a sandbox
// that runs something (the ConfigMap changed, or Velero ignored it) ends the run.
func inert(u *unstructured.Unstructured) string {
	gk := u.GroupVersionKind().GroupKind()
	if _, ok := ScaledToZero[gk]; ok {
		replicas, found, err := unstructured.NestedInt64(u.Object, "spec", "replicas")
		switch {
		case err != nil:
			return "spec.replicas is not a number"
		case !found:
			return "spec.replicas is unset (1)"
		case replicas != 0:
			return fmt.Sprintf("spec.replicas is %d", replicas)
		}
	}
	if _, ok := Suspended[gk]; ok {
		if s, _, _ := unstructured.NestedBool(u.Object, "spec", "suspend"); !s {
			return "spec.suspend is not true"
		}
	}
	return ""
}
