package agent

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"filippo.io/age"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// DefaultPartSize is the part size of a backup's multipart upload. With S3's 10,000 parts it bounds
// a backup to 156 GiB (stored, that is compressed, bytes).
const DefaultPartSize = 16 << 20

// DefaultUploadThreads is how many parts a backup uploads at once. The agent holds that many part
// buffers: 2 × 16 MiB keep one part filling while the other goes up, which is what two cores
// shared with compression and hashing can use.
const DefaultUploadThreads = 2

// Compression levels, on zstd's scale. The default is zstd's fastest: on two cores shared with
// the store and the file system, compression is what limits a backup of compressible data, and
// level 1 backed up JSON logs about twice as fast as level 3, for a ratio as good (4.91 against
// 4.75; docs/benchmarks.md). A strategy sets a higher level where stored size matters more.
const (
	DefaultCompressionLevel = 1
	MaxCompressionLevel     = 22
)

// DefaultMemoryLimit is the soft limit on the Go runtime's memory (heap, goroutine stacks, runtime
// metadata; not the executable's code, 10 MiB of coffer-agent's resident set) that coffer-agent
// applies when GOMEMLIMIT is unset. See ApplyMemoryLimit.
const DefaultMemoryLimit = 80 << 20

// ApplyMemoryLimit gives the process the soft memory limit DefaultMemoryLimit, unless getenv
// ("GOMEMLIMIT") is set (the Go runtime then applied that value at start, and it stays). It
// returns the limit in force. coffer-agent's main calls it before anything else, and the
// agent's benchmarks call it too, so that they measure what the binary does.
//
// Why: the agent's live heap is mostly long-lived buffers (2 × 16 MiB of upload parts, 8 MiB of
// zstd history), about 50 MiB at the defaults whatever the size of the tree. With GOGC's default
// of 100 alone the collector lets the heap grow to twice the live heap before it runs, so the
// garbage of a long backup (requests and responses of the upload, per-file allocations of the
// walk) could add 50 MiB of resident memory. The limit makes the collector run, and return freed
// pages to the kernel, before the runtime's memory passes 80 MiB, so that with the executable's
// 10 MiB the agent's peak RSS stays near 90 MiB, under 128 MiB. The limit is soft: at levels 10
// and above zstd's match tables (34 MiB more) put the live heap at about 81 MiB, above it; the
// collector then runs about 50 times a second, which costs little because the heap is mostly
// byte buffers without pointers (a level 19 backup took the same time with and without the
// limit). GOMEMLIMIT overrides the default; GOMEMLIMIT=off removes it.
//
// What a backup must hold grows with the tree, not only its buffers: a tree of a million small
// files needs several hundred MiB of live heap (the manifest, the repository's chunk index). A
// fixed limit below the live heap would make the collector run without pause, at up to half the
// CPU (a million-file backup took 1.7 times as long). So the default limit follows the live heap
// measured after each collection (followingLimit): the live heap and a half (the collector then
// works as with GOGC=50), never under DefaultMemoryLimit, and never over nine tenths of the
// container's memory limit (its cgroup's), where the collector working hard is better than the
// kernel killing the Job; it comes back down when the live heap does.
func ApplyMemoryLimit(getenv func(string) string) int64 {
	if getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(DefaultMemoryLimit)
		followLiveHeap.Do(func() {
			ceiling := cgroupMemoryLimit(os.ReadFile) / 10 * 9
			afterEachCollection(func() {
				s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
				if metrics.Read(s); s[0].Value.Kind() == metrics.KindUint64 {
					debug.SetMemoryLimit(followingLimit(int64(s[0].Value.Uint64()), ceiling))
				}
			})
		})
	}
	return debug.SetMemoryLimit(-1)
}

var followLiveHeap sync.Once

// followingLimit is the soft memory limit for a live heap of live bytes under a container limit
// of ceiling bytes (0: none): see ApplyMemoryLimit.
func followingLimit(live, ceiling int64) int64 {
	limit := live + live/2
	if ceiling > 0 {
		limit = min(limit, ceiling)
	}
	return max(limit, DefaultMemoryLimit)
}

// cgroupMemoryLimit is the memory limit of the process's cgroup as the container sees it (cgroup
// v2 memory.max, else v1 memory.limit_in_bytes), 0 when there is none or it cannot be read.
func cgroupMemoryLimit(read func(string) ([]byte, error)) int64 {
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := read(p)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 || n >= 1<<62 { // "max", or v1's "no limit" (a page-rounded MaxInt64)
			return 0
		}
		return n
	}
	return 0
}

// afterEachCollection calls f after every garbage collection from now on, in the runtime's
// cleanup goroutine (a cleanup of an object that only a collection frees, armed again each time).
func afterEachCollection(f func()) {
	type sentinel struct {
		_ *byte // not a tiny allocation, whose cleanup may never run
		_ [16]byte
	}
	var arm func()
	arm = func() {
		runtime.AddCleanup(new(sentinel), func(struct{}) { f(); arm() }, struct{}{})
	}
	arm()
}

// Agent runs backups, restores, cleanups and checks against one S3 client.
type Agent struct {
	// S3 is the object store's client.
	S3 *minio.Client
	// Log receives progress lines and warnings; usually stderr.
	Log io.Writer
	// PartSize is the part size of backup uploads; zero means DefaultPartSize.
	PartSize uint64
	// UploadThreads is how many parts go up at once; zero means DefaultUploadThreads.
	UploadThreads int
	// DownloadThreads is how many ranges of an artifact a restore fetches at once, and RangeSize
	// their size; zero means DefaultDownloadThreads and DefaultRangeSize.
	DownloadThreads int
	RangeSize       int
	// CodecThreads is how many goroutines compress or decompress; zero means GOMAXPROCS, at most 4.
	CodecThreads int

	// CompressionLevel is the zstd level of backups, 1 to MaxCompressionLevel; 0 means none.
	CompressionLevel int
	// Recipients, when set, encrypt backups with age; KeyRef names them in the header (see
	// ParseRecipients).
	Recipients []age.Recipient
	KeyRef     string
	// Identities decrypt encrypted artifacts on restore.
	Identities *Identities
	// Chunked writes backups in the chunked format (format 4, chunked.go) into the repository
	// Repository (a key prefix; empty: ".coffer" beside the artifact), with the chunk key ChunkKey
	// (required with encryption), in packs of PackSize bytes (zero: DefaultPackSize).
	Chunked    bool
	Repository string
	ChunkKey   string
	PackSize   int
	// RetainFor, when positive, locks every object a backup stores that a restore needs (S3 Object
	// Lock, in mode LockMode) until RetainFor after the backup started (lock.go).
	RetainFor time.Duration
	LockMode  minio.RetentionMode
	// Record, when set, is the record template of a backup (COFFER_RECORD): the backup stores it,
	// completed with its artifact, next to the artifact.
	Record *backupsv1.ArtifactRecord

	// now, when set, is the clock of chunked backups, which tell files changed just before a
	// backup from settled ones; tests move it.
	now func() time.Time
	// afterLoad, when set, runs once a chunked backup read what its repository holds; tests run
	// maintenance there.
	afterLoad func()
	// afterHeader, when set, runs once a restore checked the artifact's header and before it
	// extracts; tests change the object there.
	afterHeader func()
	// afterExtract, when set, runs once a verify extracted the artifact into data and before it
	// compares it with the manifest; tests change restored files there.
	afterExtract func(data string)
}

// maxCodecThreads caps the default of CodecThreads: each zstd goroutine holds its own window, so
// memory must not grow with the node's cores.
const maxCodecThreads = 4

func (a *Agent) codecThreads() int {
	if a.CodecThreads > 0 {
		return a.CodecThreads
	}
	return min(runtime.GOMAXPROCS(0), maxCodecThreads)
}

// NewClient returns an S3 client of endpoint (see ParseEndpoint) with static credentials.
func NewClient(endpoint, region, accessKeyID, secretAccessKey string) (*minio.Client, error) {
	host, secure, err := ParseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	c, err := minio.New(host, &minio.Options{
		Creds:  credentials.NewStaticV4(accessKeyID, secretAccessKey, ""),
		Secure: secure,
		Region: region,
		// Lets minio-go send each part's CRC32C, which the store checks.
		TrailingHeaders: true,
	})
	if err != nil {
		return nil, fmt.Errorf("S3 client of %s: %w", endpoint, err)
	}
	c.SetAppInfo("coffer-agent", "v1alpha1")
	return c, nil
}

func (a *Agent) logf(format string, args ...any) {
	if a.Log != nil {
		fmt.Fprintf(a.Log, "coffer-agent: "+format+"\n", args...)
	}
}

// Main runs the agent with command-line args and the environment getenv, and returns the process's
// exit code: 0, 1 on failure, 2 on a usage error. A failure is one line on stderr and the content
// of the termination log.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := ParseConfig(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		PrintUsage(stdout)
		return 0
	}
	if err == nil {
		err = Run(ctx, cfg, stdout, stderr)
	}
	if err == nil {
		return 0
	}
	msg := oneLine(err.Error())
	code := 1
	if ue := (*UsageError)(nil); errors.As(err, &ue) {
		code = 2
		msg = "usage: " + msg + " (see --help)"
	} else {
		msg = cfg.Mode + " failed: " + msg
	}
	fmt.Fprintf(stderr, "coffer-agent: %s\n", msg)
	if werr := writeTerminationLog(cfg.TerminationLog, []byte(msg)); werr != nil {
		fmt.Fprintf(stderr, "coffer-agent: %v\n", werr)
	}
	return code
}

// Run does what a valid cfg asks: the backup writes its ArtifactReport to the termination log
// and stdout, a restore a short JSON status to both, a verify its VerifyReport to both, a check
// its CheckReport to both.
func Run(ctx context.Context, cfg *Config, stdout, stderr io.Writer) error {
	s3, err := NewClient(cfg.Endpoint, cfg.Region, cfg.AccessKeyID, cfg.SecretAccessKey)
	if err != nil {
		return err
	}
	a := &Agent{S3: s3, Log: stderr, CompressionLevel: cfg.CompressionLevel, Recipients: cfg.Recipients, KeyRef: cfg.KeyRef, Identities: cfg.Identities, Record: cfg.Record,
		Chunked: cfg.Format == FormatChunked, ChunkKey: cfg.ChunkKey, RetainFor: cfg.RetainFor, LockMode: minio.RetentionMode(cfg.LockMode)}
	if a.Chunked {
		// One repository per namespace, whatever the strategy's prefix: no chunk is shared
		// between tenants.
		a.Repository = cfg.Repository
	}
	if cfg.Application != "" {
		a.logf("%s of %s for %s %s/%s", cfg.Mode, cfg.Application, cfg.RunKind, cfg.RunNamespace, cfg.RunName)
	}
	switch cfg.Mode {
	case jobv1.ModeBackup:
		report, err := a.Backup(ctx, cfg.Dir, cfg.Bucket, ObjectKey(cfg.Prefix, cfg.RunName, cfg.RunUID))
		if err != nil {
			return err
		}
		b, err := json.Marshal(report)
		if err != nil {
			return err
		}
		if err := writeTerminationLog(cfg.TerminationLog, b); err != nil {
			return fmt.Errorf("%s was uploaded but its report was not written: %w", report.URI, err)
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	case jobv1.ModeRestore, jobv1.ModeVerify:
		bucket, key, err := backupsv1.ParseS3URI(cfg.ArtifactURI)
		if err != nil {
			return err
		}
		if cfg.Bucket != "" && cfg.Bucket != bucket {
			a.logf("reading from bucket %q of the artifact URI, not --bucket %q", bucket, cfg.Bucket)
		}
		art := Artifact{Bucket: bucket, Key: key, Checksum: cfg.ArtifactChecksum, SizeBytes: cfg.ArtifactSizeBytes}
		if cfg.Mode == jobv1.ModeVerify {
			report, err := a.Verify(ctx, cfg.Dir, art)
			if err != nil {
				return err
			}
			return a.report(cfg, stdout, report, true) // the report is the verdict
		}
		status, err := a.Restore(ctx, cfg.Dir, art)
		if err != nil {
			return err
		}
		return a.report(cfg, stdout, status, false) // informative: a restore that worked does not fail for it
	case jobv1.ModeCleanup:
		bucket, key, err := backupsv1.ParseS3URI(cfg.ArtifactURI)
		if err != nil {
			return err
		}
		return a.Cleanup(ctx, bucket, key)
	case ModeMaintain:
		report, err := a.Maintain(ctx, cfg.Bucket, cfg.Repository, cfg.Margin)
		if err != nil {
			return err
		}
		return a.report(cfg, stdout, report, false)
	case jobv1.ModeCheck:
		bucket, key, err := backupsv1.ParseS3URI(cfg.ArtifactURI)
		if err != nil {
			return err
		}
		report, err := a.Check(ctx, bucket, key, cfg.ArtifactSizeBytes)
		if err != nil {
			return err
		}
		return a.report(cfg, stdout, report, true) // without it the driver cannot tell either
	}
	return &UsageError{Err: fmt.Errorf("mode %q is not backup, restore, verify, cleanup, check or maintain", cfg.Mode)}
}

// report writes v as JSON to the termination log and stdout. required: a report that cannot be
// written fails the run; otherwise it is a warning.
func (a *Agent) report(cfg *Config, stdout io.Writer, v any, required bool) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := writeTerminationLog(cfg.TerminationLog, b); err != nil {
		if required {
			return err
		}
		a.logf("warning: %v", err)
	}
	_, err = fmt.Fprintf(stdout, "%s\n", b)
	return err
}

// writeTerminationLog replaces the content of path with msg, cut to what Kubernetes keeps. An empty
// path writes nothing.
func writeTerminationLog(path string, msg []byte) error {
	if path == "" {
		return nil
	}
	if len(msg) > jobv1.MaxReportBytes {
		msg = msg[:jobv1.MaxReportBytes]
		for len(msg) > 0 && !utf8.Valid(msg) {
			msg = msg[:len(msg)-1]
		}
	}
	if err := os.WriteFile(path, msg, 0o644); err != nil {
		return fmt.Errorf("writing the termination log: %w", err)
	}
	return nil
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
