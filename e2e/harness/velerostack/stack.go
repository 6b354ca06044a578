// Package velerostack runs a real Velero server (out of cluster, with its AWS object-store plugin)
// and a real MinIO S3 store on loopback against a local cluster. The binaries are built from
// source by `hack/testbin.sh --velero` and found through COFFER_VELERO_ASSETS. Fault tests stop
// and start either process on the same address and data (StopMinIO, StartMinIOAgain, StopVelero,
// StartVelero) and switch MinIO to TLS from its own CA (ServeTLS).
package velerostack

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
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

	// CACert is the PEM certificate of the CA that signed MinIO's serving certificate while MinIO
	// serves TLS (see ServeTLS), else nil.
	CACert []byte

	minio, velero *components.Process
	lock          *hostLock
	// What StartMinIOAgain and StartVelero need to run the same processes again.
	assets, dir   string
	minioArgs     []string
	veleroEnv     []string
	veleroArgs    []string
	veleroMetrics string        // host:port of the Velero server's metrics
	cl            client.Client // nil for a MinIO-only stack
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
func Start(ctx context.Context, c *cluster.Cluster) (*Stack, error) {
	return StartOn(ctx, c, "127.0.0.1")
}

// StartOn is Start with MinIO listening on host: a real node's IP, for pods (Velero's node
// agent) to reach it. features are Velero's feature flags (`velero server --features`), e.g.
// "EnableCSI" for CSI snapshots, which needs the VolumeSnapshot CRDs installed.
func StartOn(ctx context.Context, c *cluster.Cluster, host string, features ...string) (_ *Stack, err error) {
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
	if err := s.startMinIO(ctx, assets, dir, host); err != nil {
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
	s.cl = cl
	s.veleroMetrics = "127.0.0.1:" + strconv.Itoa(metricsPort)
	s.veleroEnv = []string{"TMPDIR=" + filepath.Join(dir, "tmp"), "HOME=" + filepath.Join(dir, "home"), "PATH=" + os.Getenv("PATH"), "AWS_SHARED_CREDENTIALS_FILE=" + credsFile}
	s.veleroArgs = []string{"server", "--kubeconfig=" + c.Kubeconfig, "--namespace=" + Namespace, "--plugin-dir=" + filepath.Join(dir, "plugins"),
		"--metrics-address=" + s.veleroMetrics, "--profiler-address=127.0.0.1:" + strconv.Itoa(profilerPort),
		"--store-validation-frequency=10s", "--backup-sync-period=10s", "--log-level=info"}
	if len(features) > 0 {
		s.veleroArgs = append(s.veleroArgs, "--features="+strings.Join(features, ","))
	}
	if err := s.startVelero(); err != nil {
		return nil, err
	}
	if err := s.waitValidated(ctx, time.Time{}, 2*time.Minute); err != nil {
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
	s.assets, s.dir = assets, dir
	s.S3Endpoint = net.JoinHostPort(host, strconv.Itoa(port))
	s.minioArgs = []string{"server", filepath.Join(dir, "minio"), "--address", s.S3Endpoint, "--console-address", net.JoinHostPort(host, strconv.Itoa(console)), "--quiet"}
	return s.runMinIO(ctx)
}

// runMinIO starts MinIO with the stack's arguments (serving TLS once ServeTLS has made a
// certificate) and waits until it answers.
func (s *Stack) runMinIO(ctx context.Context) error {
	args := s.minioArgs
	if s.CACert != nil {
		args = append(slices.Clone(args), "--certs-dir", s.certsDir())
	}
	var err error
	s.minio, err = components.StartWithEnv(filepath.Join(s.assets, "minio"),
		[]string{"MINIO_ROOT_USER=" + AccessKey, "MINIO_ROOT_PASSWORD=" + SecretKey, "MINIO_UPDATE=off", "MINIO_BROWSER=off",
			"HOME=" + filepath.Join(s.dir, "home")}, args...)
	if err != nil {
		return fmt.Errorf("starting minio: %w", err)
	}
	health, err := s.transport()
	if err != nil {
		return err
	}
	defer health.CloseIdleConnections()
	hc := &http.Client{Transport: health, Timeout: 5 * time.Second}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if s.minio.Exited() {
			return false, fmt.Errorf("minio exited: %s", s.minio.Tail())
		}
		resp, err := hc.Get(s.S3URL() + "/minio/health/live")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for minio: %w", err)
	}
	opts := &minio.Options{Creds: credentials.NewStaticV4(AccessKey, SecretKey, "")}
	if s.CACert != nil {
		if opts.Transport, err = s.transport(); err != nil {
			return err
		}
		opts.Secure = true
	}
	s.S3, err = minio.New(s.S3Endpoint, opts)
	return err
}

// S3URL is MinIO's base URL: http://<S3Endpoint>, or https:// while it serves TLS.
func (s *Stack) S3URL() string {
	if s.CACert != nil {
		return "https://" + s.S3Endpoint
	}
	return "http://" + s.S3Endpoint
}

// transport is an HTTP transport for MinIO that trusts CACert.
func (s *Stack) transport() (*http.Transport, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if s.CACert != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(s.CACert) {
			return nil, errors.New("velerostack: the CA certificate is not PEM")
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return tr, nil
}

func (s *Stack) certsDir() string { return filepath.Join(s.dir, "certs") }

// StopMinIO stops MinIO, as an object store outage would; its address and data stay, for
// StartMinIOAgain.
func (s *Stack) StopMinIO() {
	if s.minio != nil {
		s.minio.Stop(5 * time.Second)
	}
}

// StartMinIOAgain starts MinIO again after StopMinIO, on the same address and data directory
// (serving TLS if it did), and returns once it answers. Velero notices at its next validation of
// the storage location (WaitStorageValidated).
func (s *Stack) StartMinIOAgain(ctx context.Context) error {
	if s.minio != nil && !s.minio.Exited() {
		return errors.New("velerostack: MinIO is running")
	}
	return s.runMinIO(ctx)
}

// ServeTLS restarts MinIO on its address and data directory serving HTTPS, with a serving
// certificate (for its host address and localhost) signed by a new CA, whose certificate it
// stores in CACert. MinIO reads public.crt and private.key from its --certs-dir, and trusts the
// CAs in its CAs subdirectory. On a stack with Velero it also points the storage location at
// https:// with the CA in spec.objectStorage.caCert, which Velero hands to the AWS plugin (so
// Velero itself trusts MinIO) and which drivers use to trust the presigned URLs.
func (s *Stack) ServeTLS(ctx context.Context) error {
	host, _, err := net.SplitHostPort(s.S3Endpoint)
	if err != nil {
		return err
	}
	caPEM, certPEM, keyPEM, err := newServingCert(host)
	if err != nil {
		return err
	}
	dir := s.certsDir()
	if err := os.MkdirAll(filepath.Join(dir, "CAs"), 0o700); err != nil {
		return err
	}
	for name, b := range map[string][]byte{"public.crt": certPEM, "private.key": keyPEM, filepath.Join("CAs", "ca.crt"): caPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
	}
	s.StopMinIO()
	s.CACert = caPEM
	if err := s.runMinIO(ctx); err != nil {
		return err
	}
	if s.cl == nil {
		return nil
	}
	bsl := &unstructured.Unstructured{}
	bsl.SetAPIVersion("velero.io/v1")
	bsl.SetKind("BackupStorageLocation")
	bsl.SetNamespace(Namespace)
	bsl.SetName(BSLName)
	patch := fmt.Sprintf(`{"spec":{"config":{"s3Url":%q},"objectStorage":{"caCert":%q}}}`, s.S3URL(), base64.StdEncoding.EncodeToString(caPEM))
	return s.cl.Patch(ctx, bsl, client.RawPatch(types.MergePatchType, []byte(patch)))
}

// newServingCert makes a CA and a serving certificate it signs for host (an IP address or a
// name) and localhost, valid for a day; all PEM.
func newServingCert(host string) (caPEM, certPEM, keyPEM []byte, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "coffer-test-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "minio"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost"},
	}
	if ip := net.ParseIP(host); ip != nil {
		leaf.IPAddresses = []net.IP{ip}
	} else {
		leaf.DNSNames = append(leaf.DNSNames, host)
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// MoveTo stops the Velero server and starts it against cluster c instead, as a recovery cluster
// runs Velero after its source is lost: Velero installed there with a storage location on the same
// bucket and prefix, ReadOnly when readOnly (Velero then never deletes from it); a cluster moved
// back to keeps its installation. It returns once the location is Available; Velero's sync then
// brings the backups of the location into c within about a minute (Velero enqueues its locations
// for a sync once a minute, a fixed period, and skips one not yet validated).
func (s *Stack) MoveTo(ctx context.Context, c *cluster.Cluster, readOnly bool) error {
	if s.cl == nil {
		return errors.New("velerostack: a MinIO-only stack has no Velero server")
	}
	s.StopVelero()
	cl, err := client.New(c.Config, client.Options{Scheme: cluster.Scheme})
	if err != nil {
		return err
	}
	// A cluster that ran Velero before (moving back) keeps its installation as it is.
	existing := &unstructured.Unstructured{}
	existing.SetAPIVersion("velero.io/v1")
	existing.SetKind("BackupStorageLocation")
	err = cl.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: BSLName}, existing)
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		spec := map[string]any{}
		if readOnly {
			spec["accessMode"] = "ReadOnly"
		}
		if err := installVeleroWith(ctx, cl, filepath.Join(s.assets, "velero"), s.S3Endpoint, spec); err != nil {
			return err
		}
	case err != nil:
		return err
	}
	for i, a := range s.veleroArgs {
		if strings.HasPrefix(a, "--kubeconfig=") {
			s.veleroArgs[i] = "--kubeconfig=" + c.Kubeconfig
		}
	}
	s.cl = cl
	since := time.Now()
	if err := s.StartVelero(ctx); err != nil {
		return err
	}
	return s.waitValidated(ctx, since, 2*time.Minute)
}

// startVelero starts the Velero server with the stack's flags.
func (s *Stack) startVelero() error {
	var err error
	if s.velero, err = components.StartWithEnv(filepath.Join(s.assets, "velero"), s.veleroEnv, s.veleroArgs...); err != nil {
		return fmt.Errorf("starting velero server: %w", err)
	}
	return nil
}

// StopVelero stops the Velero server, as an outage of Velero would: its API objects stay, and
// nothing processes them until StartVelero.
func (s *Stack) StopVelero() {
	if s.velero != nil {
		s.velero.Stop(5 * time.Second)
	}
}

// PauseVelero freezes the Velero server (SIGSTOP), as a stalled server would: whatever it is doing
// (a restore in progress) stays in flight, without a step, until ResumeVelero.
func (s *Stack) PauseVelero() error {
	if s.velero == nil || s.velero.Exited() {
		return errors.New("velerostack: the Velero server is not running")
	}
	return syscall.Kill(s.velero.Pid(), syscall.SIGSTOP)
}

// ResumeVelero lets a paused Velero server go on (SIGCONT).
func (s *Stack) ResumeVelero() error {
	if s.velero == nil || s.velero.Exited() {
		return errors.New("velerostack: the Velero server is not running")
	}
	return syscall.Kill(s.velero.Pid(), syscall.SIGCONT)
}

// StartVelero starts the Velero server again after StopVelero, with the same flags, and returns
// once it serves its metrics (its controllers start right after). Velero marks the backups and
// restores it finds InProgress at start as Failed; those it never picked up it runs.
func (s *Stack) StartVelero(ctx context.Context) error {
	if s.cl == nil {
		return errors.New("velerostack: a MinIO-only stack has no Velero server")
	}
	if s.velero != nil && !s.velero.Exited() {
		return errors.New("velerostack: the Velero server is running")
	}
	if err := s.startVelero(); err != nil {
		return err
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if s.velero.Exited() {
			return false, fmt.Errorf("velero server exited: %s", s.velero.Tail())
		}
		resp, err := hc.Get("http://" + s.veleroMetrics + "/metrics")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the velero server to serve: %w", err)
	}
	return nil
}

// WaitStorageValidated returns once Velero has validated the storage location after the call and
// found it Available: after StartMinIOAgain or ServeTLS, before backups that need the store
// (Velero fails the validation of a backup whose location is Unavailable). Velero validates
// every 10 s here.
func (s *Stack) WaitStorageValidated(ctx context.Context) error {
	if s.cl == nil {
		return errors.New("velerostack: a MinIO-only stack has no storage location")
	}
	return s.waitValidated(ctx, time.Now(), time.Minute)
}

// waitValidated waits until the storage location's status says Available with a validation
// after since (stored to the second, so strictly after since's second).
func (s *Stack) waitValidated(ctx context.Context, since time.Time, timeout time.Duration) error {
	after := since.Truncate(time.Second)
	var last string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if s.velero.Exited() {
			return false, fmt.Errorf("velero server exited: %s", s.velero.Tail())
		}
		bsl := &unstructured.Unstructured{}
		bsl.SetAPIVersion("velero.io/v1")
		bsl.SetKind("BackupStorageLocation")
		if err := s.cl.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: BSLName}, bsl); err != nil {
			return false, err
		}
		phase, _, _ := unstructured.NestedString(bsl.Object, "status", "phase")
		validated, _, _ := unstructured.NestedString(bsl.Object, "status", "lastValidationTime")
		last = phase + " at " + validated
		if phase != "Available" {
			return false, nil
		}
		if since.IsZero() {
			return true, nil
		}
		t, err := time.Parse(time.RFC3339, validated)
		return err == nil && t.After(after), nil
	})
	if err != nil {
		return fmt.Errorf("storage location %s/%s last %s: %w", Namespace, BSLName, last, err)
	}
	return nil
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
	return installVeleroWith(ctx, cl, velero, endpoint, nil)
}

// installVeleroWith installs Velero with extra fields in its storage location's spec.
func installVeleroWith(ctx context.Context, cl client.Client, velero, endpoint string, bslSpec map[string]any) error {
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
	for k, v := range bslSpec {
		bsl.Object["spec"].(map[string]any)[k] = v
	}
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
