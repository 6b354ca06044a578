package agent

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"filippo.io/age"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// Environment variables the agent reads besides the driver's contract.
const (
	// EnvDataDir is the fallback of --dir.
	EnvDataDir = "COFFER_DATA_DIR"
	// EnvAccessKeyID and EnvSecretAccessKey are the S3 credentials, usually from a Secret mounted
	// with envFrom. They are never printed.
	EnvAccessKeyID     = "AWS_ACCESS_KEY_ID"
	EnvSecretAccessKey = "AWS_SECRET_ACCESS_KEY"
	// EnvFormat is the fallback of --format.
	EnvFormat = jobv1.EnvArtifactFormat
)

// Values of --format.
const (
	FormatTar     = "tar"
	FormatChunked = "chunked"
)

// Defaults of the flags.
const (
	DefaultDir            = "/data"
	DefaultTerminationLog = "/dev/termination-log"
)

// Config is the agent's configuration, from flags with environment fallbacks.
type Config struct {
	// Mode is backup, restore, verify, cleanup, check or maintain.
	Mode string
	// Dir is the directory backed up, or restored into.
	Dir string
	// Endpoint is the S3 endpoint as given: http://host:port, https://host[:port] or host[:port]
	// (HTTPS).
	Endpoint string
	// Bucket receives backups. Restore, cleanup and check take the bucket from the artifact URI.
	Bucket string
	// Prefix is prepended to backup keys; by default the run's namespace.
	Prefix string
	// Region is the bucket's region; empty lets the client ask the server.
	Region string
	// TerminationLog receives the report or the error; empty disables it.
	TerminationLog string

	// AccessKeyID and SecretAccessKey are the S3 credentials.
	AccessKeyID, SecretAccessKey string

	// RunName, RunNamespace and RunUID identify the BackupJob, RestoreJob or Backup served.
	RunKind, RunName, RunNamespace, RunUID string
	// Application names the application, for the log.
	Application string

	// ArtifactURI, ArtifactChecksum and ArtifactSizeBytes (-1 when unknown) describe the artifact
	// restored, deleted or checked.
	ArtifactURI       string
	ArtifactChecksum  string
	ArtifactSizeBytes int64

	// CompressionLevel is the zstd level of a backup, 0 for none; compressionLevel is as given.
	CompressionLevel int
	compressionLevel string
	// EncryptionSecret names the Secret of the keys, when the strategy asks for encryption.
	EncryptionSecret string
	// Recipients and KeyRef encrypt a backup (from COFFER_AGE_RECIPIENTS); Identities decrypt a
	// restore (from COFFER_AGE_IDENTITIES). Keys come from the environment only, never flags.
	Recipients []age.Recipient
	KeyRef     string
	Identities *Identities
	// Record is the record template of a backup (COFFER_RECORD), if the driver gave one.
	Record *backupsv1.ArtifactRecord
	// Format is what a backup writes: FormatTar or FormatChunked. ChunkKey is a chunked
	// repository's key (COFFER_CHUNK_KEY, environment only).
	Format   string
	ChunkKey string
	// Repository and Margin are what maintenance maintains, and how long a backup may run.
	Repository string
	Margin     time.Duration
	margin     string
	// RetainFor, when positive, is how long a backup locks what it stores (S3 Object Lock, in
	// mode LockMode: COMPLIANCE or GOVERNANCE).
	RetainFor time.Duration
	LockMode  string
	retainFor string
}

// ModeMaintain runs maintenance on a chunked repository (maintain.go): the driver runs it after a
// chunked Backup's cleanup, and an operator may run it by hand (docs/driver-job.md).
const ModeMaintain = jobv1.ModeMaintain

// UsageError is a configuration error; the agent exits with code 2 on it.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usageErrorf(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// stringFlag is a flag whose value falls back to an environment variable when the flag is not
// given; the flag wins.
type stringFlag struct {
	name, env, def, usage string
	target                *string
}

func (c *Config) flags() []stringFlag {
	return []stringFlag{
		{"mode", jobv1.EnvMode, "", "backup, restore, verify, cleanup, check, or maintain (a chunked repository)", &c.Mode},
		{"repository", jobv1.EnvRepository, "", "maintain: the chunked repository's prefix; by default <prefix>/.coffer/<" + jobv1.EnvRunNamespace + ">", &c.Repository},
		{"margin", "", DefaultMaintenanceMargin.String(), "maintain: the longest a backup runs; one that started longer ago and did not finish is taken for dead", &c.margin},
		{"dir", EnvDataDir, DefaultDir, "directory backed up, or restored into", &c.Dir},
		{"endpoint", jobv1.ParamEnvName("endpoint"), "", "S3 endpoint: http://host:port, https://host[:port], or host[:port] for HTTPS", &c.Endpoint},
		{"bucket", jobv1.ParamEnvName("bucket"), "", "bucket receiving backups (restore, cleanup and check use the artifact URI's)", &c.Bucket},
		{"prefix", jobv1.ParamEnvName("prefix"), "", "key prefix of backups; by default the run's namespace (" + jobv1.EnvRunNamespace + ")", &c.Prefix},
		{"region", jobv1.ParamEnvName("region"), "", "bucket region (optional)", &c.Region},
		{"compression-level", jobv1.EnvCompressionLevel, strconv.Itoa(DefaultCompressionLevel), "zstd level of a backup, 1 (fastest) to 22 (smallest); 0 stores the tar uncompressed", &c.compressionLevel},
		{"format", EnvFormat, FormatTar, "what a backup writes: tar (one object per backup) or chunked (chunks shared by the backups of a repository beside it; needs " + EnvChunkKey + " when it encrypts)", &c.Format},
		{"retain-for", jobv1.EnvRetainFor, "", "backup: lock what the backup stores for this long after it starts (S3 Object Lock; the bucket must have it enabled)", &c.retainFor},
		{"object-lock-mode", jobv1.EnvObjectLockMode, "COMPLIANCE", "backup: the lock's mode with --retain-for, COMPLIANCE or GOVERNANCE", &c.LockMode},
		{"termination-log", "", DefaultTerminationLog, "file receiving the report or the error; empty disables it", &c.TerminationLog},
	}
}

// newFlagSet returns the agent's flags bound to c.
func (c *Config) newFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("coffer-agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, f := range c.flags() {
		usage := f.usage
		if f.env != "" {
			usage += " (env " + f.env + ")"
		}
		fs.StringVar(f.target, f.name, f.def, usage)
	}
	return fs
}

// PrintUsage writes the agent's help.
func PrintUsage(w io.Writer) {
	fs := (&Config{}).newFlagSet()
	fmt.Fprintf(w, "Usage: coffer-agent [flags]\n\nBacks up a directory to S3 as one tar, restores it, deletes it, or checks that it exists.\n"+
		"Credentials come from %s and %s. Flags win over their environment variables.\n\nFlags:\n",
		EnvAccessKeyID, EnvSecretAccessKey)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

var checksumPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// ParseConfig reads flags from args and fallbacks from getenv, and validates what the mode needs.
// It returns flag.ErrHelp for -h and --help, and a *UsageError for anything else wrong; the Config
// is never nil, and holds what was parsed before the error (the termination log, in particular).
func ParseConfig(args []string, getenv func(string) string) (*Config, error) {
	c := &Config{ArtifactSizeBytes: -1}
	fs := c.newFlagSet()
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, usageErrorf("%v", err)
	}
	if fs.NArg() > 0 {
		return c, usageErrorf("unexpected arguments %q", fs.Args())
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, f := range c.flags() {
		if given[f.name] || f.env == "" {
			continue
		}
		if v := getenv(f.env); v != "" {
			*f.target = v
		}
	}

	c.AccessKeyID, c.SecretAccessKey = getenv(EnvAccessKeyID), getenv(EnvSecretAccessKey)
	c.RunKind, c.RunName, c.RunNamespace, c.RunUID = getenv(jobv1.EnvRunKind), getenv(jobv1.EnvRunName), getenv(jobv1.EnvRunNamespace), getenv(jobv1.EnvRunUID)
	if k := getenv(jobv1.EnvApplicationKind); k != "" {
		c.Application = k + " " + getenv(jobv1.EnvApplicationName)
		if g := getenv(jobv1.EnvApplicationAPIGroup); g != "" {
			c.Application = g + "/" + c.Application
		}
	}
	c.ArtifactURI, c.ArtifactChecksum = getenv(jobv1.EnvArtifactURI), getenv(jobv1.EnvArtifactChecksum)
	if !given["prefix"] && c.Prefix == "" {
		c.Prefix = c.RunNamespace
	}
	if s := getenv(jobv1.EnvArtifactSizeBytes); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return c, usageErrorf("%s=%q is not a byte count", jobv1.EnvArtifactSizeBytes, s)
		}
		c.ArtifactSizeBytes = n
	}
	n, err := strconv.Atoi(strings.TrimSpace(c.compressionLevel))
	if err != nil || n < 0 || n > MaxCompressionLevel {
		return c, usageErrorf("compression level %q is not 0 (none) to %d", c.compressionLevel, MaxCompressionLevel)
	}
	c.CompressionLevel = n
	if c.Format != FormatTar && c.Format != FormatChunked {
		return c, usageErrorf("format %q is not %s or %s", c.Format, FormatTar, FormatChunked)
	}
	c.ChunkKey = getenv(EnvChunkKey)
	if c.Margin, err = time.ParseDuration(c.margin); err != nil {
		return c, usageErrorf("--margin %q is not a duration", c.margin)
	}
	if c.retainFor != "" {
		if c.RetainFor, err = time.ParseDuration(c.retainFor); err != nil || c.RetainFor <= 0 {
			return c, usageErrorf("--retain-for %q is not a positive duration", c.retainFor)
		}
	}
	if c.LockMode != "COMPLIANCE" && c.LockMode != "GOVERNANCE" {
		return c, usageErrorf("--object-lock-mode %q is not COMPLIANCE or GOVERNANCE", c.LockMode)
	}
	if c.Repository == "" && c.RunNamespace != "" {
		c.Repository = path.Join(c.Prefix, jobv1.RepositoryDir, c.RunNamespace)
	}
	if c.Format == FormatChunked && c.Mode == jobv1.ModeBackup {
		if c.ChunkKey != "" && len(c.ChunkKey) < minChunkKey {
			return c, usageErrorf("%s is %d characters; a chunk key needs at least %d", EnvChunkKey, len(c.ChunkKey), minChunkKey)
		}
		if c.ChunkKey == "" && strings.TrimSpace(getenv(jobv1.EnvAgeRecipients)) != "" {
			return c, usageErrorf("an encrypted chunked backup needs %s: without it, chunk IDs would tell which content the backups hold", EnvChunkKey)
		}
	}
	if err := c.keys(getenv); err != nil {
		return c, err
	}
	if text := getenv(jobv1.EnvRecord); text != "" && c.Mode == jobv1.ModeBackup {
		if c.Record, err = ParseRecordTemplate(text); err != nil {
			return c, &UsageError{Err: err}
		}
	}
	return c, c.validate()
}

// keys reads the age keys the mode needs from the environment. Errors never quote a key.
func (c *Config) keys(getenv func(string) string) error {
	c.EncryptionSecret = getenv(jobv1.EnvEncryptionSecret)
	from := "the environment"
	if c.EncryptionSecret != "" {
		from = "Secret " + c.EncryptionSecret
	}
	switch c.Mode {
	case jobv1.ModeBackup:
		text := getenv(jobv1.EnvAgeRecipients)
		if strings.TrimSpace(text) == "" {
			if c.EncryptionSecret != "" {
				return usageErrorf("the strategy encrypts backups with the keys of Secret %s, but %s is empty: give the Secret the key %q (age public keys, one per line)",
					c.EncryptionSecret, jobv1.EnvAgeRecipients, jobv1.SecretKeyRecipients)
			}
			return nil
		}
		var err error
		if c.Recipients, c.KeyRef, err = ParseRecipients(text); err != nil {
			return usageErrorf("%s (from %s) is not a list of age recipients: %v", jobv1.EnvAgeRecipients, from, err)
		}
	case jobv1.ModeRestore, jobv1.ModeVerify:
		text := getenv(jobv1.EnvAgeIdentities)
		if strings.TrimSpace(text) == "" {
			return nil // an unencrypted artifact needs none; an encrypted one fails before writing
		}
		var err error
		if c.Identities, err = ParseIdentities(text); err != nil {
			return usageErrorf("%s (from %s) is not a list of age identities: %v", jobv1.EnvAgeIdentities, from, err)
		}
	}
	return nil
}

func (c *Config) validate() error {
	switch c.Mode {
	case jobv1.ModeBackup, jobv1.ModeRestore, jobv1.ModeVerify, jobv1.ModeCleanup, jobv1.ModeCheck, ModeMaintain:
	case "":
		return usageErrorf("no mode: set --mode or %s to backup, restore, verify, cleanup, check or maintain", jobv1.EnvMode)
	default:
		return usageErrorf("mode %q is not backup, restore, verify, cleanup, check or maintain", c.Mode)
	}
	if c.Endpoint == "" {
		return usageErrorf("no S3 endpoint: set --endpoint or %s", jobv1.ParamEnvName("endpoint"))
	}
	if _, _, err := ParseEndpoint(c.Endpoint); err != nil {
		return &UsageError{Err: err}
	}
	if c.AccessKeyID == "" || c.SecretAccessKey == "" {
		return usageErrorf("no S3 credentials: set %s and %s (mount a Secret with envFrom)", EnvAccessKeyID, EnvSecretAccessKey)
	}
	if (c.Mode == jobv1.ModeBackup || c.Mode == jobv1.ModeRestore || c.Mode == jobv1.ModeVerify) && c.Dir == "" {
		return usageErrorf("no directory: set --dir or %s", EnvDataDir)
	}
	switch c.Mode {
	case jobv1.ModeBackup:
		if c.Bucket == "" {
			return usageErrorf("no bucket: set --bucket or %s", jobv1.ParamEnvName("bucket"))
		}
		if c.RunName == "" || c.RunUID == "" {
			return usageErrorf("%s and %s are required to name the backup", jobv1.EnvRunName, jobv1.EnvRunUID)
		}
		// Refused before anything is uploaded: a URI the driver could not read as s3://bucket/key.
		if _, _, err := backupsv1.ParseS3URI(ArtifactURI(c.Bucket, ObjectKey(c.Prefix, c.RunName, c.RunUID))); err != nil {
			return usageErrorf("the bucket and prefix make no usable artifact URI: %v", err)
		}
	case ModeMaintain:
		if c.Bucket == "" {
			return usageErrorf("no bucket: set --bucket or %s", jobv1.ParamEnvName("bucket"))
		}
		if c.Repository == "" {
			return usageErrorf("no repository: set --repository, or %s for the namespace's", jobv1.EnvRunNamespace)
		}
		if c.Margin <= 0 {
			return usageErrorf("--margin %s is not a positive duration", c.Margin)
		}
	case jobv1.ModeRestore, jobv1.ModeVerify:
		if !checksumPattern.MatchString(c.ArtifactChecksum) {
			return usageErrorf("%s=%q is not sha256: followed by 64 lower-case hex digits", jobv1.EnvArtifactChecksum, c.ArtifactChecksum)
		}
		fallthrough
	case jobv1.ModeCleanup, jobv1.ModeCheck:
		if c.ArtifactURI == "" {
			return usageErrorf("no artifact: %s is empty", jobv1.EnvArtifactURI)
		}
		if _, _, err := backupsv1.ParseS3URI(c.ArtifactURI); err != nil {
			return &UsageError{Err: err}
		}
	}
	return nil
}

// ParseEndpoint splits an endpoint into the host[:port] the S3 client wants and whether to use TLS.
// The scheme decides; an endpoint without scheme means HTTPS.
func ParseEndpoint(endpoint string) (host string, secure bool, err error) {
	raw := endpoint
	if !strings.Contains(raw, "://") {
		raw = "https://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", false, fmt.Errorf("endpoint %q: %w", endpoint, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", false, fmt.Errorf("endpoint %q: the scheme must be http or https", endpoint)
	case u.Host == "":
		return "", false, fmt.Errorf("endpoint %q has no host", endpoint)
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "", u.User != nil:
		return "", false, fmt.Errorf("endpoint %q must be scheme://host[:port] only", endpoint)
	}
	return u.Host, u.Scheme == "https", nil
}

// ArtifactURI is s3://bucket/key, the inverse of backupsv1.ParseS3URI (the one parser of artifact
// URIs).
func ArtifactURI(bucket, key string) string { return backupsv1.S3URI(bucket, key) }
