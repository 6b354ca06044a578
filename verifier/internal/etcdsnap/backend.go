package etcdsnap

import (
	"context"
	"errors"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/verifier/internal/backend"
)

// Backend is the etcd-snapshot backend: a run's backupRef.name is a snapshot file under Dir
// (--etcd-snapshot-dir), verified by checksum (Verify). It is no backend.Restorer: admission
// admits etcd-snapshot runs in checksum-only mode only.
type Backend struct {
	Dir string
}

var _ backend.Backend = (*Backend)(nil)

// Checksum verifies the run's snapshot file. A check that could not be carried out says nothing
// of the file: a check not started is retried; a check killed (memory) or failing otherwise is
// final, without a verdict.
func (b *Backend) Checksum(ctx context.Context, run *securityv1.BackupVerifyRun) (backend.Outcome, error) {
	rep, err := Verify(ctx, b.Dir, run.Spec.BackupRef.Name)
	return outcome(rep, err, ctx.Err() != nil)
}

// outcome is Verify's report and error as the run reconciler takes them.
func outcome(rep *Report, err error, ctxDone bool) (backend.Outcome, error) {
	out := backend.Outcome{Done: true, Findings: rep.Findings, ComputedChecksum: rep.Checksum, ChecksumBasis: rep.Basis, SizeBytes: rep.SizeBytes, Details: rep.Details}
	switch {
	case err == nil, ctxDone, errors.Is(err, ErrCheckNotStarted):
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrRefInvalid):
		err = reconcile.TerminalError(err)
	case errors.Is(err, ErrUnreadable):
		err = reconcile.TerminalError(fmt.Errorf("%w; the check must be able to read the snapshot directory (--etcd-snapshot-dir): snapshots saved by etcdctl are 0600 and root-owned, which only a check pod (--etcd-check-pods) reads", err))
	case errors.Is(err, ErrCheckKilled):
		err = reconcile.TerminalError(fmt.Errorf("%w; the check's resources were exhausted: raise the memory limit (--etcd-check-memory for check pods, else the verifier's container in deploy/verifier/manager), or check the node's memory pressure", err))
	default:
		err = reconcile.TerminalError(fmt.Errorf("%w; see the verifier's log", err))
	}
	return out, err
}
