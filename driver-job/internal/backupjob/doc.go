// Package backupjob reconciles the BackupJobs whose BackupClass resolves to a JobBackupStrategy:
// one batch/v1 Job per run, whose pod reports its artifact in its termination message; on success
// the driver creates the Backup from that report.
package backupjob

// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupjobs;restorejobs;backups,verbs=get;list;watch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupjobs/status;restorejobs/status;backups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backups,verbs=create;update;patch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=jobdriver.backups.cozystack.io,resources=jobbackupstrategies,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list
// +kubebuilder:rbac:groups=apps.cozystack.io,resources=*,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
