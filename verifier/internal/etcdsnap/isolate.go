package etcdsnap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/coffer-backup/coffer/verifier/internal/backend"
)

// statusEnv turns a process into the status helper: it checks the snapshot file the variable
// names, prints the result as JSON and exits.
//
// bbolt's consistency check walks the file's pages in a goroutine of its own, and a corrupt page
// can make that goroutine panic (or fault on the memory map). Neither can be recovered in the
// process that opened the file, so a single corrupt snapshot would crash-loop the verifier. The
// check therefore runs in a child process: the verifier's own binary, started again with this
// variable set. The helper is served from init so that every binary that can call Verify (the
// verifier and the test binaries) can also be its own helper.
const statusEnv = "COFFER_ETCDSNAP_STATUS_OF"

// testSignalEnv makes the helper of a test binary (never of the verifier) kill itself with SIGKILL,
// as the kernel's OOM killer would: KILL before the check (a killed check is a failed check, not a
// corrupt snapshot), KILL-AFTER once it has written its verdict (the verdict stands).
const testSignalEnv = "COFFER_ETCDSNAP_TEST_SELF_SIGNAL"

// maxHelperStderr bounds what is kept of a crashed helper's output (a goroutine dump can be large),
// and of the inconsistencies a helper reports (one per page, at worst).
const maxHelperStderr = 16 << 10

// helperVerdict is what the helper writes to its stdout, in one write, when the check ran to the
// end: the snapshot's status, or the inconsistency etcdutl reported. Once written, an inconsistency
// is the verdict, whatever happens to the helper after: on a corrupt file, bbolt's page walk at open
// (a goroutine of its own, with no recover) can go on walking after the check has reported, and
// crash the helper between its verdict and its exit. (Before, the helper printed the inconsistency
// to stderr, and a crash after it made a corrupt etcd snapshot a check "without a verdict".)
type helperVerdict struct {
	Status       *snapshot.Status `json:"status,omitempty"`
	Inconsistent string           `json:"inconsistent,omitempty"`
}

func init() {
	path, ok := os.LookupEnv(statusEnv)
	if !ok {
		return
	}
	misbehave := ""
	if testing.Testing() {
		misbehave = os.Getenv(testSignalEnv)
	}
	if misbehave == "KILL" {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	var v helperVerdict
	st, err := snapshot.NewV3(zap.NewNop()).Status(path)
	if err != nil {
		v.Inconsistent = backend.Truncate(err.Error(), maxHelperStderr)
	} else {
		v.Status = &st
	}
	b, _ := json.Marshal(v)
	if _, err := os.Stdout.Write(append(b, '\n')); err != nil {
		os.Exit(4)
	}
	if misbehave == "KILL-AFTER" {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	if err != nil {
		os.Exit(3)
	}
	os.Exit(0)
}

// errCheckFailed is a consistency check that ran to the end and found the file inconsistent, or
// that crashed reading it (a panic or a fault in bbolt's walk): evidence about the snapshot.
var errCheckFailed = errors.New("consistency check failed")

// ErrCheckKilled is a check whose process was killed by a signal (SIGKILL is what the kernel's OOM
// killer sends) or that ran out of memory: the verifier's resources were exhausted. It says nothing
// about the snapshot, and running the same check again in the same place fails the same way.
var ErrCheckKilled = errors.New("the consistency check was killed")

// ErrCheckNotStarted is a check whose process could not be started; another attempt may succeed.
var ErrCheckNotStarted = errors.New("the consistency check could not be started")

// status runs etcdutl's snapshot status in a child process. It returns errCheckFailed (wrapped)
// when the check reported an inconsistency or crashed in the walk, ErrCheckKilled or
// ErrCheckNotStarted (wrapped) when it could not be carried out, ctx's error when ctx ended first,
// and another error when the check failed in a way that says nothing about the file.
func status(ctx context.Context, path string) (snapshot.Status, error) {
	var st snapshot.Status
	self, err := os.Executable()
	if err != nil {
		return st, fmt.Errorf("%w: locating the verifier binary: %v", ErrCheckNotStarted, err)
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), statusEnv+"="+path)
	var stdout bytes.Buffer
	stderr := &limitedBuffer{max: maxHelperStderr}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	err = cmd.Run()
	if ctx.Err() != nil {
		return st, ctx.Err()
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return st, fmt.Errorf("%w: %v", ErrCheckNotStarted, err)
	}
	out := stderr.String()
	var v helperVerdict
	verdict := json.Unmarshal(stdout.Bytes(), &v) == nil
	switch {
	case verdict && v.Inconsistent != "":
		return st, fmt.Errorf("%w: %s", errCheckFailed, v.Inconsistent)
	case err == nil && verdict && v.Status != nil:
		return *v.Status, nil
	case verdict && v.Status != nil:
		// A clean status, then an abnormal exit: nothing in the walk is left to crash, so this is
		// not evidence about the file, and the status is not to be trusted either.
		return st, fmt.Errorf("the consistency check failed without a verdict on the file: it wrote the status, then exited abnormally (%s)", crashSummary(out, exit))
	case err == nil:
		return st, fmt.Errorf("reading the check's result: %q is not one", backend.Truncate(stdout.String(), 200))
	case signaled(exit):
		return st, fmt.Errorf("%w by a signal (%s; the kernel's OOM killer sends SIGKILL when a container exceeds its memory limit)", ErrCheckKilled, exit.Sys().(syscall.WaitStatus).Signal())
	case outOfMemory(out):
		return st, fmt.Errorf("%w: it ran out of memory (%s)", ErrCheckKilled, crashSummary(out, exit))
	case exit.ExitCode() == 2 && crashed(out):
		return st, fmt.Errorf("%w: bbolt crashed reading the file (%s)", errCheckFailed, crashSummary(out, exit))
	default:
		return st, fmt.Errorf("the consistency check failed without a verdict on the file (%s)", crashSummary(out, exit))
	}
}

func signaled(exit *exec.ExitError) bool {
	ws, ok := exit.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}

// crashed reports whether a helper's output is a Go panic or memory fault: what bbolt's walk (or
// etcd's backend code above it) does on a corrupt page, where no recover reaches. The crash need
// not be the output's first line: a binary built with the race detector reports bbolt's own data
// races before it.
func crashed(stderr string) bool {
	first := crashLine(stderr)
	return strings.HasPrefix(first, "panic: ") || strings.HasPrefix(first, "unexpected fault address") ||
		strings.HasPrefix(first, "fatal error: fault") || strings.HasPrefix(first, "fatal error: unexpected signal")
}

// outOfMemory reports whether the Go runtime of the helper gave up for lack of memory.
func outOfMemory(stderr string) bool {
	return strings.HasPrefix(crashLine(stderr), "fatal error: runtime: out of memory") || strings.Contains(stderr, "cannot allocate memory")
}

// crashLine is the first line of a helper's output where the Go runtime says how it ended (a
// panic, a fault, a fatal error), or "" when no line does.
func crashLine(stderr string) string {
	for _, line := range strings.Split(stderr, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "unexpected fault address") || strings.HasPrefix(line, "fatal error: ") {
			return line
		}
	}
	return ""
}

// crashSummary is the line of a crashed helper's output that says how it ended (crashLine), else
// its first line, or its exit status.
func crashSummary(stderr string, exit *exec.ExitError) string {
	if line := crashLine(stderr); line != "" {
		return line
	}
	for _, line := range strings.Split(stderr, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "goroutine ") {
			return line
		}
	}
	if exit == nil {
		return ""
	}
	return exit.String()
}

// limitedBuffer keeps the first max bytes written to it and discards the rest.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
