package agent

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"

	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// stagingPrefix starts the name of a restore's staging directory; backups skip such top-level
// directories, left over by an interrupted restore.
const stagingPrefix = ".coffer-restore-"

// errUploadEnded stops the archiver when the upload stopped reading.
var errUploadEnded = errors.New("the upload ended")

// ObjectKey is where a run's backup is stored: <prefix>/<runName>-<first 8 characters of runUID>.tar.
// Empty segments of the prefix (leading, trailing or doubled slashes) are dropped; an empty prefix
// puts the object at the top of the bucket.
func ObjectKey(prefix, runName, runUID string) string {
	var segments []string
	for _, s := range strings.Split(prefix, "/") {
		if s != "" {
			segments = append(segments, s)
		}
	}
	if len(runUID) > 8 {
		runUID = runUID[:8]
	}
	return strings.Join(append(segments, runName+"-"+runUID+".tar"), "/")
}

// Backup streams dir as one tar to bucket/key and returns the artifact's report. It refuses to
// replace an existing object. Nothing is stored unless the whole archive was uploaded: the object
// appears when the multipart upload completes.
func (a *Agent) Backup(ctx context.Context, dir, bucket, key string) (*jobv1.ArtifactReport, error) {
	uri := ArtifactURI(bucket, key)
	root, err := realDir(dir)
	if err != nil {
		return nil, fmt.Errorf("the directory to back up: %w", err)
	}
	_, err = a.S3.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
	switch {
	case err == nil:
		return nil, fmt.Errorf("%s already exists; refusing to overwrite it", uri)
	case minio.ToErrorResponse(err).Code != minio.NoSuchKey:
		return nil, fmt.Errorf("checking whether %s exists: %w", uri, err)
	}

	a.logf("backing up %s to %s", dir, uri)
	start := time.Now()
	pr, pw := io.Pipe()
	archived := make(chan error, 1)
	go func() {
		err := writeTar(pw, root, a.logf)
		pw.CloseWithError(err) // nil: the upload reads io.EOF
		archived <- err
	}()
	hash := sha256.New()
	var size byteCounter
	info, uploadErr := a.S3.PutObject(ctx, bucket, key, io.TeeReader(pr, io.MultiWriter(hash, &size)), -1, minio.PutObjectOptions{
		ContentType: "application/x-tar",
		PartSize:    a.partSize(),
	})
	pr.CloseWithError(errUploadEnded) // unblocks the archiver if the upload failed
	if err := <-archived; err != nil && !errors.Is(err, errUploadEnded) {
		return nil, fmt.Errorf("archiving %s: %w", dir, err)
	}
	if uploadErr != nil {
		return nil, fmt.Errorf("uploading %s: %w", uri, uploadErr)
	}
	if info.Size != int64(size) {
		return nil, fmt.Errorf("uploading %s: the store took %d bytes of %d", uri, info.Size, size)
	}
	elapsed := time.Since(start)
	a.logf("uploaded %d bytes in %s (%.1f MB/s)", size, elapsed.Round(time.Millisecond), float64(size)/1e6/elapsed.Seconds())
	report := &jobv1.ArtifactReport{URI: uri, SizeBytes: int64(size), Checksum: "sha256:" + hex.EncodeToString(hash.Sum(nil))}
	return report, report.Validate()
}

func (a *Agent) partSize() uint64 {
	if a.PartSize == 0 {
		return DefaultPartSize
	}
	return a.PartSize
}

// byteCounter counts what is written to it.
type byteCounter int64

func (c *byteCounter) Write(p []byte) (int, error) {
	*c += byteCounter(len(p))
	return len(p), nil
}

// writeTar writes the tree under dir to w as a tar, in lexical order, without the root itself.
// Symbolic links are stored, not followed; sockets, devices and FIFOs are skipped with a warning,
// as are entries removed while the walk runs, a top-level lost+found and restore staging
// directories.
func writeTar(w io.Writer, dir string, warnf func(string, ...any)) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	tw := tar.NewWriter(bw)
	buf := make([]byte, 256<<10)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path != dir && errors.Is(err, fs.ErrNotExist) {
				warnf("warning: skipping %s: removed during the backup", path)
				return nil
			}
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		if d.IsDir() && !strings.ContainsRune(rel, filepath.Separator) {
			switch {
			case rel == "lost+found":
				// The file system's, not the application's; root-only on ext4, so unreadable to
				// a non-root agent, and a fresh volume has its own.
				warnf("warning: skipping lost+found")
				return filepath.SkipDir
			case strings.HasPrefix(rel, stagingPrefix):
				warnf("warning: skipping %s: staging directory of an interrupted restore", rel)
				return filepath.SkipDir
			}
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			warnf("warning: skipping %s: removed during the backup", rel)
			return nil
		} else if err != nil {
			return err
		}
		return addEntry(tw, path, filepath.ToSlash(rel), fi, buf, warnf)
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

// addEntry writes one file, directory or symbolic link.
func addEntry(tw *tar.Writer, path, name string, fi fs.FileInfo, buf []byte, warnf func(string, ...any)) error {
	var link string
	var f *os.File
	switch mode := fi.Mode(); {
	case mode.IsDir():
		name += "/"
	case mode&fs.ModeSymlink != 0:
		var err error
		if link, err = os.Readlink(path); err != nil {
			return err
		}
	case mode.IsRegular():
		// Opened first, so that a file that cannot be read leaves no header behind; O_NOFOLLOW
		// keeps a file replaced by a link meanwhile from being followed.
		var err error
		f, err = os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if errors.Is(err, fs.ErrNotExist) {
			warnf("warning: skipping %s: removed during the backup", name)
			return nil
		} else if err != nil {
			return err
		}
		defer f.Close()
	default:
		warnf("warning: skipping %s: a %s is not a regular file, directory or symbolic link", name, typeName(mode))
		return nil
	}
	hdr, err := tar.FileInfoHeader(noNames{fi}, link)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	hdr.Name = name
	// Whole-second modification times only: the USTAR header keeps the archive compact and the
	// same tree gives the same bytes.
	hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if f == nil {
		return nil
	}
	n, err := io.CopyBuffer(tw, io.LimitReader(f, hdr.Size), buf)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if n != hdr.Size {
		return fmt.Errorf("%s shrank from %d to %d bytes while it was read", name, hdr.Size, n)
	}
	return nil
}

// noNames keeps tar.FileInfoHeader from looking owners up by name: restores use the numeric ids,
// and a volume's ids are seldom in the agent's /etc/passwd.
type noNames struct{ fs.FileInfo }

func (noNames) Uname() (string, error) { return "", nil }
func (noNames) Gname() (string, error) { return "", nil }

func typeName(m fs.FileMode) string {
	switch {
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	}
	return "special file (" + m.Type().String() + ")"
}
