package v1alpha1

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// The Job driver sets these environment variables in every container of the Jobs it creates, so
// that an agent needs no templating. They are the contract between the driver and any agent.
const (
	// EnvMode is "backup", "restore" or "cleanup".
	EnvMode = "COFFER_MODE"
	// EnvRunKind is the kind of the object the Job serves: BackupJob, RestoreJob or Backup (cleanup).
	EnvRunKind = "COFFER_RUN_KIND"
	// EnvRunName, EnvRunNamespace and EnvRunUID identify that object. An agent derives unique
	// artifact names from them.
	EnvRunName      = "COFFER_RUN_NAME"
	EnvRunNamespace = "COFFER_RUN_NAMESPACE"
	EnvRunUID       = "COFFER_RUN_UID"
	// EnvApplicationAPIGroup, EnvApplicationKind and EnvApplicationName name the application backed
	// up, or restored into.
	EnvApplicationAPIGroup = "COFFER_APPLICATION_API_GROUP"
	EnvApplicationKind     = "COFFER_APPLICATION_KIND"
	EnvApplicationName     = "COFFER_APPLICATION_NAME"
	// EnvBackupName is the Backup restored or cleaned up (restore and cleanup only).
	EnvBackupName = "COFFER_BACKUP_NAME"
	// EnvArtifactURI, EnvArtifactChecksum and EnvArtifactSizeBytes describe the artifact to restore
	// or delete (restore and cleanup only), as the backup's agent reported them.
	EnvArtifactURI       = "COFFER_ARTIFACT_URI"
	EnvArtifactChecksum  = "COFFER_ARTIFACT_CHECKSUM"
	EnvArtifactSizeBytes = "COFFER_ARTIFACT_SIZE_BYTES"
	// EnvParamPrefix prefixes one variable per BackupClass parameter: parameter "endpoint" becomes
	// COFFER_PARAM_ENDPOINT (see ParamEnvName).
	EnvParamPrefix = "COFFER_PARAM_"
)

// Modes of a Job, the value of EnvMode.
const (
	ModeBackup  = "backup"
	ModeRestore = "restore"
	ModeCleanup = "cleanup"
)

// ParamEnvName is the environment variable that carries a BackupClass parameter: the key in upper
// case, with every character outside [A-Z0-9_] replaced by '_'.
func ParamEnvName(key string) string {
	var b strings.Builder
	b.WriteString(EnvParamPrefix)
	for _, r := range strings.ToUpper(key) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// ArtifactReport is what a backup agent writes, as one JSON object, to its container's termination
// message (/dev/termination-log): where the artifact is, its size and its SHA-256.
type ArtifactReport struct {
	// URI locates the artifact, e.g. s3://bucket/prefix/name.tar.
	URI string `json:"uri"`
	// SizeBytes is the artifact's size in bytes.
	SizeBytes int64 `json:"sizeBytes"`
	// Checksum is "sha256:" and 64 lower-case hex digits.
	Checksum string `json:"checksum"`
}

var checksumPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// MaxReportBytes bounds a report; Kubernetes keeps at most 4096 bytes of a termination message.
const MaxReportBytes = 4096

// ParseArtifactReport decodes and validates a termination message. Unknown fields, trailing data,
// a URI without scheme and host, a negative size or a malformed checksum are errors that say what
// is wrong.
func ParseArtifactReport(msg string) (*ArtifactReport, error) {
	msg = strings.TrimSpace(msg)
	if msg == "" {
		return nil, fmt.Errorf("the termination message is empty; the agent must write {\"uri\":...,\"sizeBytes\":...,\"checksum\":\"sha256:...\"} to /dev/termination-log")
	}
	if len(msg) > MaxReportBytes {
		return nil, fmt.Errorf("the report is %d bytes, more than %d", len(msg), MaxReportBytes)
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(msg)))
	dec.DisallowUnknownFields()
	r := &ArtifactReport{}
	if err := dec.Decode(r); err != nil {
		return nil, fmt.Errorf("the termination message is not an artifact report: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("the termination message holds more than one JSON value")
	}
	return r, r.Validate()
}

// Validate checks a report's fields.
func (r *ArtifactReport) Validate() error {
	u, err := url.Parse(r.URI)
	switch {
	case r.URI == "":
		return fmt.Errorf("report field uri is empty")
	case err != nil:
		return fmt.Errorf("report field uri %q: %w", r.URI, err)
	case u.Scheme == "" || u.Host == "":
		return fmt.Errorf("report field uri %q needs a scheme and a host (bucket), e.g. s3://bucket/key", r.URI)
	case r.SizeBytes < 0:
		return fmt.Errorf("report field sizeBytes is negative (%d)", r.SizeBytes)
	case !checksumPattern.MatchString(r.Checksum):
		return fmt.Errorf("report field checksum %q is not sha256: followed by 64 lower-case hex digits", r.Checksum)
	}
	return nil
}
