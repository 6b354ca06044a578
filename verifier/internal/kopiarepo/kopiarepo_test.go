package kopiarepo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	pkgerrors "github.com/pkg/errors"
	"github.com/stretchr/testify/assert"

	"github.com/kopia/kopia/repo/blob"
	"github.com/kopia/kopia/repo/content"
	"github.com/kopia/kopia/snapshot"
)

// TestDamageIsOnlyWhatTheDataSays: the errors kopia gives for missing or unverifiable data are
// damage, wherever they are wrapped; a transport fault, a timeout or a cancellation is not.
func TestDamageIsOnlyWhatTheDataSays(t *testing.T) {
	for _, tt := range []struct {
		err     error
		damage  bool
		missing bool
	}{
		{pkgerrors.Wrap(blob.ErrBlobNotFound, "getting pack p0123"), true, true},
		{fmt.Errorf("reading: %w", content.ErrContentNotFound), true, true},
		{fmt.Errorf("snapshot k1: %w", snapshot.ErrSnapshotNotFound), true, true},
		{pkgerrors.Wrapf(errors.New("cipher: message authentication failed"), "invalid checksum at p0123 offset 10 length 20/20"), true, false},
		{errors.New("dial tcp 127.0.0.1:9000: connect: connection refused"), false, false},
		{io.ErrUnexpectedEOF, false, false},
		{context.DeadlineExceeded, false, false},
		{context.Canceled, false, false},
	} {
		err := damage(tt.err, "d/f")
		var d *Damage
		assert.Equal(t, tt.damage, errors.As(err, &d), "%v", tt.err)
		if tt.damage {
			assert.Equal(t, tt.missing, d.Missing, "%v", tt.err)
			assert.Equal(t, "d/f", d.Path)
			assert.ErrorIs(t, err, tt.err)
		} else {
			assert.Equal(t, tt.err, err)
		}
	}
}
