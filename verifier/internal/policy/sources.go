package policy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/verifier/internal/etcdsnap"
)

// +kubebuilder:rbac:groups=velero.io,resources=backups,verbs=list

// LabelVeleroSchedule is the label Velero puts on the backups of a Schedule.
const LabelVeleroSchedule = "velero.io/schedule-name"

// DefaultSettle is how long a snapshot file must be left unchanged before an etcd-snapshot policy
// verifies it.
const DefaultSettle = 2 * time.Minute

// velero lists the Velero backups a velero policy selects (uncached: one list per Poll) and
// returns the runs it asks for: a checksum-only run of each Completed backup taken since the
// policy exists, and a full-restore of the newest backup of each Schedule when none of the last
// `every` was restored.
func (r *Reconciler) velero(ctx context.Context, pol *securityv1.BackupVerifyPolicy) ([]want, error) {
	src := pol.Spec.Velero
	if src == nil {
		src = &securityv1.VeleroBackupSource{}
	}
	ns := src.Namespace
	if ns == "" {
		ns = "velero"
	}
	sel, err := selector(src.BackupSelector)
	if err != nil {
		return nil, err
	}
	list := &velerov1.BackupList{}
	if err := r.reader().List(ctx, list, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, notReadyError{securityv1.ReasonVeleroNotInstalled, fmt.Errorf("the cluster serves no velero.io Backups: %w", err)}
		}
		return nil, fmt.Errorf("listing Velero backups in %s: %w", ns, err)
	}
	if err := r.listRuns(ctx, pol); err != nil {
		return nil, err
	}
	// Newest first, by schedule.
	bySchedule := map[string][]*velerov1.Backup{}
	covered := int32(0)
	for i := range list.Items {
		vb := &list.Items[i]
		if vb.Status.Phase != velerov1.BackupPhaseCompleted || !vb.DeletionTimestamp.IsZero() || vb.CreationTimestamp.Before(&pol.CreationTimestamp) {
			continue
		}
		covered++
		s := vb.Labels[LabelVeleroSchedule]
		bySchedule[s] = append(bySchedule[s], vb)
	}
	pol.Status.Backups = covered
	var wants []want
	for _, fresh := range bySchedule {
		sort.Slice(fresh, func(a, c int) bool { return takenAt(fresh[a]).After(takenAt(fresh[c])) })
		restored := map[string]bool{}
		for _, vb := range fresh {
			if checksumOnly(pol) {
				m := securityv1.ModeChecksumOnly
				if ok, err := r.exists(ctx, pol.Spec.RunNamespace, securityv1.VeleroPolicyRunName(vb.Name, vb.UID, m)); err != nil {
					return nil, err
				} else if !ok {
					wants = append(wants, veleroWant(pol, vb, m))
				}
			}
			if pol.Spec.FullRestore != nil {
				ok, err := r.exists(ctx, pol.Spec.RunNamespace, securityv1.VeleroPolicyRunName(vb.Name, vb.UID, securityv1.ModeFullRestore))
				if err != nil {
					return nil, err
				}
				restored[string(vb.UID)] = ok
			}
		}
		if fr := pol.Spec.FullRestore; fr != nil && len(fresh) > 0 && !restored[string(fresh[0].UID)] {
			since := 0
			for _, vb := range fresh {
				if restored[string(vb.UID)] {
					break
				}
				since++
			}
			if since >= int(fr.Every) || since == len(fresh) {
				wants = append(wants, veleroWant(pol, fresh[0], securityv1.ModeFullRestore))
			}
		}
	}
	return wants, nil
}

// checksumOnly: the policy verifies every new backup checksum-only (the default).
func checksumOnly(pol *securityv1.BackupVerifyPolicy) bool {
	return pol.Spec.ChecksumOnly == nil || *pol.Spec.ChecksumOnly
}

func takenAt(vb *velerov1.Backup) time.Time {
	if vb.Status.StartTimestamp != nil {
		return vb.Status.StartTimestamp.Time
	}
	return vb.CreationTimestamp.Time
}

func veleroWant(pol *securityv1.BackupVerifyPolicy, vb *velerov1.Backup, m securityv1.Mode) want {
	w := want{namespace: pol.Spec.RunNamespace, name: securityv1.VeleroPolicyRunName(vb.Name, vb.UID, m), takenAt: takenAt(vb),
		backup: vb.Namespace + "/" + vb.Name, labels: map[string]string{securityv1.LabelBackupUID: string(vb.UID)},
		spec: securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendVelero, Mode: m, Timeout: pol.Spec.RunTimeout,
			BackupRef: securityv1.BackupRef{Name: vb.Name, Namespace: vb.Namespace, StorageLocation: vb.Spec.StorageLocation}}}
	if m == securityv1.ModeFullRestore {
		w.spec.SandboxNamespace = securityv1.VeleroPolicySandboxName(vb.Name, vb.UID)
	}
	return w
}

// etcd lists the snapshot directory and returns a checksum-only run for each snapshot file the
// policy selects that settled since the policy exists and has no run yet.
func (r *Reconciler) etcd(ctx context.Context, pol *securityv1.BackupVerifyPolicy) ([]want, error) {
	if r.SnapshotDir == "" {
		return nil, notReadyError{securityv1.ReasonSnapshotDirNotConfigured,
			errors.New("this verifier has no --etcd-snapshot-dir (the install for managed clusters): it verifies no etcd snapshot")}
	}
	src := pol.Spec.EtcdSnapshots
	if src == nil {
		src = &securityv1.EtcdSnapshotSource{}
	}
	pattern := src.Pattern
	if pattern == "" {
		pattern = "*"
	}
	if _, err := path.Match(pattern, ""); err != nil {
		return nil, notReadyError{securityv1.ReasonInvalidSelector, fmt.Errorf("etcdSnapshots.pattern %q: %w", pattern, err)}
	}
	settle := DefaultSettle
	if src.Settle != nil {
		settle = src.Settle.Duration
	}
	entries, err := os.ReadDir(r.SnapshotDir)
	if err != nil {
		return nil, notReadyError{securityv1.ReasonSnapshotDirUnreadable, fmt.Errorf("listing --etcd-snapshot-dir %s: %w", r.SnapshotDir, err)}
	}
	if err := r.listRuns(ctx, pol); err != nil {
		return nil, err
	}
	now := r.Clock.Now()
	covered := int32(0)
	var wants []want
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || skippedSnapshotFile(name) {
			continue
		}
		if ok, _ := path.Match(pattern, name); !ok {
			continue
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since the listing
		} else if err != nil {
			return nil, fmt.Errorf("reading snapshot %s: %w", name, err)
		}
		if info.ModTime().Before(pol.CreationTimestamp.Time) || now.Sub(info.ModTime()) < settle {
			continue
		}
		covered++
		id := fileID(info)
		run := securityv1.EtcdPolicyRunName(name, id)
		if ok, err := r.exists(ctx, pol.Spec.RunNamespace, run); err != nil {
			return nil, err
		} else if ok || !checksumOnly(pol) {
			continue
		}
		wants = append(wants, want{namespace: pol.Spec.RunNamespace, name: run, takenAt: info.ModTime(), backup: name,
			labels: map[string]string{securityv1.LabelBackupUID: id},
			spec: securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendEtcdSnapshot, Mode: securityv1.ModeChecksumOnly,
				Timeout: pol.Spec.RunTimeout, BackupRef: securityv1.BackupRef{Name: name}}})
	}
	pol.Status.Backups = covered
	return wants, nil
}

// skippedSnapshotFile: sidecars, and files being written by etcdctl (.part) or others (.tmp).
func skippedSnapshotFile(name string) bool {
	return strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".sha256") || strings.HasSuffix(name, ".part") || strings.HasSuffix(name, ".tmp")
}

// fileID is a snapshot file's identity: its size and modification time. A snapshot saved again
// under the same name is another snapshot.
func fileID(info fs.FileInfo) string {
	return strconv.FormatInt(info.Size(), 36) + "." + strconv.FormatInt(info.ModTime().UnixNano(), 36)
}

// snapshotID is the identity of snapshot ref of dir now, or "" when it is gone.
func snapshotID(dir, ref string) (string, error) {
	p, err := etcdsnap.Resolve(dir, ref)
	if err != nil {
		return "", nil // a ref that leaves dir names no snapshot of it
	}
	info, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading snapshot %s: %w", ref, err)
	}
	return fileID(info), nil
}
