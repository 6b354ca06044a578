// Command coffer-agent is Coffer's reference backup agent. The Job driver runs it as the container
// of a batch/v1 Job: it backs a directory up to S3 as one tar, compressed with zstd and optionally
// encrypted with age (docs/artifact-format.md), restores such an artifact after checking its
// SHA-256, or deletes it (package internal/agent).
//
// Flags, each falling back to an environment variable (a flag wins):
//
//	--mode              COFFER_MODE               backup, restore or cleanup
//	--dir               COFFER_DATA_DIR           directory backed up or restored into (/data)
//	--endpoint          COFFER_PARAM_ENDPOINT     http://host:port, https://host[:port], host[:port] (HTTPS)
//	--bucket            COFFER_PARAM_BUCKET       bucket of backups
//	--prefix            COFFER_PARAM_PREFIX       key prefix (the run's namespace, COFFER_RUN_NAMESPACE)
//	--region            COFFER_PARAM_REGION       bucket region (optional)
//	--compression-level COFFER_COMPRESSION_LEVEL  zstd level 1-22 of a backup, 0 for none (3)
//	--termination-log                             where the report or error goes (/dev/termination-log)
//
// Credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. A backup also reads
// COFFER_RUN_NAME and COFFER_RUN_UID, and stores <prefix>/<run name>-<first 8 of the UID>.tar; a
// restore reads COFFER_ARTIFACT_URI, COFFER_ARTIFACT_CHECKSUM and, if set,
// COFFER_ARTIFACT_SIZE_BYTES; a cleanup reads COFFER_ARTIFACT_URI. A backup encrypts to the age
// recipients in COFFER_AGE_RECIPIENTS, a restore decrypts with the age identities in
// COFFER_AGE_IDENTITIES (keys come from the environment only, never flags); with
// COFFER_ENCRYPTION_SECRET set, a backup without recipients is refused. The exit code is 0, 1 on
// failure, 2 on a usage error.
//
// Unless GOMEMLIMIT is set, the Go runtime gets a soft memory limit of 80 MiB
// (agent.DefaultMemoryLimit), which keeps the agent's peak RSS under 128 MiB whatever the size of
// the tree.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/coffer-backup/coffer/driver-job/internal/agent"
)

func main() {
	// A soft memory limit unless GOMEMLIMIT sets one: it keeps the peak RSS of any backup or
	// restore under 128 MiB (see agent.ApplyMemoryLimit).
	agent.ApplyMemoryLimit(os.Getenv)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := agent.Main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
