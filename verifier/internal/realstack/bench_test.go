package realstack

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
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
