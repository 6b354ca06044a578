package v1alpha1

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// The Job driver sets these environment variables in every container of the Jobs it creates, so
// that an agent needs no templating. They are the contract between the driver and any agent.
const (
	// EnvMode is "backup", "restore", "cleanup" or "check".
	EnvMode = "COFFER_MODE"
	// EnvRunKind is the kind of the object the Job serves: BackupJob, RestoreJob or Backup (cleanup
	// and check).
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
	// EnvBackupName is the Backup restored, cleaned up or checked (restore, cleanup and check only).
	EnvBackupName = "COFFER_BACKUP_NAME"
	// EnvArtifactURI, EnvArtifactChecksum and EnvArtifactSizeBytes describe the artifact to restore,
	// delete or check (restore, cleanup and check only), as the backup's agent reported them.
	EnvArtifactURI       = "COFFER_ARTIFACT_URI"
	EnvArtifactChecksum  = "COFFER_ARTIFACT_CHECKSUM"
	EnvArtifactSizeBytes = "COFFER_ARTIFACT_SIZE_BYTES"
	// EnvParamPrefix prefixes one variable per BackupClass parameter: parameter "endpoint" becomes
	// COFFER_PARAM_ENDPOINT (see ParamEnvName).
	EnvParamPrefix = "COFFER_PARAM_"

	// EnvCompressionLevel is the strategy's artifact.compressionLevel (backup only, when set):
	// the zstd level, 0 for no compression.
	EnvCompressionLevel = "COFFER_COMPRESSION_LEVEL"
	// EnvEncryptionSecret names the strategy's artifact.encryption Secret (backup and restore,
	// when set). It is a name, never a key: an agent that sees it must encrypt, and says which
	// Secret to fix when a key is missing.
	EnvEncryptionSecret = "COFFER_ENCRYPTION_SECRET"
	// EnvAgeRecipients holds the age recipients (public keys) a backup encrypts to, from the
	// Secret's key SecretKeyRecipients (backup only; set with secretKeyRef, never a value).
	EnvAgeRecipients = "COFFER_AGE_RECIPIENTS"
	// EnvAgeIdentities holds the age identities (private keys) a restore decrypts with, from the
	// Secret's key SecretKeyIdentities (restore only; set with secretKeyRef, never a value).
	EnvAgeIdentities = "COFFER_AGE_IDENTITIES"
	// EnvArtifactFormat is "chunked" when the strategy's artifact.format is Chunked (backup
	// only); unset, the agent writes its tar format.
	EnvArtifactFormat = "COFFER_ARTIFACT_FORMAT"
	// EnvChunkKey holds the chunk key of a Chunked strategy with encryption, from the Secret's key
	// SecretKeyChunkKey (backup only; set with secretKeyRef, never a value).
	EnvChunkKey = "COFFER_CHUNK_KEY"
	// EnvObjectLockMode ("COMPLIANCE" or "GOVERNANCE") and EnvRetainFor (a Go duration) are the
	// strategy's artifact.objectLock (backup only).
	EnvObjectLockMode = "COFFER_OBJECT_LOCK_MODE"
	EnvRetainFor      = "COFFER_RETAIN_FOR"
	// EnvRepository is the key prefix of the Chunked repository a maintenance Job maintains: the
	// deleted Backup's, beside its artifact (<prefix>/.coffer/<namespace>).
	EnvRepository = "COFFER_REPOSITORY"
	// EnvRecord holds the record (backups/v1alpha1 ArtifactRecord, JSON) of the Backup a backup
	// Job makes, without its artifact (backup only). A backup process completes it with the
	// artifact it reports and stores it next to the artifact, at the artifact's key plus
	// RecordSuffix, before it reports (contract rule BK-11); a cleanup deletes it after the
	// artifact.
	EnvRecord = "COFFER_RECORD"
)

// RecordSuffix follows an artifact's key in the key of its record.
const RecordSuffix = ".record.json"

// Keys of an encryption Secret (JobBackupStrategy spec.artifact.encryption.secretName).
const (
	// SecretKeyRecipients holds the age recipients of new backups, one per line.
	SecretKeyRecipients = "recipients"
	// SecretKeyIdentities holds the age identities of restores, one per line: the current key's
	// and every older key some artifact was encrypted to.
	SecretKeyIdentities = "identities"
	// SecretKeyChunkKey holds the chunk key of the Chunked format's repository.
	SecretKeyChunkKey = "chunkKey"
)

// Modes of a Job, the value of EnvMode.
const (
	ModeBackup  = "backup"
	ModeRestore = "restore"
	ModeCleanup = "cleanup"
	// ModeCheck asks whether a Backup's artifact still exists: the driver runs the strategy's
	// cleanupTemplate (which reaches the object store) in this mode, on a period, and the agent
	// reports a CheckReport. An agent that cannot tell (the store does not answer, access denied)
	// exits non-zero: the check is inconclusive and changes nothing.
	ModeCheck = "check"
	// ModeMaintain deletes the packs of a Chunked repository that no Backup needs any more: after
	// a Chunked Backup's cleanup, the driver runs the strategy's cleanupTemplate in this mode in
	// the Backup's namespace (at most one at a time per namespace), with the chunk key.
	ModeMaintain = "maintain"
	// ModeVerify restores a Backup's artifact into a scratch directory (never the application's
	// volume) and compares every restored file with the manifest the backup stored inside the
	// artifact: path, size and SHA-256. The driver runs the strategy's verifyTemplate in this mode
	// for an inert RestoreJob aimed at another namespace (a verifier's sandbox restore); the agent
	// reports a VerifyReport. An artifact it cannot restore (wrong checksum, key, format) fails the
	// Job as a restore would; differing files are a report, not a failure of the agent.
	ModeVerify = "verify"
)

// MaxVerifyDifferences bounds the differences a VerifyReport names; it counts them all.
const MaxVerifyDifferences = 10

// VerifyReport is what a verify agent writes, as one JSON object, to its container's termination
// message once it restored the artifact into scratch and compared it with the artifact's manifest.
type VerifyReport struct {
	// URI is the artifact verified.
	URI string `json:"uri"`
	// Format is the artifact's format version; versions before 3 carry no manifest.
	Format int `json:"format"`
	// Files is how many regular files the restore wrote.
	Files int64 `json:"files"`
	// Compared is how many files of the manifest were compared (path, size and SHA-256 of the
	// restored file, read back from the scratch volume); 0 without a manifest.
	Compared int64 `json:"compared"`
	// Mismatched counts the differences: a file whose size or SHA-256 differs from the manifest,
	// a file of the manifest that was not restored, a restored file the manifest does not list.
	Mismatched int64 `json:"mismatched"`
	// Differences says what differs, for at most MaxVerifyDifferences of them.
	Differences []string `json:"differences,omitempty"`
}

// ParseVerifyReport decodes and validates a verify agent's termination message.
func ParseVerifyReport(msg string) (*VerifyReport, error) {
	var r VerifyReport
	if err := decodeReport(msg, "a verify report", `{"uri":...,"format":3,"files":...,"compared":...,"mismatched":...}`, &r); err != nil {
		return nil, err
	}
	switch {
	case r.Files < 0 || r.Compared < 0 || r.Mismatched < 0:
		return nil, fmt.Errorf("verify report has a negative count")
	case r.Format < 1:
		return nil, fmt.Errorf("verify report field format is missing")
	case len(r.Differences) > MaxVerifyDifferences:
		return nil, fmt.Errorf("verify report names %d differences, more than %d", len(r.Differences), MaxVerifyDifferences)
	case r.Mismatched == 0 && len(r.Differences) > 0:
		return nil, fmt.Errorf("verify report names differences but counts none")
	case r.Compared > r.Files:
		return nil, fmt.Errorf("verify report compared %d files but restored %d", r.Compared, r.Files)
	}
	return &r, nil
}

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
	// Metadata describes the artifact for people and tools (e.g. its format version, compression,
	// uncompressed size, key reference). Optional; the driver copies it into the Backup's
	// spec.driverMetadata with the prefix MetadataPrefix. Never secret.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// MetadataPrefix prefixes the report's metadata keys in a Backup's spec.driverMetadata.
const MetadataPrefix = "artifact."

// Bounds of a report's metadata.
const (
	MaxMetadataEntries     = 16
	MaxMetadataValueLength = 256
)

var metadataKeyPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// MaxReportBytes bounds a report; Kubernetes keeps at most 4096 bytes of a termination message.
const MaxReportBytes = 4096

// ParseArtifactReport decodes and validates a termination message. Unknown fields, trailing data,
// a URI without scheme and host, a negative size or a malformed checksum are errors that say what
// is wrong.
func ParseArtifactReport(msg string) (*ArtifactReport, error) {
	r := &ArtifactReport{}
	if err := decodeReport(msg, "an artifact report", `{"uri":...,"sizeBytes":...,"checksum":"sha256:..."}`, r); err != nil {
		return nil, err
	}
	return r, r.Validate()
}

// decodeReport decodes a termination message into v (what, e.g. "a check report"): one JSON
// object of at most MaxReportBytes, without unknown fields or trailing data. shape is what the
// agent must write, for the message about an empty one.
func decodeReport(msg, what, shape string, v any) error {
	msg = strings.TrimSpace(msg)
	if msg == "" {
		return fmt.Errorf("the termination message is empty; the agent must write %s to /dev/termination-log", shape)
	}
	if len(msg) > MaxReportBytes {
		return fmt.Errorf("the report is %d bytes, more than %d", len(msg), MaxReportBytes)
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(msg)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("the termination message is not %s: %w", what, err)
	}
	if dec.More() {
		return fmt.Errorf("the termination message holds more than one JSON value")
	}
	return nil
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
	case !backupsv1.IsChecksum(r.Checksum):
		return fmt.Errorf("report field checksum %q is not sha256: followed by 64 lower-case hex digits", r.Checksum)
	case len(r.Metadata) > MaxMetadataEntries:
		return fmt.Errorf("report field metadata has %d entries, more than %d", len(r.Metadata), MaxMetadataEntries)
	}
	for k, v := range r.Metadata {
		if !metadataKeyPattern.MatchString(k) {
			return fmt.Errorf("report metadata key %q is not 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", k)
		}
		if len(v) > MaxMetadataValueLength {
			return fmt.Errorf("report metadata %q is %d bytes, more than %d", k, len(v), MaxMetadataValueLength)
		}
	}
	return nil
}

// CheckReport is what an agent in check mode writes, as one JSON object, to its container's
// termination message, when it could tell whether the artifact exists: {"exists": true,
// "sizeBytes": 123}. sizeBytes is the stored object's size (0 when it does not exist); the driver
// compares it with the Backup's.
type CheckReport struct {
	// Exists says whether the object at the artifact URI exists.
	Exists bool `json:"exists"`
	// SizeBytes is the object's size in bytes.
	SizeBytes int64 `json:"sizeBytes"`
}

// ParseCheckReport decodes and validates a check agent's termination message. Unknown fields,
// missing fields, trailing data and a negative size are errors that say what is wrong; the driver
// then takes the check as inconclusive.
func ParseCheckReport(msg string) (*CheckReport, error) {
	var raw struct {
		Exists    *bool  `json:"exists"`
		SizeBytes *int64 `json:"sizeBytes"`
	}
	if err := decodeReport(msg, "a check report", `{"exists":true|false,"sizeBytes":...}`, &raw); err != nil {
		return nil, err
	}
	switch {
	case raw.Exists == nil:
		return nil, fmt.Errorf("check report field exists is missing")
	case raw.SizeBytes == nil:
		return nil, fmt.Errorf("check report field sizeBytes is missing")
	case *raw.SizeBytes < 0:
		return nil, fmt.Errorf("check report field sizeBytes is negative (%d)", *raw.SizeBytes)
	}
	return &CheckReport{Exists: *raw.Exists, SizeBytes: *raw.SizeBytes}, nil
}
