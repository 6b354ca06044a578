package velerocheck

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
)

// ReadVolumesCommand is the verifier's subcommand that a volume reader runs (ReaderMain): the
// container the resource modifiers VolumeReaders put into each pod a full-restore of volume data
// restores into its volume sandbox (volumerestore.go).
const ReadVolumesCommand = "read-volumes"

// ReaderContainer is the name of that container.
const ReaderContainer = "coffer-reader"

// restoresDir is where Velero's restore helper (the pod's first init container, restore-wait)
// mounts each volume it restores, /restores/<pod volume>; the reader mounts the same.
const restoresDir = "/restores"

// veleroMarker is the directory Velero's node agent writes at the root of a restored volume for its
// restore helper (its done file); it is not the backup's.
const veleroMarker = ".velero"

// maxReport bounds a reader's report, its termination message (the kubelet keeps 4096 bytes).
const maxReport = 4096

// treeDigest sums up the regular files of a tree: how many, their bytes, and a digest of the set of
// (path, size, SHA-256) that does not depend on the order they were met in: the sum, modulo 2^256,
// of the SHA-256 of each file's record. The verifier computes it from the files of a volume's
// snapshot as its repository holds them (kopiarepo.Read), the reader from the files restored.
type treeDigest struct {
	Files int64  `json:"files"`
	Bytes int64  `json:"bytes"`
	Sum   string `json:"sum"`
	// Unreadable counts the regular files the reader could not read (their modes keep the
	// reader's user out), First names one of them.
	Unreadable int64  `json:"unreadable,omitempty"`
	First      string `json:"first,omitempty"`

	sum *big.Int
	// uid and gid own the tree's root, in the repository's record of it.
	uid, gid uint32
}

var digestModulus = new(big.Int).Lsh(big.NewInt(1), 256)

// add counts one file: its path (slash-separated, relative to the tree's root), size and SHA-256
// (hex).
func (d *treeDigest) add(p string, size int64, sha string) {
	if d.sum == nil {
		d.sum = new(big.Int)
	}
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(p)))
	h.Write(n[:])
	h.Write([]byte(p))
	binary.BigEndian.PutUint64(n[:], uint64(size))
	h.Write(n[:])
	h.Write([]byte(sha))
	d.sum.Add(d.sum, new(big.Int).SetBytes(h.Sum(nil)))
	d.sum.Mod(d.sum, digestModulus)
	d.Files++
	d.Bytes += size
}

// seal writes the sum into Sum.
func (d *treeDigest) seal() {
	if d.sum == nil {
		d.sum = new(big.Int)
	}
	b := make([]byte, 32)
	d.sum.FillBytes(b)
	d.Sum = hex.EncodeToString(b)
}

// readerReport is what a reader writes as its termination message: a digest of each volume
// restored, by pod volume name, or why it could not.
type readerReport struct {
	Volumes map[string]*treeDigest `json:"volumes"`
	Error   string                 `json:"error,omitempty"`
}

// ReaderMain is the reader: it digests every volume mounted under /restores (the first
// argument, when given, replaces it) and writes its report to the termination message file, and
// each file it read to out, a JSON line each (for whoever looks into a mismatch). It never follows
// a symbolic link and reads regular files only. It returns the process's exit code.
func ReaderMain(args []string, out io.Writer) int {
	root := restoresDir
	if len(args) > 0 {
		root = args[0]
	}
	rep := readerReport{Volumes: map[string]*treeDigest{}}
	entries, err := os.ReadDir(root)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		rep.Error = err.Error()
	}
	enc := json.NewEncoder(out)
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		d, err := digestTree(filepath.Join(root, e.Name()), func(p string, size int64, sha string) {
			_ = enc.Encode(map[string]any{"volume": e.Name(), "path": p, "size": size, "sha256": sha})
		})
		if err != nil {
			rep.Error = fmt.Sprintf("volume %s: %v", e.Name(), err)
			break
		}
		rep.Volumes[e.Name()] = d
	}
	b, _ := json.Marshal(rep)
	if len(b) > maxReport {
		b, _ = json.Marshal(readerReport{Error: fmt.Sprintf("the report of %d volume(s) does not fit a termination message", len(rep.Volumes))})
	}
	if err := os.WriteFile("/dev/termination-log", b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, string(b))
	}
	return 0
}

// digestTree digests the regular files under dir, leaving out Velero's marker at its root; each
// file read is passed to seen. A file or directory the reader may not open is counted unreadable;
// any other error ends the walk.
func digestTree(dir string, seen func(p string, size int64, sha string)) (*treeDigest, error) {
	d := &treeDigest{}
	buf := make([]byte, 1<<20)
	var walk func(rel string) error
	walk = func(rel string) error {
		entries, err := os.ReadDir(filepath.Join(dir, filepath.FromSlash(rel)))
		if errors.Is(err, fs.ErrPermission) {
			d.unreadable(rel + "/")
			return nil
		}
		if err != nil {
			return err
		}
		sort.Slice(entries, func(i, k int) bool { return entries[i].Name() < entries[k].Name() })
		for _, e := range entries {
			p := path.Join(rel, e.Name())
			if rel == "" && e.Name() == veleroMarker {
				continue
			}
			switch {
			case e.IsDir():
				if err := walk(p); err != nil {
					return err
				}
			case e.Type().IsRegular():
				f, err := os.OpenFile(filepath.Join(dir, filepath.FromSlash(p)), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
				if errors.Is(err, fs.ErrPermission) {
					d.unreadable(p)
					continue
				}
				if err != nil {
					return err
				}
				h := sha256.New()
				n, err := io.CopyBuffer(h, f, buf)
				f.Close()
				if err != nil {
					return fmt.Errorf("%s: %w", p, err)
				}
				sha := hex.EncodeToString(h.Sum(nil))
				d.add(p, n, sha)
				seen(p, n, sha)
			}
		}
		return nil
	}
	if err := walk(""); err != nil {
		return nil, err
	}
	d.seal()
	return d, nil
}

func (d *treeDigest) unreadable(p string) {
	d.Unreadable++
	if d.First == "" {
		d.First = p
	}
}

// String is the digest for a message.
func (d *treeDigest) String() string {
	s := strconv.FormatInt(d.Files, 10) + " file(s), " + strconv.FormatInt(d.Bytes, 10) + " byte(s)"
	if d.Sum != "" {
		s += ", digest " + d.Sum[:16]
	}
	return s
}
