package driver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-job/internal/agent"
	"github.com/coffer-backup/coffer/driver-job/internal/driver"
	"github.com/coffer-backup/coffer/driver-job/internal/names"
	"github.com/coffer-backup/coffer/driverkit"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

var (
	minioOnce  sync.Once
	minioStack *velerostack.Stack
	minioDir   string
	minioErr   error
)

// stopMinIO stops the catalog tests' MinIO, if they started it, and removes its data.
func stopMinIO() {
	if minioStack != nil {
		minioStack.Stop()
	}
	if minioDir != "" {
		_ = os.RemoveAll(minioDir)
	}
}

// s3 is a MinIO shared by the catalog tests (stopped by TestMain).
func s3(t testing.TB) *velerostack.Stack {
	t.Helper()
	minioOnce.Do(func() {
		if minioDir, minioErr = os.MkdirTemp("", "jobdriver-catalog-minio-"); minioErr != nil {
			return
		}
		minioStack, minioErr = velerostack.StartMinIO(context.Background(), minioDir)
	})
	if minioErr != nil {
		t.Fatalf("starting MinIO: %v", minioErr)
	}
	return minioStack
}

// foreignRecord is the record cluster "a" wrote of Backup ns/name, whose artifact is at key.
func foreignRecord(ns, name, bucket, key string) *backupsv1.ArtifactRecord {
	group := jobapi.Group
	return &backupsv1.ArtifactRecord{
		APIVersion: backupsv1.RecordAPIVersion, Kind: backupsv1.RecordKind, Format: backupsv1.RecordFormat,
		SourceCluster: backupsv1.SourceCluster{ID: "0c1a57e5-0000-4000-8000-00000000000a", Name: "cluster-a"},
		Namespace:     ns, Name: name, UID: types.UID("5a0e0000-0000-4000-8000-0000000000" + name[len(name)-2:]),
		Labels: map[string]string{backupsv1.LabelPlan: "nightly"},
		Spec: backupsv1.BackupSpec{
			ApplicationRef: corev1.TypedLocalObjectReference{APIGroup: ptr.To("apps.cozystack.io"), Kind: "Shop", Name: "web"},
			PlanRef:        &corev1.LocalObjectReference{Name: "nightly"},
			StrategyRef:    corev1.TypedLocalObjectReference{APIGroup: &group, Kind: jobapi.Kind, Name: "files-in-cluster-a"},
			TakenAt:        metav1.NewTime(time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)),
			DriverMetadata: map[string]string{"param.bucket": bucket, "param.endpoint": "https://attacker.example", "artifact.format": "2"},
		},
		Artifact: backupsv1.BackupArtifact{URI: agent.ArtifactURI(bucket, key), SizeBytes: 5, Checksum: "sha256:" + strings.Repeat("0a", 32)},
	}
}

// driverNamespace creates the driver's namespace and, in it, the catalog's credentials Secret
// catalog-creds (MinIO's keys).
func driverNamespace(t *testing.T) *corev1.Namespace {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "coffer-system-"}}
	require.NoError(t, cl.Create(ctx, ns))
	require.NoError(t, cl.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "catalog-creds", Namespace: ns.Name},
		Data: map[string][]byte{agent.EnvAccessKeyID: []byte(velerostack.AccessKey), agent.EnvSecretAccessKey: []byte(velerostack.SecretKey)}}))
	return ns
}

func put(t *testing.T, bucket, key string, data []byte) {
	t.Helper()
	_, err := s3(t).S3.PutObject(context.Background(), bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{})
	require.NoError(t, err)
}

func putRecord(t *testing.T, bucket string, r *backupsv1.ArtifactRecord, withArtifact bool) {
	t.Helper()
	putRecordAt(t, bucket, strings.TrimPrefix(r.Artifact.URI, "s3://"+bucket+"/"), r, withArtifact)
}

func putRecordAt(t *testing.T, bucket, key string, r *backupsv1.ArtifactRecord, withArtifact bool) {
	t.Helper()
	if withArtifact {
		put(t, bucket, key, []byte("12345"))
	}
	data, err := json.Marshal(r) // as the agent writes it, without Marshal's checks: some are bad on purpose
	require.NoError(t, err)
	put(t, bucket, agent.RecordKey(key), data)
}

// TestCatalogImportsTheBackupsOfAnotherCluster: a strategy with a catalog imports, as Backups
// naming it, every valid record another cluster left in the bucket whose artifact is beside it,
// into the record's namespace or the mapped one; it skips, and says why, records of this
// cluster, invalid ones, ones whose artifact is gone or elsewhere, ones whose namespace does not
// exist and ones whose name a Backup already has (left untouched). A second sync changes nothing;
// an adopted Backup gets the finalizer; a Backup whose record is gone is removed; a crash between
// the create and the status write is completed, never duplicated; missing credentials are a
// False condition, not a crash loop.
func TestCatalogImportsTheBackupsOfAnotherCluster(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, func(s *jobapi.JobBackupStrategySpec) { s.CleanupTemplate = ptr.To(agentTemplate()) })
	stack := s3(t)
	bucket := strings.ToLower(strings.ReplaceAll(f.ns, "_", "-"))
	require.NoError(t, stack.S3.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: "us-east-1"}))

	driverNS := driverNamespace(t)
	f.strategy.Spec.Catalog = &jobapi.CatalogSource{Endpoint: "http://" + stack.S3Endpoint, Bucket: bucket,
		CredentialsSecretName: "catalog-creds", NamespaceMapping: map[string]backupsv1.NamespaceName{"tenant-in-a": backupsv1.NamespaceName(f.ns)}, IntervalSeconds: ptr.To[int32](60),
		Parameters: map[string]string{"bucket": "as-b-sees-it"}}
	require.NoError(t, cl.Update(ctx, f.strategy))

	ks := &corev1.Namespace{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Name: "kube-system"}, ks))
	mapped := foreignRecord("tenant-in-a", "nightly-01", bucket, "tenant-in-a/web/nightly-01.tar")
	same := foreignRecord(f.ns, "nightly-02", bucket, f.ns+"/web/nightly-02.tar")
	own := foreignRecord(f.ns, "nightly-03", bucket, f.ns+"/web/nightly-03.tar")
	own.SourceCluster.ID = string(ks.UID)
	orphan := foreignRecord(f.ns, "nightly-04", bucket, f.ns+"/web/nightly-04.tar")
	elsewhere := foreignRecord(f.ns, "nightly-05", bucket, f.ns+"/web/nightly-05.tar")
	noNamespace := foreignRecord("gone-in-b", "nightly-06", bucket, "gone-in-b/web/nightly-06.tar")
	taken := foreignRecord(f.ns, "nightly-07", bucket, f.ns+"/web/nightly-07.tar")
	for _, r := range []*backupsv1.ArtifactRecord{mapped, same, own, noNamespace, taken} {
		putRecord(t, bucket, r, true)
	}
	putRecord(t, bucket, orphan, false)
	elsewhere.Artifact.URI = "s3://another-bucket/x.tar"
	putRecordAt(t, bucket, f.ns+"/web/nightly-05.tar", elsewhere, true)
	put(t, bucket, f.ns+"/web/garbage.tar"+jobapi.RecordSuffix, []byte(`{"apiVersion":"v1","kind":"Secret"}`))
	// A record planted below another namespace's prefix, claiming f.ns: whoever wrote it could
	// write below tenant-in-a only.
	planted := foreignRecord(f.ns, "nightly-08", bucket, "tenant-in-a/web/nightly-08.tar")
	putRecord(t, bucket, planted, true)
	existing := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "nightly-07", Namespace: f.ns},
		Spec: backupsv1.BackupSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: "web"},
			StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr.To(jobapi.Group), Kind: jobapi.Kind, Name: f.strategy.Name}, TakenAt: metav1.Now()}}
	require.NoError(t, cl.Create(ctx, existing))

	// A crash between creating the first Backup and writing its status: the status write (an update
	// for a Backup just created, a patch for one found) fails once.
	var failed atomic.Bool // the sync writes Backups from several goroutines
	crashing := interceptor.NewClient(cl.(client.WithWatch), interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if _, ok := obj.(*backupsv1.Backup); ok && failed.CompareAndSwap(false, true) {
				return errors.New("the process died here")
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
		// A Backup the sync has just created gets its status by an update.
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if _, ok := obj.(*backupsv1.Backup); ok && failed.CompareAndSwap(false, true) {
				return errors.New("the process died here")
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		}})
	kit := driver.New(&driver.Driver{Client: cl, Live: cl, Scheme: sch, Recorder: f.rec}, f.clock)
	kit.ClusterName = "cluster-b"
	cat := &driver.Catalog{Client: crashing, Live: cl, Recorder: f.rec, Clock: f.clock, Namespace: driverNS.Name, Kit: kit}
	req := reconcile.Request{NamespacedName: client.ObjectKey{Name: f.strategy.Name}}
	_, err := cat.Reconcile(ctx, req)
	require.ErrorContains(t, err, "the process died here")
	afterCrash := &backupsv1.BackupList{}
	require.NoError(t, cl.List(ctx, afterCrash, client.InNamespace(f.ns), client.MatchingLabels{backupsv1.LabelImported: "true"}))
	createdBeforeCrash := int32(len(afterCrash.Items))
	res, err := cat.Reconcile(ctx, req)
	require.NoError(t, err)
	require.Equal(t, time.Minute, res.RequeueAfter, "the next sync after intervalSeconds")

	imported := func() map[string]backupsv1.Backup {
		list := &backupsv1.BackupList{}
		require.NoError(t, cl.List(ctx, list, client.InNamespace(f.ns), client.MatchingLabels{backupsv1.LabelImported: "true"}))
		out := map[string]backupsv1.Backup{}
		for _, b := range list.Items {
			out[b.Name] = b
		}
		return out
	}
	got := imported()
	require.Len(t, got, 2, "exactly the two importable records, once each")
	for name, r := range map[string]*backupsv1.ArtifactRecord{"nightly-01": mapped, "nightly-02": same} {
		b := got[name]
		require.Equal(t, backupsv1.BackupReady, b.Status.Phase, name)
		require.Equal(t, r.Artifact, *b.Status.Artifact, name)
		require.Equal(t, f.strategy.Name, b.Spec.StrategyRef.Name, "%s names the strategy that restores it here", name)
		require.Equal(t, r.Spec.ApplicationRef, b.Spec.ApplicationRef)
		require.Equal(t, map[string]string{"param.bucket": "as-b-sees-it", "artifact.format": "2"}, b.Spec.DriverMetadata,
			"the catalog's parameters replace the record's (its endpoint never reaches a restore); the rest is the record's")
		require.True(t, r.Spec.TakenAt.Equal(&b.Spec.TakenAt))
		require.Equal(t, "nightly", b.Labels[backupsv1.LabelPlan])
		require.Equal(t, r.SourceCluster.ID, b.Annotations[backupsv1.AnnotationSourceCluster])
		require.Equal(t, string(r.UID), b.Annotations[backupsv1.AnnotationSourceUID])
		require.Empty(t, b.Finalizers, "an imported Backup is read-only towards the source's data: deleting it deletes no artifact")
		require.True(t, b.ReadOnly())
	}
	untouched := &backupsv1.Backup{}
	require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(existing), untouched))
	require.Equal(t, existing.ResourceVersion, untouched.ResourceVersion, "a Backup the sync did not make is never written")

	strat := &jobapi.JobBackupStrategy{}
	require.NoError(t, cl.Get(ctx, req.NamespacedName, strat))
	st := strat.Status.Catalog
	require.NotNil(t, st)
	require.Positive(t, createdBeforeCrash)
	require.Equal(t, backupsv1.CatalogStatus{LastSyncTime: st.LastSyncTime, Records: 9, Imported: 2, Created: 2 - createdBeforeCrash, Own: 1, Skipped: 6}, *st,
		"9 records; the sync that crashed created some Backups, this one the rest, and no Backup twice")
	synced := meta.FindStatusCondition(strat.Status.Conditions, backupsv1.ConditionCatalogSynced)
	require.NotNil(t, synced)
	require.Equal(t, metav1.ConditionTrue, synced.Status)
	for _, why := range []string{"is gone", "not the object beside it", "gone-in-b does not exist", "was not imported from this record", "not backups.cozystack.io/v1alpha1 ArtifactRecord", "its key is below tenant-in-a/, not " + f.ns + "/"} {
		require.Contains(t, synced.Message, why)
	}

	// Again: nothing new, nothing written.
	before := imported()
	_, err = cat.Reconcile(ctx, req)
	require.NoError(t, err)
	after := imported()
	for name, b := range before {
		require.Equal(t, b.ResourceVersion, after[name].ResourceVersion, "%s is not written again", name)
	}
	require.NoError(t, cl.Get(ctx, req.NamespacedName, strat))
	require.Equal(t, int32(0), strat.Status.Catalog.Created)

	// A cache that has not seen the imported Backups yet (the list comes back empty): the creates
	// find them, they are recognised as this catalog's imports, and nothing changes.
	stale := interceptor.NewClient(cl.(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*backupsv1.BackupList); ok {
				return nil
			}
			return c.List(ctx, list, opts...)
		}})
	staleCat := &driver.Catalog{Client: stale, Live: cl, Recorder: f.rec, Clock: f.clock, Namespace: driverNS.Name, Kit: kit}
	_, err = staleCat.Reconcile(ctx, req)
	require.NoError(t, err)
	require.NoError(t, cl.Get(ctx, req.NamespacedName, strat))
	require.Equal(t, backupsv1.CatalogStatus{LastSyncTime: strat.Status.Catalog.LastSyncTime, Records: 9, Imported: 2, Own: 1, Skipped: 6}, *strat.Status.Catalog)
	for name, b := range imported() {
		require.Equal(t, after[name].ResourceVersion, b.ResourceVersion, "%s is not written again", name)
	}

	// Adopted: the Backup becomes this cluster's, and its deletion will delete the artifact.
	b := after["nightly-02"]
	b.Annotations[backupsv1.AnnotationAdopted] = "true"
	require.NoError(t, cl.Update(ctx, &b))
	_, err = cat.Reconcile(ctx, req)
	require.NoError(t, err)
	require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(&b), &b))
	require.Equal(t, []string{names.Finalizer}, b.Finalizers)
	require.False(t, b.ReadOnly())

	// The source deleted nightly-01: its artifact, then its record. The imported Backup goes.
	for _, k := range []string{"tenant-in-a/web/nightly-01.tar", "tenant-in-a/web/nightly-01.tar" + jobapi.RecordSuffix} {
		require.NoError(t, stack.S3.RemoveObject(ctx, bucket, k, minio.RemoveObjectOptions{}))
	}
	_, err = cat.Reconcile(ctx, req)
	require.NoError(t, err)
	err = cl.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "nightly-01"}, &backupsv1.Backup{})
	require.True(t, apierrors.IsNotFound(err), "the Backup of a deleted artifact is removed: %v", err)
	require.NoError(t, cl.Get(ctx, req.NamespacedName, strat))
	require.Equal(t, int32(1), strat.Status.Catalog.Removed)

	// Credentials gone: a False condition saying so; nothing removed.
	require.NoError(t, cl.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "catalog-creds", Namespace: driverNS.Name}}))
	_, err = cat.Reconcile(ctx, req)
	require.NoError(t, err)
	require.NoError(t, cl.Get(ctx, req.NamespacedName, strat))
	synced = meta.FindStatusCondition(strat.Status.Conditions, backupsv1.ConditionCatalogSynced)
	require.Equal(t, metav1.ConditionFalse, synced.Status)
	require.Equal(t, backupsv1.ReasonCatalogCredentials, synced.Reason)
	require.Contains(t, synced.Message, "catalog-creds")
	require.Len(t, imported(), 1)
}

// TestCatalogMapsARecordByTheFirstSegmentOfItsKey: two tenants' catalogs share a bucket, each with
// the prefix of its own namespace, as docs/disaster-recovery.md recommends. Whoever may write below
// tenant A's prefix plants, at A/B/..., a record claiming a Backup of tenant B under the name of
// B's genuine record. A's catalog imports nothing into B and says why in its status; B's catalog
// imports B's genuine record under that name.
func TestCatalogMapsARecordByTheFirstSegmentOfItsKey(t *testing.T) {
	ctx := context.Background()
	fa := newFixture(t, nil) // tenant A: its namespace, strategy and class
	fb := newFixture(t, nil) // tenant B
	nsA, nsB := fa.ns, fb.ns
	stack := s3(t)
	bucket := strings.ToLower(nsA)
	require.NoError(t, stack.S3.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: "us-east-1"}))
	driverNS := driverNamespace(t)
	for _, f := range []*fixture{fa, fb} {
		f.strategy.Spec.Catalog = &jobapi.CatalogSource{Endpoint: "http://" + stack.S3Endpoint, Bucket: bucket, Prefix: f.ns + "/",
			CredentialsSecretName: "catalog-creds", Parameters: map[string]string{"bucket": bucket}}
		require.NoError(t, cl.Update(ctx, f.strategy))
	}

	ownA := foreignRecord(nsA, "nightly-01", bucket, nsA+"/web/nightly-01.tar")
	planted := foreignRecord(nsB, "nightly-02", bucket, nsA+"/"+nsB+"/web/nightly-02.tar")
	planted.Artifact.SizeBytes = 666
	genuine := foreignRecord(nsB, "nightly-02", bucket, nsB+"/web/nightly-02.tar")
	for _, r := range []*backupsv1.ArtifactRecord{ownA, planted, genuine} {
		putRecord(t, bucket, r, true)
	}

	kit := driver.New(&driver.Driver{Client: cl, Live: cl, Scheme: sch, Recorder: fa.rec}, fa.clock)
	cat := &driver.Catalog{Client: cl, Live: cl, Recorder: fa.rec, Clock: fa.clock, Namespace: driverNS.Name, Kit: kit}
	sync := func(f *fixture) *jobapi.JobBackupStrategy {
		req := reconcile.Request{NamespacedName: client.ObjectKey{Name: f.strategy.Name}}
		_, err := cat.Reconcile(ctx, req)
		require.NoError(t, err)
		strat := &jobapi.JobBackupStrategy{}
		require.NoError(t, cl.Get(ctx, req.NamespacedName, strat))
		return strat
	}
	// A's catalog first: the planted record would take the name before B's genuine one.
	stratA := sync(fa)
	require.Equal(t, backupsv1.CatalogStatus{LastSyncTime: stratA.Status.Catalog.LastSyncTime, Records: 2, Imported: 1, Created: 1, Skipped: 1}, *stratA.Status.Catalog,
		"A's own record imported; the planted one skipped")
	synced := meta.FindStatusCondition(stratA.Status.Conditions, backupsv1.ConditionCatalogSynced)
	require.Contains(t, synced.Message, "the record says namespace "+nsB+", but its key is below "+nsA+"/")
	list := &backupsv1.BackupList{}
	require.NoError(t, cl.List(ctx, list, client.InNamespace(nsB)))
	require.Empty(t, list.Items, "nothing of A's prefix is imported into B")

	stratB := sync(fb)
	require.Equal(t, int32(1), stratB.Status.Catalog.Imported)
	b := &backupsv1.Backup{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: nsB, Name: "nightly-02"}, b))
	require.Equal(t, genuine.Artifact, *b.Status.Artifact, "B's own record holds the name")
	require.Equal(t, agent.ArtifactURI(bucket, agent.RecordKey(nsB+"/web/nightly-02.tar")), b.Annotations[backupsv1.AnnotationRecord])
}

// A sync that runs a while says how far it is on the strategy (status.catalog.syncing: reading
// the records, then importing their Backups, done of total), and says nothing of it once it
// ended. Progress is written every driverkit.CatalogProgressEvery: here after every record.
func TestCatalogSyncReportsProgress(t *testing.T) {
	ctx := context.Background()
	every := driverkit.CatalogProgressEvery
	driverkit.CatalogProgressEvery = 0
	t.Cleanup(func() { driverkit.CatalogProgressEvery = every })
	f := newFixture(t, nil)
	stack := s3(t)
	bucket := strings.ToLower(f.ns) + "-progress"
	require.NoError(t, stack.S3.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: "us-east-1"}))
	driverNS := driverNamespace(t)
	f.strategy.Spec.Catalog = &jobapi.CatalogSource{Endpoint: "http://" + stack.S3Endpoint, Bucket: bucket,
		CredentialsSecretName: "catalog-creds", Parameters: map[string]string{"bucket": bucket}}
	require.NoError(t, cl.Update(ctx, f.strategy))
	const n = 12
	for i := range n {
		name := fmt.Sprintf("nightly-%02d", i)
		putRecord(t, bucket, foreignRecord(f.ns, name, bucket, f.ns+"/web/"+name+".tar"), true)
	}

	w, err := cl.Watch(ctx, &jobapi.JobBackupStrategyList{}, client.MatchingFields{"metadata.name": f.strategy.Name})
	require.NoError(t, err)
	defer w.Stop()
	var seen []backupsv1.CatalogProgress
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ev := range w.ResultChan() {
			if s, ok := ev.Object.(*jobapi.JobBackupStrategy); ok && s.Status.Catalog != nil {
				if p := s.Status.Catalog.Syncing; p != nil {
					seen = append(seen, *p)
				} else if s.Status.Catalog.LastSyncTime != nil {
					return // the report: the sync ended
				}
			}
		}
	}()
	kit := driver.New(&driver.Driver{Client: cl, Live: cl, Scheme: sch, Recorder: f.rec}, f.clock)
	cat := &driver.Catalog{Client: cl, Live: cl, Recorder: f.rec, Clock: f.clock, Namespace: driverNS.Name, Kit: kit}
	_, err = cat.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Name: f.strategy.Name}})
	require.NoError(t, err)
	select {
	case <-watched:
	case <-time.After(30 * time.Second):
		t.Fatal("the sync's report was not seen")
	}
	phases := map[string]bool{}
	for _, p := range seen {
		phases[p.Phase] = true
		assert.Equal(t, int32(n), p.Total, "%+v", p)
		assert.LessOrEqual(t, p.Done, p.Total)
		assert.Positive(t, p.Done)
		assert.False(t, p.StartTime.IsZero())
	}
	assert.True(t, phases[backupsv1.CatalogReading], "reading the records was reported: %+v", seen)
	assert.True(t, phases[backupsv1.CatalogImporting], "importing their Backups was reported: %+v", seen)

	strat := &jobapi.JobBackupStrategy{}
	require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(f.strategy), strat))
	require.NotNil(t, strat.Status.Catalog)
	assert.Nil(t, strat.Status.Catalog.Syncing, "no progress once the sync ended")
	assert.Equal(t, int32(n), strat.Status.Catalog.Created)
	assert.Equal(t, metav1.ConditionTrue, meta.FindStatusCondition(strat.Status.Conditions, backupsv1.ConditionCatalogSynced).Status)
}

// recordGets is a proxy to the tests' MinIO that counts the reads (GETs) of records.
type recordGets struct {
	n        atomic.Int64
	endpoint string
}

func countRecordGets(t *testing.T) *recordGets {
	t.Helper()
	target, err := url.Parse("http://" + s3(t).S3Endpoint)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target) // the Host header stays the one the client signed
	g := &recordGets{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, jobapi.RecordSuffix) {
			g.n.Add(1)
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	g.endpoint = "http://" + srv.Listener.Addr().String()
	return g
}

// The catalog keeps, of each record it read, its ETag and identity, not the record: a sync reads
// only the records that changed, and those whose Backup must be made or completed (read again at
// the ETag it knows).
func TestCatalogReadsOnlyTheRecordsItMustImport(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, nil)
	stack := s3(t)
	gets := countRecordGets(t)
	bucket := strings.ToLower(f.ns) + "-reads"
	require.NoError(t, stack.S3.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: "us-east-1"}))
	driverNS := driverNamespace(t)
	f.strategy.Spec.Catalog = &jobapi.CatalogSource{Endpoint: gets.endpoint, Bucket: bucket, CredentialsSecretName: "catalog-creds", Parameters: map[string]string{"bucket": bucket}}
	require.NoError(t, cl.Update(ctx, f.strategy))
	recs := map[string]*backupsv1.ArtifactRecord{}
	for _, name := range []string{"nightly-01", "nightly-02", "nightly-03"} {
		recs[name] = foreignRecord(f.ns, name, bucket, f.ns+"/web/"+name+".tar")
		putRecord(t, bucket, recs[name], true)
	}
	kit := driver.New(&driver.Driver{Client: cl, Live: cl, Scheme: sch, Recorder: f.rec}, f.clock)
	cat := &driver.Catalog{Client: cl, Live: cl, Recorder: f.rec, Clock: f.clock, Namespace: driverNS.Name, Kit: kit}
	sync := func() backupsv1.CatalogStatus {
		t.Helper()
		gets.n.Store(0)
		_, err := cat.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Name: f.strategy.Name}})
		require.NoError(t, err)
		strat := &jobapi.JobBackupStrategy{}
		require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(f.strategy), strat))
		require.Equal(t, metav1.ConditionTrue, meta.FindStatusCondition(strat.Status.Conditions, backupsv1.ConditionCatalogSynced).Status)
		st := *strat.Status.Catalog
		st.LastSyncTime = nil
		return st
	}

	require.Equal(t, backupsv1.CatalogStatus{Records: 3, Imported: 3, Created: 3}, sync())
	require.Equal(t, int64(3), gets.n.Load(), "the first sync reads each record once")
	require.Equal(t, backupsv1.CatalogStatus{Records: 3, Imported: 3}, sync())
	require.Zero(t, gets.n.Load(), "nothing changed: no record is read")

	// nightly-01's Backup deleted by hand, nightly-02's left without its status (a crash): both
	// records are read again, and nothing else.
	require.NoError(t, cl.Delete(ctx, &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "nightly-01"}}))
	b := &backupsv1.Backup{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "nightly-02"}, b))
	b.Status = backupsv1.BackupStatus{}
	require.NoError(t, cl.Status().Update(ctx, b))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(cl.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "nightly-01"}, &backupsv1.Backup{}))
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, backupsv1.CatalogStatus{Records: 3, Imported: 3, Created: 1}, sync())
	require.Equal(t, int64(2), gets.n.Load(), "the records of the Backups to make or complete are read again, the third not")
	for _, name := range []string{"nightly-01", "nightly-02"} {
		require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: name}, b))
		require.Equal(t, backupsv1.BackupReady, b.Status.Phase, name)
		require.Equal(t, recs[name].Artifact, *b.Status.Artifact, name)
	}

	// A changed record is read at its new ETag.
	recs["nightly-03"].Labels[backupsv1.LabelPlan] = "weekly"
	putRecord(t, bucket, recs["nightly-03"], false)
	require.Equal(t, backupsv1.CatalogStatus{Records: 3, Imported: 3}, sync())
	require.Equal(t, int64(1), gets.n.Load())

	// A record gone from the bucket is forgotten; the others stay known.
	require.Equal(t, 3, cat.Known(f.strategy.Name))
	require.NoError(t, stack.S3.RemoveObject(ctx, bucket, agent.RecordKey(strings.TrimPrefix(recs["nightly-01"].Artifact.URI, "s3://"+bucket+"/")), minio.RemoveObjectOptions{}))
	require.Equal(t, backupsv1.CatalogStatus{Records: 2, Imported: 2, Removed: 1}, sync())
	require.Zero(t, gets.n.Load())
	require.Equal(t, 2, cat.Known(f.strategy.Name), "the catalog forgets the record no longer listed")
}

// A record is imported only as it was at the ETag the catalog decided on: one that changed between
// the listing and its read is not imported in that sync (its read fails, the sync is incomplete),
// and is imported, as it now is, by the next.
func TestCatalogImportsARecordOnlyAtTheETagItListed(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, nil)
	stack := s3(t)
	bucket := strings.ToLower(f.ns) + "-etag"
	require.NoError(t, stack.S3.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: "us-east-1"}))
	driverNS := driverNamespace(t)
	later := f.ns + "-later" // the namespace the record is imported into, created after the first sync
	f.strategy.Spec.Catalog = &jobapi.CatalogSource{Endpoint: "http://" + stack.S3Endpoint, Bucket: bucket, CredentialsSecretName: "catalog-creds",
		NamespaceMapping: map[string]backupsv1.NamespaceName{f.ns: backupsv1.NamespaceName(later)}, Parameters: map[string]string{"bucket": bucket}}
	require.NoError(t, cl.Update(ctx, f.strategy))
	r := foreignRecord(f.ns, "nightly-01", bucket, f.ns+"/web/nightly-01.tar")
	putRecord(t, bucket, r, true)

	// The record is rewritten once the bucket is listed (the catalog lists the Backups then).
	var rewrite atomic.Pointer[backupsv1.ArtifactRecord]
	racing := interceptor.NewClient(cl.(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*backupsv1.BackupList); ok {
				if changed := rewrite.Swap(nil); changed != nil {
					putRecord(t, bucket, changed, false)
				}
			}
			return c.List(ctx, list, opts...)
		}})
	kit := driver.New(&driver.Driver{Client: cl, Live: cl, Scheme: sch, Recorder: f.rec}, f.clock)
	cat := &driver.Catalog{Client: racing, Live: cl, Recorder: f.rec, Clock: f.clock, Namespace: driverNS.Name, Kit: kit}
	req := reconcile.Request{NamespacedName: client.ObjectKey{Name: f.strategy.Name}}
	synced := func() *metav1.Condition {
		t.Helper()
		_, err := cat.Reconcile(ctx, req)
		require.NoError(t, err)
		strat := &jobapi.JobBackupStrategy{}
		require.NoError(t, cl.Get(ctx, req.NamespacedName, strat))
		return meta.FindStatusCondition(strat.Status.Conditions, backupsv1.ConditionCatalogSynced)
	}
	imported := func() *backupsv1.Backup {
		b := &backupsv1.Backup{}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: later, Name: "nightly-01"}, b); apierrors.IsNotFound(err) {
			return nil
		} else {
			require.NoError(t, err)
		}
		return b
	}

	// Read, and not imported: its namespace does not exist yet. The catalog knows it now.
	require.Contains(t, synced().Message, later+" does not exist")
	require.NoError(t, cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: later}}))

	// Its Backup must be made now, from the record the catalog knows; the record changes first.
	changed := foreignRecord(f.ns, "nightly-01", bucket, f.ns+"/web/nightly-01.tar")
	changed.Artifact.SizeBytes = 666
	changed.Spec.PlanRef = &corev1.LocalObjectReference{Name: "planted"}
	rewrite.Store(changed)
	cond := synced()
	require.Nil(t, rewrite.Load(), "the record was rewritten during the sync")
	require.Equal(t, metav1.ConditionFalse, cond.Status, cond.Message)
	require.Equal(t, backupsv1.ReasonCatalogUnreadable, cond.Reason)
	require.Contains(t, cond.Message, "1 of 1 record(s)")
	require.Nil(t, imported(), "nothing is imported from a record that is not the one listed")

	// The next sync lists the record as it now is, and imports that.
	cond = synced()
	require.Equal(t, metav1.ConditionTrue, cond.Status, cond.Message)
	b := imported()
	require.NotNil(t, b)
	require.Equal(t, changed.Artifact, *b.Status.Artifact)
	require.Equal(t, "planted", b.Spec.PlanRef.Name)
}
