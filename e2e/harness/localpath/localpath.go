// Package localpath gives a real node (e2e/harness/node) dynamic PersistentVolumes: Rancher's
// local-path-provisioner, built from its pinned module (hack/testbin.sh --velero), runs as a
// process against the node's API server and provisions each claim as a directory under the node's
// storage directory, created and removed by a helper pod on the node (coffer-volume-helper, its
// setupCommand and teardownCommand). Its PersistentVolumes are of type local, pinned to the node,
// so that Velero's file-system backup takes them (it skips hostPath volumes).
package localpath

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/coffer-backup/coffer/e2e/harness/components"
	"github.com/coffer-backup/coffer/e2e/harness/images"
)

const (
	// StorageClass is the default StorageClass the provisioner serves.
	StorageClass = "local-path"
	// ProvisionerName is its provisioner name.
	ProvisionerName = "rancher.io/local-path"
	// Namespace holds the helper pods.
	Namespace = "local-path-storage"
	// HelperImage is the helper pods' image; HelperPackage builds its binary.
	HelperImage   = "coffer/volume-helper:dev"
	HelperPackage = "github.com/coffer-backup/coffer/e2e/harness/cmd/coffer-volume-helper"
	helperPath    = "/usr/local/bin/coffer-volume-helper"
)

// HelperImageArchive builds the helper's image archive into dir (the Go toolchain runs in the
// current directory, which must be inside the e2e module), for node.Options.Images.
func HelperImageArchive(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "coffer-volume-helper")
	if err := images.BuildBinary(ctx, "", HelperPackage, bin); err != nil {
		return "", err
	}
	img, err := images.Build(ctx, images.Options{Binary: bin, Name: HelperImage, Path: helperPath, User: "0:0", Out: filepath.Join(dir, "coffer-volume-helper.oci.tar")})
	if err != nil {
		return "", err
	}
	return img.Archive, nil
}

// Provisioner is a running local-path-provisioner.
type Provisioner struct {
	proc *components.Process
	// Dir is the node's storage directory: each volume is a directory in it.
	Dir string
}

// Start runs the provisioner (the binary bin) against the cluster of kubeconfig, with volumes
// under dir, and creates its namespace and default StorageClass (WaitForFirstConsumer, reclaim
// Delete, volumes of type local). The node must have imported HelperImageArchive's image.
func Start(ctx context.Context, cl client.Client, bin, kubeconfig, dir string) (*Provisioner, error) {
	store := filepath.Join(dir, "volumes")
	if err := os.MkdirAll(store, 0o755); err != nil {
		return nil, err
	}
	config, err := json.Marshal(map[string]any{
		"nodePathMap":     []map[string]any{{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": []string{store}}},
		"setupCommand":    helperPath,
		"teardownCommand": helperPath,
	})
	if err != nil {
		return nil, err
	}
	helperPod := fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: helper-pod\nspec:\n  containers:\n  - name: helper\n    image: %s\n    imagePullPolicy: Never\n", HelperImage)
	files := map[string][]byte{"config.json": config, "helper-pod.yaml": []byte(helperPod)}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	firstConsumer := storagev1.VolumeBindingWaitForFirstConsumer
	del := corev1.PersistentVolumeReclaimDelete
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}},
		&storagev1.StorageClass{
			ObjectMeta: metav1.ObjectMeta{Name: StorageClass, Annotations: map[string]string{
				"storageclass.kubernetes.io/is-default-class": "true",
				"defaultVolumeType":                           "local",
			}},
			Provisioner: ProvisionerName, VolumeBindingMode: &firstConsumer, ReclaimPolicy: &del,
		},
	} {
		if err := cl.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	// The helper pods run under the namespace's default ServiceAccount, which appears once
	// kube-controller-manager has seen the namespace.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := cl.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: "default"}, &corev1.ServiceAccount{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for ServiceAccount %s/default: %w", Namespace, err)
	}
	proc, err := components.StartWithEnv(bin, []string{"PATH=" + os.Getenv("PATH")}, "--debug", "start",
		"--kubeconfig", kubeconfig, "--config", filepath.Join(dir, "config.json"), "--helper-pod-file", filepath.Join(dir, "helper-pod.yaml"),
		"--namespace", Namespace, "--service-account-name", "default", "--provisioner-name", ProvisionerName, "--helper-image", HelperImage)
	if err != nil {
		return nil, fmt.Errorf("starting local-path-provisioner: %w", err)
	}
	return &Provisioner{proc: proc, Dir: store}, nil
}

// Log is the provisioner's output so far.
func (p *Provisioner) Log() string { return p.proc.Tail() }

// Stop stops the provisioner.
func (p *Provisioner) Stop() {
	if p != nil && p.proc != nil {
		p.proc.Stop(5 * time.Second)
	}
}
