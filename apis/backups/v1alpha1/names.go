package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// MaxGeneratedNameLength bounds every name the contract derives: 63 keeps a name usable as a label
// value and as the name of a batch/v1 Job.
const MaxGeneratedNameLength = 63

// BoundedName joins parts with "-". A result longer than maxLen is cut and suffixed with "-" and
// ten hex digits of the SHA-256 of the whole name, so distinct long names stay distinct and the
// same inputs always give the same name.
func BoundedName(maxLen int, parts ...string) string {
	full := strings.Join(parts, "-")
	if len(full) <= maxLen {
		return full
	}
	sum := sha256.Sum256([]byte(full))
	suffix := "-" + hex.EncodeToString(sum[:])[:10]
	head := strings.TrimRight(full[:maxLen-len(suffix)], "-.")
	return head + suffix
}

// PlanBackupJobName is the name of the BackupJob a Plan creates for the tick at t:
// "<plan>-<t as unix minutes>", bounded by MaxGeneratedNameLength. One tick has one name, so no
// crash, restart or second replica can create two BackupJobs for it.
func PlanBackupJobName(plan string, tick time.Time) string {
	return BoundedName(MaxGeneratedNameLength, plan, strconv.FormatInt(tick.Unix()/60, 10))
}
