package velerostack

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Images of Velero for a real node, to be built from the binaries of Assets (their binaries at
// /velero and /velero-restore-helper, root, as Velero's own images have them): the server's image (the
// node agent and its data mover pods run it) and the restore helper's (the init container Velero
// adds to a restored pod whose volumes it restores by file system).
const (
	Image              = "velero/velero:coffer-e2e"
	RestoreHelperImage = "velero/velero-restore-helper:coffer-e2e"
)

// NodeAgent says where Velero's node agent runs: a real node (e2e/harness/node) whose pods'
// volumes it backs up by file-system backup.
type NodeAgent struct {
	// KubeletRoot is the node's kubelet --root-dir: its pods/ is mounted at /host_pods.
	KubeletRoot string
	// APIHost and APIPort are where pods reach the API server (the node runs no kube-proxy).
	APIHost, APIPort string
}

// InstallNodeAgent runs Velero's node agent as `velero install --use-node-agent` lays it out (a
// DaemonSet named node-agent in Velero's namespace, root, the kubelet's pods directory at
// /host_pods, the storage credentials at /credentials/cloud), under a ServiceAccount bound to
// cluster-admin as Velero's install binds its own; pods it starts inherit its image, environment
// and mounts. Restores of volumes use RestoreHelperImage (Velero's restore item action reads it
// from its plugin ConfigMap). The node must have imported both images. It returns once the
// agent's pod is Ready.
func (s *Stack) InstallNodeAgent(ctx context.Context, a NodeAgent) error {
	labels := map[string]string{"name": "node-agent", "role": "node-agent"}
	env := []corev1.EnvVar{
		{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
		{Name: "VELERO_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		{Name: "VELERO_SCRATCH_DIR", Value: "/scratch"},
		{Name: "AWS_SHARED_CREDENTIALS_FILE", Value: "/credentials/cloud"},
		{Name: "KUBERNETES_SERVICE_HOST", Value: a.APIHost},
		{Name: "KUBERNETES_SERVICE_PORT", Value: a.APIPort},
	}
	hostToContainer := corev1.MountPropagationHostToContainer
	objects := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "velero", Namespace: Namespace}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "velero-" + Namespace},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "velero", Namespace: Namespace}}},
		cloudCredentials(),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fs-restore-action-config", Namespace: Namespace,
			Labels: map[string]string{"velero.io/plugin-config": "", "velero.io/pod-volume-restore": "RestoreItemAction"}},
			Data: map[string]string{"image": RestoreHelperImage}},
		&appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: "node-agent", Namespace: Namespace},
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"name": "node-agent"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						ServiceAccountName:            "velero",
						SecurityContext:               &corev1.PodSecurityContext{RunAsUser: ptr.To(int64(0))},
						TerminationGracePeriodSeconds: ptr.To(int64(5)),
						Containers: []corev1.Container{{
							Name: "node-agent", Image: Image, ImagePullPolicy: corev1.PullNever,
							Command: []string{"/velero"}, Args: []string{"node-agent", "server", "--log-level=info"},
							Env: env,
							VolumeMounts: []corev1.VolumeMount{
								{Name: "host-pods", MountPath: "/host_pods", MountPropagation: &hostToContainer},
								{Name: "scratch", MountPath: "/scratch"},
								{Name: "cloud-credentials", MountPath: "/credentials"},
							},
						}},
						Volumes: []corev1.Volume{
							{Name: "host-pods", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: filepath.Join(a.KubeletRoot, "pods")}}},
							{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
							{Name: "cloud-credentials", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "cloud-credentials", DefaultMode: ptr.To(int32(0o444))}}},
						},
					},
				},
			},
		},
	}
	for _, o := range objects {
		if err := s.cl.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods := &corev1.PodList{}
		if err := s.cl.List(ctx, pods, client.InNamespace(Namespace), client.MatchingLabels{"name": "node-agent"}); err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					return true, nil
				}
			}
			last = fmt.Sprintf("pod %s is %s: %v", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for Velero's node agent to be Ready (%s): %w", last, err)
	}
	return nil
}

// cloudCredentials is the Secret Velero's install creates in its namespace with the store's
// credentials (key cloud, an AWS shared credentials file), which its node agent mounts and which
// opens its kopia repositories.
func cloudCredentials() *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cloud-credentials", Namespace: Namespace},
		StringData: map[string]string{"cloud": credentialsINI()}}
}

// SessionCredentials are temporary credentials of MinIO's root user narrowed by an S3 policy
// (STS AssumeRole with a session policy: the root user's rights intersected with policy), valid
// for six hours: an identity with only the rights policy grants, as an administrator would make
// one. CredentialsFile writes them as a Secret holds them.
func (s *Stack) SessionCredentials(policy string) (credentials.Value, error) {
	tr, err := s.transport()
	if err != nil {
		return credentials.Value{}, err
	}
	sts := &credentials.STSAssumeRole{Client: &http.Client{Transport: tr}, STSEndpoint: s.S3URL(), Options: credentials.STSAssumeRoleOptions{
		AccessKey: AccessKey, SecretKey: SecretKey, Policy: policy, Location: "us-east-1", DurationSeconds: int((6 * time.Hour).Seconds())}}
	v, err := sts.Retrieve()
	if err != nil {
		return credentials.Value{}, fmt.Errorf("velerostack: temporary credentials for a policy: %w", err)
	}
	return v, nil
}

// CredentialsFile is v as an AWS shared credentials file (profile default).
func CredentialsFile(v credentials.Value) string {
	return fmt.Sprintf("[default]\naws_access_key_id=%s\naws_secret_access_key=%s\naws_session_token=%s\n", v.AccessKeyID, v.SecretAccessKey, v.SessionToken)
}
