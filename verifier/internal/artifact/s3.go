package artifact

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/velerokit/download"
)

// Store reads artifacts from the one S3 endpoint the administrator gave the verifier
// (--s3-endpoint, read-only credentials). An artifact URI names only a bucket and a key: the
// endpoint never comes from a Backup, whose driver metadata a tenant may have influenced, so the
// verifier never sends its signature anywhere else.
type Store struct {
	Endpoint string
	client   *minio.Client
}

// NewStore returns a Store of endpoint (http://host:port or https://host[:port]) with static
// credentials, trusting caPEM besides the system's roots when it is set.
func NewStore(endpoint, region, accessKeyID, secretAccessKey string, caPEM []byte) (*Store, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("--s3-endpoint %q is not http(s)://host[:port]", endpoint)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = time.Minute
	if len(caPEM) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, errors.New("the S3 CA bundle holds no PEM certificate")
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	c, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(accessKeyID, secretAccessKey, ""),
		Secure: u.Scheme == "https", Region: region, Transport: tr})
	if err != nil {
		return nil, fmt.Errorf("S3 client of %s: %w", endpoint, err)
	}
	c.SetAppInfo("coffer-verifier", "v1alpha1")
	return &Store{Endpoint: endpoint, client: c}, nil
}

// errObjectMissing is the store's definite answer that the object does not exist.
var errObjectMissing = errors.New("the object does not exist")

// Digest reads the s3:// artifact of Backup b from the store's endpoint.
func (s *Store) Digest(ctx context.Context, _ *securityv1.BackupVerifyRun, b *backupsv1.Backup) (download.Digest, error) {
	uri := b.Status.Artifact.URI
	bucket, key, err := backupsv1.ParseS3URI(uri)
	if err != nil {
		return download.Digest{}, reconcile.TerminalError(fmt.Errorf("checksum-only reads s3:// artifacts: %w", err))
	}
	d, err := s.Hash(ctx, bucket, key)
	if errors.Is(err, errObjectMissing) {
		return download.Digest{}, Missing(fmt.Sprintf("the artifact %s does not exist at %s", uri, s.Endpoint))
	}
	return d, err
}

// Hash streams the object once and returns its size and SHA-256.
func (s *Store) Hash(ctx context.Context, bucket, key string) (download.Digest, error) {
	d, _, err := s.hash(ctx, bucket, key)
	return d, err
}

// hash is Hash, with what the store says of the object.
func (s *Store) hash(ctx context.Context, bucket, key string) (download.Digest, minio.ObjectInfo, error) {
	obj, err := s.client.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return download.Digest{}, minio.ObjectInfo{}, s.storeError(err)
	}
	defer obj.Close()
	// Stat returns the store's answer to the GET: a missing object is known here.
	info, err := obj.Stat()
	if err != nil {
		return download.Digest{}, info, s.storeError(err)
	}
	// What fails after it is the transfer, counted against the announced size: a transport fault
	// (download.IsTransport), retried, never a short artifact (size-mismatch) or a finding.
	d, err := download.Hash(download.Counted(obj, info.Size))
	if err != nil {
		return download.Digest{}, info, fmt.Errorf("reading %s/%s from S3 endpoint %s: %w; check that it is reachable from the verifier", bucket, key, s.Endpoint, err)
	}
	return d, info, nil
}

func (s *Store) storeError(err error) error {
	switch minio.ToErrorResponse(err).Code {
	case minio.NoSuchKey, minio.NoSuchBucket:
		return fmt.Errorf("%w: %v", errObjectMissing, err)
	}
	return fmt.Errorf("reading from S3 endpoint %s: %w; check that it is reachable from the verifier and that its credentials (Secret coffer-verifier-s3, deploy/verifier/manager) may read the bucket", s.Endpoint, err)
}
