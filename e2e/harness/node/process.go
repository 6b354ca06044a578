package node

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a node daemon (containerd, kubelet, kube-scheduler) with its output in a log file:
// one this process started, or one a dead owner left behind (adopted by Sweep).
type proc struct {
	name string
	log  string
	ref  procRef
	cmd  *exec.Cmd // nil when adopted
	logf *os.File
	done chan struct{}
	err  error // valid once done is closed
}

func startProc(name, logPath, bin string, args ...string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	p := &proc{name: name, log: logPath, logf: f, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = childEnv()
	p.cmd.Stdout, p.cmd.Stderr = f, f
	// Own process group: a signal to the group reaches helpers the daemon forked, not the test.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p.ref = refOf(p.cmd.Process.Pid)
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// adoptProc takes over a daemon another (dead) process started; nil when ref is not running.
func adoptProc(name, logPath string, ref procRef) *proc {
	if !ref.alive() {
		return nil
	}
	p := &proc{name: name, log: logPath, ref: ref, done: make(chan struct{})}
	go func() {
		for ref.alive() {
			time.Sleep(100 * time.Millisecond)
		}
		close(p.done)
	}()
	return p
}

func (p *proc) pid() int { return p.ref.PID }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitErr describes why the process ended, with its log tail.
func (p *proc) exitErr() error {
	return fmt.Errorf("%s exited: %v\n--- %s log (tail) ---\n%s", p.name, p.err, p.name, p.tail(4096))
}

// stop sends SIGTERM to the process group, and SIGKILL after grace. An adopted process is
// signalled alone unless it still leads its own group.
func (p *proc) stop(grace time.Duration) {
	if p == nil || p.exited() {
		return
	}
	target := -p.pid()
	if p.cmd == nil && processGroup(p.pid()) != p.pid() {
		target = p.pid()
	}
	_ = syscall.Kill(target, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(target, syscall.SIGKILL)
		<-p.done
	}
}

// tail is the last n bytes of the log.
func (p *proc) tail(n int64) string { return fileTail(p.log, n) }

// peakRSS is the process's peak resident set size (VmHWM), 0 once it has exited.
func (p *proc) peakRSS() int64 {
	if p == nil || p.exited() {
		return 0
	}
	return peakRSS(p.pid())
}

func fileTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	off := fi.Size() - n
	if off < 0 {
		off = 0
	}
	b, _ := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	return string(b)
}

func peakRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// childEnv is the environment of the node's daemons: the test's, with the sbin directories on
// PATH (containerd, runc and the CNI plugins call ip, iptables, mount helpers).
func childEnv() []string {
	env := os.Environ()
	for i, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			env[i] = kv + ":/usr/local/sbin:/usr/sbin:/sbin:/usr/local/bin:/usr/bin:/bin"
			return env
		}
	}
	return append(env, "PATH=/usr/local/sbin:/usr/sbin:/sbin:/usr/local/bin:/usr/bin:/bin")
}

// run executes a short command and returns its combined output.
func run(timeout time.Duration, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = childEnv()
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return out.String(), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
		}
		return out.String(), nil
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		return out.String(), fmt.Errorf("%s %s: timed out after %s", name, strings.Join(args, " "), timeout)
	}
}
