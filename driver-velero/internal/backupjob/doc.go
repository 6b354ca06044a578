// Package backupjob runs the BackupJobs whose BackupClass resolves to a VeleroBackupStrategy: one
// velero.io/v1 Backup per run, then a Coffer Backup with the artifact's size and SHA-256. Every
// other BackupJob is left untouched.
package backupjob

// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupjobs;restorejobs;backups,verbs=get;list;watch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupjobs/status;restorejobs/status;backups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backups,verbs=create;update;patch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backupclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=velerodriver.backups.cozystack.io,resources=velerobackupstrategies,verbs=get;list;watch
// +kubebuilder:rbac:groups=velero.io,resources=backups;restores;downloadrequests;deletebackuprequests,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=velero.io,resources=backups,verbs=update;patch
// +kubebuilder:rbac:groups=velero.io,resources=backupstoragelocations,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps.cozystack.io,resources=*,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
