package node

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Which directories Sweep treats as dead, on directories holding no real node (no root needed).
func TestSweepOwnerRules(t *testing.T) {
	root := t.TempDir()
	self := os.Getpid()
	start, ok := procStart(self)
	require.True(t, ok)
	mk := func(name string, owner *ownerRecord, age time.Duration) string {
		dir := filepath.Join(root, name)
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "logs"), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "logs", "kubelet.log"), []byte("log\n"), 0o600))
		if owner != nil {
			owner.Dir = dir
			b, err := json.Marshal(owner)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, ownerFile), b, 0o600))
		}
		old := time.Now().Add(-age)
		require.NoError(t, os.Chtimes(dir, old, old))
		return dir
	}
	// tail names dir on its command line, as a test's helper would; this process is its parent.
	tail := func(dir string) *exec.Cmd {
		cmd := exec.Command("tail", "-f", filepath.Join(dir, "logs", "kubelet.log"))
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}

	live := mk("coffer-node-live", &ownerRecord{PID: self, PIDStart: start, Name: "coffer-node-000001"}, time.Hour)
	// The owner's PID now belongs to another process (this one): its start time tells them apart.
	reused := mk("coffer-node-reused", &ownerRecord{PID: self, PIDStart: start + 1, Name: "coffer-node-000002"}, 0)
	reusedTail := tail(reused)
	young := mk("coffer-node-young", nil, time.Minute)
	old := mk("coffer-node-old", nil, OwnerlessAge+time.Minute)
	running := mk("coffer-node-running", nil, OwnerlessAge+time.Minute)
	tail(running) // an older harness still runs it: the daemons' parent is alive
	garbled := mk("coffer-node-garbled", nil, OwnerlessAge+time.Minute)
	require.NoError(t, os.WriteFile(filepath.Join(garbled, ownerFile), []byte("{"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(root, "coffer-node-file"), nil, 0o600))
	require.NoError(t, os.Chtimes(garbled, time.Now().Add(-time.Hour), time.Now().Add(-time.Hour)))

	var lines []string
	swept, err := Sweep(root, func(format string, args ...any) {
		lines = append(lines, fmt.Sprintf(format, args...))
		t.Logf(format, args...)
	})
	require.NoError(t, err)
	sort.Strings(swept)
	require.Equal(t, []string{garbled, old, reused}, swept)
	for _, d := range []string{garbled, old, reused} {
		require.NoDirExists(t, d)
	}
	for _, d := range []string{live, young, running} {
		require.DirExists(t, d)
	}
	require.FileExists(t, filepath.Join(root, "coffer-node-file"))
	require.Error(t, reusedTail.Wait(), "the dead node's helper is killed")
	require.NotEmpty(t, lines)

	// Sweeping again finds nothing more to do.
	swept, err = Sweep(root, nil)
	require.NoError(t, err)
	require.Empty(t, swept)
}

func TestFlagValue(t *testing.T) {
	args := []string{"etcd", "--data-dir=/tmp/a", "--listen-client-urls", "http://127.0.0.1:1"}
	require.Equal(t, "/tmp/a", flagValue(args, "--data-dir"))
	require.Equal(t, "http://127.0.0.1:1", flagValue(args, "--listen-client-urls"))
	require.Empty(t, flagValue(args, "--data"))
}
