// Command demo runs `make demo`: the local cluster of real processes (control plane, MinIO,
// Velero, and Coffer's four components under their shipped RBAC), the golden lifecycle narrated
// step by step, a final table, the samples and every Coffer kind. The cluster then keeps running
// until Ctrl-C (or stops at once with --exit).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/coffer-backup/coffer/e2e/demo"
)

func main() {
	exit := flag.Bool("exit", false, "Stop the cluster at the end instead of waiting for Ctrl-C.")
	flag.Parse()
	if err := run(*exit); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(exit bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	s, _, err := demo.Run(ctx, os.Stdout, demo.Options{})
	if s != nil {
		defer func() {
			fmt.Println("\nTearing down the local cluster")
			s.Stop()
			_ = os.RemoveAll(s.Cluster.Dir)
		}()
	}
	if err != nil {
		if s != nil {
			fmt.Fprintf(os.Stderr, "component logs (tail):\n%s", s.Logs())
		}
		return err
	}
	fmt.Printf("\nThe demo took %s.\n", time.Since(start).Round(time.Second))
	if exit {
		return nil
	}
	fmt.Printf("The cluster keeps running (the Plan fires every minute) until Ctrl-C. Use it with:\n  export KUBECONFIG=%s\n", s.Cluster.Kubeconfig)
	<-ctx.Done()
	return nil
}
