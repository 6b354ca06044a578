package velerocheck

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/verifier/internal/backend"
)

// TrustStore keeps, for each Velero backup that nothing recorded a checksum for (a backup Coffer
// did not make), the checksum the verifier computed at its first verification, and later
// verifications compare with it: trust on first use. A backup changed in storage after its first
// verification is then a critical checksum-mismatch, as for a backup Coffer made.
//
// Each record is a ConfigMap in the verifier's own namespace (Namespace), named after the
// backup, which only the verifier (and the cluster's administrators) may write: a tenant cannot
// plant or change one. It holds the backup's identity as well (its completion time and UID), so a
// new backup under a name that was used before is trusted afresh, saying so, rather than compared
// with its predecessor's checksum.
type TrustStore struct {
	// Reader reads the API server directly (no cache, so no watch on ConfigMaps).
	Reader client.Reader
	// Writer creates and replaces records.
	Writer    client.Writer
	Namespace string
}

// Keys of a trust record's data.
const (
	trustChecksum   = "checksum"
	trustSize       = "sizeBytes"
	trustBackup     = "backup"
	trustBackupUID  = "backupUID"
	trustCompleted  = "completionTimestamp"
	trustRun        = "run"
	trustRunUID     = "runUID"
	trustVerifiedAt = "firstVerifiedAt"
)

// TrustRecordName is the name of the ConfigMap that holds the first checksum of a Velero backup.
func TrustRecordName(backupNamespace, backupName string) string {
	sum := sha256.Sum256([]byte(backupNamespace + "/" + backupName))
	return "bv-checksum-" + hex.EncodeToString(sum[:16])
}

func completedAt(vb *velerov1.Backup) string {
	if vb.Status.CompletionTimestamp == nil {
		return ""
	}
	return vb.Status.CompletionTimestamp.UTC().Format(time.RFC3339)
}

// compare compares the checksum computed by run over vb's tarball with vb's trust record, making
// the record when there is none (or when it belongs to an earlier backup of the same name), and
// adds the finding to out. Creation races are settled by the API server: of two first runs, one
// creates the record and the other compares with it.
func (t *TrustStore) compare(ctx context.Context, run *securityv1.BackupVerifyRun, vb *velerov1.Backup, out *backend.Outcome, now time.Time) error {
	object := "velero.io/Backup " + vb.Namespace + "/" + vb.Name
	key := client.ObjectKey{Namespace: t.Namespace, Name: TrustRecordName(vb.Namespace, vb.Name)}
	record := func() *corev1.ConfigMap {
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
				Labels: map[string]string{securityv1.LabelChecksumTrust: "true"}},
			Data: map[string]string{
				trustChecksum: out.ComputedChecksum, trustSize: strconv.FormatInt(out.SizeBytes, 10),
				trustBackup: vb.Namespace + "/" + vb.Name, trustBackupUID: string(vb.UID), trustCompleted: completedAt(vb),
				trustRun: run.Namespace + "/" + run.Name, trustRunUID: string(run.UID), trustVerifiedAt: now.UTC().Format(time.RFC3339),
			},
		}
	}
	firstUse := func(cm *corev1.ConfigMap, why string) {
		out.ChecksumBasis = securityv1.ChecksumNone
		out.Add(securityv1.CodeChecksumFirstUse, securityv1.SeverityLow, object, fmt.Sprintf(
			"%s; this verification compared nothing: it computed %s over %d bytes and kept it in ConfigMap %s/%s, and later verifications of this backup compare with it (trust on first use)",
			why, out.ComputedChecksum, out.SizeBytes, cm.Namespace, cm.Name))
	}
	notRecorded := fmt.Sprintf("nothing recorded a checksum when this backup was taken (annotation %s)", backupsv1.AnnotationChecksum)

	for attempt := 0; ; attempt++ {
		cm := &corev1.ConfigMap{}
		err := t.Reader.Get(ctx, key, cm)
		if apierrors.IsNotFound(err) {
			cm = record()
			if err := t.Writer.Create(ctx, cm); apierrors.IsAlreadyExists(err) && attempt == 0 {
				continue // another run made it first: compare with it
			} else if err != nil {
				return fmt.Errorf("keeping the first checksum of %s in ConfigMap %s: %w", object, key, err)
			}
			firstUse(cm, notRecorded+" and no earlier verification computed one")
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the first checksum of %s from ConfigMap %s: %w", object, key, err)
		}
		d := cm.Data
		if d[trustBackup] != vb.Namespace+"/"+vb.Name || d[trustCompleted] != completedAt(vb) || d[trustChecksum] == "" {
			// Another backup of the same name (deleted and taken again), or a record that is not
			// one: this backup is trusted afresh.
			why := fmt.Sprintf("%s, and the checksum kept in ConfigMap %s was computed for an earlier backup of this name (completed %s; this one completed %s)",
				notRecorded, key, orNone(d[trustCompleted]), orNone(completedAt(vb)))
			fresh := record()
			cm.Labels, cm.Data = fresh.Labels, fresh.Data
			if err := t.Writer.Update(ctx, cm); apierrors.IsConflict(err) && attempt == 0 {
				continue
			} else if err != nil {
				return fmt.Errorf("replacing the first checksum of %s in ConfigMap %s: %w", object, key, err)
			}
			firstUse(cm, why)
			return nil
		}
		trusted := d[trustChecksum]
		if d[trustRunUID] == string(run.UID) && trusted == out.ComputedChecksum {
			// This run made the record in a pass that did not end (a crash, a failed status write).
			firstUse(cm, notRecorded+" and no earlier verification computed one")
			return nil
		}
		out.ChecksumBasis = securityv1.ChecksumFirstVerification
		out.RecordedChecksum = trusted
		first := fmt.Sprintf("its first verification (run %s, %s)", orNone(d[trustRun]), orNone(d[trustVerifiedAt]))
		if trusted != out.ComputedChecksum {
			out.Add(securityv1.CodeChecksumMismatch, securityv1.SeverityCritical, object, fmt.Sprintf(
				"the stored tarball's SHA-256 is %s (%d bytes), but %s computed %s (%s bytes): the backup changed in storage since (nothing was recorded when it was taken; compared with the checksum trusted on first use)",
				out.ComputedChecksum, out.SizeBytes, first, trusted, orNone(d[trustSize])))
			return nil
		}
		out.Add(securityv1.CodeChecksumMatch, securityv1.SeverityInfo, object, fmt.Sprintf(
			"the stored tarball (%d bytes) matches %s computed by %s (nothing was recorded when the backup was taken; trusted on first use)",
			out.SizeBytes, trusted, first))
		return nil
	}
}

// TrustPruner deletes the trust records of Velero backups that are gone, once the record is older
// than TTL (a backup gone for a moment, e.g. deleted and synced back from its storage location,
// keeps its record). It runs on the leader, once an hour.
type TrustPruner struct {
	Store *TrustStore
	Clock clock.PassiveClock
	TTL   time.Duration
}

// Start prunes once, then every hour, until ctx ends (a manager.Runnable).
func (p *TrustPruner) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("checksum-trust")
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if n, err := p.Prune(ctx); err != nil {
			log.Error(err, "Pruning checksum trust records; retrying at the next pass")
		} else if n > 0 {
			log.Info("Deleted the checksum trust records of Velero backups that are gone", "deleted", n)
		}
	}, time.Hour)
	return nil
}

// Prune deletes the records older than TTL whose Velero backup does not exist, and reports how
// many.
func (p *TrustPruner) Prune(ctx context.Context) (int, error) {
	s := p.Store
	list := &corev1.ConfigMapList{}
	if err := s.Reader.List(ctx, list, client.InNamespace(s.Namespace), client.MatchingLabels{securityv1.LabelChecksumTrust: "true"}); err != nil {
		return 0, fmt.Errorf("listing checksum trust records: %w", err)
	}
	n := 0
	for i := range list.Items {
		cm := &list.Items[i]
		if p.Clock.Since(cm.CreationTimestamp.Time) < p.TTL {
			continue
		}
		ns, name, ok := strings.Cut(cm.Data[trustBackup], "/")
		if ok && ns != "" && name != "" {
			err := s.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &velerov1.Backup{})
			if err == nil {
				continue
			}
			if !apierrors.IsNotFound(err) {
				return n, fmt.Errorf("reading Velero backup %s/%s: %w", ns, name, err)
			}
		}
		uid := cm.UID
		if err := s.Writer.Delete(ctx, cm, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return n, fmt.Errorf("deleting checksum trust record %s: %w", cm.Name, err)
		}
		n++
	}
	return n, nil
}
