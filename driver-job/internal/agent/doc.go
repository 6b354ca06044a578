// Package agent is Coffer's reference backup agent, the program a JobBackupStrategy runs as the
// container of a batch/v1 Job. It speaks the driver's contract (apis/jobdriver/v1alpha1, agent.go):
// it is configured by flags and the COFFER_* environment variables the Job driver sets, and it
// reports its artifact in the container's termination message.
//
// Modes:
//
//   - backup walks a directory in lexical order and streams it as one artifact to S3: a versioned
//     header, then the tar, compressed with zstd and, given age recipients, encrypted with age
//     (format.go, docs/artifact-format.md). Parts of a multipart upload of unknown size go up in
//     parallel while the next one fills, and the stored bytes are hashed on the way. The object
//     key is <prefix>/<run name>-<first 8 characters of the run UID>.tar; an existing object is
//     never overwritten. The ArtifactReport (uri, stored sizeBytes, checksum, and metadata: format,
//     compression, uncompressed size, ratio, key reference) goes to the termination log and to
//     stdout.
//   - restore first checks what it can without reading the whole object (its size, its format,
//     and that its identities open an encrypted artifact), writing nothing. Then it reads the
//     object once, in parallel ranges (ranged.go: two 2 MiB ranges fetched ahead of the reader,
//     each on the condition that the object's ETag is still the one it started with), and
//     decrypts, decompresses and extracts it into a staging directory inside the target directory
//     while hashing it. Only when the whole object hashed to the Backup's checksum does it move
//     each top-level entry of the backup into place, replacing an entry of the same name as a
//     whole; otherwise it removes the staging directory and the target is as it was. Top-level
//     entries of the directory that the backup does not contain are left alone. Artifacts of
//     format version 1 (plain tars) restore too.
//   - cleanup deletes the object; an object that is already gone is success.
//
// Tar entries are regular files, directories and symbolic links (stored as links, never followed),
// with their permission bits, owners and modification times (whole seconds; symbolic links keep
// the time of their restore). Sockets, devices and FIFOs are skipped with a warning, and so is a
// top-level lost+found. Restore refuses absolute names, ".." components, entries below a symbolic
// link and hard links, and restores owners only when it runs as root. The agent reads what its
// user may read: run it as the volume's owner, or with an fsGroup that makes the files readable.
//
// Every failure is printed as one line on stderr and written to the termination log, so the driver
// can show it; the exit code is 1, or 2 for a usage error.
package agent
