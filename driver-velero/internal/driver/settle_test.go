package driver

import (
	"context"
	"testing"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/coffer-backup/coffer/driver-velero/internal/names"
)

// TestUnsettledBackupLeavingTheCacheIsSuspect: a cached (unsettled) Velero backup that leaves the
// cache went, and its Backup is suspect (its next check reads the API server); one that leaves
// because it was settled does not make it suspect. Both wake the Backup.
func TestUnsettledBackupLeavingTheCacheIsSuspect(t *testing.T) {
	d := &Driver{}
	h := d.goneOrSettled(handler.EnqueueRequestsFromMapFunc(names.RunOf))
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	vb := func(run string, settled bool) *velerov1.Backup {
		o := &velerov1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "vb-" + run, Annotations: map[string]string{names.AnnotationRun: "tenant/" + run}}}
		if settled {
			markSettled(o)
		}
		return o
	}
	h.Delete(context.Background(), event.DeleteEvent{Object: vb("gone", false)}, q)
	h.Delete(context.Background(), event.DeleteEvent{Object: vb("settled", true)}, q)
	if !d.suspects.has(types.NamespacedName{Namespace: "tenant", Name: "gone"}) {
		t.Error("the Backup of an unsettled backup that left the cache is not suspect")
	}
	if d.suspects.has(types.NamespacedName{Namespace: "tenant", Name: "settled"}) {
		t.Error("the Backup of a backup settled out of the cache is suspect")
	}
	if q.Len() != 2 {
		t.Errorf("%d Backups woken, want 2", q.Len())
	}
}
