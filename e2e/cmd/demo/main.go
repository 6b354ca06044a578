// Command demo runs `make demo`: a local Coffer control plane with deploy/ and the samples
// installed. It prints every Coffer kind and the kubeconfig, then waits for Ctrl-C and tears down.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/coffer-backup/coffer/e2e/demo"
	"github.com/coffer-backup/coffer/e2e/manifests"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, err := manifests.RepoRoot()
	if err != nil {
		return err
	}
	c, err := demo.Start(ctx, root, os.Stdout)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("\nTearing down the local cluster")
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "demo: teardown:", err)
		}
		_ = os.RemoveAll(c.Dir)
	}()
	if err := demo.PrintKinds(ctx, c.Config, os.Stdout); err != nil {
		return err
	}
	fmt.Printf("\nThe cluster keeps running until Ctrl-C. Use it with:\n  export KUBECONFIG=%s\n", c.Kubeconfig)
	<-ctx.Done()
	return nil
}
