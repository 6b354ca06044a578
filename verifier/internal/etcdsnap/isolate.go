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

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
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

// maxHelperStderr bounds what is kept of a crashed helper's output (a goroutine dump can be large).
const maxHelperStderr = 16 << 10

func init() {
	path, ok := os.LookupEnv(statusEnv)
	if !ok {
		return
	}
	st, err := snapshot.NewV3(zap.NewNop()).Status(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	if err := json.NewEncoder(os.Stdout).Encode(st); err != nil {
		os.Exit(4)
	}
	os.Exit(0)
}

// errCheckFailed is a consistency check that ran to the end and found the file inconsistent.
var errCheckFailed = errors.New("consistency check failed")

// status runs etcdutl's snapshot status in a child process. It returns errCheckFailed (wrapped)
// when the check reported an inconsistency, another error when the check crashed or could not run.
func status(ctx context.Context, path string) (snapshot.Status, error) {
	var st snapshot.Status
	self, err := os.Executable()
	if err != nil {
		return st, fmt.Errorf("locating the verifier binary to run the check: %w", err)
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
	switch {
	case err == nil:
		if err := json.Unmarshal(stdout.Bytes(), &st); err != nil {
			return st, fmt.Errorf("reading the check's result: %w", err)
		}
		return st, nil
	case errors.As(err, &exit) && exit.ExitCode() == 3:
		return st, fmt.Errorf("%w: %s", errCheckFailed, strings.TrimSpace(stderr.String()))
	case errors.As(err, &exit):
		return st, fmt.Errorf("%w: bbolt crashed reading the file (%s)", errCheckFailed, crashSummary(stderr.String(), exit))
	default:
		return st, err
	}
}

// crashSummary is the first line of a crashed helper's output ("panic: ...", "unexpected fault
// address ..."), or its exit status.
func crashSummary(stderr string, exit *exec.ExitError) string {
	for _, line := range strings.Split(stderr, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "goroutine ") {
			return line
		}
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
