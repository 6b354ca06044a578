package agent

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// The manifest of a format 3 artifact lists every regular file of the backup with its size and
// SHA-256. It is the tar's last entry, of a type of its own (typeManifest, which POSIX leaves to
// vendors: an older agent refuses it, GNU tar extracts it as a regular file), so no file of the
// volume can be taken for it; being inside the payload, it is compressed, encrypted and covered by
// the artifact's checksum like the files it describes. Each line is one JSON object:
// {"path":"app/data.db","size":123,"sha256":"<64 hex digits>"}.
const (
	typeManifest = 'Y'
	manifestName = ".coffer-manifest.jsonl"
	// maxManifest bounds the manifest a verify reads into memory: about 10 million files.
	maxManifest = 1 << 30
)

// ManifestEntry is one line of a manifest.
type ManifestEntry struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// manifest collects the lines of a backup's manifest while the tar is written: about 100 bytes per
// file, the only memory of a backup that grows with the tree.
type manifest struct {
	buf  bytes.Buffer
	hash hash.Hash
}

func newManifest() *manifest { return &manifest{hash: sha256.New()} }

// add records a file whose content went through m.hash since the last add.
func (m *manifest) add(name string, size int64) error {
	return m.addSum(name, size, m.hash.Sum(nil))
}

// addSum records a file of the given SHA-256.
func (m *manifest) addSum(name string, size int64, sum []byte) error {
	line, err := json.Marshal(ManifestEntry{Path: name, Size: size, SHA256: hex.EncodeToString(sum)})
	if err != nil {
		return err
	}
	m.buf.Write(line)
	m.buf.WriteByte('\n')
	return nil
}

// write appends the manifest to the tar as its last entry.
func (m *manifest) write(tw *tar.Writer) error {
	hdr := &tar.Header{Typeflag: typeManifest, Name: manifestName, Size: int64(m.buf.Len()), Mode: 0o400, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("the manifest: %w", err)
	}
	_, err := tw.Write(m.buf.Bytes())
	return err
}

// readManifest parses a manifest entry, treating it as the untrusted input it is until the
// artifact's checksum matched.
func readManifest(r io.Reader) (map[string]ManifestEntry, error) {
	entries := map[string]ManifestEntry{}
	sc := bufio.NewScanner(io.LimitReader(r, maxManifest))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e ManifestEntry
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("the manifest's line %d: %w", len(entries)+1, err)
		}
		name, err := entryName(e.Path)
		if err != nil || name != e.Path || e.Size < 0 || len(e.SHA256) != 64 {
			return nil, fmt.Errorf("the manifest's line %d is not a file's path, size and SHA-256", len(entries)+1)
		}
		if _, dup := entries[name]; dup {
			return nil, fmt.Errorf("the manifest lists %q twice", name)
		}
		entries[name] = e
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the manifest: %w", err)
	}
	return entries, nil
}

// cutDifference cuts a verify's difference to 300 bytes (a name can be 4 KiB long).
func cutDifference(d string) string {
	if len(d) > 300 {
		return d[:300] + "..."
	}
	return d
}

// compareWithManifest reads back every regular file under dir and compares it with the manifest.
func compareWithManifest(dir string, want map[string]ManifestEntry, buf []byte) (*jobv1.VerifyReport, error) {
	r := &jobv1.VerifyReport{}
	differ := func(format string, args ...any) {
		r.Mismatched++
		if len(r.Differences) < jobv1.MaxVerifyDifferences {
			r.Differences = append(r.Differences, cutDifference(fmt.Sprintf(format, args...)))
		}
	}
	seen := make(map[string]bool, len(want))
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		e, ok := want[name]
		if !ok {
			differ("%s: restored, but the manifest does not list it", name)
			return nil
		}
		seen[name] = true
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		h.Reset()
		n, err := io.CopyBuffer(h, f, buf)
		f.Close()
		if err != nil {
			return fmt.Errorf("reading back %s: %w", name, err)
		}
		switch sum := hex.EncodeToString(h.Sum(nil)); {
		case n != e.Size:
			differ("%s: %d bytes restored, the backup holds %d", name, n, e.Size)
		case sum != e.SHA256:
			differ("%s: SHA-256 %s restored, the backup holds %s", name, sum, e.SHA256)
		default:
			r.Compared++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var missing []string
	for name := range want {
		if !seen[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		for _, name := range missing {
			differ("%s: in the backup, not restored", name)
		}
	}
	return r, nil
}

// errNoManifest: a format 3 artifact ended without its manifest.
var errNoManifest = errors.New("the artifact is format 3 but its archive has no manifest")
