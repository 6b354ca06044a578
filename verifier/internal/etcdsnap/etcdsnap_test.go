package etcdsnap

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
)

func TestResolveRefusesEscapes(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret.db"), []byte("x"), 0o600))
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret.db"), filepath.Join(dir, "link.db")))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "daily"), 0o700))
	tests := []struct {
		ref string
		ok  bool
	}{
		{"snap.db", true},
		{"daily/snap.db", true},
		{"daily/../snap.db", true},
		{"../snap.db", false},
		{"daily/../../snap.db", false},
		{"/etc/passwd", false},
		{"", false},
		{"link.db", false},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			_, err := Resolve(dir, tt.ref)
			assert.Equal(t, tt.ok, err == nil, "%v", err)
		})
	}
	rep, err := Verify(context.Background(), dir, "link.db")
	require.ErrorIs(t, err, ErrRefInvalid, "the run cannot be carried out")
	require.Len(t, rep.Findings, 1)
	assert.Equal(t, securityv1.CodeEtcdSnapshotRefInvalid, rep.Findings[0].Code)
	assert.Equal(t, securityv1.SeverityMedium, rep.Findings[0].Severity)
	assert.Empty(t, rep.Checksum, "nothing was opened")
}

func TestSidecar(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "s.db")
	require.NoError(t, os.WriteFile(p, []byte("content"), 0o600))
	sum := sha256.Sum256([]byte("content"))
	_, found, err := sidecar(p)
	require.NoError(t, err)
	assert.False(t, found)
	require.NoError(t, os.WriteFile(p+".sha256", []byte(hex.EncodeToString(sum[:])+"  s.db\n"), 0o600))
	got, found, err := sidecar(p)
	require.NoError(t, err)
	assert.True(t, found)
	assert.Equal(t, hex.EncodeToString(sum[:]), got)
	require.NoError(t, os.WriteFile(p+".sha256", []byte("nonsense\n"), 0o600))
	_, _, err = sidecar(p)
	assert.Error(t, err)
}

func TestNotASnapshot(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "junk.db"), make([]byte, 512*4+32), 0o600))
	rep, err := Verify(context.Background(), dir, "junk.db")
	require.NoError(t, err)
	assert.Contains(t, codesOf(rep.Findings), securityv1.CodeEtcdSnapshotCorrupt)
	assert.Equal(t, securityv1.SeverityCritical, securityv1.WorstSeverity(rep.Findings))
}

func codesOf(fs []securityv1.Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Code)
	}
	return out
}

// boltFile writes a bbolt database the way etcd keeps its backend (no synced freelist, a meta
// bucket) with enough keys to span many leaf pages, and returns its path and page size. Without
// the meta bucket, etcdutl's status itself dereferences nil: a bbolt file that is not an etcd
// backend must be a finding too.
func boltFile(t *testing.T, dir string, withMeta bool) (string, int) {
	t.Helper()
	p := filepath.Join(dir, "bolt.db")
	db, err := bolt.Open(p, 0o600, &bolt.Options{NoFreelistSync: true})
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		if withMeta {
			if _, err := tx.CreateBucket([]byte("meta")); err != nil {
				return err
			}
		}
		b, err := tx.CreateBucket([]byte("test"))
		if err != nil {
			return err
		}
		for i := range 3000 {
			if err := b.Put(fmt.Appendf(nil, "k%08d", i), make([]byte, 100)); err != nil {
				return err
			}
		}
		return nil
	}))
	ps := db.Info().PageSize
	require.NoError(t, db.Close())
	return p, ps
}

// TestCorruptPageDoesNotCrash: bbolt walks pages in a goroutine of its own, where a corrupt page
// panics beyond any recover. Run in this process, the check below kills the test binary (it
// killed a CI run); run in the helper process, it is a finding and the verifier lives on.
func TestCorruptPageDoesNotCrash(t *testing.T) {
	dir := t.TempDir()
	p, ps := boltFile(t, dir, true)

	rep, err := Verify(context.Background(), dir, "bolt.db")
	require.NoError(t, err)
	assert.NotContains(t, codesOf(rep.Findings), securityv1.CodeEtcdSnapshotCorrupt, "%v", rep.Findings)
	used, err := highWaterMark(p)
	require.NoError(t, err)
	assert.Equal(t, strconv.FormatInt(used, 10), rep.Details["totalSizeBytes"], "the helper's status reached the report")

	data, err := os.ReadFile(p)
	require.NoError(t, err)
	corrupted := 0
	for off := 2 * ps; off+ps <= len(data); off += ps {
		if binary.LittleEndian.Uint16(data[off+8:]) == 0x02 { // a leaf page
			binary.LittleEndian.PutUint32(data[off+16+8:], 0x7ffffff0) // its first key's size
			corrupted++
		}
	}
	require.NotZero(t, corrupted, "the file has leaf pages")
	require.NoError(t, os.WriteFile(p, data, 0o600))

	rep, err = Verify(context.Background(), dir, "bolt.db")
	require.NoError(t, err)
	require.Contains(t, codesOf(rep.Findings), securityv1.CodeEtcdSnapshotCorrupt, "%v", rep.Findings)
	assert.Equal(t, securityv1.SeverityCritical, securityv1.WorstSeverity(rep.Findings))
	assert.Contains(t, fmt.Sprint(rep.Findings), "bbolt crashed reading the file (panic: runtime error")
}

// TestCheckBoundedByContext: a check that ctx ends is not carried out; the report keeps what was
// established before it, and the caller (the run's timeout) decides what the run says.
func TestCheckBoundedByContext(t *testing.T) {
	dir := t.TempDir()
	boltFile(t, dir, true)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep, err := Verify(ctx, dir, "bolt.db")
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, []string{securityv1.CodeChecksumNotRecorded}, codesOf(rep.Findings))
}

func TestNotAnEtcdBackend(t *testing.T) {
	dir := t.TempDir()
	boltFile(t, dir, false)
	rep, err := Verify(context.Background(), dir, "bolt.db")
	require.NoError(t, err)
	assert.Contains(t, codesOf(rep.Findings), securityv1.CodeEtcdSnapshotCorrupt, "%v", rep.Findings)
}

// TestKilledCheckIsNotCorruption: the child process of the check is killed by SIGKILL, as the
// kernel's OOM killer kills a container over its memory limit. That is the verifier's resources
// exhausted, not evidence about the snapshot: no etcd-snapshot-corrupt finding, ErrCheckKilled.
// (Before, any abnormal exit of the child was an etcd-snapshot-corrupt finding.)
func TestKilledCheckIsNotCorruption(t *testing.T) {
	dir := t.TempDir()
	boltFile(t, dir, true)
	t.Setenv(testSignalEnv, "KILL")
	rep, err := Verify(context.Background(), dir, "bolt.db")
	require.ErrorIs(t, err, ErrCheckKilled)
	assert.Contains(t, err.Error(), "killed")
	assert.NotContains(t, codesOf(rep.Findings), securityv1.CodeEtcdSnapshotCorrupt)
	assert.Equal(t, []string{securityv1.CodeChecksumNotRecorded}, codesOf(rep.Findings), "what was established before the check is kept")
}

// TestVerdictStandsWhatever: etcdutl's check reports a snapshot whose keys are out of order. On
// such a file bbolt's page walk at open (a goroutine of its own, with no recover) goes on after the
// check has reported, and may crash the helper before or after it wrote its verdict; and the OOM
// killer may kill it once the verdict is written. Each way the file is corrupt, never a check
// without a verdict. (A CI run of the shipped install saw the helper's verdict, then a panic, taken
// for "failed without a verdict" on a real etcd snapshot.) A helper killed after writing an intact
// file's status has not given a verdict one can trust: trouble, no finding.
func TestVerdictStandsWhatever(t *testing.T) {
	dir := t.TempDir()
	p, ps := boltFile(t, dir, true)
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	require.True(t, swapFirstKeys(data, ps), "a leaf page with two keys of the same size")
	require.NoError(t, os.WriteFile(p, data, 0o600))

	for _, misbehave := range []string{"", "KILL-AFTER"} {
		t.Setenv(testSignalEnv, misbehave)
		for range 5 {
			rep, err := Verify(context.Background(), dir, "bolt.db")
			require.NoError(t, err, misbehave)
			require.Contains(t, codesOf(rep.Findings), securityv1.CodeEtcdSnapshotCorrupt, "%s: %v", misbehave, rep.Findings)
		}
	}

	// (still killed after writing)
	intact := t.TempDir()
	boltFile(t, intact, true)
	rep, err := Verify(context.Background(), intact, "bolt.db")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "without a verdict")
	assert.NotContains(t, codesOf(rep.Findings), securityv1.CodeEtcdSnapshotCorrupt)
}

// swapFirstKeys swaps the first two keys of the first leaf page whose first two keys have the same
// size, so that they are out of order: an inconsistency bbolt's check reports without crashing.
func swapFirstKeys(db []byte, ps int) bool {
	const pageHeader, elem = 16, 16 // leafPageElement: flags, pos, ksize, vsize (uint32 each)
	for off := 2 * ps; off+ps <= len(db); off += ps {
		if binary.LittleEndian.Uint16(db[off+8:]) != 0x02 || binary.LittleEndian.Uint16(db[off+10:]) < 2 {
			continue
		}
		e0, e1 := off+pageHeader, off+pageHeader+elem
		k0 := e0 + int(binary.LittleEndian.Uint32(db[e0+4:]))
		k1 := e1 + int(binary.LittleEndian.Uint32(db[e1+4:]))
		n := int(binary.LittleEndian.Uint32(db[e0+8:]))
		if n == 0 || n != int(binary.LittleEndian.Uint32(db[e1+8:])) || k1+n > len(db) {
			continue
		}
		a := append([]byte(nil), db[k0:k0+n]...)
		copy(db[k0:k0+n], db[k1:k1+n])
		copy(db[k1:k1+n], a)
		return true
	}
	return false
}

// TestCrashClassification: what a helper printed before it exited 2 decides whether the file is
// corrupt (a panic or a fault in the walk) or the check ran out of memory.
func TestCrashClassification(t *testing.T) {
	for _, tt := range []struct {
		stderr       string
		crash, noMem bool
	}{
		{"panic: runtime error: slice bounds out of range [:2147483632] with capacity 4096\n\ngoroutine 7 [running]:\ngo.etcd.io/bbolt...", true, false},
		{"\nunexpected fault address 0x7f00deadbeef\nfatal error: fault\n[signal SIGBUS: bus error]", true, false},
		{"fatal error: runtime: out of memory\n\nruntime stack:", false, true},
		{"runtime: cannot allocate memory", false, true},
		{"some other failure", false, false},
		// A test binary built with the race detector reports bbolt's races before the panic.
		{"==================\nWARNING: DATA RACE\nRead at 0x00c000123456 by goroutine 9:\n==================\npanic: runtime error: invalid memory address or nil pointer dereference", true, false},
	} {
		assert.Equal(t, tt.crash, crashed(tt.stderr), tt.stderr)
		assert.Equal(t, tt.noMem, outOfMemory(tt.stderr), tt.stderr)
	}
}

// A lister pod's listing fits the kubelet's bound on termination messages: the newest files are
// kept, and the oldest left out are counted, so that nobody takes the listing for complete.
func TestListingFitsTerminationMessage(t *testing.T) {
	dir := t.TempDir()
	base := time.Now().Add(-time.Hour)
	const n = 200
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("snapshot-%03d-of-a-long-name.db", i))
		require.NoError(t, os.WriteFile(p, []byte("x"), 0o600))
		at := base.Add(time.Duration(i) * time.Second)
		require.NoError(t, os.Chtimes(p, at, at))
	}
	for _, f := range []string{"snapshot-999.db.sha256", "snapshot-998.db.part", ".hidden.db", "notes.txt"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600))
	}
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub.db"), 0o700))
	out := filepath.Join(t.TempDir(), "termination-log")
	var stdout bytes.Buffer
	require.Equal(t, 0, ListMain([]string{"--dir=" + dir, "--pattern=*.db", "--result=" + out}, &stdout))
	msg, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.LessOrEqual(t, len(msg), maxMessage)
	l := &Listing{}
	require.NoError(t, json.Unmarshal(msg, l))
	assert.Empty(t, l.Error)
	require.NotEmpty(t, l.Files)
	assert.Equal(t, n, len(l.Files)+l.Omitted, "every snapshot listed or counted; sidecars, partial, hidden files and directories none")
	assert.Positive(t, l.Omitted)
	assert.Equal(t, "snapshot-199-of-a-long-name.db", l.Files[0].Name, "newest first")
	for i := 1; i < len(l.Files); i++ {
		assert.Greater(t, l.Files[i-1].ModTime, l.Files[i].ModTime)
	}

	require.Equal(t, 0, ListMain([]string{"--dir=" + filepath.Join(dir, "missing"), "--result=" + out}, &stdout))
	msg, err = os.ReadFile(out)
	require.NoError(t, err)
	l = &Listing{}
	require.NoError(t, json.Unmarshal(msg, l))
	assert.Contains(t, l.Error, "listing")
	assert.NotNil(t, l.Files)
}
