// Package plan reconciles Plans: it turns cron ticks into BackupJobs, exactly once per tick.
package plan

// +kubebuilder:rbac:groups=backups.cozystack.io,resources=plans,verbs=get;list;watch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=plans/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupjobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupjobs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backups,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
