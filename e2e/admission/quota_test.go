package admission

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
)

// TestTenantQuota: the sample quota of deploy/samples bounds what a tenant holding the shipped
// coffer-tenant role can create in its namespace, kind by kind, on a real API server with
// kube-controller-manager's quota controller: a tenant flooding RestoreJobs is refused at the
// quota's count, with the API server's "exceeded quota", and another tenant's namespace is not
// affected.
func TestTenantQuota(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	objs, err := manifests.Render(filepath.Join(root, "deploy", "samples"))
	require.NoError(t, err)
	sample := &corev1.ResourceQuota{}
	for _, o := range objs {
		if o.GetKind() == "ResourceQuota" {
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, sample))
		}
	}
	require.NotEmpty(t, sample.Spec.Hard, "deploy/samples has the tenant quota")
	limit := func(resource string) int {
		q, ok := sample.Spec.Hard[corev1.ResourceName("count/"+resource+"."+backupsv1.Group)]
		require.True(t, ok, "the sample quota counts %s", resource)
		return int(q.Value())
	}

	flooded, other := namespace(t), namespace(t)
	for _, ns := range []string{flooded, other} {
		q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: sample.Name, Namespace: ns}, Spec: sample.Spec}
		require.NoError(t, cl.Create(ctx, q))
		// The quota controller fills status.hard; admission counts against it from then on.
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			err := cl.Get(ctx, client.ObjectKeyFromObject(q), q)
			return err == nil && len(q.Status.Hard) == len(q.Spec.Hard), err
		}), "kube-controller-manager never computed the quota")
		bindTenant(t, "quota-tenant-"+ns, ns)
	}
	tenant := as(t, "quota-tenant-"+flooded)
	fill := func(kind string, n int, make func(i int) client.Object) {
		t.Helper()
		for i := range n {
			require.NoError(t, tenant.Create(ctx, make(i)), "%s %d of %d", kind, i+1, n)
		}
		err := tenant.Create(ctx, make(n))
		require.Error(t, err, "%s %d is over the quota", kind, n+1)
		assert.True(t, apierrors.IsForbidden(err), "%v", err)
		assert.Contains(t, err.Error(), "exceeded quota: "+sample.Name)
	}
	fill("RestoreJob", limit("restorejobs"), func(int) client.Object { return restoreJob(flooded, "") })
	fill("Plan", limit("plans"), func(int) client.Object { return classPlan(flooded, "quota-none") })
	fill("BackupJob", limit("backupjobs"), func(int) client.Object { return classJob(flooded, "quota-none") })

	q := &corev1.ResourceQuota{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: flooded, Name: sample.Name}, q))
	for name, hard := range q.Status.Hard {
		used := q.Status.Used[name]
		assert.Zero(t, hard.Cmp(used), "%s: used %s of %s", name, used.String(), hard.String())
	}

	// The other tenant's namespace is not touched by the flood.
	neighbour := as(t, "quota-tenant-"+other)
	require.NoError(t, neighbour.Create(ctx, restoreJob(other, "")))
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: other, Name: sample.Name}, q))
	used := q.Status.Used[corev1.ResourceName("count/restorejobs."+backupsv1.Group)]
	assert.Zero(t, used.Cmp(resource.MustParse("1")), "the neighbour's count: %s", used.String())
}
