// Package verifyrun reconciles BackupVerifyRuns: Pending (implicit) → Running → Succeeded | Failed.
// It verifies one Velero backup or etcd snapshot per run (checksum-only or full-restore), writes
// one BackupVerifyResult and emits the run's SecurityEvents, each exactly once. Terminal runs are
// never touched again; there is no finalizer.
package verifyrun

// The spec's ClusterRole, narrowed to what the code calls (each verb and its caller is listed in
// docs/security.md, which a test keeps equal to deploy/). Runs are read through the manager's cache
// (get, list, watch) and their status written with Status().Patch; Results are read through the
// cache, created, deleted only when they belong to an earlier run of the same name (see
// ownResult), and their status written with Status().Update. Everything the Velero backend reads
// (Velero Backups, storage locations, Restores, DownloadRequests, sandbox namespaces, the restored
// objects) goes through the uncached API reader, so get suffices where nothing lists.
//
// The verifier reads nothing outside its sandboxes but Velero's objects. Namespaces are created
// (the verifier makes each sandbox itself), listed by the run's UID label and deleted only when
// they carry it. In each sandbox it creates a RoleBinding of its own ServiceAccount to the shipped
// ClusterRole coffer-verifier-sandbox (get on every kind there, for the diff, and create on
// NetworkPolicies, for the sandbox's deny-all policy): it may create RoleBindings and bind that
// one ClusterRole, not hold its rights. The admission policy coffer-verifier-confinement
// (deploy/verifier/policies) confines namespaces and RoleBindings to labelled -bvsandbox
// namespaces, that role and itself. A storage location's caCertRef Secret is read through the
// Role of deploy/verifier/velero (by name, in Velero's namespace). The leader-election Lease and
// its core/v1 events are the namespaced Role's (deploy/verifier/rbac/leader_election_role.yaml).
//
// +kubebuilder:rbac:groups=security.ugallu.io,resources=backupverifyruns,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=security.ugallu.io,resources=backupverifyresults,verbs=get
// +kubebuilder:rbac:groups=security.ugallu.io,resources=backupverifyruns/status,verbs=patch
// +kubebuilder:rbac:groups=security.ugallu.io,resources=backupverifyresults,verbs=create;delete
// +kubebuilder:rbac:groups=security.ugallu.io,resources=backupverifyresults/status,verbs=update
// +kubebuilder:rbac:groups=security.ugallu.io,resources=securityevents,verbs=create
// +kubebuilder:rbac:groups=velero.io,resources=backups;backupstoragelocations,verbs=get
// +kubebuilder:rbac:groups=velero.io,resources=restores;downloadrequests,verbs=get;create;delete
// +kubebuilder:rbac:groups=velero.io,resources=restores,verbs=list
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;create;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=create
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=coffer-verifier-sandbox
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=backups/status,verbs=patch
// +kubebuilder:rbac:groups=backups.cozystack.io,resources=restorejobs,verbs=get;list;create;delete
