// Package velerokit is the root of the Velero helpers that driver-velero and the verifier share
// (DownloadRequests and streaming of a backup's files), so that neither component imports the
// other. It requires Velero's API types and controller-runtime, nothing of Coffer's components.
package velerokit
