// Package download streams files of a Velero backup (its tarball, its resource list) through a
// velero.io/v1 DownloadRequest, in constant memory. Velero answers a DownloadRequest with a
// short-lived presigned URL of its object store; the bytes never pass through the API server.
package download

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
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
			if !apierrors.IsNotFound(err) {
				return false, err
			}
			// Gone (deleted below because it was about to expire, or by Velero's expiry): ask again.
			fresh := &velerov1.DownloadRequest{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: dr.Spec}
			if err := c.Create(ctx, fresh); err != nil && !apierrors.IsAlreadyExists(err) {
				return false, fmt.Errorf("creating DownloadRequest %s/%s again: %w", ns, name, err)
			}
			return false, nil
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

// Open GETs url and returns its body; the caller closes it. The URL is presigned: no error it
// returns (nor any error reading the body, see Redact) carries its query string, which holds the
// signature. A non-200 answer is an *HTTPError.
//
// The body counts the bytes it delivers against what the server announced (Content-Length): every
// error reading it, and an end before the announced length, is a *TransportError (IsTransport),
// never io.EOF nor a bare io.ErrUnexpectedEOF, so a reader stacked on it (gzip, tar, JSON) passes
// it up as it is and its caller can tell a connection that broke from data that is truncated.
func Open(ctx context.Context, httpClient *http.Client, url string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, Redact(err)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("downloading from the object store: %w", Redact(err))
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("downloading from the object store: %w", &HTTPError{StatusCode: resp.StatusCode, Status: resp.Status})
	}
	return &countingBody{body: redactingBody{resp.Body}, expected: resp.ContentLength}, nil
}

// ErrTransport is what every *TransportError is (errors.Is): the bytes of a download did not all
// arrive. It says nothing about the file: a transport fault is retried, never a verdict.
var ErrTransport = errors.New("transport fault")

// TransportError is a download that stopped before its end: the connection broke, timed out or
// was reset, or closed before the Content-Length the server announced.
type TransportError struct {
	// Read is how many bytes of the body arrived; Expected is its Content-Length, -1 when the
	// server announced none.
	Read, Expected int64
	// Err is the error reading the body (redacted), or nil when it ended early without one.
	Err error
}

func (e *TransportError) Error() string {
	what := fmt.Sprintf("transport fault: the download stopped after %d bytes", e.Read)
	if e.Expected >= 0 {
		what = fmt.Sprintf("transport fault: the download stopped after %d of the %d bytes the object store announced", e.Read, e.Expected)
	}
	if e.Err != nil {
		return what + ": " + e.Err.Error()
	}
	return what
}

// Unwrap returns the read error (for errors.Is of context.DeadlineExceeded and the like).
func (e *TransportError) Unwrap() error { return e.Err }

// Is makes every TransportError ErrTransport.
func (e *TransportError) Is(target error) bool { return target == ErrTransport }

// IsTransport reports whether err (or an error it wraps) is a transport fault of a download.
func IsTransport(err error) bool { return errors.Is(err, ErrTransport) }

// countingBody counts the bytes of a response body and turns every read error, and an EOF before
// the announced length, into a *TransportError. It returns io.EOF only at the announced end (or,
// without a Content-Length, at the end the transport reports).
type countingBody struct {
	body     io.ReadCloser
	expected int64
	read     int64
	err      error
}

func (b *countingBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.body.Read(p)
	b.read += int64(n)
	switch {
	case err == nil:
		return n, nil
	case err == io.EOF && (b.expected < 0 || b.read == b.expected):
		b.err = io.EOF
	case err == io.EOF:
		b.err = &TransportError{Read: b.read, Expected: b.expected}
	default:
		b.err = &TransportError{Read: b.read, Expected: b.expected, Err: err}
	}
	return n, b.err
}

func (b *countingBody) Close() error { return b.body.Close() }

// Counted is r read as Open's bodies are: expected is the length the server announced for it (-1
// for none); every error reading r, and an end before expected bytes, is a *TransportError.
func Counted(r io.Reader, expected int64) io.Reader {
	return &countingBody{body: io.NopCloser(r), expected: expected}
}

// HTTPError is an object store's answer other than 200 OK.
type HTTPError struct {
	StatusCode int
	Status     string
}

func (e *HTTPError) Error() string { return "HTTP " + e.Status }

// IsNotFound reports whether err is the object store's 404: the file does not exist.
func IsNotFound(err error) bool {
	var h *HTTPError
	return errors.As(err, &h) && h.StatusCode == http.StatusNotFound
}

// redactingBody redacts the errors of reading a presigned download.
type redactingBody struct{ io.ReadCloser }

func (b redactingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		err = Redact(err)
	}
	return n, err
}

// Redact returns err with the query string of any URL it names removed: a presigned URL's query
// carries its signature, which must never reach a status, finding, event or log. A *url.Error
// (what net/http returns, quoting the whole URL) gets its URL shortened; any other error whose text
// holds an http(s) URL with a query is replaced by one with the same text less the queries (the
// error chain is kept for errors.Is/As only in the first case).
func Redact(err error) error {
	if err == nil {
		return nil
	}
	var ue *url.Error
	if errors.As(err, &ue) && strings.Contains(ue.URL, "?") {
		ue.URL = RedactURL(ue.URL)
	}
	if msg := err.Error(); msg != redactText(msg) {
		return &redacted{msg: redactText(msg), err: err}
	}
	return err
}

// redacted keeps the chain of an error whose text had to be rewritten, without its text.
type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.err }

// RedactURL drops the query string and fragment of a URL ("…?<redacted>").
func RedactURL(u string) string {
	if i := strings.IndexAny(u, "?#"); i >= 0 {
		return u[:i] + "?REDACTED"
	}
	return u
}

// redactText redacts every http(s) URL in s.
func redactText(s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "http")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		rest := s[i:]
		if !strings.HasPrefix(rest, "http://") && !strings.HasPrefix(rest, "https://") {
			b.WriteString(s[:i+4])
			s = s[i+4:]
			continue
		}
		end := strings.IndexAny(rest, " \t\n\"'`<>")
		if end < 0 {
			end = len(rest)
		}
		b.WriteString(s[:i])
		b.WriteString(RedactURL(rest[:end]))
		s = rest[end:]
	}
}

// Timeouts of the HTTP client NewHTTPClient makes. The whole download is bounded by the caller's
// context; these bound each phase of a connection, so that an object store that stops answering
// fails the request instead of holding it until the context ends.
var (
	DialTimeout           = 30 * time.Second
	TLSHandshakeTimeout   = 30 * time.Second
	ResponseHeaderTimeout = 2 * time.Minute
	IdleConnTimeout       = 90 * time.Second
)

// NewHTTPClient returns a client for an object store's presigned URLs: dial, TLS-handshake and
// response-header timeouts (see the variables above), proxies from the environment, and, when
// caPEM is not empty, the PEM certificates in it trusted besides the system's roots (a
// BackupStorageLocation's spec.objectStorage.caCert, e.g. a self-signed MinIO's CA).
func NewHTTPClient(caPEM []byte) (*http.Client, error) {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   TLSHandshakeTimeout,
		ResponseHeaderTimeout: ResponseHeaderTimeout,
		IdleConnTimeout:       IdleConnTimeout,
		ExpectContinueTimeout: time.Second,
		MaxIdleConnsPerHost:   4,
		ForceAttemptHTTP2:     true,
	}
	if len(caPEM) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, errors.New("the storage location's CA bundle (caCert) holds no PEM certificate")
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr}, nil
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
		return Digest{}, fmt.Errorf("reading from the object store: %w", Redact(err))
	}
	return d, nil
}
