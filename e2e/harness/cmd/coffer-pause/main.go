// Command coffer-pause is the pod sandbox ("pause") process of the e2e node harness: it holds a
// pod's namespaces open, does nothing else, and exits 0 on SIGTERM or SIGINT. As PID 1 of a pod
// that shares its process namespace it also reaps orphaned children, as the upstream pause does.
//
// Build it static (CGO_ENABLED=0); e2e/harness/images packs it into the image coffer/pause:dev.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-v" || os.Args[1] == "--version") {
		os.Stdout.WriteString("coffer-pause\n")
		return
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	reap() // children inherited before the handler was installed
	for sig := range sigs {
		reap()
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
	}
}

// reap collects every exited child without blocking; SIGCHLD signals coalesce, so one signal may
// stand for several exits.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
