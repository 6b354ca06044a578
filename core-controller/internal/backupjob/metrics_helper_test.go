package backupjob

import (
	"testing"

	dtomodel "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/coffer-backup/coffer/core-controller/internal/metrics"
)

// sampleCount returns the sample count of the duration histogram for an outcome.
func sampleCount(t *testing.T, outcome string) uint64 {
	t.Helper()
	obs, err := metrics.JobDuration.GetMetricWithLabelValues(outcome)
	require.NoError(t, err)
	m := &dtomodel.Metric{}
	require.NoError(t, obs.(interface{ Write(*dtomodel.Metric) error }).Write(m))
	return m.GetHistogram().GetSampleCount()
}
