// Package velerocheck verifies Velero backups for the backup verifier: checksum-only (stream the
// tarball, recompute SHA-256, compare with the checksum recorded when it was taken) and
// full-restore (restore into sandbox namespaces the verifier owns, diff them with the backup's own
// resource list, clean up). It writes nothing outside its sandboxes and its own Restore.
package velerocheck

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/driver-velero/pkg/download"
)

// Outcome is what one step of a verification found.
type Outcome struct {
	Findings []securityv1.Finding
	// Done is false while a full-restore's Restore is still running.
	Done             bool
	RecordedChecksum string
	ComputedChecksum string
	SizeBytes        int64
	ObjectsExpected  int32
	ObjectsRestored  int32
	Details          map[string]string
}

func (o *Outcome) add(code string, sev securityv1.Severity, object, msg string) {
	o.Findings = append(o.Findings, securityv1.Finding{Code: code, Severity: sev, Object: object, Message: msg})
}

// Checker runs Velero verifications.
type Checker struct {
	// Reader reads the API server directly, so a missing Velero CRD is an answer, not a stuck cache.
	Reader client.Reader
	// Client writes the verifier's own objects (DownloadRequests, the Restore, sandboxes).
	Client          client.Client
	HTTP            *http.Client
	DownloadTimeout time.Duration
}

func backupNamespace(run *securityv1.BackupVerifyRun) string {
	if run.Spec.BackupRef.Namespace != "" {
		return run.Spec.BackupRef.Namespace
	}
	return "velero"
}

// backup reads the Velero Backup under verification, or says why the run cannot go on.
func (c *Checker) backup(ctx context.Context, run *securityv1.BackupVerifyRun, out *Outcome) *velerov1.Backup {
	key := client.ObjectKey{Namespace: backupNamespace(run), Name: run.Spec.BackupRef.Name}
	vb := &velerov1.Backup{}
	err := c.Reader.Get(ctx, key, vb)
	switch {
	case meta.IsNoMatchError(err):
		out.add(securityv1.CodeVeleroCRDMissing, securityv1.SeverityHigh, "", "the velero.io/v1 Backup kind is not served: Velero's CRDs are not installed")
		return nil
	case apierrors.IsNotFound(err):
		out.add(securityv1.CodeVeleroBackupNotFound, securityv1.SeverityHigh, "velero.io/Backup "+key.String(), fmt.Sprintf("Velero backup %s not found", key))
		return nil
	case err != nil:
		out.add(securityv1.CodeVeleroBackupNotFound, securityv1.SeverityHigh, "velero.io/Backup "+key.String(), fmt.Sprintf("reading Velero backup %s: %v", key, err))
		return nil
	}
	if vb.Status.Phase != velerov1.BackupPhaseCompleted && vb.Status.Phase != velerov1.BackupPhasePartiallyFailed {
		out.add(securityv1.CodeVeleroBackupNotComplete, securityv1.SeverityHigh, "velero.io/Backup "+key.String(),
			fmt.Sprintf("Velero backup %s is %q, not Completed", key, vb.Status.Phase))
		return nil
	}
	bsl := &velerov1.BackupStorageLocation{}
	if err := c.Reader.Get(ctx, client.ObjectKey{Namespace: vb.Namespace, Name: vb.Spec.StorageLocation}, bsl); err != nil || bsl.Status.Phase == velerov1.BackupStorageLocationPhaseUnavailable {
		msg := fmt.Sprintf("BackupStorageLocation %s/%s is unavailable", vb.Namespace, vb.Spec.StorageLocation)
		if err != nil {
			msg = fmt.Sprintf("reading BackupStorageLocation %s/%s: %v", vb.Namespace, vb.Spec.StorageLocation, err)
		}
		out.add(securityv1.CodeStorageUnavailable, securityv1.SeverityHigh, "velero.io/BackupStorageLocation "+vb.Spec.StorageLocation, msg)
		return nil
	}
	return vb
}

// Checksum streams the backup's tarball once and compares its SHA-256 with the recorded one.
func (c *Checker) Checksum(ctx context.Context, run *securityv1.BackupVerifyRun) Outcome {
	out := Outcome{Done: true}
	vb := c.backup(ctx, run, &out)
	if vb == nil {
		return out
	}
	body, done, err := c.open(ctx, run, vb, "contents", velerov1.DownloadTargetKindBackupContents)
	if err != nil {
		out.add(securityv1.CodeStorageUnavailable, securityv1.SeverityHigh, "velero.io/Backup "+vb.Name, err.Error())
		return out
	}
	d, err := download.Hash(body)
	done()
	if err != nil {
		out.add(securityv1.CodeStorageUnavailable, securityv1.SeverityHigh, "velero.io/Backup "+vb.Name, "reading from the object store: "+err.Error())
		return out
	}
	out.ComputedChecksum, out.SizeBytes = d.Checksum(), d.SizeBytes
	out.RecordedChecksum = vb.Annotations[backupsv1.AnnotationChecksum]
	object := "velero.io/Backup " + vb.Namespace + "/" + vb.Name
	switch {
	case out.RecordedChecksum == "":
		out.add(securityv1.CodeChecksumNotRecorded, securityv1.SeverityMedium, object,
			fmt.Sprintf("no checksum was recorded for this backup (annotation %s); computed %s over %d bytes", backupsv1.AnnotationChecksum, out.ComputedChecksum, d.SizeBytes))
	case out.RecordedChecksum != out.ComputedChecksum:
		out.add(securityv1.CodeChecksumMismatch, securityv1.SeverityCritical, object,
			fmt.Sprintf("the stored tarball's SHA-256 is %s, but %s was recorded when the backup was taken", out.ComputedChecksum, out.RecordedChecksum))
	default:
		out.add(securityv1.CodeChecksumMatch, securityv1.SeverityInfo, object,
			fmt.Sprintf("the stored tarball (%d bytes) matches the recorded %s", d.SizeBytes, out.RecordedChecksum))
	}
	return out
}

// open downloads one file of the backup through a DownloadRequest named after the run and what;
// done closes it and deletes the request.
func (c *Checker) open(ctx context.Context, run *securityv1.BackupVerifyRun, vb *velerov1.Backup, what string, kind velerov1.DownloadTargetKind) (io.Reader, func(), error) {
	name := backupsv1.BoundedName(backupsv1.MaxGeneratedNameLength, "bvr", run.Name, string(run.UID)[:8], what)
	url, err := download.Request(ctx, c.Reader, c.Client, vb.Namespace, name, velerov1.DownloadTarget{Kind: kind, Name: vb.Name}, c.DownloadTimeout)
	cleanup := func() { _ = download.Cleanup(context.WithoutCancel(ctx), c.Client, vb.Namespace, name) }
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	body, err := download.Open(ctx, c.HTTP, url)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return body, func() { body.Close(); cleanup() }, nil
}

// regeneratedByControllers drops from missing the objects their restored controllers regenerate
// (see controllers.go) and counts them as restored. When the backup's tarball cannot be read,
// missing is returned as it is.
func (c *Checker) regeneratedByControllers(ctx context.Context, run *securityv1.BackupVerifyRun, vb *velerov1.Backup, missing []missingObject,
	versions map[schema.GroupKind]string, sandboxOf map[string]string, out *Outcome) []missingObject {
	ctrl, err := c.controllers(ctx, run, vb)
	var left []missingObject
	if err == nil {
		left, err = c.regenerated(ctx, missing, ctrl, versions, sandboxOf)
	}
	if err != nil {
		out.add(securityv1.CodeStorageUnavailable, securityv1.SeverityHigh, "velero.io/Backup "+vb.Name,
			"checking whether controllers regenerate the missing objects: "+err.Error())
		return missing
	}
	if n := len(missing) - len(left); n > 0 {
		out.ObjectsRestored += int32(n)
		if out.Details == nil {
			out.Details = map[string]string{}
		}
		out.Details["objectsLeftToControllers"] = strconv.Itoa(n)
	}
	return left
}

// ResourceList downloads the backup's own list of what it holds: "<apiVersion>/<Kind>" → "ns/name".
func (c *Checker) resourceList(ctx context.Context, run *securityv1.BackupVerifyRun, vb *velerov1.Backup) (map[string][]string, error) {
	body, done, err := c.open(ctx, run, vb, "list", velerov1.DownloadTargetKindBackupResourceList)
	if err != nil {
		return nil, err
	}
	defer done()
	gz, err := gzip.NewReader(body)
	if err != nil {
		return nil, fmt.Errorf("reading the resource list: %w", err)
	}
	list := map[string][]string{}
	if err := json.NewDecoder(gz).Decode(&list); err != nil {
		return nil, fmt.Errorf("decoding the resource list: %w", err)
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

// Sandboxes maps each source namespace of a backup to its sandbox: the run's sandboxNamespace for a
// backup of one namespace, else "<sandbox stem>-<source>-bvsandbox" for each, bounded to 63.
func Sandboxes(run *securityv1.BackupVerifyRun, sources []string) map[string]string {
	out := map[string]string{}
	if len(sources) == 1 {
		out[sources[0]] = run.Spec.SandboxNamespace
		return out
	}
	stem := strings.TrimSuffix(run.Spec.SandboxNamespace, securityv1.SandboxSuffix)
	for _, src := range sources {
		out[src] = backupsv1.BoundedName(63-len(securityv1.SandboxSuffix), stem, src) + securityv1.SandboxSuffix
	}
	return out
}

// RestoreName is the verification Restore's name, keyed by the run.
func RestoreName(run *securityv1.BackupVerifyRun) string {
	return backupsv1.BoundedName(backupsv1.MaxGeneratedNameLength, "bvr", run.Namespace, run.Name)
}

// FullRestore advances a full-restore: sandboxes, the Restore, and, once it is terminal, the diff.
func (c *Checker) FullRestore(ctx context.Context, run *securityv1.BackupVerifyRun) Outcome {
	out := Outcome{Done: true}
	vb := c.backup(ctx, run, &out)
	if vb == nil {
		return out
	}
	// While this run's Restore is in flight there is nothing to read from the object store: every
	// poll would otherwise download the resource list again. A Restore of this run that is being
	// deleted means an earlier pass finished and began cleaning up, then died before writing the
	// Result, and the verdict died with it: the run waits until the Restore and its sandboxes are
	// gone and restores again, within its timeout.
	inFlight := &velerov1.Restore{}
	err := c.Reader.Get(ctx, client.ObjectKey{Namespace: vb.Namespace, Name: RestoreName(run)}, inFlight)
	if err == nil && inFlight.Labels[securityv1.LabelRunUID] == string(run.UID) &&
		(!restoreTerminal(inFlight.Status.Phase) || !inFlight.DeletionTimestamp.IsZero()) {
		out.Done = false
		return out
	}
	list, err := c.resourceList(ctx, run, vb)
	if err != nil {
		out.add(securityv1.CodeStorageUnavailable, securityv1.SeverityHigh, "velero.io/Backup "+vb.Name, "reading the backup's resource list: "+err.Error())
		return out
	}
	objects, sources := namespaced(list)
	if len(sources) == 0 {
		out.add(securityv1.CodeObjectMissing, securityv1.SeverityHigh, "velero.io/Backup "+vb.Name, "the backup holds no namespaced objects to restore")
		return out
	}
	mapping := Sandboxes(run, sources)
	for _, src := range sources {
		wait, f := c.ensureSandbox(ctx, run, mapping[src])
		if f != nil {
			out.Findings = append(out.Findings, *f)
			return out
		}
		if wait {
			out.Done = false
			return out
		}
	}
	vr, err := c.ensureRestore(ctx, run, vb, sources, mapping)
	if err != nil {
		out.add(securityv1.CodeRestoreFailed, securityv1.SeverityCritical, "velero.io/Restore "+RestoreName(run), err.Error())
		return out
	}
	switch vr.Status.Phase {
	case velerov1.RestorePhaseCompleted:
	case velerov1.RestorePhasePartiallyFailed:
		out.add(securityv1.CodeRestorePartiallyFailed, securityv1.SeverityHigh, "velero.io/Restore "+vr.Name,
			fmt.Sprintf("the restore completed with %d error(s) and %d warning(s)", vr.Status.Errors, vr.Status.Warnings))
	case velerov1.RestorePhaseFailed, velerov1.RestorePhaseFailedValidation:
		out.add(securityv1.CodeRestoreFailed, securityv1.SeverityCritical, "velero.io/Restore "+vr.Name,
			fmt.Sprintf("the restore %s: %s%s", vr.Status.Phase, vr.Status.FailureReason, strings.Join(vr.Status.ValidationErrors, "; ")))
		return out
	default:
		out.Done = false
		return out
	}
	var missing []missingObject
	for _, src := range sources {
		for _, o := range objects[src] {
			out.ObjectsExpected++
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(o.gvk)
			err := c.Reader.Get(ctx, client.ObjectKey{Namespace: mapping[src], Name: o.name}, u)
			switch {
			case err == nil:
				out.ObjectsRestored++
			case apierrors.IsNotFound(err):
				missing = append(missing, missingObject{gvk: o.gvk, source: src, sandbox: mapping[src], name: o.name})
			default:
				missing = append(missing, missingObject{gvk: o.gvk, source: src, sandbox: mapping[src], name: o.name, err: err})
			}
		}
	}
	if len(missing) > 0 {
		versions := map[schema.GroupKind]string{}
		for _, src := range sources {
			for _, o := range objects[src] {
				versions[o.gvk.GroupKind()] = o.gvk.Version
			}
		}
		missing = c.regeneratedByControllers(ctx, run, vb, missing, versions, mapping, &out)
	}
	for _, m := range missing {
		o := objectRef{gvk: m.gvk, name: m.name}
		if m.err != nil && !meta.IsNoMatchError(m.err) {
			out.add(securityv1.CodeObjectMissing, securityv1.SeverityHigh, describe(o, m.sandbox), "reading it from the sandbox: "+m.err.Error())
			continue
		}
		out.add(securityv1.CodeObjectMissing, securityv1.SeverityHigh, describe(o, m.sandbox),
			fmt.Sprintf("%s %s/%s of the backup is missing from the sandbox", m.gvk.Kind, m.source, m.name))
	}
	if out.ObjectsExpected == out.ObjectsRestored && len(out.Findings) == 0 {
		out.add(securityv1.CodeChecksumMatch, securityv1.SeverityInfo, "velero.io/Restore "+vr.Name,
			fmt.Sprintf("all %d namespaced objects of the backup were restored into the sandbox", out.ObjectsExpected))
	}
	return out
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

// ensureSandbox creates a sandbox labelled with the run's UID, or accepts one that carries it. A
// namespace the verifier did not create for this run is refused, never reused. wait is true while
// this run's own sandbox from an earlier pass is still being deleted (see FullRestore).
func (c *Checker) ensureSandbox(ctx context.Context, run *securityv1.BackupVerifyRun, name string) (wait bool, _ *securityv1.Finding) {
	ns := &corev1.Namespace{}
	err := c.Reader.Get(ctx, client.ObjectKey{Name: name}, ns)
	if err == nil {
		if ns.Labels[securityv1.LabelRunUID] == string(run.UID) {
			return !ns.DeletionTimestamp.IsZero(), nil
		}
		return false, &securityv1.Finding{Code: securityv1.CodeSandboxNotOwned, Severity: securityv1.SeverityCritical, Object: "core/Namespace " + name,
			Message: fmt.Sprintf("sandbox namespace %s already exists and was not created for this run; it is never reused", name)}
	}
	if !apierrors.IsNotFound(err) {
		return false, &securityv1.Finding{Code: securityv1.CodeSandboxNotOwned, Severity: securityv1.SeverityCritical, Object: "core/Namespace " + name, Message: err.Error()}
	}
	if !strings.HasSuffix(name, securityv1.SandboxSuffix) {
		return false, &securityv1.Finding{Code: securityv1.CodeSandboxNotOwned, Severity: securityv1.SeverityCritical, Object: "core/Namespace " + name,
			Message: fmt.Sprintf("sandbox namespace %s does not end with %s", name, securityv1.SandboxSuffix)}
	}
	ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		securityv1.LabelRunUID: string(run.UID), securityv1.LabelRun: backupsv1.BoundedName(63, run.Name)}}}
	if err := c.Client.Create(ctx, ns); err != nil {
		return false, &securityv1.Finding{Code: securityv1.CodeSandboxNotOwned, Severity: securityv1.SeverityCritical, Object: "core/Namespace " + name,
			Message: "creating the sandbox: " + err.Error()}
	}
	return false, nil
}

func (c *Checker) ensureRestore(ctx context.Context, run *securityv1.BackupVerifyRun, vb *velerov1.Backup, sources []string, mapping map[string]string) (*velerov1.Restore, error) {
	key := client.ObjectKey{Namespace: vb.Namespace, Name: RestoreName(run)}
	vr := &velerov1.Restore{}
	err := c.Reader.Get(ctx, key, vr)
	if err == nil {
		if vr.Labels[securityv1.LabelRunUID] != string(run.UID) {
			return nil, fmt.Errorf("velero restore %s exists and belongs to another run", key)
		}
		return vr, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	noCluster := false
	vr = &velerov1.Restore{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: map[string]string{
			securityv1.LabelRunUID: string(run.UID), securityv1.LabelRun: backupsv1.BoundedName(63, run.Name)}},
		Spec: velerov1.RestoreSpec{
			BackupName:              vb.Name,
			IncludedNamespaces:      sources,
			NamespaceMapping:        mapping,
			IncludeClusterResources: &noCluster,
		},
	}
	if err := c.Client.Create(ctx, vr); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating velero restore %s: %w", key, err)
	}
	return vr, nil
}

// Cleanup deletes the run's Restore and the sandboxes carrying its UID, best-effort: each failure
// is a finding; nothing else is ever deleted.
func (c *Checker) Cleanup(ctx context.Context, run *securityv1.BackupVerifyRun) []securityv1.Finding {
	var out []securityv1.Finding
	vr := &velerov1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: backupNamespace(run), Name: RestoreName(run)}}
	if err := c.Client.Delete(ctx, vr); err != nil && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
		out = append(out, securityv1.Finding{Code: securityv1.CodeCleanupFailed, Severity: securityv1.SeverityLow,
			Object: "velero.io/Restore " + vr.Name, Message: "deleting the verification restore: " + err.Error()})
	}
	nss := &corev1.NamespaceList{}
	if err := c.Reader.List(ctx, nss, client.MatchingLabels{securityv1.LabelRunUID: string(run.UID)}); err != nil {
		return append(out, securityv1.Finding{Code: securityv1.CodeCleanupFailed, Severity: securityv1.SeverityLow, Message: "listing sandboxes: " + err.Error()})
	}
	for i := range nss.Items {
		ns := &nss.Items[i]
		if !strings.HasSuffix(ns.Name, securityv1.SandboxSuffix) {
			continue
		}
		if err := c.Client.Delete(ctx, ns, client.Preconditions{UID: &ns.UID}); err != nil && !apierrors.IsNotFound(err) {
			out = append(out, securityv1.Finding{Code: securityv1.CodeCleanupFailed, Severity: securityv1.SeverityLow,
				Object: "core/Namespace " + ns.Name, Message: "deleting the sandbox: " + err.Error()})
		}
	}
	return out
}
