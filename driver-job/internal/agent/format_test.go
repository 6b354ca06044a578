package agent

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"

	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// newKey returns a fresh age key: its identity (private) and recipient (public) strings.
func newKey(t *testing.T) (identity, recipient string) {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	return id.String(), id.Recipient().String()
}

// readObject returns an object's bytes.
func readObject(t *testing.T, bucket, key string) []byte {
	t.Helper()
	obj, err := store(t).S3.GetObject(context.Background(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	b, err := io.ReadAll(obj)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// emptyDir removes every entry of dir.
func emptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := removeAll(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFormats backs up and restores one tree in every combination of compression and encryption,
// and checks the header, the report's metadata and the tree restored.
func TestFormats(t *testing.T) {
	identity, recipient := newKey(t)
	_, escrow := newKey(t) // a second recipient: the artifact opens with either key
	for _, tc := range []struct {
		name        string
		level       string
		recipients  string
		compression Compression
		encryption  Encryption
	}{
		{"plain", "0", "", CompressionNone, EncryptionNone},
		{"compressed", "", "", CompressionZstd, EncryptionNone}, // the default level
		{"encrypted", "0", recipient, CompressionNone, EncryptionAge},
		{"compressed and encrypted", "19", "# the tenant's key\n" + recipient + "\n" + escrow + "\n", CompressionZstd, EncryptionAge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bucket := newBucket(t)
			dir := filepath.Join(t.TempDir(), "data")
			makeTree(t, dir, 3<<20)
			// Something compressible besides the random bytes.
			if err := os.WriteFile(filepath.Join(dir, "app", "log.json"), bytes.Repeat([]byte(`{"level":"info","msg":"request served","status":200}`+"\n"), 20000), 0o644); err != nil {
				t.Fatal(err)
			}
			mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC) // tar keeps whole seconds
			for _, p := range []string{"app/log.json", "app"} {
				if err := os.Chtimes(filepath.Join(dir, p), mtime, mtime); err != nil {
					t.Fatal(err)
				}
			}
			want := snapshot(t, dir)
			delete(want, "app/agent.sock")

			e := env(t, jobv1.ModeBackup, bucket, dir)
			if tc.level != "" {
				e[jobv1.EnvCompressionLevel] = tc.level
			}
			if tc.recipients != "" {
				e[jobv1.EnvEncryptionSecret] = "backup-keys"
				e[jobv1.EnvAgeRecipients] = tc.recipients
			}
			report := backup(t, e)
			_, key := keyOf(t, report)
			stored := readObject(t, bucket, key)
			if sum := sha256.Sum256(stored); report.Checksum != "sha256:"+hex.EncodeToString(sum[:]) || report.SizeBytes != int64(len(stored)) {
				t.Fatalf("the report (%d bytes, %s) does not describe the stored object (%d bytes)", report.SizeBytes, report.Checksum, len(stored))
			}
			info, err := store(t).S3.StatObject(context.Background(), bucket, key, minio.StatObjectOptions{Checksum: true})
			if err != nil || info.ChecksumCRC32C == "" || info.ContentType != ContentType {
				t.Errorf("the store holds no CRC32C of the parts (%q) or the content type is %q: %v", info.ChecksumCRC32C, info.ContentType, err)
			}
			h, payload, err := ReadHeader(bytes.NewReader(stored))
			if err != nil {
				t.Fatal(err)
			}
			if h.Version != FormatVersion || h.Compression != tc.compression || h.Encryption != tc.encryption {
				t.Errorf("header %+v, want version %d, compression %s, encryption %s", h, FormatVersion, tc.compression, tc.encryption)
			}
			var wantRef string
			if tc.encryption == EncryptionAge {
				wantRef = KeyFingerprint(recipient)
				if strings.Contains(tc.recipients, escrow) {
					wantRef += "," + KeyFingerprint(escrow)
				}
			}
			if h.KeyRef != wantRef || report.Metadata[MetaKeyRef] != wantRef {
				t.Errorf("key reference %q in the header, %q in the report; want %q", h.KeyRef, report.Metadata[MetaKeyRef], wantRef)
			}
			if tc.encryption == EncryptionAge {
				if rest, _ := io.ReadAll(payload); !bytes.HasPrefix(rest, []byte("age-encryption.org/v1\n")) {
					t.Errorf("the payload is not an age file: %q", rest[:min(len(rest), 40)])
				}
				if bytes.Contains(stored, []byte("request served")) {
					t.Errorf("the stored object holds plaintext")
				}
			}
			tarBytes, err := strconv.ParseInt(report.Metadata[MetaUncompressedBytes], 10, 64)
			if err != nil || tarBytes < 3<<20 {
				t.Errorf("uncompressedBytes %q, want the tar's size", report.Metadata[MetaUncompressedBytes])
			}
			if tc.compression == CompressionZstd && report.SizeBytes >= tarBytes {
				t.Errorf("compressed to %d bytes from %d", report.SizeBytes, tarBytes)
			}
			t.Logf("%s: tar %d bytes, stored %d bytes, metadata %v", tc.name, tarBytes, report.SizeBytes, report.Metadata)
			if b, err := json.Marshal(report); err != nil {
				t.Fatal(err)
			} else if _, err := jobv1.ParseArtifactReport(string(b)); err != nil {
				t.Errorf("the driver refuses the report: %v", err)
			}

			emptyDir(t, dir)
			re := restoreEnv(t, jobv1.ModeRestore, bucket, dir, report)
			if tc.encryption == EncryptionAge {
				re[jobv1.EnvAgeIdentities] = "# created: today\n" + identity + "\n"
			}
			r := run(t, re)
			if r.code != 0 {
				t.Fatalf("restore exited %d: %s", r.code, r.stderr)
			}
			assertSameTree(t, want, snapshot(t, dir))
			assertNoStaging(t, dir)
		})
	}
}

// encryptedBackup backs up a small tree, compressed and encrypted, and returns the report, the
// directory with an edit made after the backup, and its snapshot.
func encryptedBackup(t *testing.T, bucket, recipient string) (*jobv1.ArtifactReport, string, map[string]string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	makeTree(t, dir, 1<<20)
	e := env(t, jobv1.ModeBackup, bucket, dir)
	e[jobv1.EnvAgeRecipients] = recipient
	report := backup(t, e)
	if err := os.WriteFile(filepath.Join(dir, "app", "config.yaml"), []byte("edited after the backup\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return report, dir, snapshot(t, dir)
}

// refused runs a restore that must fail with want in its termination log and leave dir as it was.
func refused(t *testing.T, e map[string]string, dir string, before map[string]string, want ...string) {
	t.Helper()
	r := run(t, e)
	if r.code != 1 {
		t.Fatalf("restore exited %d, want 1: %s", r.code, r.stderr)
	}
	t.Logf("refused: %s", r.termLog)
	for _, w := range want {
		if !strings.Contains(r.termLog, w) {
			t.Errorf("termination log %q lacks %q", r.termLog, w)
		}
	}
	assertSameTree(t, before, snapshot(t, dir))
	assertNoStaging(t, dir)
}

func TestRestoreRefusesWrongKey(t *testing.T) {
	bucket := newBucket(t)
	_, recipient := newKey(t)
	other, otherRecipient := newKey(t)
	report, dir, before := encryptedBackup(t, bucket, recipient)

	e := restoreEnv(t, jobv1.ModeRestore, bucket, dir, report)
	e[jobv1.EnvAgeIdentities] = other
	refused(t, e, dir, before, "wrong key", "encrypted to key "+KeyFingerprint(recipient), "keys "+KeyFingerprint(otherRecipient), "nothing was restored")

	delete(e, jobv1.EnvAgeIdentities)
	refused(t, e, dir, before, "the agent was given no identity", "nothing was restored")

	e[jobv1.EnvAgeIdentities] = "AGE-SECRET-KEY-1NOTAKEY"
	r := run(t, e)
	if r.code != 2 || !strings.Contains(r.termLog, "is not a list of age identities") || strings.Contains(r.termLog+r.stderr, "NOTAKEY") {
		t.Errorf("a malformed identity: exit %d, %q; want a usage error that does not quote the key", r.code, r.termLog)
	}
}

// TestRestoreRefusesDamagedEncryptedArtifacts damages an encrypted artifact in place. With the
// Backup's checksum, the size check or the checksum refuses it (the checksum is named even though
// age failed first). With a checksum recomputed for the damaged bytes
// (a Backup whose status was rewritten too), age's authentication refuses it during extraction,
// which happens in the staging directory: the target stays as it was either way.
func TestRestoreRefusesDamagedEncryptedArtifacts(t *testing.T) {
	bucket := newBucket(t)
	identity, recipient := newKey(t)
	report, dir, before := encryptedBackup(t, bucket, recipient)
	_, key := keyOf(t, report)
	good := readObject(t, bucket, key)

	for _, tc := range []struct {
		name                   string
		damage                 func([]byte) []byte
		withBackupSum, withNew []string
	}{
		{"one tampered byte", func(b []byte) []byte { b[len(b)*2/3] ^= 0x01; return b },
			[]string{"has checksum", "nothing was restored"}, []string{"failed to decrypt and authenticate", "nothing was restored"}},
		{"truncated", func(b []byte) []byte { return b[:len(b)-100] },
			[]string{"bytes, expected", "nothing was restored"}, []string{"damaged or truncated", "nothing was restored"}},
		{"truncated at a chunk boundary", func(b []byte) []byte {
			// The last chunk dropped, the others whole: only age's last-chunk flag tells.
			i := bytes.Index(b, []byte("\n--- "))
			start := i + 1 + bytes.IndexByte(b[i+1:], '\n') + 1 + 16 // after the header's MAC line and the nonce
			const chunk = 64<<10 + 16
			return b[:start+(len(b)-start-1)/chunk*chunk]
		}, []string{"bytes, expected", "nothing was restored"}, []string{"damaged or truncated", "nothing was restored"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			damaged := tc.damage(bytes.Clone(good))
			overwrite(t, bucket, key, damaged)
			e := restoreEnv(t, jobv1.ModeRestore, bucket, dir, report)
			e[jobv1.EnvAgeIdentities] = identity
			refused(t, e, dir, before, tc.withBackupSum...)

			sum := sha256.Sum256(damaged)
			rewritten := *report
			rewritten.Checksum, rewritten.SizeBytes = "sha256:"+hex.EncodeToString(sum[:]), int64(len(damaged))
			e = restoreEnv(t, jobv1.ModeRestore, bucket, dir, &rewritten)
			e[jobv1.EnvAgeIdentities] = identity
			refused(t, e, dir, before, tc.withNew...)
		})
	}

	overwrite(t, bucket, key, good)
	e := restoreEnv(t, jobv1.ModeRestore, bucket, dir, report)
	e[jobv1.EnvAgeIdentities] = identity
	if r := run(t, e); r.code != 0 {
		t.Fatalf("the intact artifact does not restore: %s", r.stderr)
	}
}

// TestRestoreVersion1 restores an artifact of the first format, a plain tar without header,
// written as the agent wrote them before version 2 (writeTar is that writer, unchanged).
func TestRestoreVersion1(t *testing.T) {
	bucket := newBucket(t)
	dir := filepath.Join(t.TempDir(), "data")
	makeTree(t, dir, 2<<20)
	want := snapshot(t, dir)
	delete(want, "app/agent.sock")
	var old bytes.Buffer
	if err := writeTar(&old, dir, t.Logf, false, nil); err != nil {
		t.Fatal(err)
	}
	if h, _, err := ReadHeader(bytes.NewReader(old.Bytes())); err != nil || h.Version != 1 {
		t.Fatalf("a plain tar reads as %+v, %v; want version 1", h, err)
	}
	report := upload(t, bucket, "tenant-a/old-12345678.tar", old.Bytes())
	emptyDir(t, dir)
	e := restoreEnv(t, jobv1.ModeRestore, bucket, dir, report)
	e[jobv1.EnvAgeIdentities], _ = newKey(t) // a key configured since does not get in the way
	r := run(t, e)
	if r.code != 0 {
		t.Fatalf("restore of a version 1 artifact exited %d: %s", r.code, r.stderr)
	}
	if !strings.Contains(r.termLog, `"format":1`) {
		t.Errorf("restore status %q, want format 1", r.termLog)
	}
	assertSameTree(t, want, snapshot(t, dir))
}

// TestRestoreZstdWindow restores a compressed artifact whose zstd window is the largest the
// agent ever wrote (8 MiB, at level 22), and refuses one with a larger window, which would make
// the decoder hold more memory.
func TestRestoreZstdWindow(t *testing.T) {
	bucket := newBucket(t)
	dir := t.TempDir()
	before := snapshot(t, dir)
	data := strings.Repeat("0123456789abcdef", 64<<10) // 1 MiB
	artifact := func(window int) []byte {
		h, err := Header{Version: FormatVersion, Compression: CompressionZstd}.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		b.Write(h)
		zw, err := zstd.NewWriter(&b, zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(MaxCompressionLevel)), zstd.WithWindowSize(window))
		if err != nil {
			t.Fatal(err)
		}
		// More than a block, so that the encoder streams, and writes the window in the frame
		// header (a stream within one block is one frame as large as its content).
		if _, err := zw.Write(makeTar(t, entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "x", Mode: 0o600}, data: data})); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}

	report := upload(t, bucket, "window-8m.tar", artifact(maxWindow))
	if r := run(t, restoreEnv(t, jobv1.ModeRestore, bucket, dir, report)); r.code != 0 {
		t.Fatalf("restore of an artifact with an 8 MiB window exited %d: %s", r.code, r.stderr)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "x")); err != nil || string(b) != data {
		t.Fatalf("x reads %d bytes, %v; want the %d written", len(b), err, len(data))
	}

	dir = t.TempDir()
	report = upload(t, bucket, "window-16m.tar", artifact(2*maxWindow))
	refused(t, restoreEnv(t, jobv1.ModeRestore, bucket, dir, report), dir, before,
		"zstd window is larger than the 8 MiB this agent decodes", "nothing was restored")
}

func TestRestoreRefusesNewerFormat(t *testing.T) {
	bucket := newBucket(t)
	dir := t.TempDir()
	before := snapshot(t, dir)
	newer := append(append([]byte{}, formatMagic[:]...), LatestFormatVersion+1, 0, 0, 0)
	newer = append(newer, makeTar(t, entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "x"}, data: "x"})...)
	report := upload(t, bucket, "newer.tar", newer)
	refused(t, restoreEnv(t, jobv1.ModeRestore, bucket, dir, report), dir, before,
		fmt.Sprintf("format version %d", LatestFormatVersion+1), "restore it with a newer coffer-agent", "nothing was restored")

	unknown := append(append([]byte{}, formatMagic[:]...), FormatVersion, 7, 0, 0)
	report = upload(t, bucket, "unknown.tar", unknown)
	refused(t, restoreEnv(t, jobv1.ModeRestore, bucket, dir, report), dir, before, "compression unknown (7)")
}

func TestEncryptionConfig(t *testing.T) {
	bucket := newBucket(t)
	dir := t.TempDir()
	e := env(t, jobv1.ModeBackup, bucket, dir)
	e[jobv1.EnvEncryptionSecret] = "backup-keys"
	r := run(t, e)
	if r.code != 2 || !strings.Contains(r.termLog, "Secret backup-keys") || !strings.Contains(r.termLog, `key "recipients"`) {
		t.Errorf("encryption without recipients: exit %d, %q; want a usage error naming the Secret and its key", r.code, r.termLog)
	}
	identity, _ := newKey(t)
	e[jobv1.EnvAgeRecipients] = identity // a private key where the public one belongs
	r = run(t, e)
	if r.code != 2 || !strings.Contains(r.termLog, "is not a list of age recipients") || strings.Contains(r.termLog+r.stderr, identity) {
		t.Errorf("a private key as recipient: exit %d, %q; want a usage error that does not quote it", r.code, r.termLog)
	}
	for _, level := range []string{"-1", "23", "fast"} {
		e := env(t, jobv1.ModeBackup, bucket, dir)
		e[jobv1.EnvCompressionLevel] = level
		if r := run(t, e); r.code != 2 || !strings.Contains(r.termLog, "compression level") {
			t.Errorf("compression level %s: exit %d, %q; want a usage error", level, r.code, r.termLog)
		}
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	for _, h := range []Header{
		{Version: 2},
		{Version: 2, Compression: CompressionZstd},
		{Version: 2, Compression: CompressionZstd, Encryption: EncryptionAge, KeyRef: "0123456789abcdef,fedcba9876543210"},
	} {
		b, err := h.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		got, rest, err := ReadHeader(io.MultiReader(bytes.NewReader(b), strings.NewReader("payload")))
		if err != nil || got != h {
			t.Errorf("ReadHeader(%x) = %+v, %v; want %+v", b, got, err, h)
		}
		if p, _ := io.ReadAll(rest); string(p) != "payload" {
			t.Errorf("payload %q", p)
		}
	}
	for _, bad := range []Header{
		{Version: 1},
		{Version: 2, Encryption: EncryptionAge},
		{Version: 2, KeyRef: "0123456789abcdef"},
		{Version: 2, Encryption: EncryptionAge, KeyRef: "bad ref"},
		{Version: 2, Compression: 9},
	} {
		if _, err := bad.MarshalBinary(); err == nil {
			t.Errorf("header %+v was encoded", bad)
		}
	}
	// Short or empty objects are version 1 (and fail later as archives), never a panic.
	for _, short := range [][]byte{nil, []byte("ab"), formatMagic[:5]} {
		h, rest, err := ReadHeader(bytes.NewReader(short))
		if p, _ := io.ReadAll(rest); err != nil || h.Version != 1 || !bytes.Equal(p, short) {
			t.Errorf("ReadHeader(%q) = %+v, %q, %v", short, h, p, err)
		}
	}
	if _, _, err := ReadHeader(bytes.NewReader(append(formatMagic[:], 2, 0))); err == nil || !strings.Contains(err.Error(), "ends inside its header") {
		t.Errorf("a cut header: %v", err)
	}
}
