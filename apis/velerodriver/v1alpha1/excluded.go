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

// RBAC returns the kinds a restore leaves out unless its RestoreJob sets spec.options.restoreRBAC
// "true" (contract RJ-14), with their Velero resource names: Roles, RoleBindings and
// ServiceAccounts. Velero creates what it restores with its own rights, so a restored RoleBinding
// never meets the API server's escalation check; only the admission policy coffer-restore-rbac
// knows whether the requesting user could have created them. They are backed up as ever.
func RBAC() map[schema.GroupKind]string {
	const rbac = "rbac.authorization.k8s.io"
	return map[schema.GroupKind]string{
		{Group: rbac, Kind: "Role"}:        "roles." + rbac,
		{Group: rbac, Kind: "RoleBinding"}: "rolebindings." + rbac,
		{Kind: "ServiceAccount"}:           "serviceaccounts",
	}
}

// InertExcluded returns what an inert restore (spec.options.inert, contract RJ-12) leaves out:
// Excluded, bare Pods, the RBAC kinds whatever spec.options.restoreRBAC says (a verification
// sandbox receives no RBAC objects), and NetworkPolicies (nor any NetworkPolicy, which could void
// its deny-all). Nothing else changes on purpose: the workloads it restores keep their replicas and
// suspend, and what they would start is their controllers' to make again.
func InertExcluded() map[schema.GroupKind]string {
	out := Excluded()
	out[schema.GroupKind{Kind: "Pod"}] = "pods"
	maps.Copy(out, RBAC())
	out[schema.GroupKind{Group: "networking.k8s.io", Kind: "NetworkPolicy"}] = "networkpolicies.networking.k8s.io"
	return out
}

// Resources returns the Velero resource names of kinds, sorted: a Velero spec's
// excludedResources.
func Resources(kinds map[schema.GroupKind]string) []string {
	return slices.Sorted(maps.Values(kinds))
}
