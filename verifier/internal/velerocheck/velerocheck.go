// Package velerocheck verifies Velero backups for the backup verifier: checksum-only (stream the
// tarball, recompute SHA-256, compare with the checksum recorded when it was taken) and
// full-restore (restore into sandbox namespaces the verifier owns, confined by package sandbox and
// inert by the Restore's own settings (sandbox.go), diff them with the backup's own resource list,
// clean up). It writes nothing outside its sandboxes and its own Restore, and reads nothing
// outside them but Velero's objects.
//
// Findings are facts about the backup. Trouble reaching it (the API server, Velero, the object
// store) is an error: the caller retries it within the run's timeout, and an error wrapped in
// reconcile.TerminalError is one that a retry cannot fix. No error carries a presigned URL.
package velerocheck

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/velerokit/download"
	"github.com/coffer-backup/coffer/verifier/internal/backend"
	"github.com/coffer-backup/coffer/verifier/internal/sandbox"
)

// Checker runs Velero verifications.
type Checker struct {
	// Reader reads the API server directly, so a missing Velero CRD is an answer, not a stuck cache.
	Reader client.Reader
	// Client writes the verifier's own objects (DownloadRequests, the Restore).
	Client client.Client
	// Sandbox makes, re-checks and deletes the sandboxes a full-restore restores into (its
	// BeforeDiff hook runs before each diff). Required for full-restore.
	Sandbox *sandbox.Maker
	// HTTP, when set, downloads every file (tests inject faults through it). Unset, each storage
	// location gets a client of download.NewHTTPClient (timeouts) that trusts its caCert.
	HTTP            *http.Client
	DownloadTimeout time.Duration
	// Trust keeps the first checksum of the backups nothing recorded one for, and compares later
	// verifications with it. Unset, such a backup is checksum-not-recorded (medium) every time.
	Trust *TrustStore
	// ReaderImage is the verifier's own image, which the readers of a full-restore of volume data
	// run (volumerestore.go). Unset, volume data is not restored (a finding says so).
	ReaderImage string

	mu      sync.Mutex
	clients map[[sha256.Size]byte]*http.Client
	reads   map[types.UID]*repositoryRead // by run, read while Velero restores volume data
	records records                       // of the snapshots read whole and found sound (its own lock)
}

func backupNamespace(run *securityv1.BackupVerifyRun) string {
	if run.Spec.BackupRef.Namespace != "" {
		return run.Spec.BackupRef.Namespace
	}
	return "velero"
}

// errFileMissing is the object store's definite answer that a file of the backup does not exist.
var errFileMissing = errors.New("the file does not exist in the object store")

// locate reads the Velero Backup under verification and its storage location. A nil Backup with
// a nil error means a finding says why the run cannot go on.
func (c *Checker) locate(ctx context.Context, run *securityv1.BackupVerifyRun, out *backend.Outcome) (*velerov1.Backup, *velerov1.BackupStorageLocation, error) {
	key := client.ObjectKey{Namespace: backupNamespace(run), Name: run.Spec.BackupRef.Name}
	vb := &velerov1.Backup{}
	err := c.Reader.Get(ctx, key, vb)
	switch {
	case meta.IsNoMatchError(err):
		// The verification cannot be carried out: the run Fails with the finding the spec names.
		const msg = "the velero.io/v1 Backup kind is not served: Velero's CRDs are not installed"
		out.Add(securityv1.CodeVeleroCRDMissing, securityv1.SeverityMedium, "", msg)
		return nil, nil, reconcile.TerminalError(errors.New(securityv1.CodeVeleroCRDMissing + ": " + msg))
	case apierrors.IsNotFound(err):
		out.Add(securityv1.CodeVeleroBackupNotFound, securityv1.SeverityHigh, "velero.io/Backup "+key.String(), fmt.Sprintf("Velero backup %s not found", key))
		return nil, nil, nil
	case err != nil:
		return nil, nil, backend.APIError("reading velero.io Backup "+key.String(), err)
	}
	if vb.Status.Phase != velerov1.BackupPhaseCompleted && vb.Status.Phase != velerov1.BackupPhasePartiallyFailed {
		out.Add(securityv1.CodeVeleroBackupNotComplete, securityv1.SeverityHigh, "velero.io/Backup "+key.String(),
			fmt.Sprintf("Velero backup %s is %q, not Completed", key, vb.Status.Phase))
		return nil, nil, nil
	}
	if want := run.Spec.BackupRef.StorageLocation; want != "" && want != vb.Spec.StorageLocation {
		return nil, nil, reconcile.TerminalError(fmt.Errorf("Velero backup %s is stored in location %q, not in %q as the run's backupRef.storageLocation says: it was not verified",
			key, vb.Spec.StorageLocation, want))
	}
	bslKey := client.ObjectKey{Namespace: vb.Namespace, Name: vb.Spec.StorageLocation}
	bsl := &velerov1.BackupStorageLocation{}
	err = c.Reader.Get(ctx, bslKey, bsl)
	switch {
	case apierrors.IsNotFound(err):
		out.Add(securityv1.CodeStorageUnavailable, securityv1.SeverityHigh, "velero.io/BackupStorageLocation "+bslKey.String(),
			fmt.Sprintf("the backup's storage location %s does not exist", bslKey))
		return nil, nil, nil
	case err != nil:
		return nil, nil, backend.APIError("reading velero.io BackupStorageLocation "+bslKey.String(), err)
	case bsl.Status.Phase == velerov1.BackupStorageLocationPhaseUnavailable:
		return nil, nil, fmt.Errorf("BackupStorageLocation %s is Unavailable (%s): Velero cannot reach its object store; check the store and the location's status",
			bslKey, orNone(bsl.Status.Message))
	}
	return vb, bsl, nil
}

func orNone(s string) string {
	if s == "" {
		return "no message"
	}
	return s
}

// StorageCARole is the Role, in Velero's namespace, that lets the verifier read the Secrets a
// storage location names as its caCertRef (deploy/verifier/velero: by name, never every Secret
// of the namespace, which holds Velero's own credentials).
const StorageCARole = "coffer-verifier-storage-ca"

// httpClient is the client for a storage location's presigned URLs: timeouts, and its CA bundle
// (spec.objectStorage.caCertRef, else caCert) trusted besides the system's roots.
func (c *Checker) httpClient(ctx context.Context, bsl *velerov1.BackupStorageLocation) (*http.Client, error) {
	if c.HTTP != nil {
		return c.HTTP, nil
	}
	ca, err := c.storageCA(ctx, bsl)
	if err != nil {
		return nil, err
	}
	key := sha256.Sum256(ca)
	c.mu.Lock()
	defer c.mu.Unlock()
	if hc, ok := c.clients[key]; ok {
		return hc, nil
	}
	hc, err := download.NewHTTPClient(ca)
	if err != nil {
		return nil, reconcile.TerminalError(fmt.Errorf("BackupStorageLocation %s/%s: %w", bsl.Namespace, bsl.Name, err))
	}
	if c.clients == nil {
		c.clients = map[[sha256.Size]byte]*http.Client{}
	}
	c.clients[key] = hc
	return hc, nil
}

// storageCA is the CA bundle of a storage location (spec.objectStorage.caCertRef, else caCert),
// nil for none.
func (c *Checker) storageCA(ctx context.Context, bsl *velerov1.BackupStorageLocation) ([]byte, error) {
	store := bsl.Spec.ObjectStorage
	if store == nil {
		return nil, nil
	}
	ref := store.CACertRef
	if ref == nil {
		return store.CACert, nil
	}
	sec := &corev1.Secret{}
	if err := c.Reader.Get(ctx, client.ObjectKey{Namespace: bsl.Namespace, Name: ref.Name}, sec); err != nil {
		what := fmt.Sprintf("reading the CA bundle of BackupStorageLocation %s/%s (Secret %s)", bsl.Namespace, bsl.Name, ref.Name)
		if apierrors.IsForbidden(err) {
			// The verifier reads no Secret but the ones the Role of deploy/verifier/velero names.
			return nil, fmt.Errorf("%s: %w; add %q to the resourceNames of Role %s/%s (deploy/verifier/velero)",
				what, err, ref.Name, bsl.Namespace, StorageCARole)
		}
		return nil, backend.APIError(what, err)
	}
	ca := sec.Data[ref.Key]
	if len(ca) == 0 {
		return nil, fmt.Errorf("Secret %s/%s named by BackupStorageLocation %s as its caCertRef has no key %q", bsl.Namespace, ref.Name, bsl.Name, ref.Key)
	}
	return ca, nil
}

// Checksum streams the backup's tarball once and compares its SHA-256 with the recorded one, then
// reads the data of each of its volumes whole from its kopia repository (volumes.go).
func (c *Checker) Checksum(ctx context.Context, run *securityv1.BackupVerifyRun) (backend.Outcome, error) {
	out, vb, bsl, err := c.checksumTarball(ctx, run)
	if err != nil || vb == nil || out.ComputedChecksum == "" {
		return out, err
	}
	_, err = c.checkVolumes(ctx, vb, bsl, "", &out)
	return out, err
}

// checksumTarball is Checksum of the tarball alone; it returns the Velero backup and its storage
// location when it found them.
func (c *Checker) checksumTarball(ctx context.Context, run *securityv1.BackupVerifyRun) (backend.Outcome, *velerov1.Backup, *velerov1.BackupStorageLocation, error) {
	out := backend.Outcome{Done: true}
	vb, bsl, err := c.locate(ctx, run, &out)
	if err != nil || vb == nil {
		return out, nil, nil, err
	}
	object := "velero.io/Backup " + vb.Namespace + "/" + vb.Name
	body, done, err := c.open(ctx, run, vb, bsl, "contents", velerov1.DownloadTargetKindBackupContents)
	if errors.Is(err, errFileMissing) {
		out.Add(securityv1.CodeStorageUnavailable, securityv1.SeverityHigh, object, "the backup's tarball is missing from its storage location "+bsl.Name)
		return out, nil, nil, nil
	}
	if err != nil {
		return out, nil, nil, err
	}
	d, err := download.Hash(body)
	done()
	if err != nil {
		return out, nil, nil, c.storageError(bsl, "reading the backup's tarball", err)
	}
	out.ComputedChecksum, out.SizeBytes = d.Checksum(), d.SizeBytes
	out.RecordedChecksum = vb.Annotations[backupsv1.AnnotationChecksum]
	out.ChecksumBasis = securityv1.ChecksumRecorded
	switch {
	case out.RecordedChecksum == "" && c.Trust != nil:
		return out, vb, bsl, c.Trust.compare(ctx, run, vb, &out, time.Now())
	case out.RecordedChecksum == "":
		out.ChecksumBasis = securityv1.ChecksumNone
		out.Add(securityv1.CodeChecksumNotRecorded, securityv1.SeverityMedium, object,
			fmt.Sprintf("no checksum was recorded for this backup (annotation %s); computed %s over %d bytes", backupsv1.AnnotationChecksum, out.ComputedChecksum, d.SizeBytes))
	case out.RecordedChecksum != out.ComputedChecksum:
		out.Add(securityv1.CodeChecksumMismatch, securityv1.SeverityCritical, object,
			fmt.Sprintf("the stored tarball's SHA-256 is %s, but %s was recorded when the backup was taken", out.ComputedChecksum, out.RecordedChecksum))
	default:
		out.Add(securityv1.CodeChecksumMatch, securityv1.SeverityInfo, object,
			fmt.Sprintf("the stored tarball (%d bytes) matches the recorded %s", d.SizeBytes, out.RecordedChecksum))
	}
	return out, vb, bsl, nil
}

// storageError is trouble with a storage location's object store while doing what.
func (c *Checker) storageError(bsl *velerov1.BackupStorageLocation, what string, err error) error {
	return fmt.Errorf("%s from the object store: %w; check BackupStorageLocation %s/%s: its object store must be reachable from the verifier, and its caCert must hold the store's CA when that is not a public one",
		what, download.Redact(err), bsl.Namespace, bsl.Name)
}

// open downloads one file of the backup through a DownloadRequest named after the run and what;
// done closes it and deletes the request. errFileMissing (wrapped) is the store's answer that the
// file does not exist.
func (c *Checker) open(ctx context.Context, run *securityv1.BackupVerifyRun, vb *velerov1.Backup, bsl *velerov1.BackupStorageLocation, what string, kind velerov1.DownloadTargetKind) (io.Reader, func(), error) {
	hc, err := c.httpClient(ctx, bsl)
	if err != nil {
		return nil, nil, err
	}
	name := backupsv1.BoundedName(backupsv1.MaxGeneratedNameLength, "bvr", run.Name, string(run.UID)[:8], what)
	url, err := download.Request(ctx, c.Reader, c.Client, vb.Namespace, name, velerov1.DownloadTarget{Kind: kind, Name: vb.Name}, c.DownloadTimeout)
	cleanup := func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = download.Cleanup(cctx, c.Client, vb.Namespace, name)
	}
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("%w; check that the Velero server runs and processes DownloadRequests in namespace %s", download.Redact(err), vb.Namespace)
	}
	body, err := download.Open(ctx, hc, url)
	if err != nil {
		cleanup()
		if download.IsNotFound(err) {
			return nil, nil, fmt.Errorf("%s of backup %s: %w", what, vb.Name, errFileMissing)
		}
		return nil, nil, c.storageError(bsl, "downloading the backup's "+what, err)
	}
	return body, func() { body.Close(); cleanup() }, nil
}

// regeneratedByControllers drops from missing the objects their restored controllers regenerate
// (see controllers.go; ctrl is read from the backup's tarball) and counts them as restored.
func (c *Checker) regeneratedByControllers(ctx context.Context, missing []missingObject, ctrl map[objectKey]controllerRef,
	versions map[schema.GroupKind]string, sr *sandboxRestore, out *backend.Outcome) ([]missingObject, error) {
	left, excluded, err := c.regenerated(ctx, missing, ctrl, versions, sr.mapping, sr.excluded)
	if err != nil {
		return nil, err
	}
	// Objects whose controller is of a kind left out of the sandbox (a DaemonSet's
	// ControllerRevisions, a Pod's ephemeral volume claims) were left out with it.
	n := len(missing) - len(left) - excluded
	out.ObjectsRestored += int32(n)
	out.ObjectsExpected -= int32(excluded)
	out.Count(DetailLeftToControllers, n)
	if excluded > 0 {
		prev, _ := strconv.Atoi(out.Details[DetailObjectsExcluded])
		out.Count(DetailObjectsExcluded, prev+excluded)
	}
	return left, nil
}

func atoiOr0(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// Keys of a full-restore Result's details.
const (
	// DetailLeftToControllers counts the objects missing from the sandbox by name whose
	// controller is there (see controllers.go).
	DetailLeftToControllers = "objectsLeftToControllers"
	// DetailObjectsExcluded counts the objects of the backup the Restore left out on purpose
	// (ExcludedFromSandbox, and what their controllers own); they are not in objectsExpected.
	DetailObjectsExcluded = "objectsExcluded"
	// DetailScaledToZero counts the restored workloads whose replicas the sandbox set to 0.
	DetailScaledToZero = "workloadsScaledToZero"
	// DetailSuspended counts the restored Jobs and CronJobs the sandbox suspended.
	DetailSuspended = "workloadsSuspended"
)

// errMalformed marks a file of the backup that was read whole and does not decode: a fact.
var errMalformed = errors.New("malformed")

// malformed reports whether a decoding error is about the content (not about reading it).
func malformed(err error) bool {
	if download.IsTransport(err) {
		return false // the file did not arrive whole: nothing is known of its content
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	return errors.Is(err, gzip.ErrHeader) || errors.Is(err, gzip.ErrChecksum) || errors.As(err, &syn) || errors.As(err, &typ)
}

// resourceList downloads the backup's own list of what it holds: "<apiVersion>/<Kind>" → "ns/name".
func (c *Checker) resourceList(ctx context.Context, run *securityv1.BackupVerifyRun, vb *velerov1.Backup, bsl *velerov1.BackupStorageLocation) (map[string][]string, error) {
	body, done, err := c.open(ctx, run, vb, bsl, "list", velerov1.DownloadTargetKindBackupResourceList)
	if err != nil {
		return nil, err
	}
	defer done()
	list := map[string][]string{}
	gz, err := gzip.NewReader(body)
	if err == nil {
		err = json.NewDecoder(gz).Decode(&list)
	}
	if err != nil {
		if malformed(err) {
			return nil, fmt.Errorf("%w: %v", errMalformed, err)
		}
		return nil, c.storageError(bsl, "reading the backup's resource list", err)
	}
	return list, nil
}

// never restored by Velero, so never expected in a sandbox.
var notRestored = map[schema.GroupKind]bool{
	{Kind: "Event"}: true, {Group: "events.k8s.io", Kind: "Event"}: true, {Kind: "Node"}: true,
	{Group: "velero.io", Kind: "Backup"}: true, {Group: "velero.io", Kind: "Restore"}: true,
}

// namespaced lists the namespaced objects of a resource list, by source namespace.
func namespaced(list map[string][]string) (map[string][]objectRef, []string) {
	byNS := map[string][]objectRef{}
	for res, entries := range list {
		i := strings.LastIndex(res, "/")
		if i < 0 {
			continue
		}
		gv, err := schema.ParseGroupVersion(res[:i])
		if err != nil {
			continue
		}
		gvk := gv.WithKind(res[i+1:])
		if notRestored[gvk.GroupKind()] {
			continue
		}
		for _, e := range entries {
			ns, name, ok := strings.Cut(e, "/")
			if !ok {
				continue // cluster-scoped: never restored into a sandbox
			}
			byNS[ns] = append(byNS[ns], objectRef{gvk: gvk, name: name})
		}
	}
	var nss []string
	for ns := range byNS {
		nss = append(nss, ns)
	}
	sort.Strings(nss)
	return byNS, nss
}

type objectRef struct {
	gvk  schema.GroupVersionKind
	name string
}

// RestoreName is the verification Restore's name, keyed by the run.
func RestoreName(run *securityv1.BackupVerifyRun) string {
	return backupsv1.BoundedName(backupsv1.MaxGeneratedNameLength, "bvr", run.Namespace, run.Name)
}

// FullRestore advances a full-restore: sandboxes, the Restore, and, once it is terminal, the diff.
func (c *Checker) FullRestore(ctx context.Context, run *securityv1.BackupVerifyRun) (backend.Outcome, error) {
	out := backend.Outcome{Done: true}
	vb, bsl, err := c.locate(ctx, run, &out)
	if err != nil || vb == nil {
		return out, err
	}
	// While this run's Restore is in flight there is nothing to read from the object store: every
	// poll would otherwise download the resource list again. A Restore of this run that is being
	// deleted means an earlier pass finished and began cleaning up, then died before writing the
	// Result, and the verdict died with it: the run waits until the Restore and its sandboxes are
	// gone and restores again, within its timeout.
	restoreKey := client.ObjectKey{Namespace: vb.Namespace, Name: RestoreName(run)}
	inFlight := &velerov1.Restore{}
	err = c.Reader.Get(ctx, restoreKey, inFlight)
	first := apierrors.IsNotFound(err)
	switch {
	case err == nil && inFlight.Labels[securityv1.LabelRunUID] == string(run.UID) &&
		(!restoreTerminal(inFlight.Status.Phase) || !inFlight.DeletionTimestamp.IsZero()):
		out.Done = false
		return out, nil
	case err != nil && !apierrors.IsNotFound(err):
		return out, backend.APIError("reading Velero restore "+restoreKey.String(), err)
	}
	if busy, err := c.volumesInFlight(ctx, run, vb.Namespace); busy || err != nil {
		out.Done = false
		return out, err
	}
	objects, sources, err := c.backupObjects(ctx, run, vb, bsl, &out)
	if err != nil || objects == nil {
		return out, err
	}
	mapping := sandbox.Names(run, sources)
	names := make([]string, 0, len(sources))
	for _, src := range sources {
		names = append(names, mapping[src])
	}
	if ready, refused, err := c.Sandbox.Ensure(ctx, run, names, &out); !ready {
		if refused != nil {
			return out, sandbox.Refused(&out, *refused)
		}
		return out, err
	}
	if first {
		// Velero runs one Restore at a time and holds it until its volumes' data is written: the
		// volume Restore goes first, so the data (most of the time) does not wait for the objects,
		// and the objects' Restore (about a second) runs beside the readers of the restored data.
		c.startVolumes(ctx, run, vb, bsl, objects, sources)
	}
	vr, err := c.ensureRestore(ctx, run, vb, sources, mapping)
	if err != nil {
		return out, err
	}
	switch vr.Status.Phase {
	case velerov1.RestorePhaseCompleted:
	case velerov1.RestorePhaseFailedValidation:
		if v := strings.Join(vr.Status.ValidationErrors, "; "); strings.Contains(v, SandboxModifiers) {
			// Not a fact about the backup: without its resource modifiers a sandbox would run the
			// backup's workloads, so the verifier never restores without them.
			return out, reconcile.TerminalError(fmt.Errorf("velero restore %s/%s cannot use the sandbox's resource modifiers (%s); "+
				"apply deploy/verifier/velero in Velero's namespace %s (ConfigMap %s)", vr.Namespace, vr.Name, v, vr.Namespace, SandboxModifiers))
		}
		out.Add(securityv1.CodeRestoreFailed, securityv1.SeverityCritical, "velero.io/Restore "+vr.Name,
			fmt.Sprintf("the restore %s: %s%s", vr.Status.Phase, vr.Status.FailureReason, strings.Join(vr.Status.ValidationErrors, "; ")))
		return out, nil
	case velerov1.RestorePhasePartiallyFailed:
		out.Add(securityv1.CodeRestorePartiallyFailed, securityv1.SeverityHigh, "velero.io/Restore "+vr.Name,
			fmt.Sprintf("the restore completed with %d error(s) and %d warning(s)", vr.Status.Errors, vr.Status.Warnings))
	case velerov1.RestorePhaseFailed:
		out.Add(securityv1.CodeRestoreFailed, securityv1.SeverityCritical, "velero.io/Restore "+vr.Name,
			fmt.Sprintf("the restore %s: %s%s", vr.Status.Phase, vr.Status.FailureReason, strings.Join(vr.Status.ValidationErrors, "; ")))
		return out, nil
	default:
		out.Done = false
		if !first { // started above otherwise
			c.startVolumes(ctx, run, vb, bsl, objects, sources)
		}
		return out, nil
	}
	out.RestoreTook(vr.CreationTimestamp, vr.Status.CompletionTimestamp)
	sr := &sandboxRestore{vb: vb, bsl: bsl, objects: objects, sources: sources, mapping: mapping, excluded: ExcludedFromSandbox, inert: true}
	if err := c.compareSandboxes(ctx, run, sr, &out); err != nil {
		return out, err
	}
	if out.ObjectsExpected == out.ObjectsRestored && len(out.Findings) == 0 {
		msg := fmt.Sprintf("all %d namespaced objects of the backup were restored into the sandbox", out.ObjectsExpected)
		if n := out.Details[DetailObjectsCompared]; n != "" {
			msg += fmt.Sprintf(", %s of them identical in content to the backup", n)
		}
		if n := out.Details[DetailObjectsExcluded]; n != "" {
			msg += fmt.Sprintf(" (%s left out on purpose: Pods, DaemonSets and what they own, RBAC, ServiceAccounts and NetworkPolicies)", n)
		}
		out.Add(securityv1.CodeChecksumMatch, securityv1.SeverityInfo, "velero.io/Restore "+vr.Name, msg)
	}
	_, err = c.restoreVolumes(ctx, run, vb, bsl, objects, sources, &out)
	return out, err
}

// backupObjects reads the backup's resource list: its namespaced objects by source namespace, and
// those namespaces. A nil map with a nil error means a finding says why there is nothing to restore.
func (c *Checker) backupObjects(ctx context.Context, run *securityv1.BackupVerifyRun, vb *velerov1.Backup, bsl *velerov1.BackupStorageLocation,
	out *backend.Outcome) (map[string][]objectRef, []string, error) {
	object := "velero.io/Backup " + vb.Namespace + "/" + vb.Name
	list, err := c.resourceList(ctx, run, vb, bsl)
	switch {
	case errors.Is(err, errFileMissing):
		out.Add(securityv1.CodeStorageUnavailable, securityv1.SeverityHigh, object, "the backup's resource list is missing from its storage location "+bsl.Name)
		return nil, nil, nil
	case errors.Is(err, errMalformed):
		out.Add(securityv1.CodeRestoreFailed, securityv1.SeverityCritical, object, "the backup's resource list cannot be decoded: "+err.Error())
		return nil, nil, nil
	case err != nil:
		return nil, nil, err
	}
	objects, sources := namespaced(list)
	if len(sources) == 0 {
		out.Add(securityv1.CodeObjectMissing, securityv1.SeverityHigh, object, "the backup holds no namespaced objects to restore")
		return nil, nil, nil
	}
	return objects, sources, nil
}

// sandboxRestore is a restore of a Velero backup into sandboxes: the verifier's own Restore, or a
// driver's through the driver contract (CompareRestore).
type sandboxRestore struct {
	vb  *velerov1.Backup
	bsl *velerov1.BackupStorageLocation
	// objects are the backup's namespaced objects by source namespace; sources are the namespaces
	// restored, mapping names the sandbox of each.
	objects map[string][]objectRef
	sources []string
	mapping map[string]string
	// excluded are the kinds the restore leaves out on purpose, with their Velero resource names.
	excluded map[schema.GroupKind]string
	// inert: the restore applied the sandbox's resource modifiers (SandboxModifiers), so every
	// restored workload must come back scaled to zero or suspended (inert).
	inert bool
}

// compareSandboxes diffs the sandboxes of a finished restore with the backup: every namespaced
// object of the backup not of an excluded kind must be in its sandbox (object-missing, but for what
// controllers regenerate, controllers.go) and identical in content to its copy in the backup
// (content-mismatch, content.go, compared by package contentdiff); the counts go to out's details.
// A sandbox that is not inert although sr.inert is trouble that ends the run.
func (c *Checker) compareSandboxes(ctx context.Context, run *securityv1.BackupVerifyRun, sr *sandboxRestore, out *backend.Outcome) error {
	if confined, err := c.Sandbox.Recheck(ctx, run, sr.mapping, out); err != nil || !confined {
		return err
	}
	// The backup's tarball is indexed while the sandbox is read (content.go).
	want := map[objectKey]bool{}
	for _, src := range sr.sources {
		for _, o := range sr.objects[src] {
			if _, ok := sr.excluded[o.gvk.GroupKind()]; !ok {
				want[objectKey{gk: o.gvk.GroupKind(), ns: src, name: o.name}] = true
			}
		}
	}
	diffCtx, stopDiff := context.WithCancel(ctx)
	defer stopDiff()
	content := c.startContentDiff(diffCtx, run, sr, want)
	var missing []missingObject
	var live []string
	inertCount := map[string]int{}
	for _, src := range sr.sources {
		sandbox := sr.mapping[src]
		for _, o := range sr.objects[src] {
			gk := o.gvk.GroupKind()
			if _, ok := sr.excluded[gk]; ok {
				inertCount[DetailObjectsExcluded]++
				continue
			}
			if _, ok := ScaledToZero[gk]; ok && sr.inert {
				inertCount[DetailScaledToZero]++
			}
			if _, ok := Suspended[gk]; ok && sr.inert {
				inertCount[DetailSuspended]++
			}
			out.ObjectsExpected++
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(o.gvk)
			err := c.Reader.Get(ctx, client.ObjectKey{Namespace: sandbox, Name: o.name}, u)
			switch {
			case err == nil:
				out.ObjectsRestored++
				if why := inert(u); sr.inert && why != "" {
					live = append(live, describe(o, sandbox)+": "+why)
				}
				content.observe(o, src, sandbox, u)
			case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
				missing = append(missing, missingObject{gvk: o.gvk, source: src, sandbox: sandbox, name: o.name})
			default:
				return backend.APIError(fmt.Sprintf("reading %s from the sandbox", describe(o, sandbox)), err)
			}
		}
	}
	if len(live) > 0 {
		// Not a fact about the backup: the sandbox was not inert. The run ends and its cleanup
		// deletes the sandboxes at once.
		return reconcile.TerminalError(fmt.Errorf("the sandbox is not inert: %s; the resource modifiers of ConfigMap %s/%s (deploy/verifier/velero) "+
			"must restore workloads with replicas 0 and suspend true", strings.Join(live, "; "), sr.vb.Namespace, SandboxModifiers))
	}
	for k, n := range inertCount {
		out.Count(k, n)
	}
	object := "velero.io/Backup " + sr.vb.Namespace + "/" + sr.vb.Name
	idx, err := content.wait(ctx)
	switch {
	case errors.Is(err, errFileMissing):
		out.Add(securityv1.CodeStorageUnavailable, securityv1.SeverityHigh, object, "the backup's tarball is missing from its storage location "+sr.bsl.Name)
		return nil
	case errors.Is(err, errTarball):
		out.Add(securityv1.CodeRestoreFailed, securityv1.SeverityCritical, object, err.Error())
		return nil
	case err != nil:
		return fmt.Errorf("reading the backup's tarball to compare the sandbox with it: %w", err)
	}
	if err := content.finish(ctx, idx, out); err != nil {
		return fmt.Errorf("locating the differences between the sandbox and the backup: %w", err)
	}
	if len(missing) > 0 && len(idx.saTokens) > 0 {
		// Left out with their ServiceAccounts (contentIndex.saTokens).
		left, tokens := missing[:0], 0
		for _, m := range missing {
			if idx.saTokens[objectKey{gk: m.gvk.GroupKind(), ns: m.source, name: m.name}] {
				tokens++
				continue
			}
			left = append(left, m)
		}
		missing = left
		out.ObjectsExpected -= int32(tokens)
		out.Count(DetailObjectsExcluded, atoiOr0(out.Details[DetailObjectsExcluded])+tokens)
	}
	if len(missing) > 0 {
		versions := map[schema.GroupKind]string{}
		for _, src := range sr.sources {
			for _, o := range sr.objects[src] {
				versions[o.gvk.GroupKind()] = o.gvk.Version
			}
		}
		var err error
		if missing, err = c.regeneratedByControllers(ctx, missing, idx.ctrl, versions, sr, out); err != nil {
			return fmt.Errorf("checking whether controllers regenerate the objects missing from the sandbox: %w", err)
		}
	}
	for _, m := range missing {
		out.Add(securityv1.CodeObjectMissing, securityv1.SeverityHigh, describe(objectRef{gvk: m.gvk, name: m.name}, m.sandbox),
			fmt.Sprintf("%s %s/%s of the backup is missing from the sandbox", m.gvk.Kind, m.source, m.name))
	}
	return nil
}

// CompareRestore diffs a sandbox that another restore of the Velero backup run.Spec.BackupRef
// filled (a driver's, through the driver contract) with the backup, as FullRestore diffs its own
// Restore's: the backup's objects of namespace source, restored into sandbox (Velero's
// namespaceMapping), but for the kinds that restore left out on purpose (excluded, with their
// Velero resource names). Its workloads are not expected inert (the caller keeps them from
// starting pods). Findings (object-missing, content-mismatch, and those of FullRestore's reading
// of the backup) and details are FullRestore's. Then, as FullRestore does, the volume data of
// source is restored into a volume sandbox of the run's and compared (restoreVolumes): out.Done is
// false while that goes on; the kopia snapshots it restores are returned.
func (c *Checker) CompareRestore(ctx context.Context, run *securityv1.BackupVerifyRun, source, sandbox string, excluded map[schema.GroupKind]string) (backend.Outcome, []string, error) {
	out := backend.Outcome{Done: true}
	vb, bsl, err := c.locate(ctx, run, &out)
	if err != nil || vb == nil {
		return out, nil, err
	}
	if busy, err := c.volumesInFlight(ctx, run, vb.Namespace); busy || err != nil {
		out.Done = false
		return out, nil, err
	}
	objects, _, err := c.backupObjects(ctx, run, vb, bsl, &out)
	if err != nil || objects == nil {
		return out, nil, err
	}
	if len(objects[source]) == 0 {
		out.Add(securityv1.CodeObjectMissing, securityv1.SeverityHigh, "velero.io/Backup "+vb.Namespace+"/"+vb.Name,
			fmt.Sprintf("the backup holds no namespaced objects of namespace %s to restore", source))
		return out, nil, nil
	}
	sr := &sandboxRestore{vb: vb, bsl: bsl, objects: objects, sources: []string{source}, mapping: map[string]string{source: sandbox}, excluded: excluded}
	if err := c.compareSandboxes(ctx, run, sr, &out); err != nil {
		return out, nil, err
	}
	byNS, err := c.restoreVolumes(ctx, run, vb, bsl, objects, []string{source}, &out)
	return out, snapshotsOf(byNS), err
}

func restoreTerminal(p velerov1.RestorePhase) bool {
	switch p {
	case velerov1.RestorePhaseCompleted, velerov1.RestorePhasePartiallyFailed, velerov1.RestorePhaseFailed, velerov1.RestorePhaseFailedValidation:
		return true
	}
	return false
}

func describe(o objectRef, ns string) string {
	g := o.gvk.Group
	if g == "" {
		g = "core"
	}
	return fmt.Sprintf("%s/%s %s/%s", g, o.gvk.Kind, ns, o.name)
}

func (c *Checker) ensureRestore(ctx context.Context, run *securityv1.BackupVerifyRun, vb *velerov1.Backup, sources []string, mapping map[string]string) (*velerov1.Restore, error) {
	noCluster, noVolumes := false, false
	return c.ensureRestoreNamed(ctx, run, RestoreName(run), velerov1.RestoreSpec{
		BackupName:              vb.Name,
		IncludedNamespaces:      sources,
		NamespaceMapping:        mapping,
		IncludeClusterResources: &noCluster,
		// The sandbox runs nothing (sandbox.go).
		ExcludedResources: excludedResources(),
		ResourceModifier:  &corev1.TypedLocalObjectReference{Kind: "ConfigMap", Name: SandboxModifiers},
		// No volume data: nothing reads it here (the volume phase restores it into the volume
		// sandboxes, volumerestore.go). Velero would otherwise move the data of every claim with a
		// DataUpload into this sandbox too; its claims come back unbound, without data sources.
		RestorePVs: &noVolumes,
	})
}

// ensureRestoreNamed reads run's Velero Restore name in the backup's namespace, or creates it with
// spec, labelled with the run's UID.
func (c *Checker) ensureRestoreNamed(ctx context.Context, run *securityv1.BackupVerifyRun, name string, spec velerov1.RestoreSpec) (*velerov1.Restore, error) {
	key := client.ObjectKey{Namespace: backupNamespace(run), Name: name}
	vr := &velerov1.Restore{}
	err := c.Reader.Get(ctx, key, vr)
	if err == nil {
		if owner := vr.Labels[securityv1.LabelRunUID]; owner != string(run.UID) {
			// Left by an earlier run of the same name (deleted and created again mid-restore), or
			// made by someone else: not this run's, never adopted or deleted, and waiting will not
			// make it go away.
			return nil, reconcile.TerminalError(fmt.Errorf("velero restore %s exists and does not belong to this run (its %s label is %q); "+
				"delete it, and any namespace labelled %s=%s, then create the run again", key, securityv1.LabelRunUID, owner, securityv1.LabelRunUID, owner))
		}
		return vr, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, backend.APIError("reading velero restore "+key.String(), err)
	}
	vr = &velerov1.Restore{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: map[string]string{
			securityv1.LabelRunUID: string(run.UID), securityv1.LabelRun: backupsv1.BoundedName(63, run.Name)}},
		Spec: spec,
	}
	if err := c.Client.Create(ctx, vr); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, backend.APIError("creating velero restore "+key.String(), err)
	}
	return vr, nil
}

// Cleanup deletes the run's Restore and the sandboxes carrying its UID, best-effort: each failure
// is a finding; nothing else is ever deleted (a Restore under the run's Restore name that is not
// labelled with its UID is left alone).
func (c *Checker) Cleanup(ctx context.Context, run *securityv1.BackupVerifyRun) []securityv1.Finding {
	c.forgetRead(run)
	var out []securityv1.Finding
	for _, name := range []string{RestoreName(run), VolumeRestoreName(run)} {
		key := client.ObjectKey{Namespace: backupNamespace(run), Name: name}
		vr := &velerov1.Restore{}
		err := c.Reader.Get(ctx, key, vr)
		if err == nil && vr.Labels[securityv1.LabelRunUID] == string(run.UID) {
			if !restoreTerminal(vr.Status.Phase) {
				// Velero does not stop a restore whose Restore is deleted: it goes on, and re-creates
				// a deleted sandbox from the backup's copy of the source namespace for each item left
				// (without the run's label, its Pod Security labels or its deny-all policy, with the
				// source's Secrets). So while it restores, neither the Restore nor the sandboxes are
				// deleted: they stay confined, and the Sweeper deletes them once it ended (RestoreHold).
				return []securityv1.Finding{{Code: securityv1.CodeCleanupDeferred, Severity: securityv1.SeverityInfo, Object: "velero.io/Restore " + key.String(),
					Message: fmt.Sprintf("Velero is still restoring (phase %q): the Restore and its sandboxes are kept, confined, and deleted once it ends", vr.Status.Phase)}}
			}
			err = c.Client.Delete(ctx, vr, client.Preconditions{UID: &vr.UID})
		}
		if err != nil && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
			out = append(out, securityv1.Finding{Code: securityv1.CodeCleanupFailed, Severity: securityv1.SeverityLow,
				Object: "velero.io/Restore " + key.Name, Message: "deleting the verification restore: " + err.Error()})
		}
	}
	return append(out, c.Sandbox.Cleanup(ctx, run)...)
}

var _ backend.Restorer = (*Checker)(nil)

// Waiting names the Velero Restore a full-restore in progress waits for.
func (c *Checker) Waiting(run *securityv1.BackupVerifyRun) string {
	return "velero restore " + RestoreName(run)
}

// RestoreHold is the Sweeper's hold for the velero backend: the sandboxes of an ended or deleted
// run are kept while a Velero Restore of that run (labelled with its UID) has not ended, since
// Velero would re-create a deleted sandbox (Cleanup); Restores of the run that ended are deleted
// (UID precondition), and then the sandboxes may go.
func (c *Checker) RestoreHold(ctx context.Context, runUID types.UID) (bool, error) {
	list := &velerov1.RestoreList{}
	err := c.Reader.List(ctx, list, client.MatchingLabels{securityv1.LabelRunUID: string(runUID)})
	if meta.IsNoMatchError(err) {
		return false, nil
	}
	if err != nil {
		return true, fmt.Errorf("listing the Velero Restores of run %s: %w", runUID, err)
	}
	hold := false
	for i := range list.Items {
		vr := &list.Items[i]
		if !restoreTerminal(vr.Status.Phase) {
			hold = true
			continue
		}
		if err := c.Client.Delete(ctx, vr, client.Preconditions{UID: &vr.UID}); err != nil && !apierrors.IsNotFound(err) {
			return true, fmt.Errorf("deleting Velero Restore %s/%s of run %s: %w", vr.Namespace, vr.Name, runUID, err)
		}
	}
	return hold, nil
}
