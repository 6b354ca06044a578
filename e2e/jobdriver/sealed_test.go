//go:build e2e

package jobdriver

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// sealed backs up an application with compression and encryption on (a strategy naming a key
// Secret), on real Jobs: the stored object is a format-2 artifact that holds none of the plain
// data, opens with the standard tools' libraries (age, zstd, tar) given the private key, and is
// smaller than its tar; it restores byte for byte. A restore given only another key fails before
// writing, naming both keys; once the old key is back beside the new one (a rotation), the old
// Backup restores again, and a new backup names the new key. Then the strategy switches to the
// Chunked format.
func (e *env) sealed(t *testing.T) {
	ctx := e.ctx
	ns, err := e.n.Cluster.Namespace(ctx, "sealed")
	require.NoError(t, err)
	require.NoError(t, e.cl.Create(ctx, e.credentials(ns)))
	oldKey, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	newKey, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "shop-keys", Namespace: ns}, StringData: map[string]string{
		"recipients": "# the shop's backup key\n" + oldKey.Recipient().String() + "\n",
		"identities": oldKey.String() + "\n",
	}}
	require.NoError(t, e.cl.Create(ctx, keys))

	strat := e.strategy("")
	strat.Spec.Artifact = &jobapi.ArtifactOptions{CompressionLevel: ptr.To[int32](3), Encryption: &jobapi.ArtifactEncryption{SecretName: keys.Name}}
	require.NoError(t, e.cl.Create(ctx, strat))
	class := e.class(t, ns, strat)
	e.application(t, ns, "shop")
	dir := e.dir(ns, "shop")
	// Compressible data beside the random blob: JSON log lines, as applications write them.
	var logs bytes.Buffer
	for i := 0; logs.Len() < 2<<20; i++ {
		fmt.Fprintf(&logs, `{"ts":"2031-03-01T07:%02d:%02dZ","level":"info","path":"/api/v1/orders/%d","status":200,"latency_ms":%d}`+"\n", i/60%60, i%60, i, i%250)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "orders", "access.log"), logs.Bytes(), 0o640))
	require.NoError(t, os.Lchown(filepath.Join(dir, "orders", "access.log"), agentUID, agentUID))
	original := tree(t, dir)

	backup := func(name string) (*backupsv1.Backup, []byte) {
		t.Helper()
		bj := &backupsv1.BackupJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: backupsv1.BackupJobSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"}, BackupClassName: class.Name}}
		require.NoError(t, e.cl.Create(ctx, bj))
		e.wait(t, "the BackupJob", bj, bj.IsTerminal)
		require.Equal(t, backupsv1.BackupJobSucceeded, bj.Status.Phase, bj.Status.Message)
		b := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: bj.Name, Namespace: ns}}
		e.wait(t, "the Backup", b, func() bool { return b.Status.Phase == backupsv1.BackupReady })
		key := strings.TrimPrefix(b.Status.Artifact.URI, "s3://"+bucket+"/")
		obj, err := e.s3.S3.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
		require.NoError(t, err)
		stored, err := io.ReadAll(obj)
		require.NoError(t, err)
		sum := sha256.Sum256(stored)
		require.Equal(t, "sha256:"+hex.EncodeToString(sum[:]), b.Status.Artifact.Checksum, "the checksum covers the stored (compressed, encrypted) bytes")
		require.Equal(t, int64(len(stored)), b.Status.Artifact.SizeBytes)
		return b, stored
	}
	restore := func(name string, b *backupsv1.Backup) *backupsv1.RestoreJob {
		t.Helper()
		rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: b.Name}}}
		require.NoError(t, e.cl.Create(ctx, rj))
		e.wait(t, "the RestoreJob "+name, rj, rj.IsTerminal)
		return rj
	}
	setKeys := func(recipients, identities string) {
		t.Helper()
		require.NoError(t, e.cl.Get(ctx, client.ObjectKeyFromObject(keys), keys))
		keys.Data = map[string][]byte{"recipients": []byte(recipients), "identities": []byte(identities)}
		require.NoError(t, e.cl.Update(ctx, keys))
	}

	b, stored := backup("sealed-1")
	keyRef := fingerprint(oldKey.Recipient().String())
	h := parseHeader(t, stored)
	assert.Equal(t, artifactHeader{version: 3, compression: 1, encryption: 1, keyRef: keyRef}, h.artifactHeader, "a format-3 header: zstd, age, the key's reference")
	md := b.Spec.DriverMetadata
	assert.Equal(t, "age", md[jobapi.MetadataPrefix+"encryption"])
	assert.Equal(t, "zstd-3", md[jobapi.MetadataPrefix+"compression"])
	assert.Equal(t, keyRef, md[jobapi.MetadataPrefix+"keyRef"], "the Backup names the key it needs")
	for _, plain := range []string{"tea\ncoffee", `"path":"/api/v1/orders/`, "orders/2031/03.csv"} {
		assert.NotContains(t, string(stored), plain, "the stored object holds no plain data")
	}
	blob, err := os.ReadFile(filepath.Join(dir, "media", "blob.bin"))
	require.NoError(t, err)
	assert.False(t, bytes.Contains(stored, blob[:64]), "the stored object holds no plain data")

	// The standard libraries open it with the private key: age, then zstd, then tar.
	listed := openArtifact(t, stored[h.payload:], oldKey)
	tarBytes, err := strconv.ParseInt(md[jobapi.MetadataPrefix+"uncompressedBytes"], 10, 64)
	require.NoError(t, err)
	assert.Equal(t, tarBytes, listed.tarBytes, "the reported uncompressed size is the tar's")
	assert.Less(t, int64(len(stored)), listed.tarBytes-(1<<20), "compression saved at least the compressible log's first MiB")
	for p, want := range original {
		if strings.HasPrefix(want, "file ") {
			assert.Equal(t, want[strings.LastIndexByte(want, ' ')+1:], listed.files[p], "the artifact holds %s as it was", p)
		}
	}
	assert.Equal(t, listed.files, listed.manifest, "the manifest lists every file of the tar with its SHA-256, and nothing else")
	t.Logf("sealed artifact: %d bytes stored for a %d-byte tar (ratio %s), key %s", len(stored), listed.tarBytes, md[jobapi.MetadataPrefix+"compressionRatio"], keyRef)

	// Data lost, then restored byte for byte.
	wipe(t, dir)
	rj := restore("undo", b)
	require.Equal(t, backupsv1.RestoreJobSucceeded, rj.Status.Phase, rj.Status.Message)
	require.Equal(t, original, tree(t, dir), "every file back, identical")

	// Only another key: the restore fails before writing, naming both keys.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "catalog.txt"), []byte("edited after the backup\n"), 0o640))
	before := tree(t, dir)
	setKeys(newKey.Recipient().String()+"\n", newKey.String()+"\n")
	rj = restore("with-another-key", b)
	require.Equal(t, backupsv1.RestoreJobFailed, rj.Status.Phase)
	assert.Contains(t, rj.Status.Message, "wrong key", "the agent's reason reaches the RestoreJob")
	assert.Contains(t, rj.Status.Message, keyRef, "it names the key the artifact needs")
	assert.Contains(t, rj.Status.Message, fingerprint(newKey.Recipient().String()), "and the key it was given")
	require.Equal(t, before, tree(t, dir), "nothing was written")

	// Rotation: the old identity kept beside the new one restores the old Backup; new backups are
	// encrypted to the new key only.
	setKeys(newKey.Recipient().String()+"\n", newKey.String()+"\n"+oldKey.String()+"\n")
	rj = restore("after-rotation", b)
	require.Equal(t, backupsv1.RestoreJobSucceeded, rj.Status.Phase, rj.Status.Message)
	require.Equal(t, original, tree(t, dir), "the old Backup restores with the kept old key")
	b2, stored2 := backup("sealed-2")
	h2 := parseHeader(t, stored2)
	assert.Equal(t, fingerprint(newKey.Recipient().String()), h2.keyRef, "a new backup names the new key")
	assert.Equal(t, h2.keyRef, b2.Spec.DriverMetadata[jobapi.MetadataPrefix+"keyRef"])
	_, err = age.Decrypt(bytes.NewReader(stored2[h2.payload:]), oldKey)
	var noMatch *age.NoIdentityMatchError
	assert.ErrorAs(t, err, &noMatch, "the old key does not open a backup made after the rotation")

	// The Chunked format, switched on for the same strategy: the next backup stores the tree as
	// chunks in the namespace's repository and an index; the one after stores nothing, since
	// nothing changed; the index alone restores the tree, and the older tar Backups still restore.
	require.NoError(t, e.cl.Get(ctx, client.ObjectKeyFromObject(keys), keys))
	keys.Data["chunkKey"] = []byte("the shop's chunk key, random enough for a test")
	require.NoError(t, e.cl.Update(ctx, keys))
	require.NoError(t, e.cl.Get(ctx, client.ObjectKeyFromObject(strat), strat))
	strat.Spec.Artifact.Format = jobapi.ArtifactFormatChunked
	require.NoError(t, e.cl.Update(ctx, strat))
	c1, index1 := backup("chunked-1")
	assert.Equal(t, byte(4), parseHeader(t, index1).version, "a format-4 index")
	prefix := path.Dir(strings.TrimPrefix(c1.Status.Artifact.URI, "s3://"+bucket+"/")) // the namespace, then the application here
	assert.True(t, strings.HasPrefix(prefix, ns+"/"), prefix)
	assert.Equal(t, "s3://"+bucket+"/"+prefix+"/.coffer/"+ns, c1.Spec.DriverMetadata[jobapi.MetadataPrefix+"repository"], "the repository is below the prefix, and the namespace's")
	assert.NotEqual(t, "0", c1.Spec.DriverMetadata[jobapi.MetadataPrefix+"storedBytes"])
	c2, _ := backup("chunked-2")
	assert.Equal(t, "0", c2.Spec.DriverMetadata[jobapi.MetadataPrefix+"storedBytes"], "nothing changed, nothing stored")
	assert.Equal(t, "0", c2.Spec.DriverMetadata[jobapi.MetadataPrefix+"uncompressedBytes"], "and no file read again")
	packs := 0
	repo := strings.TrimPrefix(c1.Spec.DriverMetadata[jobapi.MetadataPrefix+"repository"], "s3://"+bucket+"/")
	for o := range e.s3.S3.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: repo + "/packs/", Recursive: true}) {
		require.NoError(t, o.Err)
		packs++
		pack := readAll(t, e, o.Key)
		for _, plain := range []string{"tea\ncoffee", `"path":"/api/v1/orders/`} {
			assert.NotContains(t, string(pack), plain, "the packs hold no plain data")
		}
		assert.False(t, bytes.Contains(pack, blob[:64]), "the packs hold no plain data")
	}
	require.NotZero(t, packs, "the chunks are in packs below %s", repo)
	// Each Backup's pack list (what checksum-only verification checks without keys) is the one
	// it records, and names packs whose bytes have the listed digests.
	l1, l2 := packList(t, e, repo, c1), packList(t, e, repo, c2)
	assert.Equal(t, l1.Sequence+1, l2.Sequence, "the second chunked backup is the next in the repository")
	assert.Len(t, l2.Packs, len(l1.Packs), "the same packs")
	for i, p := range l1.Packs {
		assert.True(t, p.Added, "the first chunked backup added pack %s", p.Name)
		assert.False(t, l2.Packs[i].Added, "the second added nothing")
		assert.Equal(t, p.SHA256, l2.Packs[i].SHA256)
		sum := sha256.Sum256(readAll(t, e, repo+"/packs/"+p.Name))
		assert.Equal(t, p.SHA256, hex.EncodeToString(sum[:]), "pack %s", p.Name)
	}
	wipe(t, dir)
	rj = restore("from-chunks", c2)
	require.Equal(t, backupsv1.RestoreJobSucceeded, rj.Status.Phase, rj.Status.Message)
	require.Equal(t, original, tree(t, dir), "every file back from the chunks, identical")
	wipe(t, dir)
	rj = restore("tar-after-chunks", b)
	require.Equal(t, backupsv1.RestoreJobSucceeded, rj.Status.Phase, rj.Status.Message)
	require.Equal(t, original, tree(t, dir), "a tar Backup still restores")

	// Deleting a chunked Backup runs its cleanup, then the maintenance of the namespace's
	// repository: a real agent, in mode maintain, with the chunk key from the Secret.
	require.NoError(t, e.cl.Delete(ctx, c1))
	var done *batchv1.Job
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		jobs := &batchv1.JobList{}
		if err := e.cl.List(ctx, jobs, client.InNamespace(ns), client.MatchingLabels{"jobdriver.backups.cozystack.io/run-kind": "Maintenance"}); err != nil {
			return false, err
		}
		for i, j := range jobs.Items {
			for _, c := range j.Status.Conditions {
				if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
					done = &jobs.Items[i]
					return true, nil
				}
			}
		}
		return false, nil
	})
	require.NoError(t, err, "a maintenance Job ran after the cleanup\n%s", e.driver.Tail())
	require.Equal(t, int32(1), done.Status.Succeeded, "the maintenance Job succeeded: %+v", done.Status)
	assert.True(t, restoreStill(t, e, c2), "the remaining chunked Backup is intact")
}

// restoreStill reports whether every pack Backup b's pack list names still exists.
func restoreStill(t *testing.T, e *env, b *backupsv1.Backup) bool {
	repo := strings.TrimPrefix(b.Spec.DriverMetadata[jobapi.MetadataPrefix+"repository"], "s3://"+bucket+"/")
	for _, p := range packList(t, e, repo, b).Packs {
		if _, err := e.s3.S3.StatObject(e.ctx, bucket, repo+"/packs/"+p.Name, minio.StatObjectOptions{}); err != nil {
			return false
		}
	}
	return true
}

// packList reads Backup b's pack list from the repository and checks it against the digest b
// records.
func packList(t *testing.T, e *env, repo string, b *backupsv1.Backup) *jobapi.PackList {
	t.Helper()
	name := strings.TrimSuffix(path.Base(b.Status.Artifact.URI), ".tar")
	data := readAll(t, e, repo+"/"+jobapi.PackListDir+"/"+name)
	sum := sha256.Sum256(data)
	require.Equal(t, "sha256:"+hex.EncodeToString(sum[:]), b.Spec.DriverMetadata[jobapi.MetadataPrefix+jobapi.MetaPackList])
	l, err := jobapi.ParsePackList(bytes.NewReader(data))
	require.NoError(t, err)
	require.NotEmpty(t, l.Packs)
	return l
}

func readAll(t *testing.T, e *env, key string) []byte {
	t.Helper()
	obj, err := e.s3.S3.GetObject(e.ctx, bucket, key, minio.GetObjectOptions{})
	require.NoError(t, err)
	defer obj.Close()
	b, err := io.ReadAll(obj)
	require.NoError(t, err)
	return b
}

type artifactHeader struct {
	version, compression, encryption byte
	keyRef                           string
}

type parsedHeader struct {
	artifactHeader
	payload int // offset of the payload
}

// parseHeader reads a format-3 header (version 2's layout) as docs/artifact-format.md lays it out.
func parseHeader(t *testing.T, b []byte) parsedHeader {
	t.Helper()
	magic := []byte{0x89, 'C', 'O', 'F', 'F', 'E', 'R', 0x1a}
	require.GreaterOrEqual(t, len(b), 12)
	require.Equal(t, magic, b[:8], "the artifact starts with the format's magic")
	n := int(b[11])
	require.GreaterOrEqual(t, len(b), 12+n)
	return parsedHeader{artifactHeader: artifactHeader{version: b[8], compression: b[9], encryption: b[10], keyRef: string(b[12 : 12+n])}, payload: 12 + n}
}

// fingerprint is a recipient's key reference: the first 16 hex digits of its SHA-256.
func fingerprint(recipient string) string {
	sum := sha256.Sum256([]byte(recipient))
	return hex.EncodeToString(sum[:8])
}

type listing struct {
	tarBytes int64
	files    map[string]string // path → SHA-256 of regular files
	manifest map[string]string // path → SHA-256, from the manifest entry (format 3)
}

// openArtifact decrypts, decompresses and reads a payload with the upstream libraries alone.
func openArtifact(t *testing.T, payload []byte, id age.Identity) listing {
	t.Helper()
	plain, err := age.Decrypt(bytes.NewReader(payload), id)
	require.NoError(t, err)
	zr, err := zstd.NewReader(plain)
	require.NoError(t, err)
	defer zr.Close()
	count := &countingReader{r: zr}
	tr := tar.NewReader(count)
	out := listing{files: map[string]string{}, manifest: map[string]string{}}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if hdr.Typeflag == 'Y' { // the manifest: one JSON object per line
			dec := json.NewDecoder(tr)
			for dec.More() {
				var line struct {
					Path   string `json:"path"`
					Size   int64  `json:"size"`
					SHA256 string `json:"sha256"`
				}
				require.NoError(t, dec.Decode(&line))
				out.manifest[line.Path] = line.SHA256
			}
			continue
		}
		if hdr.Typeflag == tar.TypeReg {
			h := sha256.New()
			_, err := io.Copy(h, tr)
			require.NoError(t, err)
			out.files[filepath.Clean(hdr.Name)] = hex.EncodeToString(h.Sum(nil))
		}
	}
	_, err = io.Copy(io.Discard, count) // the tar's end-of-archive padding
	require.NoError(t, err)
	out.tarBytes = count.n
	return out
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// wipe empties a directory, keeping it.
func wipe(t *testing.T, dir string) {
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, en := range entries {
		require.NoError(t, os.RemoveAll(filepath.Join(dir, en.Name())))
	}
}
