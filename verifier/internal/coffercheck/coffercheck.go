// Package coffercheck verifies Coffer's own Backups (backups.cozystack.io), whatever driver made
// them:
//
//   - checksum-only reads the artifact the Backup records in status.artifact, through the reader
//     package artifact's Registry chooses for it (by driver, else by URI scheme: a Velero tarball
//     through Velero's DownloadRequest for driver-velero, any other s3:// artifact from the S3
//     endpoint the administrator gave the verifier), and compares its size and SHA-256 with it;
//   - full-restore restores the Backup through the driver contract: a RestoreJob in the Backup's
//     namespace whose spec.options.targetNamespace is the run's sandbox (created, confined and
//     bound by package sandbox, as for the velero backend: a ResourceQuota of zero pods among
//     what confines it), so every driver that implements restores into another namespace,
//     third-party ones included, can be verified without the verifier knowing it. The admission
//     policy coffer-restore-target admits that RestoreJob because the verifier may create
//     RestoreJobs in its sandbox (ClusterRole coffer-verifier-sandbox) and nobody else may;
//     coffer-verifier-confinement lets the verifier create no other RestoreJob. Once the
//     RestoreJob succeeded, the sandbox is compared by content with the artifact when its reader
//     can read content (an artifact.Comparer: driver-velero's Velero backup). A driver that
//     compares what it restored with the backup's own record of it (contract RJ-13; driver-job's
//     verifyTemplate) reports the count in the RestoreJob's status.items.compared, or fails it
//     ContentMismatch, which becomes a content-mismatch finding; for other drivers the Result
//     says no content diff was made.
//
// Findings are facts about the Backup; an error is trouble carrying the verification out, retried
// by the caller within the run's timeout, and final when wrapped in reconcile.TerminalError.
package coffercheck

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/velerokit/download"
	"github.com/coffer-backup/coffer/verifier/internal/artifact"
	"github.com/coffer-backup/coffer/verifier/internal/backend"
	"github.com/coffer-backup/coffer/verifier/internal/sandbox"
)

// Checker verifies backups.cozystack.io Backups.
type Checker struct {
	// Reader reads the API server directly.
	Reader client.Reader
	// Client writes the verifier's RestoreJobs.
	Client client.Client
	// Artifacts chooses the reader of each Backup's artifact.
	Artifacts artifact.Registry
	// Sandbox makes, re-checks and deletes the run's sandbox. Required for full-restore.
	Sandbox *sandbox.Maker
	// PackSlices is the number of slices of a chunked Backup's older packs a checksum-only run
	// reads one of (artifact.DefaultPackSlices when 0).
	PackSlices int
}

// BackupKey is the Backup a run of the coffer backend verifies.
func BackupKey(run *securityv1.BackupVerifyRun) client.ObjectKey { return run.CofferBackup() }

func object(key client.ObjectKey) string { return "backups.cozystack.io/Backup " + key.String() }

// backup reads the Backup under verification. A Backup that is gone, being deleted, or not Ready
// with an artifact cannot be verified: the run ends BackupVerifyFailed, saying why, and no verdict
// is recorded (retention may have pruned it while the run waited; that says nothing bad about it).
func (c *Checker) backup(ctx context.Context, run *securityv1.BackupVerifyRun, out *backend.Outcome) (*backupsv1.Backup, error) {
	key := BackupKey(run)
	b := &backupsv1.Backup{}
	err := c.Reader.Get(ctx, key, b)
	switch {
	case apierrors.IsNotFound(err) || err == nil && !b.DeletionTimestamp.IsZero():
		msg := fmt.Sprintf("Backup %s does not exist or is being deleted: there is nothing to verify", key)
		out.Findings = append(out.Findings, securityv1.Finding{Code: securityv1.CodeBackupNotFound, Severity: securityv1.SeverityMedium, Object: object(key), Message: msg})
		return nil, reconcile.TerminalError(errors.New(msg))
	case err != nil:
		return nil, backend.APIError("reading Backup "+key.String(), err)
	case b.Status.Phase != backupsv1.BackupReady || b.Status.Artifact == nil:
		msg := fmt.Sprintf("Backup %s is %q without a recorded artifact: only a Ready Backup can be verified", key, b.Status.Phase)
		if b.Status.Phase == backupsv1.BackupReady {
			msg = fmt.Sprintf("Backup %s records no artifact in status.artifact: its driver (%s) does not say where it is", key, ptr.Deref(b.Spec.StrategyRef.APIGroup, ""))
		}
		out.Findings = append(out.Findings, securityv1.Finding{Code: securityv1.CodeBackupNotReady, Severity: securityv1.SeverityMedium, Object: object(key), Message: msg})
		return nil, reconcile.TerminalError(errors.New(msg))
	}
	return b, nil
}

// Checksum reads the stored artifact once, through its reader, and compares its size and SHA-256
// with status.artifact.
func (c *Checker) Checksum(ctx context.Context, run *securityv1.BackupVerifyRun) (backend.Outcome, error) {
	out := backend.Outcome{Done: true}
	b, err := c.backup(ctx, run, &out)
	if err != nil {
		return out, err
	}
	out.RecordedChecksum = b.Status.Artifact.Checksum
	rd, err := c.Artifacts.For(b)
	if err != nil {
		return out, err
	}
	d, err := rd.Digest(ctx, run, b)
	var missing string
	switch {
	case errors.Is(err, artifact.ErrMissing):
		missing = err.Error()
	case err != nil:
		return out, err
	}
	var packs *artifact.PackCheck
	if pc, ok := rd.(artifact.PackChecker); ok && missing == "" && chunked(b) && b.Spec.DriverMetadata[artifact.MetaPackList] != "" {
		if packs, err = pc.CheckPacks(ctx, b, c.PackSlices); err != nil {
			return out, err
		}
	}
	var locks *artifact.LockCheck
	if lc, ok := rd.(artifact.LockChecker); ok && missing == "" {
		if locks, err = lc.CheckLocks(ctx, b, packs); err != nil {
			return out, err
		}
	}
	out = compare(out, b, d, missing, packs)
	if locks != nil {
		lockFindings(&out, b, locks)
	}
	if vc, ok := rd.(artifact.VolumeChecker); ok && missing == "" {
		if err := vc.CheckVolumes(ctx, run, b, &out); err != nil {
			return out, err
		}
	}
	return out, nil
}

// lockFindings reports the objects of a Backup in a bucket with object lock that no lock holds.
func lockFindings(out *backend.Outcome, b *backupsv1.Backup, l *artifact.LockCheck) {
	switch {
	case l.Unknown != "":
		out.Detail(DetailObjectLock, "unknown: "+l.Unknown)
	case len(l.Unlocked) > 0:
		out.Detail(DetailObjectLock, "unlocked")
		shown := l.Unlocked[:min(len(l.Unlocked), 5)]
		more := ""
		if len(l.Unlocked) > len(shown) {
			more = fmt.Sprintf(" and %d more", len(l.Unlocked)-len(shown))
		}
		out.Add(securityv1.CodeObjectUnlocked, securityv1.SeverityMedium, object(client.ObjectKeyFromObject(b)), fmt.Sprintf(
			"%d of the Backup's %d objects are not locked in bucket %s, which has object lock: %s%s; whoever may write to the bucket can delete them. "+
				"Set the strategy's artifact.objectLock with a retainFor that covers the Plan's retention", len(l.Unlocked), l.Checked, l.Bucket, strings.Join(shown, ", "), more))
	default:
		out.Detail(DetailObjectLock, "locked")
	}
}

func chunked(b *backupsv1.Backup) bool {
	return b.Spec.DriverMetadata[artifact.MetaFormat] == artifact.ChunkedFormat
}

// compare judges a read artifact against status.artifact, and a chunked artifact's packs when
// they were checked.
func compare(out backend.Outcome, b *backupsv1.Backup, d download.Digest, missing string, packs *artifact.PackCheck) backend.Outcome {
	obj := object(client.ObjectKeyFromObject(b))
	art := b.Status.Artifact
	add := func(code string, sev securityv1.Severity, msg string) {
		out.Findings = append(out.Findings, securityv1.Finding{Code: code, Severity: sev, Object: obj, Message: msg})
	}
	if missing != "" {
		add(securityv1.CodeArtifactMissing, securityv1.SeverityHigh, missing)
		return out
	}
	out.ComputedChecksum, out.SizeBytes = d.Checksum(), d.SizeBytes
	ok := true
	if art.SizeBytes > 0 && art.SizeBytes != d.SizeBytes {
		ok = false
		add(securityv1.CodeSizeMismatch, securityv1.SeverityCritical, fmt.Sprintf("the stored artifact %s holds %d bytes, but the Backup records %d", art.URI, d.SizeBytes, art.SizeBytes))
	}
	out.ChecksumBasis = securityv1.ChecksumRecorded
	switch {
	case art.Checksum == "":
		out.ChecksumBasis = securityv1.ChecksumNone
		add(securityv1.CodeChecksumNotRecorded, securityv1.SeverityMedium, fmt.Sprintf("the Backup records no checksum; computed %s over %d bytes", out.ComputedChecksum, d.SizeBytes))
		ok = false
	case art.Checksum != out.ComputedChecksum:
		ok = false
		add(securityv1.CodeChecksumMismatch, securityv1.SeverityCritical, fmt.Sprintf("the stored artifact's SHA-256 is %s, but the Backup records %s", out.ComputedChecksum, art.Checksum))
	}
	if packs != nil {
		out.Detail(DetailChunksRead, "added+slice")
		out.Detail(DetailPacksListed, strconv.Itoa(packs.Listed))
		out.Detail(DetailPacksRead, strconv.Itoa(packs.Read))
		out.Detail(DetailPackBytesRead, strconv.FormatInt(packs.BytesRead, 10))
		out.Detail(DetailPackSlice, fmt.Sprintf("%d/%d", packs.Slice, packs.Slices))
		for i, p := range packs.Problems {
			msg := p.Message
			if i == len(packs.Problems)-1 && packs.Unshown > 0 {
				msg += fmt.Sprintf(" (and %d more problems with the packs)", packs.Unshown)
			}
			add(p.Code, securityv1.SeverityCritical, msg)
		}
		ok = ok && len(packs.Problems) == 0
	}
	switch {
	case ok && chunked(b) && packs != nil:
		add(securityv1.CodeChecksumMatch, securityv1.SeverityInfo, fmt.Sprintf("the stored index %s (%d bytes) of a chunked Backup matches the recorded %s; "+
			"its %d packs in %s exist with their listed sizes, and the %d read (those it added and slice %d of the older ones, %d bytes) match their SHA-256; "+
			"the chunks' keyed hashes are checked by full-restore verification", art.URI, d.SizeBytes, art.Checksum, packs.Listed, packs.Repository, packs.Read, packs.Slice, packs.BytesRead))
	case ok && chunked(b):
		// The truth about what was read: a chunked artifact is an index, and its chunks live in
		// packs the verifier cannot open (they are sealed for the namespace's keys); this Backup
		// records no pack list (written before them) to check them by.
		add(securityv1.CodeChecksumMatch, securityv1.SeverityInfo, fmt.Sprintf("the stored index %s (%d bytes) of a chunked Backup matches the recorded %s; "+
			"the chunks it names (in %s) are read by full-restore verification, not by checksum-only", art.URI, d.SizeBytes, art.Checksum, b.Spec.DriverMetadata[artifact.MetaRepository]))
		out.Detail(DetailChunksRead, "false")
	case ok:
		add(securityv1.CodeChecksumMatch, securityv1.SeverityInfo, fmt.Sprintf("the stored artifact %s (%d bytes) matches the recorded %s", art.URI, d.SizeBytes, art.Checksum))
	}
	return out
}

// Details of a checksum-only Result of a chunked artifact (coffer-agent's format 4, which says so
// in the Backup's driverMetadata, as driver-job copies the agent's report there).
const (
	// DetailChunksRead is "added+slice" when the packs were checked (package artifact: PackCheck),
	// "false" when only the index was read (a Backup without a pack list).
	DetailChunksRead    = "chunksRead"
	DetailPacksListed   = "packsListed"
	DetailPacksRead     = "packsRead"
	DetailPackBytesRead = "packBytesRead"
	// DetailPackSlice is "<slot>/<slices>": which slice of the older packs the run read.
	DetailPackSlice = "packSlice"
	// DetailObjectLock is, for a Backup in a bucket with object lock, "locked" (every object it
	// looked at), "unlocked" (see the object-unlocked finding) or "unknown".
	DetailObjectLock = "objectLock"
)

// RestoreJobName is the name of a run's RestoreJob, in the Backup's namespace.
func RestoreJobName(run *securityv1.BackupVerifyRun) string {
	return backupsv1.BoundedName(backupsv1.MaxGeneratedNameLength, "bvr", run.Name, string(run.UID)[:8])
}

// Reasons a driver gives when it cannot restore into a sandbox at all: the verification could not
// be carried out, which says nothing about the Backup.
var cannotTryReasons = map[string]bool{
	"TargetNotSupported": true, "TargetNotAuthorized": true, backupsv1.ReasonTargetApplicationUnsupported: true,
	backupsv1.ReasonNoDriverClaimed: true, backupsv1.ReasonBackupNotFound: true,
}

// FullRestore advances a full-restore: the sandbox, the RestoreJob, and once it ended, the verdict.
func (c *Checker) FullRestore(ctx context.Context, run *securityv1.BackupVerifyRun) (backend.Outcome, error) {
	out := backend.Outcome{Done: true}
	key := client.ObjectKey{Namespace: BackupKey(run).Namespace, Name: RestoreJobName(run)}
	rj := &backupsv1.RestoreJob{}
	err := c.Reader.Get(ctx, key, rj)
	switch {
	case apierrors.IsNotFound(err):
		rj = nil
	case err != nil:
		return out, backend.APIError("reading RestoreJob "+key.String(), err)
	case rj.Labels[securityv1.LabelRunUID] != string(run.UID):
		return out, reconcile.TerminalError(fmt.Errorf("RestoreJob %s exists and does not belong to this run (its %s label is %q); delete it, then create the run again",
			key, securityv1.LabelRunUID, rj.Labels[securityv1.LabelRunUID]))
	}
	if rj == nil {
		b, err := c.backup(ctx, run, &out)
		if err != nil {
			return out, err
		}
		if ready, refused, err := c.Sandbox.Ensure(ctx, run, []string{run.Spec.SandboxNamespace}, &out); !ready {
			if refused != nil {
				return out, sandbox.Refused(&out, *refused)
			}
			return out, err
		}
		// A comparison that restores on its own (driver-velero's volume data) says what the
		// driver's restore may leave out, and starts now, beside it.
		var starter artifact.Starter
		if rd, err := c.Artifacts.For(b); err == nil {
			starter, _ = rd.(artifact.Starter)
		}
		options := map[string]string{backupsv1.OptionTargetNamespace: run.Spec.SandboxNamespace, backupsv1.OptionInert: "true"}
		if starter != nil {
			for k, v := range starter.RestoreOptions() {
				if _, standard := options[k]; !standard {
					options[k] = v
				}
			}
		}
		if rj, err = c.createRestoreJob(ctx, run, b, key, options); err != nil {
			return out, err
		}
		if starter != nil {
			starter.StartRestore(ctx, run, b)
		}
	}
	obj := "backups.cozystack.io/RestoreJob " + key.String()
	ready := meta.FindStatusCondition(rj.Status.Conditions, backupsv1.ConditionReady)
	switch rj.Status.Phase {
	case backupsv1.RestoreJobSucceeded:
	case backupsv1.RestoreJobFailed:
		reason, msg := rj.Status.Message, rj.Status.Message
		if ready != nil {
			reason, msg = ready.Reason, ready.Message
		}
		if cannotTryReasons[reason] {
			return out, reconcile.TerminalError(fmt.Errorf("the Backup's driver did not restore it into the sandbox (%s: %s): it cannot be verified by full-restore", reason, msg))
		}
		if reason == backupsv1.ReasonContentMismatch {
			out.Details = map[string]string{artifact.DetailContentDiff: "by the driver, with the backup's own record of its content"}
			out.Findings = append(out.Findings, securityv1.Finding{Code: securityv1.CodeContentMismatch, Severity: securityv1.SeverityHigh, Object: obj,
				Message: "the driver restored the Backup and its content differs from what the backup recorded: " + msg})
			return out, nil
		}
		out.Findings = append(out.Findings, securityv1.Finding{Code: securityv1.CodeRestoreFailed, Severity: securityv1.SeverityCritical, Object: obj,
			Message: fmt.Sprintf("the restore into the sandbox failed (%s): %s", reason, msg)})
		return out, nil
	default:
		out.Done = false
		return out, nil
	}
	msg := "the Backup's driver restored it into sandbox " + run.Spec.SandboxNamespace
	out.Details = map[string]string{}
	out.RestoreTook(rj.CreationTimestamp, rj.Status.CompletedAt)
	if it := rj.Status.Items; it != nil {
		out.Details["itemsRestored"], out.Details["itemsSkipped"], out.Details["itemsFailed"] = fmt.Sprint(it.Restored), fmt.Sprint(it.Skipped), fmt.Sprint(it.Failed)
		msg += fmt.Sprintf(" (%d item(s) restored, %d skipped, %d failed)", it.Restored, it.Skipped, it.Failed)
		if it.Failed > 0 {
			out.Findings = append(out.Findings, securityv1.Finding{Code: securityv1.CodeRestorePartiallyFailed, Severity: securityv1.SeverityHigh, Object: obj,
				Message: fmt.Sprintf("the restore into the sandbox failed for %d item(s): %s", it.Failed, restoreMessage(rj))})
			return out, nil
		}
	}
	// The restored state, compared with the Backup before the cleanup deletes the sandbox.
	b, err := c.backup(ctx, run, &out)
	if err != nil {
		return out, err
	}
	diff, err := c.compareContent(ctx, run, b, rj, &out)
	if err != nil {
		return out, err
	}
	succeeded := securityv1.Finding{Code: securityv1.CodeRestoreSucceeded, Severity: securityv1.SeverityInfo, Object: obj, Message: msg + "; " + diff}
	out.Findings = append([]securityv1.Finding{succeeded}, out.Findings...)
	return out, nil
}

// sandboxRefused turns a sandbox the verifier may not use (sandbox-not-owned: a namespace it did
// not create for this run, or a name without the sandbox suffix) into a run that could not be
// carried out. It says nothing of the Backup, so it must not become a verdict on it, as the velero
// backend's critical finding would: the finding goes to the Result at medium severity, and the
// run fails (BackupVerifyFailed).
// compareContent compares what the driver restored into the sandbox with the Backup, by content,
// where the verifier can read the Backup's content (its reader is an artifact.Comparer, as
// driver-velero's is). Otherwise it re-checks the sandbox and takes the driver's own comparison
// (contract RJ-13), if it made one. Its findings, counts and details go to out; it returns what
// the restore-succeeded finding says of it.
func (c *Checker) compareContent(ctx context.Context, run *securityv1.BackupVerifyRun, b *backupsv1.Backup, rj *backupsv1.RestoreJob, out *backend.Outcome) (string, error) {
	rd, err := c.Artifacts.For(b)
	if cmp, ok := rd.(artifact.Comparer); ok && err == nil {
		// The comparer's diff re-checks the sandbox itself.
		vout, said, err := cmp.CompareRestore(ctx, run, b, run.Spec.SandboxNamespace)
		if err != nil {
			return "", err
		}
		out.Done = vout.Done // a comparison that restores volume data takes passes
		out.Findings = append(out.Findings, vout.Findings...)
		out.ObjectsExpected, out.ObjectsRestored = vout.ObjectsExpected, vout.ObjectsRestored
		out.Merge(&vout) // the restore of volume data counts in the restore time
		return said, nil
	}
	confined, err := c.Sandbox.Recheck(ctx, run, map[string]string{b.Namespace: run.Spec.SandboxNamespace}, out)
	if err != nil {
		return "", err
	}
	if !confined {
		return "but the sandbox was not confined when the verifier re-checked it: see the sandbox-tampered findings", nil
	}
	driver := ptr.Deref(b.Spec.StrategyRef.APIGroup, "(core)")
	if it := rj.Status.Items; it != nil && it.Compared > 0 {
		// Contract RJ-13: the driver compared what it restored with the backup's own record
		// of it; a difference would have failed the RestoreJob ContentMismatch.
		out.ObjectsExpected, out.ObjectsRestored = int32(min(it.Compared, math.MaxInt32)), int32(min(it.Restored, math.MaxInt32))
		out.Details[artifact.DetailContentDiff] = fmt.Sprintf("by driver %s: %d item(s) compared with the backup's own record of them", driver, it.Compared)
		return fmt.Sprintf("driver %s compared %d restored item(s) by content with the backup's own record of them: identical", driver, it.Compared), nil
	}
	out.Details[artifact.DetailContentDiff] = "not available for driver " + driver
	return "its content was not compared with the Backup: no content diff is available for driver " + driver, nil
}

func (c *Checker) createRestoreJob(ctx context.Context, run *securityv1.BackupVerifyRun, b *backupsv1.Backup, key client.ObjectKey, options map[string]string) (*backupsv1.RestoreJob, error) {
	rj := &backupsv1.RestoreJob{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: map[string]string{
			securityv1.LabelRunUID: string(run.UID), securityv1.LabelRun: backupsv1.BoundedName(63, run.Name)}},
		Spec: backupsv1.RestoreJobSpec{
			BackupRef: corev1.LocalObjectReference{Name: b.Name},
			Options:   backupsv1.StringOptions(options),
		},
	}
	if err := c.Client.Create(ctx, rj); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("RestoreJob %s was created meanwhile; reading it again", key)
		}
		return nil, backend.APIError("creating RestoreJob "+key.String(), err)
	}
	return rj, nil
}

// Cleanup deletes the run's RestoreJob and sandbox, best-effort: each failure is a finding.
// Nothing but objects carrying the run's UID is deleted.
func (c *Checker) Cleanup(ctx context.Context, run *securityv1.BackupVerifyRun) []securityv1.Finding {
	var out []securityv1.Finding
	key := client.ObjectKey{Namespace: BackupKey(run).Namespace, Name: RestoreJobName(run)}
	rj := &backupsv1.RestoreJob{}
	err := c.Reader.Get(ctx, key, rj)
	if err == nil && rj.Labels[securityv1.LabelRunUID] == string(run.UID) {
		if !rj.Status.Phase.IsTerminal() {
			// The driver may go on restoring after its RestoreJob is deleted (driver-velero's
			// Velero Restore does, and Velero re-creates a deleted sandbox from the backup's copy of
			// the source namespace). So while the RestoreJob runs, neither it nor the sandbox is
			// deleted: they stay confined, and the Sweeper deletes them once it ended (RestoreHold).
			return []securityv1.Finding{{Code: securityv1.CodeCleanupDeferred, Severity: securityv1.SeverityInfo, Object: "backups.cozystack.io/RestoreJob " + key.String(),
				Message: fmt.Sprintf("the driver is still restoring (RestoreJob phase %q): the RestoreJob and its sandbox are kept, confined, and deleted once it ends", orPending(rj.Status.Phase))}}
		}
		err = c.Client.Delete(ctx, rj, client.Preconditions{UID: &rj.UID})
	}
	if err != nil && !apierrors.IsNotFound(err) {
		out = append(out, securityv1.Finding{Code: securityv1.CodeCleanupFailed, Severity: securityv1.SeverityLow,
			Object: "backups.cozystack.io/RestoreJob " + key.String(), Message: "deleting the verification RestoreJob: " + err.Error()})
	}
	// What the readers' comparisons made for the run (driver-velero's: the restore of its volume
	// data). Every Cleaner is asked, not only the Backup's driver's: the Backup may be gone by now,
	// and each deletes only what carries the run's UID (another driver's finds nothing: one list).
	for _, rd := range c.Artifacts.ByDriver {
		if cl, ok := rd.(artifact.Cleaner); ok {
			fs := cl.Cleanup(ctx, run)
			if slices.ContainsFunc(fs, func(f securityv1.Finding) bool { return f.Code == securityv1.CodeCleanupDeferred }) {
				return append(out, fs...)
			}
			out = append(out, fs...)
		}
	}
	return append(out, c.Sandbox.Cleanup(ctx, run)...)
}

func orPending(p backupsv1.RestoreJobPhase) backupsv1.RestoreJobPhase {
	if p == "" {
		return backupsv1.RestoreJobPending
	}
	return p
}

// RestoreHold tells the sandbox Sweeper whether the sandboxes of the run with runUID must stay:
// while one of its RestoreJobs runs (its driver restores into them). It deletes the run's
// RestoreJobs that ended.
func (c *Checker) RestoreHold(ctx context.Context, runUID types.UID) (bool, error) {
	list := &backupsv1.RestoreJobList{}
	err := c.Reader.List(ctx, list, client.MatchingLabels{securityv1.LabelRunUID: string(runUID)})
	if meta.IsNoMatchError(err) {
		return false, nil
	}
	if err != nil {
		return true, fmt.Errorf("listing the RestoreJobs of run %s: %w", runUID, err)
	}
	hold := false
	for i := range list.Items {
		rj := &list.Items[i]
		if !rj.Status.Phase.IsTerminal() {
			hold = true
			continue
		}
		if err := c.Client.Delete(ctx, rj, client.Preconditions{UID: &rj.UID}); err != nil && !apierrors.IsNotFound(err) {
			return true, fmt.Errorf("deleting RestoreJob %s/%s of run %s: %w", rj.Namespace, rj.Name, runUID, err)
		}
	}
	return hold, nil
}

// restoreMessage is what the RestoreJob says of its end: its Ready condition's message, or its
// status message.
func restoreMessage(rj *backupsv1.RestoreJob) string {
	if c := meta.FindStatusCondition(rj.Status.Conditions, backupsv1.ConditionReady); c != nil && c.Message != "" {
		return c.Message
	}
	return rj.Status.Message
}

var _ backend.Restorer = (*Checker)(nil)

// Waiting names the RestoreJob a full-restore in progress waits for.
func (c *Checker) Waiting(run *securityv1.BackupVerifyRun) string {
	return "RestoreJob " + RestoreJobName(run)
}
