// Package election is the leader-election timing every Coffer component takes from its flags.
//
// A leader renews its Lease every retry period, and a standby reads it as often: at
// controller-runtime's defaults (a 15 s lease, renewed every 2 s) that is 30 requests per minute
// per component, whatever else it does, most of what a component asks of the API server at rest
// (docs/benchmarks.md, "Scale"). Coffer's defaults renew every 10 s (6 requests a minute; with
// its watches' periodic renewals a component stays under 10) and let a Lease lapse after 30 s: a
// standby takes over at most LeaseDuration plus RetryPeriod (40 s) after the leader dies, which a
// Plan's startingDeadlineSeconds and every run's deadline absorb; a leader that stops hands its
// Lease back at once. A test harness that kills leaders on purpose may shorten them with the
// flags.
package election

import (
	"flag"
	"fmt"
	"time"
)

// The default timing (the flags' defaults).
const (
	DefaultLeaseDuration = 30 * time.Second
	DefaultRenewDeadline = 20 * time.Second
	DefaultRetryPeriod   = 10 * time.Second
)

// Timing is how long a Lease lasts without renewal, how long a leader keeps trying to renew it
// before it gives up leading, and how often leader and standbys act on it.
type Timing struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Defaults is the default timing.
func Defaults() Timing {
	return Timing{LeaseDuration: DefaultLeaseDuration, RenewDeadline: DefaultRenewDeadline, RetryPeriod: DefaultRetryPeriod}
}

// Bind registers the flags --leader-elect-lease-duration, --leader-elect-renew-deadline and
// --leader-elect-retry-period on fs, with the defaults.
func (t *Timing) Bind(fs *flag.FlagSet) {
	d := Defaults()
	fs.DurationVar(&t.LeaseDuration, "leader-elect-lease-duration", d.LeaseDuration,
		"How long a standby waits after the leader's last renewal of the Lease before it takes the Lease over.")
	fs.DurationVar(&t.RenewDeadline, "leader-elect-renew-deadline", d.RenewDeadline,
		"How long the leader keeps trying to renew the Lease before it stops leading (and exits); shorter than the lease duration.")
	fs.DurationVar(&t.RetryPeriod, "leader-elect-retry-period", d.RetryPeriod,
		"How often the leader renews the Lease and a standby tries to acquire it (one API request each time).")
}

// Validate refuses a timing the leader elector would reject, or one where a leader could lose
// the Lease while it still believes it leads.
func (t Timing) Validate() error {
	switch {
	case t.RetryPeriod <= 0:
		return fmt.Errorf("--leader-elect-retry-period must be positive, not %s", t.RetryPeriod)
	case t.RenewDeadline <= t.RetryPeriod*12/10:
		return fmt.Errorf("--leader-elect-renew-deadline (%s) must be longer than 1.2 retry periods (%s)", t.RenewDeadline, t.RetryPeriod*12/10)
	case t.LeaseDuration <= t.RenewDeadline:
		return fmt.Errorf("--leader-elect-lease-duration (%s) must be longer than the renew deadline (%s)", t.LeaseDuration, t.RenewDeadline)
	}
	return nil
}

// Flags are the command-line flags that give t.
func (t Timing) Flags() []string {
	return []string{"--leader-elect-lease-duration=" + t.LeaseDuration.String(),
		"--leader-elect-renew-deadline=" + t.RenewDeadline.String(), "--leader-elect-retry-period=" + t.RetryPeriod.String()}
}
