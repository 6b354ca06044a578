package realstack

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	iofs "io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kopia/kopia/fs/localfs"
	"github.com/kopia/kopia/repo"
	"github.com/kopia/kopia/repo/blob/s3"
	"github.com/kopia/kopia/snapshot"
	"github.com/kopia/kopia/snapshot/policy"
	"github.com/kopia/kopia/snapshot/upload"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	velerodriverv1 "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
	"github.com/coffer-backup/coffer/velerokit/volumes"
	"github.com/coffer-backup/coffer/verifier/internal/kopiarepo"
	"github.com/coffer-backup/coffer/verifier/internal/velerocheck"
)

// volumeRepo is a kopia repository in Velero's layout and format for namespace ns, in the
// stack's bucket, opened with Velero's own repository password (the Secret the Velero server
// creates), holding one snapshot of dir; it returns the snapshot's ID. The e2e volumes suite
// verifies repositories Velero's node agent wrote; this one lets the suite damage a repository
// whose content it knows.
func volumeRepo(t testing.TB, ns, dir string) (loc kopiarepo.Location, snapshotID string) {
	t.Helper()
	ctx := context.Background()
	pw := &corev1.Secret{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: velerostack.Namespace, Name: velerocheck.RepoCredentialsSecret}, pw), "the Velero server creates its repository password")
	loc = kopiarepo.Location{Endpoint: strings.TrimPrefix(stack.S3URL(), "http://"), Insecure: true, Region: "us-east-1", Bucket: velerostack.Bucket,
		Prefix: volumes.RepositoryPrefix(velerostack.Prefix, ns), AccessKey: velerostack.AccessKey, SecretKey: velerostack.SecretKey,
		Password: string(pw.Data[velerocheck.RepoPasswordKey])}
	st, err := s3.New(ctx, &s3.Options{BucketName: loc.Bucket, Prefix: loc.Prefix, Endpoint: loc.Endpoint, DoNotUseTLS: true,
		AccessKeyID: loc.AccessKey, SecretAccessKey: loc.SecretKey, Region: loc.Region}, true)
	require.NoError(t, err)
	defer st.Close(ctx)
	require.NoError(t, repo.Initialize(ctx, st, &repo.NewRepositoryOptions{}, loc.Password))
	cfg := filepath.Join(t.TempDir(), "repository.config")
	require.NoError(t, repo.Connect(ctx, cfg, st, loc.Password, &repo.ConnectOptions{ClientOptions: repo.ClientOptions{Username: "default", Hostname: "default"}}))
	rep, err := repo.Open(ctx, cfg, loc.Password, nil)
	require.NoError(t, err)
	defer rep.Close(ctx)
	src, err := localfs.Directory(dir)
	require.NoError(t, err)
	require.NoError(t, repo.WriteSession(ctx, rep, repo.WriteSessionOptions{Purpose: "test"}, func(ctx context.Context, w repo.RepositoryWriter) error {
		man, err := upload.NewUploader(w).Upload(ctx, src, policy.BuildTree(nil, policy.DefaultPolicy), snapshot.SourceInfo{Host: "default", UserName: "default", Path: dir})
		if err != nil {
			return err
		}
		id, err := snapshot.SaveSnapshot(ctx, w, man)
		snapshotID = string(id)
		return err
	}))
	return loc, snapshotID
}

// verifierStorage creates the verifier's own store identity (velerocheck.StorageSecret) as the
// docs say to: temporary credentials narrowed to volumes.ReadPolicy, under the key named as the
// storage location; the key "cloud" beside it holds credentials that open nothing, so a run that
// reads volume data proves the location's key is the one used. It returns the credentials.
func verifierStorage(t *testing.T) credentials.Value {
	t.Helper()
	creds, err := stack.SessionCredentials(volumes.ReadPolicy(velerostack.Bucket, velerostack.Prefix))
	require.NoError(t, err)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: velerocheck.StorageSecret, Namespace: velerostack.Namespace},
		StringData: map[string]string{velerostack.BSLName: velerostack.CredentialsFile(creds), velerocheck.StorageDefaultKey: "[default]\naws_access_key_id=nobody\naws_secret_access_key=nothing\n"}}
	require.NoError(t, client.IgnoreAlreadyExists(cl.Create(context.Background(), sec)))
	return creds
}

// volumeFiles writes random and compressible files into a new directory; it returns it, the
// number of files and their bytes.
func volumeFiles(t *testing.T) (dir string, files, size int64) {
	dir = t.TempDir()
	for i := range 6 {
		data := make([]byte, (i+1)*300<<10)
		if i%2 == 0 {
			_, _ = rand.Read(data)
		} else {
			copy(data, strings.Repeat("compressible ", len(data)/13))
		}
		sub := filepath.Join(dir, "d"+strconv.Itoa(i%3))
		require.NoError(t, os.MkdirAll(sub, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(sub, "f"+strconv.Itoa(i)), data, 0o644))
		files++
		size += int64(len(data))
	}
	return dir, files, size
}

// largestPack is the key of the repository's largest pack blob (kopia's p… blobs hold the data).
func largestPack(t *testing.T, prefix string) string {
	var key string
	var size int64
	for o := range stack.S3.ListObjects(context.Background(), velerostack.Bucket, minio.ListObjectsOptions{Prefix: prefix + "p"}) {
		require.NoError(t, o.Err)
		if o.Size > size {
			key, size = o.Key, o.Size
		}
	}
	require.NotEmpty(t, key, "the repository holds a pack")
	return key
}

func TestChecksumOnlyReadsVolumeData(t *testing.T) {
	ctx := context.Background()
	ns := uniq("vd")
	namespaceWithData(t, ns)
	vb := veleroBackup(t, uniq("vd"), true, ns)
	readOnly := verifierStorage(t)
	dir, files, size := volumeFiles(t)
	loc, snap := volumeRepo(t, ns, dir)

	// The record Velero's node agent makes of a file-system backup of a pod's volume.
	pvb := &velerov1.PodVolumeBackup{ObjectMeta: metav1.ObjectMeta{Name: vb.Name + "-data", Namespace: velerostack.Namespace,
		Labels: map[string]string{velerov1.BackupUIDLabel: string(vb.UID), velerov1.BackupNameLabel: vb.Name}},
		Spec: velerov1.PodVolumeBackupSpec{Node: "node-1", Pod: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "shop"}, Volume: "data",
			BackupStorageLocation: velerostack.BSLName, UploaderType: "kopia"},
		// Velero's CRD has no status subresource: the node agent writes it with the object.
		Status: velerov1.PodVolumeBackupStatus{Phase: velerov1.PodVolumeBackupPhaseCompleted, SnapshotID: snap}}
	require.NoError(t, cl.Create(ctx, pvb))
	object := "velero.io/PodVolumeBackup " + velerostack.Namespace + "/" + pvb.Name

	bsl := &velerov1.BackupStorageLocation{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: velerostack.Namespace, Name: velerostack.BSLName}, bsl))

	t.Run("every file of the volume's snapshot is read and verified", func(t *testing.T) {
		h := newHarness(t)
		run := veleroRun(t, "vd-ok", vb.Name, securityv1.ModeChecksumOnly, "")
		h.finish(run)
		require.Equal(t, securityv1.RunSucceeded, run.Status.Phase, run.Status.Message)
		assert.True(t, h.velero().Remembers(bsl, ns, snap), "a snapshot read whole and sound is remembered, for a full-restore to compare with")
		assert.False(t, h.velero().Remembers(bsl, "other", snap), "by its repository")
		res := result(t, run)
		assert.Equal(t, securityv1.SeverityInfo, res.Status.WorstSeverity, "%+v", res.Spec.Findings)
		assert.ElementsMatch(t, []string{securityv1.CodeChecksumMatch, securityv1.CodeVolumeDataMatch}, codes(res.Spec.Findings))
		assert.Equal(t, "1", res.Spec.Details[velerocheck.DetailVolumeSnapshots])
		assert.Equal(t, strconv.FormatInt(files, 10), res.Spec.Details[velerocheck.DetailVolumeFiles])
		assert.Equal(t, strconv.FormatInt(size, 10), res.Spec.Details[velerocheck.DetailVolumeBytes])
	})

	t.Run("a Coffer Backup of driver-velero: its namespace's volumes read, and what it records that Velero holds no record of said", func(t *testing.T) {
		h := cofferHarness(t)
		dm := map[string]string{velerodriverv1.MetaBackupName: vb.Name, velerodriverv1.MetaNamespace: velerostack.Namespace}
		b := cofferBackupIn(t, ns, "vd-coffer", velerodriverv1.Group, dm, backupsv1.BackupReady,
			&backupsv1.BackupArtifact{URI: "s3://" + velerostack.Bucket + "/" + velerostack.ObjectKey(vb.Name), Checksum: vb.Annotations[backupsv1.AnnotationChecksum]})
		// Its record: the volume above, and one moved by the data mover that no DataUpload here
		// records (Velero's storage sync does not bring them along).
		raw, err := velerodriverv1.VolumeData{Volumes: []velerodriverv1.VolumeRecord{
			{Method: velerodriverv1.VolumeMethodFileSystem, Namespace: ns, Pod: "shop", PodVolume: "data", Uploader: "kopia", SnapshotID: snap, Phase: "Completed", Source: pvb.Name},
			{Method: velerodriverv1.VolumeMethodDataMover, Namespace: ns, PersistentVolumeClaim: "db", SnapshotID: "c0ffee0c0ffee0c0ffee0c0ffee0c0ff", Phase: "Completed", Source: "gone"},
		}}.Raw()
		require.NoError(t, err)
		orig := b.DeepCopy()
		b.Status.UnderlyingResources = raw
		require.NoError(t, cl.Status().Patch(ctx, b, client.MergeFrom(orig)))

		run := newRun(t, "vd-coffer", securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendCoffer, BackupRef: securityv1.BackupRef{Name: b.Name, Namespace: ns},
			Mode: securityv1.ModeChecksumOnly, Timeout: &metav1.Duration{Duration: 5 * time.Minute}})
		h.finish(run)
		require.Equal(t, securityv1.RunSucceeded, run.Status.Phase, run.Status.Message)
		res := result(t, run)
		assert.ElementsMatch(t, []string{securityv1.CodeChecksumMatch, securityv1.CodeVolumeDataMatch, securityv1.CodeVolumeDataNotRead}, codes(res.Spec.Findings), findingsOf(res.Spec.Findings))
		assert.Equal(t, strconv.FormatInt(files, 10), res.Spec.Details[velerocheck.DetailVolumeFiles])
		f := finding(t, res.Spec.Findings, securityv1.CodeVolumeDataNotRead)
		assert.Equal(t, securityv1.SeverityMedium, f.Severity)
		assert.Contains(t, f.Message, "c0ffee0c0ffee0c0ffee0c0ffee0c0ff")
	})

	t.Run("a Coffer Backup of another namespace does not read this one's volumes", func(t *testing.T) {
		h := cofferHarness(t)
		other := uniq("vd-other")
		require.NoError(t, cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}))
		dm := map[string]string{velerodriverv1.MetaBackupName: vb.Name, velerodriverv1.MetaNamespace: velerostack.Namespace}
		b := cofferBackupIn(t, other, "vd-elsewhere", velerodriverv1.Group, dm, backupsv1.BackupReady,
			&backupsv1.BackupArtifact{URI: "s3://" + velerostack.Bucket + "/" + velerostack.ObjectKey(vb.Name), Checksum: vb.Annotations[backupsv1.AnnotationChecksum]})
		run := newRun(t, "vd-elsewhere", securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendCoffer, BackupRef: securityv1.BackupRef{Name: b.Name, Namespace: other},
			Mode: securityv1.ModeChecksumOnly, Timeout: &metav1.Duration{Duration: 5 * time.Minute}})
		h.finish(run)
		require.Equal(t, securityv1.RunSucceeded, run.Status.Phase, run.Status.Message)
		res := result(t, run)
		f := finding(t, res.Spec.Findings, securityv1.CodeVolumeDataNotRead)
		assert.Contains(t, f.Message, "it is of namespace "+ns+", not of the Backup's "+other)
		assert.NotContains(t, codes(res.Spec.Findings), securityv1.CodeVolumeDataMatch)
		assert.Equal(t, "0", res.Spec.Details[velerocheck.DetailVolumeFiles], "nothing of another namespace's volume was read")
	})

	// A verifier whose deploy/verifier/velero predates the volume-data Role (or a Secret it may not
	// read): the tarball is verified as before, and the Result says what was not read and why; no
	// failed run, no damage claimed.
	t.Run("without the volume-data Role, what was not read is said, and the rest verified", func(t *testing.T) {
		for _, tt := range []struct {
			name   string
			denied func(obj any, key client.ObjectKey) bool
			want   string
		}{
			{"vd-no-list", func(obj any, _ client.ObjectKey) bool { _, ok := obj.(*velerov1.PodVolumeBackupList); return ok },
				"apply deploy/verifier/velero (Role velero/coffer-verifier-volume-data)"},
			{"vd-no-secret", func(obj any, key client.ObjectKey) bool {
				_, ok := obj.(*corev1.Secret)
				return ok && key.Name == velerocheck.RepoCredentialsSecret
			}, `add "velero-repo-credentials" to the resourceNames of Role velero/coffer-verifier-volume-data`},
		} {
			forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "velero.io", Resource: "podvolumebackups"}, "", errors.New("RBAC: access denied"))
			reader := interceptor.NewClient(cl, interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if tt.denied(obj, key) {
						return forbidden
					}
					return c.Get(ctx, key, obj, opts...)
				},
				List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
					if tt.denied(list, client.ObjectKey{}) {
						return forbidden
					}
					return c.List(ctx, list, opts...)
				},
			})
			h := newHarness(t)
			h.r = h.reconciler(reader)
			run := veleroRun(t, tt.name, vb.Name, securityv1.ModeChecksumOnly, "")
			h.finish(run)
			require.Equal(t, securityv1.RunSucceeded, run.Status.Phase, run.Status.Message)
			res := result(t, run)
			assert.ElementsMatch(t, []string{securityv1.CodeChecksumMatch, securityv1.CodeVolumeDataNotRead}, codes(res.Spec.Findings), findingsOf(res.Spec.Findings))
			f := finding(t, res.Spec.Findings, securityv1.CodeVolumeDataNotRead)
			assert.Equal(t, securityv1.SeverityMedium, f.Severity)
			assert.Contains(t, f.Message, tt.want)
		}
	})

	t.Run("the verifier's store identity reads the repositories and nothing else", func(t *testing.T) {
		c, err := minio.New(strings.TrimPrefix(stack.S3URL(), "http://"), &minio.Options{Region: "us-east-1",
			Creds: credentials.NewStaticV4(readOnly.AccessKeyID, readOnly.SecretAccessKey, readOnly.SessionToken)})
		require.NoError(t, err)
		r, err := c.GetObject(ctx, velerostack.Bucket, largestPack(t, loc.Prefix), minio.GetObjectOptions{})
		require.NoError(t, err)
		_, err = io.Copy(io.Discard, r)
		r.Close()
		require.NoError(t, err, "it reads the repository's packs")
		denied := func(what string, err error) {
			t.Helper()
			assert.Equal(t, "AccessDenied", minio.ToErrorResponse(err).Code, "%s with the verifier's store identity: %v", what, err)
		}
		_, err = c.PutObject(ctx, velerostack.Bucket, loc.Prefix+"planted", strings.NewReader("x"), 1, minio.PutObjectOptions{})
		denied("writing into a repository", err)
		denied("deleting a pack", c.RemoveObject(ctx, velerostack.Bucket, largestPack(t, loc.Prefix), minio.RemoveObjectOptions{}))
		tarball, err := c.GetObject(ctx, velerostack.Bucket, velerostack.ObjectKey(vb.Name), minio.GetObjectOptions{})
		if err == nil {
			_, err = tarball.Stat()
		}
		denied("reading a backup's tarball", err)
	})

	t.Run("without its own store identity the verifier says what to create, and reads no Velero credentials", func(t *testing.T) {
		var read []string
		reader := interceptor.NewClient(cl, interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if _, ok := obj.(*corev1.Secret); ok {
					read = append(read, key.Name)
					if key.Name == velerocheck.StorageSecret {
						return apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, key.Name)
					}
				}
				return c.Get(ctx, key, obj, opts...)
			},
		})
		h := newHarness(t)
		h.r = h.reconciler(reader)
		run := veleroRun(t, "vd-no-identity", vb.Name, securityv1.ModeChecksumOnly, "")
		h.finish(run)
		require.Equal(t, securityv1.RunSucceeded, run.Status.Phase, run.Status.Message)
		res := result(t, run)
		assert.ElementsMatch(t, []string{securityv1.CodeChecksumMatch, securityv1.CodeVolumeDataNotRead}, codes(res.Spec.Findings), findingsOf(res.Spec.Findings))
		assert.Contains(t, finding(t, res.Spec.Findings, securityv1.CodeVolumeDataNotRead).Message, "Secret velero/coffer-verifier-storage, the verifier's own read-only credentials")
		assert.Contains(t, read, velerocheck.StorageSecret)
		assert.Subset(t, []string{velerocheck.StorageSecret, velerocheck.RepoCredentialsSecret}, read, "the only Secrets the verifier reads")
	})

	t.Run("one flipped byte in a pack of the repository is a critical finding naming the volume", func(t *testing.T) {
		h := newHarness(t)
		before := veleroRun(t, "vd-before-flip", vb.Name, securityv1.ModeChecksumOnly, "")
		h.finish(before)
		require.True(t, h.velero().Remembers(bsl, ns, snap))

		flipMiddleByte(t, largestPack(t, loc.Prefix))
		run := veleroRun(t, "vd-flipped", vb.Name, securityv1.ModeChecksumOnly, "")
		h.finish(run)
		assert.False(t, h.velero().Remembers(bsl, ns, snap), "a snapshot found damaged is forgotten: the next full-restore reads it again")
		require.Equal(t, securityv1.RunSucceeded, run.Status.Phase, "damage is a verdict, not a failed run: %s", run.Status.Message)
		assert.Equal(t, securityv1.SeverityCritical, run.Status.WorstSeverity)
		res := result(t, run)
		f := finding(t, res.Spec.Findings, securityv1.CodeVolumeDataCorrupt)
		assert.Equal(t, securityv1.SeverityCritical, f.Severity)
		assert.Equal(t, object, f.Object)
		assert.Contains(t, f.Message, "volume data of pod "+ns+"/shop")
		assert.Contains(t, f.Message, snap)
		assert.Contains(t, codes(res.Spec.Findings), securityv1.CodeChecksumMatch, "the tarball itself is sound")
		assert.NotContains(t, codes(res.Spec.Findings), securityv1.CodeVolumeDataMatch)
	})

	t.Run("a pack gone from the repository is a critical finding", func(t *testing.T) {
		key := largestPack(t, loc.Prefix)
		orig := bucketObject(t, key)
		require.NoError(t, stack.S3.RemoveObject(ctx, velerostack.Bucket, key, minio.RemoveObjectOptions{}))
		t.Cleanup(func() { putBucketObject(t, key, orig) })

		h := newHarness(t)
		run := veleroRun(t, "vd-gone", vb.Name, securityv1.ModeChecksumOnly, "")
		h.finish(run)
		require.Equal(t, securityv1.RunSucceeded, run.Status.Phase, run.Status.Message)
		f := finding(t, result(t, run).Spec.Findings, securityv1.CodeVolumeDataMissing)
		assert.Equal(t, securityv1.SeverityCritical, f.Severity)
		assert.Equal(t, object, f.Object)
	})

	t.Run("a store that stops answering mid-read is trouble, not damage", func(t *testing.T) {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		p := newProxy(t, loc.Endpoint)
		through := loc
		through.Endpoint = p.addr
		r, err := kopiarepo.Open(rctx, through)
		require.NoError(t, err)
		defer r.Close(rctx)
		p.drop()
		_, err = r.Read(rctx, snap, func(kopiarepo.File) error { return nil })
		require.Error(t, err)
		var d *kopiarepo.Damage
		assert.False(t, errors.As(err, &d), "an unreachable store says nothing about the data: %v", err)
	})

	t.Run("the backup side's record of its files", func(t *testing.T) {
		r, err := kopiarepo.Open(ctx, loc)
		require.NoError(t, err)
		defer r.Close(ctx)
		var got []kopiarepo.File
		st, err := r.Read(ctx, snap, func(f kopiarepo.File) error { got = append(got, f); return nil })
		require.NoError(t, err)
		assert.Equal(t, files, st.Files)
		assert.Equal(t, size, st.Bytes)
		want := tree(t, dir)
		require.Len(t, got, len(want))
		for _, f := range got {
			assert.Equal(t, want[f.Path], f.SHA256, f.Path)
		}
	})
}

// proxy forwards TCP connections to a store until drop closes them all and refuses new ones.
type proxy struct {
	addr  string
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{addr: ln.Addr().String(), ln: ln}
	t.Cleanup(p.drop)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

func (p *proxy) drop() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// finding is the finding of code in fs.
func finding(t *testing.T, fs []securityv1.Finding, code string) securityv1.Finding {
	t.Helper()
	for _, f := range fs {
		if f.Code == code {
			return f
		}
	}
	t.Fatalf("no %s finding in %s", code, findingsOf(fs))
	return securityv1.Finding{}
}

// tree is the SHA-256 of every regular file under dir, by its slash path relative to dir.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, e iofs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		sum := sha256.Sum256(data)
		out[filepath.ToSlash(rel)] = hex.EncodeToString(sum[:])
		return nil
	}))
	return out
}
