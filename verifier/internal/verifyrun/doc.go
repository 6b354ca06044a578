// Package verifyrun reconciles BackupVerifyRuns: Pending (implicit) → Running → Succeeded | Failed.
// It verifies one Velero backup or etcd snapshot per run (checksum-only or full-restore), writes
// one BackupVerifyResult and emits the run's SecurityEvents, each exactly once. Terminal runs are
// never touched again; there is no finalizer.
package verifyrun

// The spec's ClusterRole, narrowed: secrets, pods, configmaps and serviceaccounts are read only
// through the sandbox diff, which reads any restored kind, so the verifier gets read access to
// every namespaced kind it may have to diff (get only); namespaces are created (the verifier makes
// each sandbox itself) and deleted only when they carry the run's UID label. A BackupVerifyResult is
// deleted only when it belongs to an earlier run of the same name (see ownResult).
//
// +kubebuilder:rbac:groups=security.ugallu.io,resources=backupverifyruns;backupverifyruns/status;backupverifyresults;backupverifyresults/status,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=security.ugallu.io,resources=backupverifyresults,verbs=delete
// +kubebuilder:rbac:groups=security.ugallu.io,resources=securityevents,verbs=create
// +kubebuilder:rbac:groups=velero.io,resources=backups;backupstoragelocations,verbs=get;list;watch
// +kubebuilder:rbac:groups=velero.io,resources=restores,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=velero.io,resources=downloadrequests,verbs=get;create;delete
// +kubebuilder:rbac:groups="",resources=pods;configmaps;secrets;serviceaccounts,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=*,resources=*,verbs=get
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
