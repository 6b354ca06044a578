package velerostack

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// veleroFixedAddr is where every Velero server binds its controller manager's metrics endpoint:
// Velero v1.18 leaves controller-runtime's default and has no flag for it. Two Velero servers on
// one machine therefore cannot run at once; Start serializes them across processes (parallel test
// packages, other suites) with a host-wide lock held until Stop. The kernel releases it when a
// holder dies.
const veleroFixedAddr = ":8080"

// hostLock is an exclusive flock on a file in the temp dir.
type hostLock struct{ f *os.File }

func lockHost(ctx context.Context, timeout time.Duration) (*hostLock, error) {
	path := filepath.Join(os.TempDir(), "coffer-velero-server.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == syscall.EWOULDBLOCK {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("waiting %s for another Velero server on this machine to stop (lock %s): %w", timeout, path, err)
	}
	// A Velero server outside this lock (another checkout's harness, a user's) may hold the port:
	// wait for it too, then say so instead of letting Velero die.
	var busy error
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		l, err := net.Listen("tcp", veleroFixedAddr)
		if err != nil {
			busy = err
			return false, nil
		}
		return true, l.Close()
	})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("port %s, which every Velero server binds, stayed taken by another process for %s: %v", veleroFixedAddr, timeout, busy)
	}
	return &hostLock{f: f}, nil
}

func (l *hostLock) release() {
	if l != nil && l.f != nil {
		_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
		l.f.Close()
		l.f = nil
	}
}
