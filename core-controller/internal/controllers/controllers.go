// Package controllers registers core's reconcilers with a manager: Plans, BackupJobs and
// RestoreJobs. The binary and the end-to-end tests wire core the same way, through Setup.
package controllers

import (
	"context"
	"fmt"
	"time"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/coffer-backup/coffer/core-controller/internal/backupjob"
	"github.com/coffer-backup/coffer/core-controller/internal/claim"
	"github.com/coffer-backup/coffer/core-controller/internal/plan"
	"github.com/coffer-backup/coffer/core-controller/internal/restorejob"
)

// EventSource names core's events.
const EventSource = "coffer-core-controller"

// Options configure core's controllers.
type Options struct {
	// ClaimTimeout is how long a BackupJob or RestoreJob may wait for a driver before core fails it.
	ClaimTimeout time.Duration
	// PlanWorkers is how many Plans are reconciled in parallel.
	PlanWorkers int
	// Clock is the reconcilers' clock; nil means the real one.
	Clock clock.PassiveClock
}

// DefaultOptions are the defaults of the binary's flags.
func DefaultOptions() Options {
	return Options{ClaimTimeout: claim.DefaultTimeout, PlanWorkers: 8}
}

// Validate reports options the controllers cannot run with.
func (o Options) Validate() error {
	if o.ClaimTimeout <= 0 {
		return fmt.Errorf("the driver claim timeout must be positive, got %s", o.ClaimTimeout)
	}
	if o.PlanWorkers < 1 {
		return fmt.Errorf("plan workers must be at least 1, got %d", o.PlanWorkers)
	}
	return nil
}

// Setup registers the Plan, BackupJob and RestoreJob controllers with mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	clk := o.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	started := clk.Now()
	recorder := mgr.GetEventRecorder(EventSource)
	settings := claim.Settings{Client: mgr.GetClient(), Clock: clk, Recorder: recorder, ClaimTimeout: o.ClaimTimeout, Started: started}
	if err := (&plan.Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Clock:     clk,
		Recorder:  recorder,
	}).SetupWithManager(ctx, mgr, o.PlanWorkers); err != nil {
		return fmt.Errorf("setting up the Plan controller: %w", err)
	}
	if err := (&backupjob.Reconciler{Settings: settings, APIReader: mgr.GetAPIReader()}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the BackupJob controller: %w", err)
	}
	if err := (&restorejob.Reconciler{Settings: settings}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the RestoreJob controller: %w", err)
	}
	return nil
}
