package agent

import (
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// TestMemoryLimitFollowsLiveHeap: coffer-agent's default soft memory limit rises with a live heap
// larger than it (the collector would otherwise run without pause) and comes back down once that
// heap is freed. In a child process: the limit is the process's.
func TestMemoryLimitFollowsLiveHeap(t *testing.T) {
	if os.Getenv("COFFER_TEST_MEMORY_LIMIT_CHILD") != "1" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryLimitFollowsLiveHeap$", "-test.v")
		cmd.Env = append(os.Environ(), "COFFER_TEST_MEMORY_LIMIT_CHILD=1", "GOMEMLIMIT=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return
	}
	if got := ApplyMemoryLimit(func(string) string { return "" }); got != DefaultMemoryLimit {
		t.Fatalf("limit %d; want the default, %d", got, DefaultMemoryLimit)
	}
	// waitFor collects until the limit meets want; the limit is set after a collection, in the
	// runtime's cleanup goroutine.
	waitFor := func(what string, want func(int64) bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; {
			runtime.GC()
			if l := debug.SetMemoryLimit(-1); want(l) {
				return
			} else if time.Now().After(deadline) {
				t.Fatalf("%s: the limit is %d MiB", what, l>>20)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	held := make([]byte, 256<<20)
	for i := range held {
		held[i] = byte(i)
	}
	waitFor("with 256 MiB live", func(l int64) bool { return l >= 256<<20+128<<20 })
	runtime.KeepAlive(held)
	held = nil
	waitFor("once freed", func(l int64) bool { return l == DefaultMemoryLimit })
}

// The limit follows the live heap with half of it to spare, between the default and nine tenths
// of the container's limit; the container's limit is read from cgroup v2, else v1.
func TestFollowingLimit(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct{ live, ceiling, want int64 }{
		{10 * mib, 0, DefaultMemoryLimit},
		{400 * mib, 0, 600 * mib},
		{400 * mib, 460 * mib, 460 * mib},
		{400 * mib, 40 * mib, DefaultMemoryLimit},
	} {
		if got := followingLimit(tc.live, tc.ceiling); got != tc.want {
			t.Errorf("followingLimit(%d MiB, %d MiB) = %d MiB; want %d MiB", tc.live/mib, tc.ceiling/mib, got/mib, tc.want/mib)
		}
	}
	files := func(m map[string]string) func(string) ([]byte, error) {
		return func(p string) ([]byte, error) {
			if v, ok := m[p]; ok {
				return []byte(v), nil
			}
			return nil, os.ErrNotExist
		}
	}
	const v2, v1 = "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int64
	}{
		{"v2 limit", map[string]string{v2: "536870912\n", v1: "1024"}, 512 * mib},
		{"v2 none", map[string]string{v2: "max\n"}, 0},
		{"v1 limit", map[string]string{v1: "268435456\n"}, 256 * mib},
		{"v1 none", map[string]string{v1: "9223372036854771712\n"}, 0},
		{"no cgroup", nil, 0},
	} {
		if got := cgroupMemoryLimit(files(tc.files)); got != tc.want {
			t.Errorf("%s: %d; want %d", tc.name, got, tc.want)
		}
	}
}
