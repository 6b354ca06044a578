// Package etcdsnap verifies an etcd snapshot file: the SHA-256 etcd appends to every snapshot it
// saves, an optional `<file>.sha256` sidecar, and bbolt's own consistency (etcdutl's snapshot status).
package etcdsnap

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
)

// Report is what a verification found.
type Report struct {
	Findings []securityv1.Finding
	// Details are recorded in the BackupVerifyResult.
	Details map[string]string
	// SHA256 of the whole file, "sha256:<hex>", when it could be read.
	Checksum  string
	SizeBytes int64
	// Basis: Recorded when the SHA-256 etcd appended or a .sha256 sidecar was compared, None when
	// the file carries neither.
	Basis securityv1.ChecksumBasis
}

func (r *Report) add(code string, sev securityv1.Severity, msg string) {
	r.Findings = append(r.Findings, securityv1.Finding{Code: code, Severity: sev, Message: msg})
}

// Resolve joins ref to dir and refuses any ref that leaves dir (absolute paths, "..", symlinks
// pointing outside). Nothing is opened for a refused ref.
func Resolve(dir, ref string) (string, error) {
	if ref == "" || filepath.IsAbs(ref) {
		return "", fmt.Errorf("snapshot ref %q must be a relative path inside the snapshot directory", ref)
	}
	base, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	p := filepath.Join(base, ref)
	if !within(base, p) {
		return "", fmt.Errorf("snapshot ref %q escapes the snapshot directory", ref)
	}
	realBase, err := filepath.EvalSymlinks(base)
	if err != nil {
		return "", err
	}
	if real, err := filepath.EvalSymlinks(p); err == nil && !within(realBase, real) {
		return "", fmt.Errorf("snapshot ref %q resolves outside the snapshot directory", ref)
	}
	return p, nil
}

func within(base, p string) bool {
	rel, err := filepath.Rel(base, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// ErrNotFound: the snapshot the run names is not in the snapshot directory. The verification
// cannot be carried out (as ugallu: the run Fails, BackupVerifyFailed); the report holds an
// etcd-snapshot-not-found finding (medium) saying so.
var ErrNotFound = errors.New("etcd-snapshot-not-found")

// ErrRefInvalid: the run's backupRef.name is no file name within the snapshot directory (it
// escapes it). The run Fails as with ErrNotFound; no file outside the directory is read.
var ErrRefInvalid = errors.New("etcd-snapshot-ref-invalid")

// Verify checks the snapshot dir/ref. The bbolt consistency check runs in a child process (see
// statusEnv) that ctx bounds. The findings of the report are facts about the file. An error means
// the check could not be carried out and says nothing about the file: ErrNotFound or
// ErrRefInvalid (wrapped) when there is no such file, ctx's error when ctx ended
// first, ErrCheckKilled (wrapped) when the check's process was killed or ran out of memory,
// ErrCheckNotStarted (wrapped) when it could not be started; the report then holds the findings
// established before the check.
func Verify(ctx context.Context, dir, ref string) (*Report, error) {
	r := &Report{Details: map[string]string{}}
	path, err := Resolve(dir, ref)
	if err != nil {
		r.add(securityv1.CodeEtcdSnapshotRefInvalid, securityv1.SeverityMedium, err.Error())
		return r, fmt.Errorf("%w: %v", ErrRefInvalid, err)
	}
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		msg := fmt.Sprintf("snapshot %s not found in the snapshot directory", ref)
		r.add(securityv1.CodeEtcdSnapshotNotFound, securityv1.SeverityMedium, msg)
		return r, fmt.Errorf("%w: %s", ErrNotFound, msg)
	}
	if err != nil {
		return r, unreadable(ref, err)
	}
	if !st.Mode().IsRegular() {
		msg := fmt.Sprintf("snapshot %s is not a regular file (%s)", ref, st.Mode().Type())
		r.add(securityv1.CodeEtcdSnapshotNotFound, securityv1.SeverityMedium, msg)
		return r, fmt.Errorf("%w: %s", ErrNotFound, msg)
	}
	r.SizeBytes = st.Size()
	whole, appended, err := digest(path, st.Size())
	if err != nil {
		return r, unreadable(ref, err)
	}
	r.Checksum = "sha256:" + whole
	switch {
	case appended == nil:
		r.add(securityv1.CodeChecksumNotRecorded, securityv1.SeverityMedium,
			fmt.Sprintf("snapshot %s carries no appended SHA-256 (size %d is not a whole number of pages plus 32 bytes): truncated, or not saved by etcd", ref, st.Size()))
	case !appended.ok:
		r.add(securityv1.CodeEtcdSnapshotCorrupt, securityv1.SeverityCritical,
			fmt.Sprintf("snapshot %s: the SHA-256 etcd appended (%s) does not match its content (%s)", ref, appended.want, appended.got))
	default:
		r.Details["appendedSHA256"] = appended.want
	}
	want, found, err := sidecar(path)
	if errors.Is(err, errNoDigest) {
		r.add(securityv1.CodeChecksumMismatch, securityv1.SeverityHigh, fmt.Sprintf("%s.sha256: %v", ref, err))
	} else if err != nil {
		return r, unreadable(ref+".sha256", err)
	} else if found {
		if want != whole {
			r.add(securityv1.CodeChecksumMismatch, securityv1.SeverityCritical,
				fmt.Sprintf("snapshot %s: SHA-256 %s does not match %s.sha256 (%s)", ref, whole, ref, want))
		} else {
			r.Details["sidecarSHA256"] = want
		}
	}
	r.Basis = securityv1.ChecksumNone
	if appended != nil || found {
		r.Basis = securityv1.ChecksumRecorded
	}
	content := st.Size()
	if appended != nil {
		content -= sha256.Size
	}
	if need, err := highWaterMark(path); errors.Is(err, errOpen) {
		return r, unreadable(ref, err)
	} else if err != nil {
		r.add(securityv1.CodeEtcdSnapshotCorrupt, securityv1.SeverityCritical, fmt.Sprintf("snapshot %s has no valid bbolt meta page: %v", ref, err))
		return r, nil
	} else if content < need {
		r.add(securityv1.CodeEtcdSnapshotCorrupt, securityv1.SeverityCritical,
			fmt.Sprintf("snapshot %s is truncated: its database needs %d bytes, the file holds %d", ref, need, content))
		return r, nil
	}
	sum, err := status(ctx, path)
	switch {
	case errors.Is(err, errCheckFailed):
		r.add(securityv1.CodeEtcdSnapshotCorrupt, securityv1.SeverityCritical, fmt.Sprintf("snapshot %s fails etcdutl's consistency check: %v", ref, err))
		return r, nil
	case ctx.Err() != nil:
		return r, fmt.Errorf("the consistency check of snapshot %s did not finish: %w", ref, ctx.Err())
	case err != nil:
		return r, fmt.Errorf("the consistency check of snapshot %s: %w", ref, err)
	}
	r.Details["revision"] = strconv.FormatInt(sum.Revision, 10)
	r.Details["totalKeys"] = strconv.Itoa(sum.TotalKey)
	r.Details["totalSizeBytes"] = strconv.FormatInt(sum.TotalSize, 10)
	r.Details["hash"] = strconv.FormatUint(uint64(sum.Hash), 10)
	if len(r.Findings) == 0 {
		r.add(securityv1.CodeChecksumMatch, securityv1.SeverityInfo,
			fmt.Sprintf("snapshot %s is intact: appended SHA-256 matches, revision %d, %d keys", ref, sum.Revision, sum.TotalKey))
	}
	return r, nil
}

// ErrUnreadable is a snapshot (or its sidecar) the verifier could not open or read: trouble
// carrying the check out, which says nothing about the snapshot. etcdctl, kubeadm, k3s and RKE2
// save snapshots 0600 and root-owned.
var ErrUnreadable = errors.New("the snapshot could not be read")

// errNoDigest is a sidecar that was read and holds no SHA-256 digest: a fact about it.
var errNoDigest = errors.New("no SHA-256 digest in the sidecar")

// errOpen marks a failure to open the file (not to parse it).
var errOpen = errors.New("opening the file")

func unreadable(what string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrUnreadable, what, err)
}

type appendedHash struct {
	ok        bool
	want, got string
}

// digest hashes the whole file and, when etcd appended a SHA-256 (size ≡ 32 mod 512), the content
// before it, in one pass with constant memory.
func digest(path string, size int64) (string, *appendedHash, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	whole := sha256.New()
	if size%512 != sha256.Size {
		if _, err := io.CopyBuffer(whole, f, make([]byte, 256<<10)); err != nil {
			return "", nil, err
		}
		return hex.EncodeToString(whole.Sum(nil)), nil, nil
	}
	content := sha256.New()
	if _, err := io.CopyBuffer(io.MultiWriter(whole, content), io.LimitReader(f, size-sha256.Size), make([]byte, 256<<10)); err != nil {
		return "", nil, err
	}
	trailer := make([]byte, sha256.Size)
	if _, err := io.ReadFull(f, trailer); err != nil {
		return "", nil, err
	}
	whole.Write(trailer)
	got := content.Sum(nil)
	return hex.EncodeToString(whole.Sum(nil)), &appendedHash{ok: bytes.Equal(got, trailer), want: hex.EncodeToString(trailer), got: hex.EncodeToString(got)}, nil
}

// sidecar reads "<path>.sha256" in sha256sum's format (or a bare digest).
func sidecar(path string) (string, bool, error) {
	f, err := os.Open(path + ".sha256")
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	line, err := bufio.NewReader(io.LimitReader(f, 4096)).ReadString('\n')
	if err != nil && err != io.EOF {
		return "", false, err
	}
	fields := strings.Fields(line)
	if len(fields) == 0 || len(fields[0]) != 64 {
		return "", false, errNoDigest
	}
	return strings.ToLower(fields[0]), true, nil
}

// bbolt's meta page layout: a 16-byte page header, then magic, version, page size, flags, the root
// bucket (16 bytes), the freelist page id, the high-water page id and the transaction id.
const (
	boltMagic       = 0xED0CDAED
	metaMagicOff    = 16
	metaPageSizeOff = 24
	metaHWMOff      = 56
	metaTxidOff     = 64
)

// highWaterMark reads both bbolt meta pages and returns the size in bytes the newer one says the
// database occupies (high-water page id × page size): a shorter file is truncated.
func highWaterMark(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errOpen, err)
	}
	defer f.Close()
	read := func(off int64) (pageSize uint32, hwm, txid uint64, ok bool) {
		buf := make([]byte, 72)
		if _, err := f.ReadAt(buf, off); err != nil {
			return 0, 0, 0, false
		}
		le := binary.LittleEndian
		if le.Uint32(buf[metaMagicOff:]) != boltMagic {
			return 0, 0, 0, false
		}
		return le.Uint32(buf[metaPageSizeOff:]), le.Uint64(buf[metaHWMOff:]), le.Uint64(buf[metaTxidOff:]), true
	}
	ps, hwm, txid, ok := read(0)
	if !ok {
		return 0, fmt.Errorf("bad magic in meta page 0")
	}
	if ps2, hwm2, txid2, ok2 := read(int64(ps)); ok2 && txid2 > txid {
		ps, hwm = ps2, hwm2
	}
	return int64(hwm) * int64(ps), nil
}
