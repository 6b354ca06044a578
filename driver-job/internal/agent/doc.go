// Package agent is Coffer's reference backup agent, the program a JobBackupStrategy runs as the
// container of a batch/v1 Job. It speaks the driver's contract (apis/jobdriver/v1alpha1, agent.go):
// it is configured by flags and the COFFER_* environment variables the Job driver sets, and it
// reports its artifact in the container's termination message.
//
// Modes:
//
//   - backup walks a directory in lexical order and streams it as one tar to S3 with a multipart
//     upload of unknown size, hashing it on the way. The object key is
//     <prefix>/<run name>-<first 8 characters of the run UID>.tar; an existing object is never
//     overwritten. The ArtifactReport (uri, sizeBytes, checksum) goes to the termination log and
//     to stdout.
//   - restore verifies the object's size and SHA-256 in a first pass that writes nothing, then
//     extracts it into a staging directory inside the target directory while hashing it again, and
//     finally moves each top-level entry of the backup into place, replacing an entry of the same
//     name as a whole. Top-level entries of the directory that the backup does not contain are left
//     alone.
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
