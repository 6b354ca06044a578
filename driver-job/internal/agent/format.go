package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"filippo.io/age"

	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// The artifact format (docs/artifact-format.md). Version 1 is a plain tar without header, as the
// agent wrote before version 2. Version 2 is a header followed by the payload: the tar, compressed
// with zstd when the header says so, then encrypted with age when the header says so. Version 3
// is version 2 whose tar ends with a manifest entry (manifest.go): the path, size and SHA-256 of
// every regular file, which a verify compares the restored files with. Version 4 (chunked.go) is
// version 3 whose regular files carry the list of their chunks, stored in packs beside it.
//
//	offset  size  field
//	0       8     magic "\x89COFFER\x1a"
//	8       1     format version, 2 to 4
//	9       1     compression: 0 none, 1 zstd
//	10      1     encryption: 0 none, 1 age
//	11      1     n, the length of the key reference (0 without encryption)
//	12      n     key reference: the fingerprints of the age recipients, comma-separated
//	12+n    ...   payload
//
// The header is not authenticated on its own: the artifact's SHA-256, which the restore checks
// before it reads anything else, covers it.
const (
	// FormatVersion is the version the agent writes unless asked for chunked backups.
	FormatVersion = 3
	// LatestFormatVersion is the latest version the agent reads and writes.
	LatestFormatVersion = chunkedVersion
	// firstHeaderVersion is the first version with a header; the agent reads it and every later
	// one up to LatestFormatVersion.
	firstHeaderVersion = 2
	// headerFixedSize is the size of the header without its key reference.
	headerFixedSize = 12
	// maxKeyRef bounds the key reference: 15 fingerprints.
	maxKeyRef = 255
)

// formatMagic starts every artifact of version 2 and later. Its first byte is not ASCII, so no tar
// the agent wrote before (whose first bytes are the first entry's name) starts with it in practice.
var formatMagic = [8]byte{0x89, 'C', 'O', 'F', 'F', 'E', 'R', 0x1a}

// Compression is the codec of a payload, as stored in the header.
type Compression uint8

const (
	CompressionNone Compression = 0
	CompressionZstd Compression = 1
)

func (c Compression) String() string {
	switch c {
	case CompressionNone:
		return "none"
	case CompressionZstd:
		return "zstd"
	}
	return fmt.Sprintf("unknown (%d)", uint8(c))
}

// Encryption is the cipher of a payload, as stored in the header.
type Encryption uint8

const (
	EncryptionNone Encryption = 0
	EncryptionAge  Encryption = 1
)

func (e Encryption) String() string {
	switch e {
	case EncryptionNone:
		return "none"
	case EncryptionAge:
		return "age"
	}
	return fmt.Sprintf("unknown (%d)", uint8(e))
}

// Header is an artifact's header. Version 1 artifacts have none: their Header is {Version: 1}.
type Header struct {
	Version     uint8
	Compression Compression
	Encryption  Encryption
	// KeyRef names the keys an encrypted payload was encrypted to (KeyFingerprint of each age
	// recipient, comma-separated); empty without encryption.
	KeyRef string
}

// MarshalBinary encodes a header of version 2 or later (their headers are alike).
func (h Header) MarshalBinary() ([]byte, error) {
	if h.Version < firstHeaderVersion || h.Version > LatestFormatVersion {
		return nil, fmt.Errorf("format version %d has no header of this shape (versions %d to %d have)", h.Version, firstHeaderVersion, LatestFormatVersion)
	}
	if err := h.check(); err != nil {
		return nil, err
	}
	b := make([]byte, 0, headerFixedSize+len(h.KeyRef))
	b = append(b, formatMagic[:]...)
	b = append(b, h.Version, byte(h.Compression), byte(h.Encryption), byte(len(h.KeyRef)))
	return append(b, h.KeyRef...), nil
}

func (h Header) check() error {
	switch {
	case h.Compression != CompressionNone && h.Compression != CompressionZstd:
		return fmt.Errorf("the artifact header names compression %s, which this agent does not know", h.Compression)
	case h.Encryption != EncryptionNone && h.Encryption != EncryptionAge:
		return fmt.Errorf("the artifact header names encryption %s, which this agent does not know", h.Encryption)
	case len(h.KeyRef) > maxKeyRef:
		return fmt.Errorf("the key reference is %d bytes, more than %d", len(h.KeyRef), maxKeyRef)
	case h.Encryption == EncryptionNone && h.KeyRef != "":
		return fmt.Errorf("the artifact header has a key reference but no encryption")
	case h.Encryption != EncryptionNone && h.KeyRef == "":
		return fmt.Errorf("the artifact header names encryption without a key reference")
	}
	for _, c := range []byte(h.KeyRef) {
		if c <= ' ' || c > '~' {
			return fmt.Errorf("the artifact header's key reference is not printable ASCII")
		}
	}
	return nil
}

// ReadHeader reads an artifact's header from r, which must start at the artifact's first byte,
// and returns it with a reader of the payload. Without the magic, the artifact is version 1: the
// payload is then all of r, the bytes peeked included.
func ReadHeader(r io.Reader) (Header, io.Reader, error) {
	var fixed [headerFixedSize]byte
	n, err := io.ReadFull(r, fixed[:])
	if n < len(formatMagic) || !bytes.Equal(fixed[:len(formatMagic)], formatMagic[:]) {
		if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
			return Header{}, nil, err
		}
		return Header{Version: 1}, io.MultiReader(bytes.NewReader(fixed[:n]), r), nil
	}
	if err != nil {
		return Header{}, nil, fmt.Errorf("the artifact ends inside its header")
	}
	h := Header{Version: fixed[8], Compression: Compression(fixed[9]), Encryption: Encryption(fixed[10])}
	if h.Version < firstHeaderVersion || h.Version > LatestFormatVersion {
		return h, nil, fmt.Errorf("the artifact has format version %d; this agent reads versions 1 to %d: restore it with a newer coffer-agent", h.Version, LatestFormatVersion)
	}
	ref := make([]byte, fixed[11])
	if _, err := io.ReadFull(r, ref); err != nil {
		return h, nil, fmt.Errorf("the artifact ends inside its header")
	}
	h.KeyRef = string(ref)
	return h, r, h.check()
}

// KeyFingerprint names an age recipient in artifact headers: the first 16 hex digits of the
// SHA-256 of its string form (age1...). It is public, like the recipient.
func KeyFingerprint(recipient string) string {
	sum := sha256.Sum256([]byte(recipient))
	return hex.EncodeToString(sum[:8])
}

// ParseRecipients reads age recipients, one per line (the format of age -R files: blank lines and
// # comments are skipped), and returns them with their key reference. X25519 (age1...) and hybrid
// post-quantum (age1pq1...) recipients are accepted.
func ParseRecipients(text string) ([]age.Recipient, string, error) {
	recipients, err := age.ParseRecipients(strings.NewReader(text))
	if err != nil {
		return nil, "", err
	}
	var refs []string
	for _, r := range recipients {
		s, ok := r.(fmt.Stringer)
		if !ok {
			return nil, "", fmt.Errorf("recipient of type %T is not supported", r)
		}
		refs = append(refs, KeyFingerprint(s.String()))
	}
	ref := strings.Join(refs, ",")
	if len(ref) > maxKeyRef {
		return nil, "", fmt.Errorf("%d recipients are more than the %d a header can name", len(refs), (maxKeyRef+1)/17)
	}
	return recipients, ref, nil
}

// Identities are age identities, the private keys restores decrypt with.
type Identities struct {
	ids []age.Identity
	// fingerprints[i] is KeyFingerprint of ids[i]'s recipient.
	fingerprints []string
}

// ParseIdentities reads age identities, one per line (the format of age-keygen's output: blank
// lines and # comments are skipped). Errors never quote the text, which holds private keys.
func ParseIdentities(text string) (*Identities, error) {
	ids, err := age.ParseIdentities(strings.NewReader(text))
	if err != nil {
		// Only the line number: the rest of age's message may carry bits of a malformed key.
		if m := identityLine.FindString(err.Error()); m != "" {
			return nil, fmt.Errorf("%s: not an age identity (AGE-SECRET-KEY-1... or AGE-SECRET-KEY-PQ-1...)", m)
		}
		return nil, fmt.Errorf("no age identity found")
	}
	out := &Identities{ids: ids}
	for _, id := range ids {
		var recipient string
		switch id := id.(type) {
		case *age.X25519Identity:
			recipient = id.Recipient().String()
		case *age.HybridIdentity:
			recipient = id.Recipient().String()
		default:
			return nil, fmt.Errorf("identity of type %T is not supported", id)
		}
		out.fingerprints = append(out.fingerprints, KeyFingerprint(recipient))
	}
	return out, nil
}

var identityLine = regexp.MustCompile(`^error at line [0-9]+`)

// Fingerprints lists the identities' key fingerprints.
func (ids *Identities) Fingerprints() []string {
	if ids == nil {
		return nil
	}
	return ids.fingerprints
}

// checkKey tells whether the identities can decrypt an artifact whose header is h and whose
// payload starts with prefix (which must hold the whole age header). It unwraps the file key,
// so a wrong key is refused before anything is written.
func (ids *Identities) checkKey(h Header, prefix []byte) error {
	if h.Encryption == EncryptionNone {
		return nil
	}
	if ids == nil || len(ids.ids) == 0 {
		return fmt.Errorf("the artifact is encrypted to key %s, and the agent was given no identity (%s is empty): "+
			"does the strategy's encryption Secret exist, with the key %q?", h.KeyRef, jobv1.EnvAgeIdentities, jobv1.SecretKeyIdentities)
	}
	hdr, err := age.ExtractHeader(bytes.NewReader(prefix))
	if err != nil {
		return fmt.Errorf("reading the artifact's age header: %w", err)
	}
	if _, err := age.DecryptHeader(hdr, ids.ids...); err != nil {
		var noMatch *age.NoIdentityMatchError
		if errors.As(err, &noMatch) {
			return fmt.Errorf("wrong key: the artifact is encrypted to key %s, and none of the %d identities given (keys %s) decrypts it; "+
				"an artifact keeps the key it was written with: keep old identities in the Secret after a rotation",
				h.KeyRef, len(ids.ids), strings.Join(ids.fingerprints, ","))
		}
		return fmt.Errorf("decrypting the artifact's age header: %w", err)
	}
	return nil
}

// decrypt returns the plaintext of an age payload.
func (ids *Identities) decrypt(h Header, payload io.Reader) (io.Reader, error) {
	if ids == nil {
		return nil, fmt.Errorf("the artifact is encrypted to key %s, and the agent was given no identity", h.KeyRef)
	}
	r, err := age.Decrypt(payload, ids.ids...)
	if err != nil {
		return nil, fmt.Errorf("decrypting the artifact: %w", err)
	}
	return r, nil
}
