// Package verifyrun reconciles BackupVerifyRuns: it verifies one Velero backup or etcd snapshot
// per run (checksum-only or full-restore), writes one BackupVerifyResult and emits the run's
// SecurityEvents. The reconciler itself is built by the verifier issue; this package holds the
// RBAC the spec fixes for it (plus namespaces create: the verifier creates each sandbox itself), from which `make manifests` generates deploy/verifier/rbac.
package verifyrun

// +kubebuilder:rbac:groups=security.ugallu.io,resources=backupverifyruns;backupverifyruns/status;backupverifyresults;backupverifyresults/status,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=security.ugallu.io,resources=securityevents,verbs=create
// +kubebuilder:rbac:groups=velero.io,resources=backups;backupstoragelocations,verbs=get;list;watch
// +kubebuilder:rbac:groups=velero.io,resources=restores,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=pods;configmaps;secrets;serviceaccounts,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
