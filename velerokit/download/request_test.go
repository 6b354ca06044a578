package download

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

// TestRequestAsksAgainWhenExpiring: a DownloadRequest left over from an earlier attempt, whose URL
// is about to expire, is deleted and created again, and Request returns the new request's URL
// (before, it waited for the deleted request until its timeout). The API server is real; the test
// plays Velero's part of processing the requests.
func TestRequestAsksAgainWhenExpiring(t *testing.T) {
	assets, err := velerostack.Assets()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{})
	require.NoError(t, err)
	defer func() { _ = c.Stop() }()
	sch := runtime.NewScheme()
	require.NoError(t, velerov1.AddToScheme(sch))
	require.NoError(t, corev1.AddToScheme(sch))
	cl, err := client.New(c.Config, client.Options{Scheme: sch})
	require.NoError(t, err)
	require.NoError(t, velerostack.InstallCRDs(ctx, cl, assets+"/velero"))
	require.NoError(t, cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "velero"}}))

	target := velerov1.DownloadTarget{Kind: velerov1.DownloadTargetKindBackupContents, Name: "b1"}
	stale := &velerov1.DownloadRequest{ObjectMeta: metav1.ObjectMeta{Name: "b1-contents", Namespace: "velero"},
		Spec: velerov1.DownloadRequestSpec{Target: target}}
	require.NoError(t, cl.Create(ctx, stale))
	process(t, ctx, cl, stale, "https://store.example/old?X-Amz-Signature=old", time.Now().Add(5*time.Second))

	// Velero's part: process the fresh request once it exists.
	go func() {
		for ctx.Err() == nil {
			got := &velerov1.DownloadRequest{}
			err := cl.Get(ctx, client.ObjectKeyFromObject(stale), got)
			if err == nil && got.UID != stale.UID && got.Status.Phase == "" {
				got.Status = velerov1.DownloadRequestStatus{Phase: velerov1.DownloadRequestPhaseProcessed,
					DownloadURL: "https://store.example/new", Expiration: &metav1.Time{Time: time.Now().Add(10 * time.Minute)}}
				_ = writeStatus(ctx, cl, got)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	url, err := Request(ctx, cl, cl, "velero", "b1-contents", target, 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, "https://store.example/new", url)
}

func process(t *testing.T, ctx context.Context, cl client.Client, dr *velerov1.DownloadRequest, url string, expires time.Time) {
	t.Helper()
	dr.Status = velerov1.DownloadRequestStatus{Phase: velerov1.DownloadRequestPhaseProcessed, DownloadURL: url, Expiration: &metav1.Time{Time: expires}}
	require.NoError(t, writeStatus(ctx, cl, dr))
}

// writeStatus writes a DownloadRequest's status, through the status subresource when its CRD has
// one.
func writeStatus(ctx context.Context, cl client.Client, dr *velerov1.DownloadRequest) error {
	err := cl.Status().Update(ctx, dr)
	if apierrors.IsNotFound(err) {
		return cl.Update(ctx, dr)
	}
	return err
}
