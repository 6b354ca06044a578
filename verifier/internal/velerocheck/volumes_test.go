package velerocheck

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAWSCredentials(t *testing.T) {
	file := []byte(`# Velero's credentials
[default]
aws_access_key_id = AKID
aws_secret_access_key=SECRET

[profile backup]
aws_access_key_id=B-AKID
aws_secret_access_key = B-SECRET
aws_session_token = B-TOKEN
`)
	id, secret, token, err := awsCredentials(file, "default")
	require.NoError(t, err)
	assert.Equal(t, []string{"AKID", "SECRET", ""}, []string{id, secret, token})
	id, secret, token, err = awsCredentials(file, "backup")
	require.NoError(t, err)
	assert.Equal(t, []string{"B-AKID", "B-SECRET", "B-TOKEN"}, []string{id, secret, token})
	_, _, _, err = awsCredentials(file, "other")
	assert.ErrorContains(t, err, `profile "other" has no aws_access_key_id`)
}
