// Package contentdiff compares an object a restore brought back into a sandbox with its copy in
// the backup, by content, for every backend that restores. It knows nothing of where either copy
// comes from: the caller decodes both (integers as int64, as the client and
// k8s.io/apimachinery/pkg/util/json do), pairs them by kind, namespace and name, and chooses which
// objects to compare.
//
// Two copies have the same content when they normalize to the same object (Normalize); equal
// normalized objects have equal digests (DigestOf), so a caller may keep only a digest of each
// copy, and read both copies again only for the objects whose digests differ, to name the first
// field that differs (FirstDiff, Diff.Describe). A description quotes no Secret value.
//
// The normalized form is what the backup says about an object, minus what a restore into a
// sandbox changes by design: every top-level field but apiVersion and kind (the caller pairs the
// copies by them), metadata (the API server's: uid, resourceVersion, timestamps, managedFields,
// and the namespace, which the sandbox's is not; ownerReferences name the old owners' UIDs) and
// status (what controllers observe, not what is restored), and the object's labels and
// annotations, minus
//   - what Velero's restore sets or clears (its restore item actions): the labels
//     velero.io/backup-name and velero.io/restore-name; a Service's cluster IPs (unless headless),
//     node ports and health-check node port; a PersistentVolumeClaim's volumeName, data sources
//     (cleared by a restore without volume data), binding annotations and the selector label
//     velero.io/dynamic-pv-restore (its data mover's); a ServiceAccount's token Secrets; a Job's controller-uid selector and labels; a
//     service-account-token Secret's token, ca.crt and namespace keys and its service-account.uid
//     annotation (the token controller's);
//   - what the sandbox changes on purpose, so that no restored workload starts a pod: replicas and
//     suspend of the kinds in InertFields (not compared after a driver's restore either, which
//     leaves them as they were);
//   - namespaces the restore's namespace mapping rewrites: a RoleBinding's subjects are mapped
//     from source to sandbox first.
//
// Numbers compare as numbers: 1 and 1.0 are the same content. Objects the cluster writes into
// every namespace by itself are not compared at all (Skipped).
package contentdiff

import (
	"crypto/sha256"
	"encoding/json"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Skipped reports whether an object is left out of the content diff: state the cluster writes
// into every namespace by itself, which the restore finds there and leaves as it is.
func Skipped(gk schema.GroupKind, name string) bool {
	switch {
	case gk == schema.GroupKind{Kind: "ConfigMap"} && name == "kube-root-ca.crt":
		// The root-CA publisher writes the cluster's own CA bundle into every namespace.
		return true
	}
	return false
}

// InertFields are the fields of spec a sandbox sets so that a restored workload starts no pod, by
// kind: replicas 0, suspend true. They are not content.
var InertFields = map[schema.GroupKind]string{
	{Group: "apps", Kind: "Deployment"}:  "replicas",
	{Group: "apps", Kind: "StatefulSet"}: "replicas",
	{Group: "apps", Kind: "ReplicaSet"}:  "replicas",
	{Kind: "ReplicationController"}:      "replicas",
	{Group: "batch", Kind: "Job"}:        "suspend",
	{Group: "batch", Kind: "CronJob"}:    "suspend",
}

// Labels and annotations a restore adds or removes. The velero.io keys are those of Velero's API
// (velerov1.BackupNameLabel, RestoreNameLabel, VolumeSnapshotLabel, DataUploadNameAnnotation).
var (
	restoreLabels = []string{"velero.io/backup-name", "velero.io/restore-name"}
	// pvcBindingAnnotations are removed by Velero's PVC restore action; the controllers binding
	// the claim in the sandbox set them again.
	pvcBindingAnnotations = []string{
		"pv.kubernetes.io/bind-completed", "pv.kubernetes.io/bound-by-controller",
		"volume.kubernetes.io/storage-provisioner", "volume.beta.kubernetes.io/storage-provisioner",
		"volume.kubernetes.io/selected-node", "velero.io/volume-snapshot-name", "velero.io/data-upload-name",
	}
	jobControllerLabels = []string{"controller-uid", "batch.kubernetes.io/controller-uid"}
)

// dynamicPVRestoreLabel is the label Velero's data mover restore selects a restored claim's volume
// by (velerov1.DynamicPVRestoreLabel).
const dynamicPVRestoreLabel = "velero.io/dynamic-pv-restore"

var (
	gkConfigMap   = schema.GroupKind{Kind: "ConfigMap"}
	gkSecret      = schema.GroupKind{Kind: "Secret"}
	gkService     = schema.GroupKind{Kind: "Service"}
	gkPVC         = schema.GroupKind{Kind: "PersistentVolumeClaim"}
	gkSA          = schema.GroupKind{Kind: "ServiceAccount"}
	gkJob         = schema.GroupKind{Group: "batch", Kind: "Job"}
	gkRoleBinding = schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "RoleBinding"}
)

// Normalize reduces obj (modified in place) to what the content diff compares. mapping, for the
// backup's copy, maps source namespaces to sandboxes; nil for the sandbox's copy.
func Normalize(obj map[string]any, gk schema.GroupKind, mapping map[string]string) map[string]any {
	md, _ := obj["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	labels, _ := md["labels"].(map[string]any)
	annotations, _ := md["annotations"].(map[string]any)
	for _, k := range []string{"apiVersion", "kind", "metadata", "status"} {
		delete(obj, k)
	}
	for _, k := range restoreLabels {
		delete(labels, k)
	}
	spec, _ := obj["spec"].(map[string]any)
	if f, ok := InertFields[gk]; ok {
		delete(spec, f)
	}
	switch gk {
	case gkService:
		if ip, _ := spec["clusterIP"].(string); ip != "None" {
			delete(spec, "clusterIP")
			delete(spec, "clusterIPs")
		}
		delete(spec, "healthCheckNodePort")
		ports, _ := spec["ports"].([]any)
		for _, p := range ports {
			if p, ok := p.(map[string]any); ok {
				delete(p, "nodePort")
			}
		}
	case gkPVC:
		// A verification's Restore brings no volume data (restorePVs false): Velero then clears
		// these three; the data is compared by the volume phase, file by file.
		for _, k := range []string{"volumeName", "dataSource", "dataSourceRef"} {
			delete(spec, k)
		}
		// Velero's data mover restore selects the volume its DataDownload provisions.
		if sel, ok := spec["selector"].(map[string]any); ok {
			if ml, ok := sel["matchLabels"].(map[string]any); ok {
				delete(ml, dynamicPVRestoreLabel)
				if len(ml) == 0 {
					delete(sel, "matchLabels")
				}
			}
			if len(sel) == 0 {
				delete(spec, "selector")
			}
		}
		for _, k := range pvcBindingAnnotations {
			delete(annotations, k)
		}
	case gkSA:
		// Velero drops the <name>-token-* Secrets; the cluster adds its own, if any.
		secrets, _ := obj["secrets"].([]any)
		kept := secrets[:0]
		for _, s := range secrets {
			if s, ok := s.(map[string]any); ok {
				if n, _ := s["name"].(string); strings.HasPrefix(n, name+"-token-") {
					continue
				}
			}
			kept = append(kept, s)
		}
		if len(kept) == 0 {
			delete(obj, "secrets")
		} else {
			obj["secrets"] = kept
		}
	case gkJob:
		if sel, ok := spec["selector"].(map[string]any); ok {
			ml, _ := sel["matchLabels"].(map[string]any)
			for _, k := range jobControllerLabels {
				delete(ml, k)
			}
			pruneEmpty(sel, "matchLabels")
			pruneEmpty(spec, "selector")
		}
		if tmpl, ok := spec["template"].(map[string]any); ok {
			if tmd, ok := tmpl["metadata"].(map[string]any); ok {
				tl, _ := tmd["labels"].(map[string]any)
				for _, k := range jobControllerLabels {
					delete(tl, k)
				}
			}
		}
	case gkRoleBinding:
		if mapping != nil {
			subjects, _ := obj["subjects"].([]any)
			for _, s := range subjects {
				if s, ok := s.(map[string]any); ok {
					if ns, _ := s["namespace"].(string); mapping[ns] != "" {
						s["namespace"] = mapping[ns]
					}
				}
			}
		}
	case gkSecret:
		if t, _ := obj["type"].(string); t == string(corev1.SecretTypeServiceAccountToken) {
			// Velero's secret restore action drops these; the token controller writes them again.
			// The namespace key is the token controller's too: Velero restores it unmapped, and
			// the controller writes it only where it is missing, so it says nothing of the data.
			delete(annotations, "kubernetes.io/service-account.uid")
			data, _ := obj["data"].(map[string]any)
			delete(data, "token")
			delete(data, "ca.crt")
			delete(data, "namespace")
		}
	}
	kept := map[string]any{}
	if len(labels) > 0 {
		kept["labels"] = labels
	}
	if len(annotations) > 0 {
		kept["annotations"] = annotations
	}
	if len(kept) > 0 {
		obj["metadata"] = kept
	}
	return obj
}

// pruneEmpty deletes m[key] when it is an empty map.
func pruneEmpty(m map[string]any, key string) {
	if v, ok := m[key].(map[string]any); ok && len(v) == 0 {
		delete(m, key)
	}
}

// Digest is the SHA-256 of a normalized object.
type Digest [sha256.Size]byte

// DigestOf hashes a normalized object (encoding/json sorts map keys, so equal objects hash alike).
func DigestOf(obj map[string]any) (Digest, error) {
	h := sha256.New()
	if err := json.NewEncoder(h).Encode(obj); err != nil {
		return Digest{}, err
	}
	var d Digest
	h.Sum(d[:0])
	return d, nil
}

// LiveDigest is the digest of the sandbox's copy of an object; it normalizes u in place. false:
// the object does not encode, and is not comparable.
func LiveDigest(u *unstructured.Unstructured) (Digest, bool) {
	gk := u.GroupVersionKind().GroupKind()
	d, err := DigestOf(Normalize(u.Object, gk, nil))
	return d, err == nil
}

// IsServiceAccountToken reports whether a decoded object is a service-account-token Secret.
func IsServiceAccountToken(gk schema.GroupKind, obj map[string]any) bool {
	t, _ := obj["type"].(string)
	return gk == gkSecret && t == string(corev1.SecretTypeServiceAccountToken)
}
