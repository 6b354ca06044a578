package v1alpha1

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// A pack list is what a chunked backup (artifact format 4) tells a reader without keys: every pack
// its index names, with the pack's size and the SHA-256 of its stored bytes, and which of them the
// backup added. The agent stores it, in the clear (pack names, sizes and digests of ciphertext say
// nothing about content), at <repository>/PackListDir/<name>, where name is the artifact's base
// name without ".tar", and reports its SHA-256 in the metadata key MetaPackList; checksum-only
// verification reads it to check the packs, not only the index.
//
// Text, one line each: the header "coffer-packlist 1", "sequence <n>" (the backup's number in its
// repository, counted from 0), then one line a pack in the order the index introduces them:
// "<32 hex: the name below packs/> <size> <64 hex: SHA-256, or - when the pack was written before
// pack lists> <added: + or ->".
const (
	PackListVersion = 1
	PackListDir     = "packlists"
	// MetaPackList is the report metadata key of the pack list's "sha256:<hex>".
	MetaPackList = "packList"
	// MaxPackListBytes bounds a pack list a reader reads (about 8 million packs: 64 TB of data).
	MaxPackListBytes = 1 << 30

	packListHeader = "coffer-packlist 1"
)

// PackList is a parsed pack list.
// +kubebuilder:object:generate=false
type PackList struct {
	// Sequence is the backup's number in its repository (the previous backup's plus one).
	Sequence int64
	Packs    []ListedPack
}

// ListedPack is a pack of a pack list.
// +kubebuilder:object:generate=false
type ListedPack struct {
	// Name is the pack's key below <repository>/packs/: 32 lower-case hex digits.
	Name string
	Size int64
	// SHA256 is the SHA-256 of the pack's stored bytes, 64 lower-case hex digits; empty when the
	// pack was written before pack lists (only its existence and size can be checked).
	SHA256 string
	// Added is true for the packs this backup stored.
	Added bool
}

// Marshal writes l in the pack list's text form.
func (l *PackList) Marshal() ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\nsequence %d\n", packListHeader, l.Sequence)
	for _, p := range l.Packs {
		if err := p.check(); err != nil {
			return nil, err
		}
		sum, added := p.SHA256, "-"
		if sum == "" {
			sum = "-"
		}
		if p.Added {
			added = "+"
		}
		fmt.Fprintf(&b, "%s %d %s %s\n", p.Name, p.Size, sum, added)
	}
	return b.Bytes(), nil
}

func (p *ListedPack) check() error {
	switch {
	case !isHex(p.Name, 32):
		return fmt.Errorf("pack name %q is not 32 lower-case hex digits", p.Name)
	case p.Size <= 0:
		return fmt.Errorf("pack %s: size %d is not positive", p.Name, p.Size)
	case p.SHA256 != "" && !isHex(p.SHA256, 64):
		return fmt.Errorf("pack %s: SHA-256 %q is not 64 lower-case hex digits", p.Name, p.SHA256)
	case p.SHA256 == "" && p.Added:
		return fmt.Errorf("pack %s: a pack the backup added has a SHA-256", p.Name)
	}
	return nil
}

func isHex(s string, n int) bool {
	if len(s) != n || strings.ToLower(s) != s {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// ParsePackList reads a pack list strictly: a malformed line, a repeated pack or more than
// MaxPackListBytes is an error that says where.
func ParsePackList(r io.Reader) (*PackList, error) {
	sc := bufio.NewScanner(io.LimitReader(r, MaxPackListBytes+1))
	sc.Buffer(make([]byte, 0, 4096), 4096)
	read := 0
	line := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		read += len(sc.Bytes()) + 1
		return sc.Text(), true
	}
	if h, ok := line(); !ok || h != packListHeader {
		if err := sc.Err(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("not a pack list: the first line is not %q", packListHeader)
	}
	l := &PackList{}
	s, _ := line()
	seq, ok := strings.CutPrefix(s, "sequence ")
	n, err := strconv.ParseInt(seq, 10, 64)
	if !ok || err != nil || n < 0 {
		return nil, fmt.Errorf("pack list line 2: %q is not \"sequence <n>\"", s)
	}
	l.Sequence = n
	seen := map[string]bool{}
	for no := 3; ; no++ {
		s, ok := line()
		if !ok {
			break
		}
		f := strings.Split(s, " ")
		if len(f) != 4 || (f[3] != "+" && f[3] != "-") {
			return nil, fmt.Errorf("pack list line %d: %q is not \"<name> <size> <sha256|-> <+|->\"", no, s)
		}
		p := ListedPack{Name: f[0], SHA256: f[2], Added: f[3] == "+"}
		if p.SHA256 == "-" {
			p.SHA256 = ""
		}
		if p.Size, err = strconv.ParseInt(f[1], 10, 64); err != nil {
			return nil, fmt.Errorf("pack list line %d: size %q: %w", no, f[1], err)
		}
		if err := p.check(); err != nil {
			return nil, fmt.Errorf("pack list line %d: %w", no, err)
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("pack list line %d: pack %s is listed twice", no, p.Name)
		}
		seen[p.Name] = true
		l.Packs = append(l.Packs, p)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, errors.New("pack list: a line is longer than 4096 bytes")
		}
		return nil, err
	}
	if read > MaxPackListBytes {
		return nil, fmt.Errorf("pack list: more than %d bytes", MaxPackListBytes)
	}
	return l, nil
}
