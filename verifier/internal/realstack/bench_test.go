package realstack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
	"github.com/coffer-backup/coffer/verifier/internal/artifact"
	"github.com/coffer-backup/coffer/verifier/internal/coffercheck"
	"github.com/coffer-backup/coffer/verifier/internal/etcdsnap"
)

// BenchmarkFullRestore compares a full-restore verification of a 1,000-object backup (restore into
// a sandbox, diff every object, clean up) with a bare Velero restore of the same backup into a
// mapped namespace, on the same stack in the same run. The verification is driven step by step
// with a short poll instead of the controller's 10 s, so both wait for Velero alike.
func BenchmarkFullRestore(b *testing.B) {
	const objects = 1000
	ctx := context.Background()
	ns := uniq("bench")
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	for i := range objects {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%04d", i), Namespace: ns}, Data: map[string]string{"v": fmt.Sprint(i)}}
		if err := cl.Create(ctx, cm); err != nil {
			b.Fatal(err)
		}
	}
	vb := veleroBackup(b, ns, true, ns)
	for i := range b.N {
		// Bare Velero restore.
		target := fmt.Sprintf("%s-bare-%d", ns, i)
		vr := &velerov1.Restore{ObjectMeta: metav1.ObjectMeta{Name: target, Namespace: velerostack.Namespace},
			Spec: velerov1.RestoreSpec{BackupName: vb.Name, IncludedNamespaces: []string{ns}, NamespaceMapping: map[string]string{ns: target}}}
		t0 := time.Now()
		if err := cl.Create(ctx, vr); err != nil {
			b.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
			if err := cl.Get(ctx, client.ObjectKeyFromObject(vr), vr); err != nil {
				return false, err
			}
			return vr.Status.Phase == velerov1.RestorePhaseCompleted || vr.Status.Phase == velerov1.RestorePhasePartiallyFailed || vr.Status.Phase == velerov1.RestorePhaseFailed, nil
		})
		bare := time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}

		// Full-restore verification of the same backup.
		h := newHarness(b)
		run := &securityv1.BackupVerifyRun{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%s-%d", ns, i), Namespace: "default"},
			Spec: securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendVelero, BackupRef: securityv1.BackupRef{Name: vb.Name, Namespace: velerostack.Namespace},
				Mode: securityv1.ModeFullRestore, SandboxNamespace: fmt.Sprintf("%s-%d-bvsandbox", ns, i)}}
		if err := cl.Create(ctx, run); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
			h.step(run)
			return run.Status.Phase.IsTerminal(), nil
		})
		verify := time.Since(t1)
		if err != nil || run.Status.Phase != securityv1.RunSucceeded {
			b.Fatalf("verification: %v %s %s", err, run.Status.Phase, run.Status.Message)
		}
		res := result(b, run)
		b.ReportMetric(bare.Seconds(), "bare-restore-s")
		b.ReportMetric(verify.Seconds(), "full-restore-verify-s")
		fmt.Fprintf(os.Stdout, "| %d objects | bare Velero restore %.2f s | full-restore verification %.2f s (%d/%d objects diffed, ratio %.2f) |\n",
			res.Spec.ObjectsExpected, bare.Seconds(), verify.Seconds(), res.Spec.ObjectsRestored, res.Spec.ObjectsExpected, verify.Seconds()/bare.Seconds())
	}
}

// BenchmarkEtcdSnapshotCheck fills the test etcd with ~100 MiB, saves a real snapshot with etcdctl,
// and compares the verifier's check (appended SHA-256, bbolt meta, etcdutl status, in one pass
// plus the status walk) with `etcdutl snapshot status` followed by `openssl dgst -sha256`.
func BenchmarkEtcdSnapshotCheck(b *testing.B) {
	ctx := context.Background()
	assets, err := cluster.AssetsDir()
	if err != nil {
		b.Fatal(err)
	}
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{lc.EtcdURL}, DialTimeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer etcd.Close()
	value := strings.Repeat("x", 4096)
	var g errgroup.Group
	g.SetLimit(32)
	for i := range 25000 {
		g.Go(func() error {
			_, err := etcd.Put(ctx, fmt.Sprintf("/bench/%06d", i), value)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	snap := filepath.Join(snapDir, "bench.db")
	if out, err := exec.Command(filepath.Join(assets, "etcdctl"), "--endpoints="+lc.EtcdURL, "snapshot", "save", snap).CombinedOutput(); err != nil {
		b.Fatalf("%v: %s", err, out)
	}
	st, _ := os.Stat(snap)
	for range b.N {
		t0 := time.Now()
		rep, err := etcdsnap.Verify(context.Background(), snapDir, "bench.db")
		ours := time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		if securityv1.WorstSeverity(rep.Findings).AtLeast(securityv1.SeverityHigh) {
			b.Fatalf("the snapshot does not verify: %+v", rep.Findings)
		}
		t1 := time.Now()
		if out, err := exec.Command("sh", "-c", fmt.Sprintf("'%s' snapshot status '%s' && openssl dgst -sha256 '%s'", filepath.Join(assets, "etcdutl"), snap, snap)).CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
		peer := time.Since(t1)
		b.ReportMetric(ours.Seconds(), "coffer-s")
		b.ReportMetric(peer.Seconds(), "etcdutl+openssl-s")
		fmt.Fprintf(os.Stdout, "| %.0f MiB snapshot | verifier %.2f s | etcdutl snapshot status + openssl dgst %.2f s | ratio %.2f |\n",
			float64(st.Size())/(1<<20), ours.Seconds(), peer.Seconds(), ours.Seconds()/peer.Seconds())
	}
}

// BenchmarkCofferChecksum compares checksum-only of a 1 GiB artifact of a Coffer Backup (the
// coffer backend: read the Backup, stream the object from the S3 endpoint, hash it, compare) with
// its peer, `curl <presigned URL> | openssl dgst -sha256`, on the same MinIO in the same run.
func BenchmarkCofferChecksum(b *testing.B) {
	const size = 1 << 30
	ctx := context.Background()
	mc, err := minio.New(strings.TrimPrefix(strings.TrimPrefix(stack.S3URL(), "http://"), "https://"), &minio.Options{
		Creds: credentials.NewStaticV4(velerostack.AccessKey, velerostack.SecretKey, ""), Secure: strings.HasPrefix(stack.S3URL(), "https://")})
	if err != nil {
		b.Fatal(err)
	}
	key := uniq("bench-artifact")
	h := sha256.New()
	body := io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{1}), size), h)
	if _, err := mc.PutObject(ctx, velerostack.Bucket, key, body, size, minio.PutObjectOptions{}); err != nil {
		b.Fatal(err)
	}
	sum := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if err := cl.Create(ctx, &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: key, Namespace: "default"},
		Spec: backupsv1.BackupSpec{ApplicationRef: corev1.TypedLocalObjectReference{APIGroup: ptr("apps.cozystack.io"), Kind: "Postgres", Name: "db"},
			StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr("jobdriver.backups.cozystack.io"), Kind: "JobBackupStrategy", Name: "s"},
			TakenAt:     metav1.Now()}}); err != nil {
		b.Fatal(err)
	}
	bk := &backupsv1.Backup{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "default", Name: key}, bk); err != nil {
		b.Fatal(err)
	}
	bk.Status.Phase = backupsv1.BackupReady
	bk.Status.Artifact = &backupsv1.BackupArtifact{URI: "s3://" + velerostack.Bucket + "/" + key, SizeBytes: size, Checksum: sum}
	if err := cl.Status().Update(ctx, bk); err != nil {
		b.Fatal(err)
	}
	store, err := artifact.NewStore(stack.S3URL(), "us-east-1", velerostack.AccessKey, velerostack.SecretKey, stack.CACert)
	if err != nil {
		b.Fatal(err)
	}
	checker := &coffercheck.Checker{Reader: cl, Client: cl, Artifacts: artifact.Registry{ByScheme: map[string]artifact.Reader{"s3": store}}}
	run := &securityv1.BackupVerifyRun{ObjectMeta: metav1.ObjectMeta{Name: key, Namespace: "default"},
		Spec: securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendCoffer, BackupRef: securityv1.BackupRef{Name: key}, Mode: securityv1.ModeChecksumOnly}}
	for range b.N {
		t0 := time.Now()
		out, err := checker.Checksum(ctx, run)
		coffer := time.Since(t0)
		if err != nil || out.ComputedChecksum != sum {
			b.Fatalf("checksum-only: %v, computed %s, want %s", err, out.ComputedChecksum, sum)
		}
		u, err := mc.PresignedGetObject(ctx, velerostack.Bucket, key, time.Hour, nil)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		peerOut, err := exec.CommandContext(ctx, "sh", "-c", `curl -sf "$0" | openssl dgst -sha256`, u.String()).Output()
		peer := time.Since(t1)
		if err != nil || !strings.Contains(string(peerOut), strings.TrimPrefix(sum, "sha256:")) {
			b.Fatalf("curl | openssl: %v: %s", err, peerOut)
		}
		b.ReportMetric(coffer.Seconds(), "coffer-checksum-s")
		b.ReportMetric(peer.Seconds(), "curl+openssl-s")
		fmt.Fprintf(os.Stdout, "| 1 GiB artifact | coffer checksum-only %.2f s | curl <presigned> | openssl dgst -sha256 %.2f s | ratio %.2f |\n",
			coffer.Seconds(), peer.Seconds(), coffer.Seconds()/peer.Seconds())
	}
}
