// Package download streams files of a Velero backup (its tarball, its resource list) through a
// velero.io/v1 DownloadRequest, in constant memory. Velero answers a DownloadRequest with a
// short-lived presigned URL of its object store; the bytes never pass through the API server.
package download

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"time"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Request asks Velero for a file of a backup and returns its URL. The DownloadRequest, named name
// in namespace ns, is created through c if missing (so a retry after a crash reuses it) and deleted
// after use by the caller through Cleanup; its status is read through r (which may be an uncached
// reader: then only get is needed on downloadrequests). It waits up to timeout for Velero.
func Request(ctx context.Context, r client.Reader, c client.Client, ns, name string, target velerov1.DownloadTarget, timeout time.Duration) (string, error) {
	dr := &velerov1.DownloadRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       velerov1.DownloadRequestSpec{Target: target},
	}
	if err := c.Create(ctx, dr); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating DownloadRequest %s/%s: %w", ns, name, err)
	}
	var url string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		got := &velerov1.DownloadRequest{}
		if err := r.Get(ctx, client.ObjectKeyFromObject(dr), got); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		if got.Status.Phase == velerov1.DownloadRequestPhaseProcessed && got.Status.DownloadURL != "" {
			if got.Status.Expiration != nil && time.Until(got.Status.Expiration.Time) < 30*time.Second {
				// Too close to expiry to stream a large file: ask again.
				return false, c.Delete(ctx, got)
			}
			url = got.Status.DownloadURL
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return "", fmt.Errorf("waiting for Velero to process DownloadRequest %s/%s: %w", ns, name, err)
	}
	return url, nil
}

// Cleanup deletes a DownloadRequest (Velero would expire it too).
func Cleanup(ctx context.Context, c client.Client, ns, name string) error {
	err := c.Delete(ctx, &velerov1.DownloadRequest{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}})
	return client.IgnoreNotFound(err)
}

// Digest is the size and SHA-256 of a stream.
type Digest struct {
	SizeBytes int64
	SHA256    string // 64 lower-case hex digits
}

// Checksum is the digest in the contract's form, "sha256:<hex>".
func (d Digest) Checksum() string { return "sha256:" + d.SHA256 }

// Hash streams r through SHA-256 with a fixed buffer.
func Hash(r io.Reader) (Digest, error) {
	h := sha256.New()
	n, err := io.CopyBuffer(h, r, make([]byte, 256<<10))
	if err != nil {
		return Digest{}, err
	}
	return Digest{SizeBytes: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// Open GETs url and returns its body; the caller closes it.
func Open(ctx context.Context, httpClient *http.Client, url string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("downloading from the object store: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("downloading from the object store: HTTP %s", resp.Status)
	}
	return resp.Body, nil
}

// HashURL downloads url and returns its digest, in constant memory.
func HashURL(ctx context.Context, httpClient *http.Client, url string) (Digest, error) {
	body, err := Open(ctx, httpClient, url)
	if err != nil {
		return Digest{}, err
	}
	defer body.Close()
	d, err := Hash(body)
	if err != nil {
		return Digest{}, fmt.Errorf("reading from the object store: %w", err)
	}
	return d, nil
}
