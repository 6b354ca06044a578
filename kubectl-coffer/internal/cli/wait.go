package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/coffer-backup/coffer/kubectl-coffer/internal/view"
)

// waitFlags are --wait and --timeout.
type waitFlags struct {
	wait    bool
	timeout time.Duration
}

func (f *waitFlags) addFlags(cmd *cobra.Command, what string) {
	cmd.Flags().BoolVar(&f.wait, "wait", false, "Wait until the "+what+" ends, printing its progress; exit non-zero if it failed.")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 0, "With --wait, give up waiting after this long (0: wait until the run ends, as every run does).")
}

// RunFailedError says that a waited-for run ended Failed, and why.
type RunFailedError struct {
	Run   string
	State view.State
}

func (e *RunFailedError) Error() string { return e.Run + " " + e.State.String() }

// waitFor reads a run every PollInterval until it is terminal, printing a progress line to w each
// time its state changes. A run that ends Failed is a *RunFailedError.
func (o *Options) waitFor(ctx context.Context, w io.Writer, ref string, timeout time.Duration, read func(context.Context) (view.State, error)) (view.State, error) {
	start := o.Clock.Now()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var s view.State
	last, lastErr := "", ""
	for {
		cur, err := read(ctx)
		switch {
		case apierrors.IsNotFound(err):
			return s, fmt.Errorf("%s was deleted while waiting for it", ref)
		case err != nil && ctx.Err() == nil:
			// Trouble reading is not the run's outcome: say it once and read again.
			if msg := err.Error(); msg != lastErr {
				fmt.Fprintf(w, "%s reading %s failed, retrying: %v\n", view.Waited(o.Clock.Since(start)), ref, err)
				lastErr = msg
			}
		case err == nil:
			s, lastErr = cur, ""
			if line := s.String(); line != last {
				fmt.Fprintln(w, view.ProgressLine(ref, s, o.Clock.Since(start)))
				last = line
			}
			if s.Terminal {
				if !s.Succeeded {
					return s, &RunFailedError{Run: ref, State: s}
				}
				return s, nil
			}
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return s, fmt.Errorf("timed out after %s waiting for %s, which is %s", timeout, ref, s)
			}
			return s, ctx.Err()
		case <-o.Clock.After(o.PollInterval):
		}
	}
}
