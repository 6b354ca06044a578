// Package velerostack runs a real Velero server (out of cluster, with its AWS object-store plugin)
// and a real MinIO S3 store on loopback against a local cluster. The binaries are built from
// source by `hack/testbin.sh --velero` and found through COFFER_VELERO_ASSETS.
package velerostack

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/components"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
)

// AssetsEnv names the variable holding the directory of velero, velero-plugin-for-aws and minio.
const AssetsEnv = "COFFER_VELERO_ASSETS"

// Fixed names of the stack's objects.
const (
	Namespace = "velero"
	BSLName   = "default"
	Bucket    = "coffer"
	Prefix    = "velero"
	// AccessKey and SecretKey are MinIO's root credentials.
	AccessKey = "coffer-test"
	SecretKey = "coffer-test-secret"
)

// Stack is a running Velero server and MinIO.
type Stack struct {
	// S3Endpoint is MinIO's host:port on loopback.
	S3Endpoint string
	// S3 is a client of the bucket, for tests that check what is stored.
	S3 *minio.Client

	minio, velero *components.Process
	lock          *hostLock
}

// Assets returns the directory of the stack's binaries or an error saying how to build them.
func Assets() (string, error) {
	dir := os.Getenv(AssetsEnv)
	if dir == "" {
		return "", fmt.Errorf("%s is not set: run the tests through `make test`, or export %s=$(hack/testbin.sh --velero)", AssetsEnv, AssetsEnv)
	}
	for _, b := range []string{"velero", "velero-plugin-for-aws", "minio"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("%s=%s lacks %s: run `hack/testbin.sh --velero`: %w", AssetsEnv, dir, b, err)
		}
	}
	return dir, nil
}

// Start brings MinIO and Velero up against c and returns once the storage location is Available.
func Start(ctx context.Context, c *cluster.Cluster) (_ *Stack, err error) {
	assets, err := Assets()
	if err != nil {
		return nil, err
	}
	s := &Stack{}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	dir := filepath.Join(c.Dir, "velero-stack")
	for _, d := range []string{"minio", "plugins", "tmp", "home"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	if err := s.startMinIO(ctx, assets, dir, "127.0.0.1"); err != nil {
		return nil, err
	}
	if err := s.S3.MakeBucket(ctx, Bucket, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		return nil, err
	}
	cl, err := client.New(c.Config, client.Options{Scheme: cluster.Scheme})
	if err != nil {
		return nil, err
	}
	if err := installVelero(ctx, cl, filepath.Join(assets, "velero"), s.S3Endpoint); err != nil {
		return nil, err
	}
	if err := os.Symlink(filepath.Join(assets, "velero-plugin-for-aws"), filepath.Join(dir, "plugins", "velero-plugin-for-aws")); err != nil {
		return nil, err
	}
	// The AWS plugin reads the shared credentials file, as after a default `velero install`. With a
	// credential on the storage location instead, Velero rewrites that file each time it opens the
	// store, and a plugin reading it at that moment finds it empty ("no EC2 IMDS role found").
	credsFile := filepath.Join(dir, "home", ".aws", "credentials")
	if err := os.MkdirAll(filepath.Dir(credsFile), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(credsFile, []byte(credentialsINI()), 0o600); err != nil {
		return nil, err
	}
	if s.lock, err = lockHost(ctx, 15*time.Minute); err != nil {
		return nil, err
	}
	metricsPort, _ := cluster.FreePort()
	profilerPort, _ := cluster.FreePort()
	s.velero, err = components.StartWithEnv(filepath.Join(assets, "velero"),
		[]string{"TMPDIR=" + filepath.Join(dir, "tmp"), "HOME=" + filepath.Join(dir, "home"), "PATH=" + os.Getenv("PATH"), "AWS_SHARED_CREDENTIALS_FILE=" + credsFile},
		"server", "--kubeconfig="+c.Kubeconfig, "--namespace="+Namespace, "--plugin-dir="+filepath.Join(dir, "plugins"),
		"--metrics-address=127.0.0.1:"+strconv.Itoa(metricsPort), "--profiler-address=127.0.0.1:"+strconv.Itoa(profilerPort),
		"--store-validation-frequency=10s", "--log-level=info")
	if err != nil {
		return nil, fmt.Errorf("starting velero server: %w", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if s.velero.Exited() {
			return false, fmt.Errorf("velero server exited: %s", s.velero.Tail())
		}
		bsl := &unstructured.Unstructured{}
		bsl.SetAPIVersion("velero.io/v1")
		bsl.SetKind("BackupStorageLocation")
		if err := cl.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: BSLName}, bsl); err != nil {
			return false, err
		}
		phase, _, _ := unstructured.NestedString(bsl.Object, "status", "phase")
		return phase == "Available", nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for the BackupStorageLocation to become Available: %w", err)
	}
	return s, nil
}

func (s *Stack) startMinIO(ctx context.Context, assets, dir, host string) error {
	port, err := cluster.FreePort()
	if err != nil {
		return err
	}
	console, err := cluster.FreePort()
	if err != nil {
		return err
	}
	s.S3Endpoint = net.JoinHostPort(host, strconv.Itoa(port))
	s.minio, err = components.StartWithEnv(filepath.Join(assets, "minio"),
		[]string{"MINIO_ROOT_USER=" + AccessKey, "MINIO_ROOT_PASSWORD=" + SecretKey, "MINIO_UPDATE=off", "MINIO_BROWSER=off",
			"HOME=" + filepath.Join(dir, "home")},
		"server", filepath.Join(dir, "minio"), "--address", s.S3Endpoint, "--console-address", net.JoinHostPort(host, strconv.Itoa(console)), "--quiet")
	if err != nil {
		return fmt.Errorf("starting minio: %w", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if s.minio.Exited() {
			return false, fmt.Errorf("minio exited: %s", s.minio.Tail())
		}
		resp, err := http.Get("http://" + s.S3Endpoint + "/minio/health/live")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for minio: %w", err)
	}
	s.S3, err = minio.New(s.S3Endpoint, &minio.Options{Creds: credentials.NewStaticV4(AccessKey, SecretKey, "")})
	return err
}

// StartMinIO runs MinIO alone on loopback (state under dir), for tests that need only an S3 store.
func StartMinIO(ctx context.Context, dir string) (*Stack, error) {
	return StartMinIOOn(ctx, dir, "127.0.0.1")
}

// StartMinIOOn runs MinIO alone listening on host (e.g. a test node's bridge address, which its
// pods can reach).
func StartMinIOOn(ctx context.Context, dir, host string) (*Stack, error) {
	assets, err := Assets()
	if err != nil {
		return nil, err
	}
	s := &Stack{}
	for _, d := range []string{"minio", "home"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	if err := s.startMinIO(ctx, assets, dir, host); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// InstallCRDs applies Velero's CRDs as `velero install --crds-only` prints them (velero is the
// path of the velero binary): a cluster a Velero driver or a verifier runs in has Velero, and
// their controllers watch its kinds.
func InstallCRDs(ctx context.Context, cl client.Client, velero string) error {
	out, err := exec.CommandContext(ctx, velero, "install", "--crds-only", "--dry-run", "-o", "yaml").Output()
	if err != nil {
		return fmt.Errorf("velero install --crds-only: %w", err)
	}
	var crds []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err == io.EOF {
			break
		} else if err != nil {
			return fmt.Errorf("decoding Velero's CRDs: %w", err)
		}
		items := []any{u.Object}
		if u.GetKind() == "List" {
			items, _, _ = unstructured.NestedSlice(u.Object, "items")
		}
		for _, it := range items {
			if m, ok := it.(map[string]any); ok && m["kind"] == "CustomResourceDefinition" {
				crds = append(crds, &unstructured.Unstructured{Object: m})
			}
		}
	}
	if len(crds) == 0 {
		return fmt.Errorf("velero install --crds-only printed no CRDs")
	}
	return manifests.Apply(ctx, cl, crds)
}

// installVelero applies Velero's CRDs, its namespace, credentials, storage location, and the
// zero-replica Deployment its restore actions look up.
func installVelero(ctx context.Context, cl client.Client, velero, endpoint string) error {
	if err := InstallCRDs(ctx, cl, velero); err != nil {
		return err
	}
	replicas := int32(0)
	labels := map[string]string{"component": "velero"}
	bsl := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "velero.io/v1", "kind": "BackupStorageLocation",
		"metadata": map[string]any{"name": BSLName, "namespace": Namespace},
		"spec": map[string]any{
			"provider":      "aws",
			"default":       true,
			"objectStorage": map[string]any{"bucket": Bucket, "prefix": Prefix},
			"config":        map[string]any{"region": "us-east-1", "s3ForcePathStyle": "true", "s3Url": "http://" + endpoint},
		},
	}}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}},
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "velero", Namespace: Namespace},
			Spec: appsv1.DeploymentSpec{
				Replicas: &replicas,
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "velero", Image: "velero/velero:placeholder"}}},
				},
			},
		},
		bsl,
	} {
		if err := cl.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

// ObjectKey is where Velero stores a backup's tarball in the bucket.
func ObjectKey(backup string) string {
	return strings.Join([]string{Prefix, "backups", backup, backup + ".tar.gz"}, "/")
}

// Stop stops Velero and MinIO.
func (s *Stack) Stop() {
	for _, p := range []*components.Process{s.velero, s.minio} {
		if p != nil {
			p.Stop(5 * time.Second)
		}
	}
	s.lock.release()
}

// VeleroLog is the tail of the Velero server's log, for failure messages.
func (s *Stack) VeleroLog() string {
	if s.velero == nil {
		return ""
	}
	return s.velero.Tail()
}

// credentialsINI is MinIO's root credentials as an AWS shared credentials file.
func credentialsINI() string {
	return fmt.Sprintf("[default]\naws_access_key_id=%s\naws_secret_access_key=%s\n", AccessKey, SecretKey)
}
