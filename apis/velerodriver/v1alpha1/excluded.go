package v1alpha1

import (
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Excluded returns the kinds the Velero driver never puts in a Velero backup nor restores from
// one, whatever a strategy's templates say, with their Velero resource names: Coffer's run
// records and Plans, and the verifier's runs and Results (a verification policy keeps them in the
// Backups' namespace). Restored into a sandbox or another namespace they would run again (a
// BackupJob or BackupVerifyRun without status is a new run; a Plan fires) or, as copies of Backups
// and Results, act on or stand for the originals. Backups made before a kind joined the list may
// hold it, so restores exclude them too. Whoever compares a restore with its backup (the
// verifier's content diff) expects none of them back.
func Excluded() map[schema.GroupKind]string {
	const backups, security = "backups.cozystack.io", "security.ugallu.io"
	return map[schema.GroupKind]string{
		{Group: backups, Kind: "Plan"}:                "plans." + backups,
		{Group: backups, Kind: "BackupJob"}:           "backupjobs." + backups,
		{Group: backups, Kind: "Backup"}:              "backups." + backups,
		{Group: backups, Kind: "RestoreJob"}:          "restorejobs." + backups,
		{Group: security, Kind: "BackupVerifyRun"}:    "backupverifyruns." + security,
		{Group: security, Kind: "BackupVerifyResult"}: "backupverifyresults." + security,
	}
}

// InertExcluded returns what an inert restore (spec.options.inert, contract RJ-12) leaves out:
// Excluded, bare Pods, and NetworkPolicies (a verification sandbox receives none, which could void
// its deny-all). Nothing else changes on purpose: the workloads it restores keep their replicas and
// suspend, and what they would start is their controllers' to make again.
func InertExcluded() map[schema.GroupKind]string {
	out := Excluded()
	out[schema.GroupKind{Kind: "Pod"}] = "pods"
	out[schema.GroupKind{Group: "networking.k8s.io", Kind: "NetworkPolicy"}] = "networkpolicies.networking.k8s.io"
	return out
}

// Resources returns the Velero resource names of kinds, sorted: a Velero spec's
// excludedResources.
func Resources(kinds map[schema.GroupKind]string) []string {
	return slices.Sorted(maps.Values(kinds))
}
