// Package plan reconciles Plans: it turns cron ticks into BackupJobs, exactly once per tick, keeps
// the BackupJob history within the Plan's limits, prunes Backups by the Plan's retention policy,
// and reports it all in the Plan's status, conditions and events, including whether its
// BackupClass resolves to a strategy for its application. It never executes a backup and
// never writes a driver's objects or a Backup.
package plan

// Reads go through the manager's cache (get, list, watch); status is written with Status().Patch
// only, so the status subresources need patch alone (see docs/security.md).
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=plans,verbs=get;list;watch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=plans/status,verbs=patch
// The BackupJobs a Plan creates carry an ownerReference to it with blockOwnerDeletion, which the
// OwnerReferencesPermissionEnforcement admission plugin allows only to who may update the Plan's
// finalizers.
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=plans/finalizers,verbs=update
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupjobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backups,verbs=get;list;watch;delete
// A Plan's Ready condition says whether its BackupClass resolves for its application.
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupclasses,verbs=get;list;watch
// A class with a namespaceSelector allows only the namespaces it selects: the Plan's namespace is
// read uncached (APIReader.Get) for its labels.
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
