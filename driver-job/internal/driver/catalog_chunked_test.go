package driver_test

import (
	"context"
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-job/internal/agent"
	"github.com/coffer-backup/coffer/driver-job/internal/driver"
)

// TestCatalogImportsChunkedBackups: the chunked Backups another cluster made (real agent backups,
// the second storing only what changed) are imported like any other, their repository's objects
// are not taken for records, and each imported Backup restores on its own, byte for byte.
func TestCatalogImportsChunkedBackups(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, nil)
	stack := s3(t)
	bucket := strings.ToLower(strings.ReplaceAll(f.ns, "_", "-"))
	require.NoError(t, stack.S3.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: "us-east-1"}))
	driverNS := driverNamespace(t)
	f.strategy.Spec.Catalog = &jobapi.CatalogSource{Endpoint: "http://" + stack.S3Endpoint, Bucket: bucket,
		CredentialsSecretName: "catalog-creds", IntervalSeconds: ptr.To[int32](60)}
	require.NoError(t, cl.Update(ctx, f.strategy))

	// Cluster A's backups of one application, into its repository below the prefix.
	dir := t.TempDir()
	files := map[string][]byte{}
	write := func(name string, n int) {
		data := make([]byte, n)
		_, _ = rand.Read(data)
		files[name] = data
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o644))
	}
	for _, n := range []string{"a", "b", "c"} {
		write(n, 300<<10)
	}
	prefix := f.ns + "/web"
	a := &agent.Agent{S3: stack.S3, Log: io.Discard, CompressionLevel: 1, Chunked: true, Repository: prefix + "/.coffer/" + f.ns}
	trees := map[string]map[string][]byte{}
	var stored []string
	for i, name := range []string{"nightly-11", "nightly-12"} {
		if i == 1 {
			write("b", 300<<10)
		}
		a.Record = foreignRecord(f.ns, name, bucket, prefix+"/"+name+".tar")
		report, err := a.Backup(ctx, dir, bucket, prefix+"/"+name+".tar")
		require.NoError(t, err)
		stored = append(stored, report.Metadata[agent.MetaStoredBytes])
		trees[name] = map[string][]byte{}
		for k, v := range files {
			trees[name][k] = v
		}
	}
	require.NotEqual(t, "0", stored[1], "the second backup stored the changed file")

	kit := driver.New(&driver.Driver{Client: cl, Live: cl, Scheme: sch, Recorder: f.rec}, f.clock)
	kit.ClusterName = "cluster-b"
	cat := &driver.Catalog{Client: cl, Live: cl, Recorder: f.rec, Clock: f.clock, Namespace: driverNS.Name, Kit: kit}
	_, err := cat.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Name: f.strategy.Name}})
	require.NoError(t, err)
	strat := &jobapi.JobBackupStrategy{}
	require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(f.strategy), strat))
	require.NotNil(t, strat.Status.Catalog)
	require.Equal(t, int32(2), strat.Status.Catalog.Records, "the two records; the repository's packs and records are not records")
	require.Equal(t, int32(2), strat.Status.Catalog.Imported)

	for name, want := range trees {
		b := &backupsv1.Backup{}
		require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: name}, b))
		require.Equal(t, backupsv1.BackupReady, b.Status.Phase, name)
		require.Equal(t, "4", b.Spec.DriverMetadata["artifact.format"], name)
		require.Equal(t, "s3://"+bucket+"/"+prefix+"/.coffer/"+f.ns, b.Spec.DriverMetadata["artifact.repository"], name)
		require.NotEmpty(t, b.Spec.DriverMetadata["artifact."+jobapi.MetaPackList], name)

		target := t.TempDir()
		bkt, key, err := backupsv1.ParseS3URI(b.Status.Artifact.URI)
		require.NoError(t, err)
		restorer := &agent.Agent{S3: stack.S3, Log: io.Discard}
		_, err = restorer.Restore(ctx, target, agent.Artifact{Bucket: bkt, Key: key, Checksum: b.Status.Artifact.Checksum, SizeBytes: b.Status.Artifact.SizeBytes})
		require.NoError(t, err, "restoring the imported %s", name)
		for f, data := range want {
			got, err := os.ReadFile(filepath.Join(target, f))
			require.NoError(t, err)
			require.Equal(t, data, got, "%s of %s", f, name)
		}
	}
}
