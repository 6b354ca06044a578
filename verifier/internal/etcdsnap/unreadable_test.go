package etcdsnap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// verifierUID is the user the verifier runs as (deploy/verifier/manager, verifier/Dockerfile).
const verifierUID = 65532

// asVerifierEnv makes this test binary, run as the verifier's user, verify the snapshot the
// variable names (dir and ref, joined by a NUL) and print what it found.
const asVerifierEnv = "COFFER_ETCDSNAP_TEST_AS_VERIFIER"

// verified is what a verification as the verifier's user found.
type verified struct {
	Codes      []string
	Err        string
	Unreadable bool
}

func TestMain(m *testing.M) {
	if arg, ok := os.LookupEnv(asVerifierEnv); ok {
		var dir, ref string
		if _, err := fmt.Sscanf(arg, "%q %q", &dir, &ref); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		rep, err := Verify(context.Background(), dir, ref)
		out := verified{Codes: codesOf(rep.Findings), Unreadable: errors.Is(err, ErrUnreadable)}
		if err != nil {
			out.Err = err.Error()
		}
		_ = json.NewEncoder(os.Stdout).Encode(out)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// verifyAsVerifier verifies dir/ref as the verifier's user would: as root, in a copy of this test
// binary running as that user; otherwise in this process, whose user owns nothing of the files
// once they are made unreadable (mode 0).
func verifyAsVerifier(t *testing.T, dir, ref string, unreadable ...string) verified {
	t.Helper()
	if os.Geteuid() != 0 {
		for _, p := range unreadable {
			require.NoError(t, os.Chmod(p, 0))
		}
		rep, err := Verify(context.Background(), dir, ref)
		out := verified{Codes: codesOf(rep.Findings), Unreadable: errors.Is(err, ErrUnreadable)}
		if err != nil {
			out.Err = err.Error()
		}
		return out
	}
	// Root-owned and 0600, as etcdctl saves them; the directories are traversable.
	for _, p := range unreadable {
		require.NoError(t, os.Chown(p, 0, 0))
		require.NoError(t, os.Chmod(p, 0o600))
	}
	for d := dir; d != "/" && d != "."; d = filepath.Dir(d) {
		if st, err := os.Stat(d); err == nil && st.Mode().Perm()&0o005 != 0o005 {
			require.NoError(t, os.Chmod(d, st.Mode().Perm()|0o005))
		}
	}
	binDir, err := os.MkdirTemp("", "etcdsnap-as-verifier-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(binDir) })
	require.NoError(t, os.Chmod(binDir, 0o755))
	self, err := os.Executable()
	require.NoError(t, err)
	bin := filepath.Join(binDir, "etcdsnap.test")
	copyFile(t, self, bin)
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), asVerifierEnv+"="+fmt.Sprintf("%q %q", dir, ref))
	cmd.Dir = binDir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: verifierUID, Gid: verifierUID}}
	stdout, err := cmd.Output()
	require.NoError(t, err, "the check as user %d: %s", verifierUID, stdout)
	var out verified
	require.NoError(t, json.Unmarshal(stdout, &out), "%s", stdout)
	return out
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	require.NoError(t, err)
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY, 0o755)
	require.NoError(t, err)
	_, err = io.Copy(dst, src)
	require.NoError(t, err)
	require.NoError(t, dst.Close())
}

// A snapshot saved as etcdctl saves it (0600, root-owned) that the verifier's user cannot read is
// trouble carrying the check out (ErrUnreadable, a failed run), never a finding about the
// snapshot; so is a sidecar it cannot read. The same snapshot, readable, is intact.
func TestUnreadableSnapshotIsTroubleNotAFinding(t *testing.T) {
	dir := t.TempDir()
	p, _ := boltFile(t, dir, true)
	require.NoError(t, os.Chmod(p, 0o644))

	readable := verifyAsVerifier(t, dir, "bolt.db")
	assert.False(t, readable.Unreadable, readable.Err)
	assert.NotContains(t, readable.Codes, "etcd-snapshot-corrupt")

	sidecarPath := p + ".sha256"
	require.NoError(t, os.WriteFile(sidecarPath, []byte("0000000000000000000000000000000000000000000000000000000000000000  bolt.db\n"), 0o644))
	side := verifyAsVerifier(t, dir, "bolt.db", sidecarPath)
	assert.True(t, side.Unreadable, "an unreadable sidecar: %+v", side)
	assert.Contains(t, side.Err, "bolt.db.sha256")
	assert.NotContains(t, side.Codes, "checksum-mismatch", "no finding from a sidecar it could not read")
	assert.NotContains(t, side.Codes, "etcd-snapshot-corrupt")

	require.NoError(t, os.Remove(sidecarPath))
	snap := verifyAsVerifier(t, dir, "bolt.db", p)
	assert.True(t, snap.Unreadable, "an unreadable snapshot: %+v", snap)
	assert.Contains(t, snap.Err, "permission denied")
	assert.Empty(t, snap.Codes, "no finding about the snapshot")
}
