package election_test

import (
	"flag"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coffer-backup/coffer/apis/election"
)

func parse(t *testing.T, args ...string) (election.Timing, error) {
	t.Helper()
	var tm election.Timing
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	tm.Bind(fs)
	require.NoError(t, fs.Parse(args))
	return tm, tm.Validate()
}

// The defaults renew a Lease fewer than 10 times a minute and are valid; Flags gives back what
// it is parsed from; a timing the leader elector would refuse is refused with the flag's name.
func TestTiming(t *testing.T) {
	d, err := parse(t)
	require.NoError(t, err)
	assert.Equal(t, election.Defaults(), d)
	assert.Less(t, time.Minute/d.RetryPeriod, time.Duration(10), "renewals per minute")

	fast := election.Timing{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
	got, err := parse(t, fast.Flags()...)
	require.NoError(t, err)
	assert.Equal(t, fast, got)

	for flags, want := range map[string][]string{
		"--leader-elect-retry-period":   {"--leader-elect-retry-period=0s"},
		"--leader-elect-renew-deadline": {"--leader-elect-renew-deadline=12s"},
		"--leader-elect-lease-duration": {"--leader-elect-lease-duration=20s"},
	} {
		_, err := parse(t, want...)
		require.Error(t, err, want)
		assert.Contains(t, err.Error(), flags)
	}
}
