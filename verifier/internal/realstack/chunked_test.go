package realstack

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
	"github.com/coffer-backup/coffer/verifier/internal/artifact"
	"github.com/coffer-backup/coffer/verifier/internal/coffercheck"
)

// chunkedRepo is a chunked repository in the suite's MinIO laid out as coffer-agent lays it out
// (driver-job/internal/agent: chunked.go): packs of random bytes (as sealed chunks look) and the
// pack lists of Backups that name them, written with the format's own code (apis/jobdriver).
type chunkedRepo struct {
	prefix, repo string
	packs        map[string][]byte
}

func newChunkedRepo(t *testing.T, prefix string) *chunkedRepo {
	r := &chunkedRepo{prefix: prefix, repo: prefix + "/.coffer/default", packs: map[string][]byte{}}
	t.Cleanup(func() {
		for o := range stack.S3.ListObjects(context.Background(), velerostack.Bucket, minio.ListObjectsOptions{Prefix: prefix + "/", Recursive: true}) {
			_ = stack.S3.RemoveObject(context.Background(), velerostack.Bucket, o.Key, minio.RemoveObjectOptions{})
		}
	})
	return r
}

// pack stores a pack of random bytes whose name falls in slot (of DefaultPackSlices), or in any
// other slot when slot < 0.
func (r *chunkedRepo) pack(t *testing.T, slot int) string {
	t.Helper()
	for {
		var n [16]byte
		_, _ = rand.Read(n[:])
		name := hex.EncodeToString(n[:])
		if s := artifact.Slot(name, artifact.DefaultPackSlices); slot >= 0 && s != slot || slot < 0 && s == -slot-1 {
			continue
		}
		r.packs[name] = randomBytes(t, 64<<10+len(r.packs))
		putBucketObject(t, r.repo+"/packs/"+name, r.packs[name])
		return name
	}
}

func (r *chunkedRepo) listed(name string, added, legacy bool) jobv1.ListedPack {
	p := jobv1.ListedPack{Name: name, Size: int64(len(r.packs[name])), Added: added}
	if !legacy {
		sum := sha256.Sum256(r.packs[name])
		p.SHA256 = hex.EncodeToString(sum[:])
	}
	return p
}

// backup stores an index and the pack list l of Backup name, and creates the Backup as driver-job
// records it.
func (r *chunkedRepo) backup(t *testing.T, name string, l *jobv1.PackList) *backupsv1.Backup {
	t.Helper()
	art := putArtifact(t, r.prefix+"/"+name+".tar", randomBytes(t, 4096))
	data, err := l.Marshal()
	require.NoError(t, err)
	putBucketObject(t, r.repo+"/packlists/"+name, data)
	sum := sha256.Sum256(data)
	return cofferBackup(t, name, jobDriverGroup, map[string]string{
		artifact.MetaFormat: artifact.ChunkedFormat, artifact.MetaRepository: "s3://" + velerostack.Bucket + "/" + r.repo,
		artifact.MetaPackList: "sha256:" + hex.EncodeToString(sum[:]),
	}, backupsv1.BackupReady, art)
}

// TestCofferChunkedPacks: checksum-only of a chunked Backup checks its packs by the pack list its
// backup stored: every pack exists with its size, the packs it added are read and hashed, and of
// the older ones the slice of its sequence number, so that Backups verified one after the other
// re-read every pack. A damaged or missing pack is a critical finding naming the pack.
func TestCofferChunkedPacks(t *testing.T) {
	name := uniq("chk")
	r := newChunkedRepo(t, "coffer-job/"+name)
	const seq = 5 // slot 5 of 11
	l := &jobv1.PackList{Sequence: seq}
	var added, inSlice, outside []string
	for range 3 {
		added = append(added, r.pack(t, -1))
		l.Packs = append(l.Packs, r.listed(added[len(added)-1], true, false))
	}
	for range 2 {
		inSlice = append(inSlice, r.pack(t, seq))
		l.Packs = append(l.Packs, r.listed(inSlice[len(inSlice)-1], false, false))
	}
	for range 8 {
		outside = append(outside, r.pack(t, -seq-1))
		l.Packs = append(l.Packs, r.listed(outside[len(outside)-1], false, false))
	}
	legacy := r.pack(t, seq) // written before pack lists: its existence and size are all there is
	l.Packs = append(l.Packs, r.listed(legacy, false, true))
	b := r.backup(t, name, l)

	check := func(t *testing.T, b *backupsv1.Backup, run string) (*securityv1.BackupVerifyRun, *securityv1.BackupVerifyResult) {
		t.Helper()
		h := cofferHarness(t)
		vr := cofferRun(t, run, b.Name, string(b.UID))
		h.finish(vr)
		return vr, result(t, vr)
	}
	flip := func(t *testing.T, pack string) {
		t.Helper()
		damaged := append([]byte(nil), r.packs[pack]...)
		damaged[len(damaged)/3] ^= 0x40
		putBucketObject(t, r.repo+"/packs/"+pack, damaged)
		t.Cleanup(func() { putBucketObject(t, r.repo+"/packs/"+pack, r.packs[pack]) })
	}

	t.Run("sound packs pass, and the Result says what was read", func(t *testing.T) {
		run, res := check(t, b, name+"-ok")
		require.Equal(t, securityv1.RunSucceeded, run.Status.Phase, run.Status.Message)
		require.Equal(t, []string{securityv1.CodeChecksumMatch}, codes(res.Spec.Findings), findingsOf(res.Spec.Findings))
		assert.Contains(t, res.Spec.Findings[0].Message, "its 14 packs in s3://"+velerostack.Bucket+"/"+r.repo+" exist")
		var bytesRead int
		for _, p := range append(append([]string{}, added...), inSlice...) {
			bytesRead += len(r.packs[p])
		}
		assert.Equal(t, map[string]string{
			coffercheck.DetailChunksRead: "added+slice", coffercheck.DetailPacksListed: "14", coffercheck.DetailPacksRead: "5",
			coffercheck.DetailPackBytesRead: strconv.Itoa(bytesRead), coffercheck.DetailPackSlice: "5/11",
		}, res.Spec.Details)
		assertVerdict(t, b, run, backupsv1.VerificationPassed, metav1.ConditionTrue, backupsv1.ReasonChecksumVerified)
	})

	t.Run("a flipped byte in a pack the Backup added is a critical finding naming it", func(t *testing.T) {
		flip(t, added[1])
		run, res := check(t, b, name+"-added")
		assertMismatch(t, run)
		require.Equal(t, []string{securityv1.CodeChecksumMismatch}, codes(res.Spec.Findings), findingsOf(res.Spec.Findings))
		assert.Equal(t, securityv1.SeverityCritical, res.Spec.Findings[0].Severity)
		assert.Contains(t, res.Spec.Findings[0].Message, "pack s3://"+velerostack.Bucket+"/"+r.repo+"/packs/"+added[1])
		assertVerdict(t, b, run, backupsv1.VerificationFailed, metav1.ConditionFalse, backupsv1.ReasonChecksumMismatch)
	})

	t.Run("an older pack outside the slice is read by the run whose slice it is", func(t *testing.T) {
		flip(t, outside[0])
		run, res := check(t, b, name+"-outside")
		require.Equal(t, securityv1.RunSucceeded, run.Status.Phase, run.Status.Message)
		require.Equal(t, []string{securityv1.CodeChecksumMatch}, codes(res.Spec.Findings), "slice 5 does not read it\n%s", findingsOf(res.Spec.Findings))

		// The next Backups of the repository name the same packs; the one whose sequence falls on
		// the pack's slot reads it.
		slot := artifact.Slot(outside[0], artifact.DefaultPackSlices)
		next := &jobv1.PackList{Sequence: int64(seq + (slot-seq+artifact.DefaultPackSlices)%artifact.DefaultPackSlices)}
		for _, p := range l.Packs {
			p.Added = false
			next.Packs = append(next.Packs, p)
		}
		later := r.backup(t, name+"-later", next)
		run, res = check(t, later, name+"-later")
		assertMismatch(t, run)
		require.Equal(t, []string{securityv1.CodeChecksumMismatch}, codes(res.Spec.Findings), findingsOf(res.Spec.Findings))
		assert.Contains(t, res.Spec.Findings[0].Message, "/packs/"+outside[0])
		assert.Equal(t, strconv.Itoa(slot)+"/11", res.Spec.Details[coffercheck.DetailPackSlice])
	})

	t.Run("a missing older pack is a critical finding naming it", func(t *testing.T) {
		require.NoError(t, stack.S3.RemoveObject(context.Background(), velerostack.Bucket, r.repo+"/packs/"+outside[3], minio.RemoveObjectOptions{}))
		t.Cleanup(func() { putBucketObject(t, r.repo+"/packs/"+outside[3], r.packs[outside[3]]) })
		run, res := check(t, b, name+"-missing")
		assertMismatch(t, run)
		require.Equal(t, []string{securityv1.CodeArtifactMissing}, codes(res.Spec.Findings), findingsOf(res.Spec.Findings))
		assert.Equal(t, securityv1.SeverityCritical, res.Spec.Findings[0].Severity)
		assert.Contains(t, res.Spec.Findings[0].Message, "/packs/"+outside[3]+" does not exist")
	})

	t.Run("a pack list that is not the recorded one is a mismatch", func(t *testing.T) {
		fewer := &jobv1.PackList{Sequence: seq, Packs: l.Packs[:len(l.Packs)-1]}
		data, err := fewer.Marshal()
		require.NoError(t, err)
		key := r.repo + "/packlists/" + name
		original := bucketObject(t, key)
		putBucketObject(t, key, data)
		t.Cleanup(func() { putBucketObject(t, key, original) })
		run, res := check(t, b, name+"-list")
		assertMismatch(t, run)
		require.Equal(t, []string{securityv1.CodeChecksumMismatch}, codes(res.Spec.Findings), findingsOf(res.Spec.Findings))
		assert.Contains(t, res.Spec.Findings[0].Message, "the pack list s3://"+velerostack.Bucket+"/"+key)
	})

	t.Run("a repository outside the artifact's prefix is not read", func(t *testing.T) {
		// A tenant's pod wrote the report: it names another namespace's repository.
		other := cofferBackup(t, name+"-elsewhere", jobDriverGroup, map[string]string{
			artifact.MetaFormat: artifact.ChunkedFormat, artifact.MetaRepository: "s3://" + velerostack.Bucket + "/coffer-job/other/.coffer/other",
			artifact.MetaPackList: b.Spec.DriverMetadata[artifact.MetaPackList],
		}, backupsv1.BackupReady, b.Status.Artifact)
		run, res := check(t, other, name+"-elsewhere")
		assert.Equal(t, securityv1.RunFailed, run.Status.Phase)
		assert.Contains(t, run.Status.Message, "not s3://"+velerostack.Bucket+"/"+r.prefix+"/.coffer/<namespace> beside its artifact")
		assert.Empty(t, codes(res.Spec.Findings), "no verdict on the Backup's packs: %s", findingsOf(res.Spec.Findings))
	})
}

// TestCofferObjectLock: in a bucket with object lock, checksum-only reports the objects of a
// Backup that no lock holds (medium: the Backup is sound, and deletable); once every object is
// locked, the Result says so.
func TestCofferObjectLock(t *testing.T) {
	ctx := context.Background()
	name := uniq("lck")
	bucket := name
	require.NoError(t, stack.S3.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: "us-east-1", ObjectLocking: true}))
	t.Cleanup(func() {
		for o := range stack.S3.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Recursive: true, WithVersions: true}) {
			_ = stack.S3.RemoveObject(context.Background(), bucket, o.Key, minio.RemoveObjectOptions{VersionID: o.VersionID, GovernanceBypass: true})
		}
		_ = stack.S3.RemoveBucket(context.Background(), bucket)
	})
	mode := minio.Governance
	put := func(key string, data []byte, locked bool) {
		t.Helper()
		opts := minio.PutObjectOptions{}
		if locked {
			opts.Mode, opts.RetainUntilDate = mode, time.Now().Add(time.Hour).UTC()
		}
		_, err := stack.S3.PutObject(ctx, bucket, key, bytes.NewReader(data), int64(len(data)), opts)
		require.NoError(t, err)
	}
	repo := "tenant/.coffer/default"
	var l jobv1.PackList
	var unlockedPack string
	for i := range 3 {
		data := randomBytes(t, 4096+i)
		var n [16]byte
		_, _ = rand.Read(n[:])
		pack := hex.EncodeToString(n[:])
		put(repo+"/packs/"+pack, data, i != 1)
		if i == 1 {
			unlockedPack = pack
		}
		sum := sha256.Sum256(data)
		l.Packs = append(l.Packs, jobv1.ListedPack{Name: pack, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]), Added: true})
	}
	list, err := l.Marshal()
	require.NoError(t, err)
	put(repo+"/packlists/"+name, list, true)
	index := randomBytes(t, 2048)
	put("tenant/"+name+".tar", index, true)
	indexSum, listSum := sha256.Sum256(index), sha256.Sum256(list)
	b := cofferBackup(t, name, jobDriverGroup, map[string]string{
		artifact.MetaFormat: artifact.ChunkedFormat, artifact.MetaRepository: "s3://" + bucket + "/" + repo,
		artifact.MetaPackList: "sha256:" + hex.EncodeToString(listSum[:]),
	}, backupsv1.BackupReady, &backupsv1.BackupArtifact{URI: "s3://" + bucket + "/tenant/" + name + ".tar", SizeBytes: int64(len(index)), Checksum: "sha256:" + hex.EncodeToString(indexSum[:])})

	check := func(run string) *securityv1.BackupVerifyResult {
		t.Helper()
		h := cofferHarness(t)
		vr := cofferRun(t, run, b.Name, string(b.UID))
		h.finish(vr)
		require.Equal(t, securityv1.RunSucceeded, vr.Status.Phase, vr.Status.Message)
		return result(t, vr)
	}
	res := check(name + "-one-unlocked")
	require.Equal(t, []string{securityv1.CodeObjectUnlocked, securityv1.CodeChecksumMatch}, codes(res.Spec.Findings), "worst first\n%s", findingsOf(res.Spec.Findings))
	unlocked := res.Spec.Findings[0]
	assert.Equal(t, securityv1.SeverityMedium, unlocked.Severity)
	assert.Contains(t, unlocked.Message, "1 of the Backup's 5 objects are not locked in bucket "+bucket)
	assert.Contains(t, unlocked.Message, "s3://"+bucket+"/"+repo+"/packs/"+unlockedPack)
	assert.Equal(t, "unlocked", res.Spec.Details[coffercheck.DetailObjectLock])

	until := time.Now().Add(time.Hour).UTC()
	require.NoError(t, stack.S3.PutObjectRetention(ctx, bucket, repo+"/packs/"+unlockedPack, minio.PutObjectRetentionOptions{Mode: &mode, RetainUntilDate: &until}))
	res = check(name + "-all-locked")
	require.Equal(t, []string{securityv1.CodeChecksumMatch}, codes(res.Spec.Findings), findingsOf(res.Spec.Findings))
	assert.Equal(t, "locked", res.Spec.Details[coffercheck.DetailObjectLock])
}
