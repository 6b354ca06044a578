package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// JobBackupStrategySpec says how the Job driver runs a backup, restore or cleanup as a batch/v1 Job.
//
// The pod templates are stored without an OpenAPI schema (three full pod schemas would make the
// CRD too large) and are checked when rendered: every string is a Go template rendered with
// .Application, .Parameters, .Mode (and .Backup on restore), and the result must decode as a pod
// template. Rendering fails closed.
type JobBackupStrategySpec struct {
	// template is the pod template of the backup Job.
	// +required
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	Template corev1.PodTemplateSpec `json:"template"`

	// restoreTemplate is the pod template of the restore Job. Unset means template, rendered with
	// .Mode "restore".
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	RestoreTemplate *corev1.PodTemplateSpec `json:"restoreTemplate,omitempty"`

	// cleanupTemplate is the pod template of the Job run when a Backup is deleted, to delete its
	// artifact (.Mode "cleanup"). The driver also runs it to check that artifacts still exist
	// (.Mode "check") and, for the Chunked format, to maintain the namespace's repository after a
	// Backup's deletion (.Mode "maintain"). Unset means the artifact stays when its Backup is
	// deleted.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	CleanupTemplate *corev1.PodTemplateSpec `json:"cleanupTemplate,omitempty"`

	// verifyTemplate is the pod template of the Job that proves a Backup restorable for a
	// verifier: rendered with .Mode "verify", it runs in the Backup's namespace, must restore into
	// a scratch volume of its own (an emptyDir), never the application's, and reports a
	// VerifyReport (coffer-agent --mode verify compares every restored file with the artifact's
	// manifest). The driver runs it for an inert RestoreJob aimed at another namespace, which the
	// admission policy coffer-restore-target admits only from whoever may create RestoreJobs
	// there: the verifier, for its sandbox. Unset means such a RestoreJob fails TargetNotSupported.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	VerifyTemplate *corev1.PodTemplateSpec `json:"verifyTemplate,omitempty"`

	// backoffLimit is the Jobs' backoffLimit. Unset means 0 (a backup is not retried blindly).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10
	BackoffLimit *int32 `json:"backoffLimit,omitempty"`

	// activeDeadlineSeconds is the Jobs' activeDeadlineSeconds. Unset means 3600.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds,omitempty"`

	// ttlSecondsAfterFinished is the Jobs' ttlSecondsAfterFinished. Unset keeps finished Jobs
	// until their BackupJob or RestoreJob is deleted.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`

	// artifact says how the agent stores the artifact: compression and encryption. The driver
	// passes it to the agent's containers as environment variables (COFFER_COMPRESSION_LEVEL,
	// COFFER_ENCRYPTION_SECRET, and the keys by secretKeyRef); coffer-agent honours them, other
	// agents may ignore them. Unset means coffer-agent's defaults: zstd level 1, no encryption.
	// +optional
	Artifact *ArtifactOptions `json:"artifact,omitempty"`

	// catalog, when set, makes this cluster import the Backups another cluster stored in a bucket:
	// the driver lists the records beside the artifacts (contract BK-11) and keeps one Backup per
	// record of another cluster, naming this strategy (contract BK-12; docs/disaster-recovery.md).
	// Opt-in; unset imports nothing.
	// +optional
	Catalog *CatalogSource `json:"catalog,omitempty"`
	// volumeSnapshot, when set, makes backups crash-consistent: before a backup Job starts, the
	// driver takes a CSI VolumeSnapshot of each claim its rendered template mounts, provisions a
	// claim from each snapshot (the source claim's StorageClass and size), and runs the Job on
	// those clones, mounted read-only; once the Job has ended it deletes the clones and the
	// snapshots. The claims' CSI driver must support snapshots. Unset backs up the claims
	// themselves, as the application writes them.
	// +optional
	VolumeSnapshot *VolumeSnapshotOptions `json:"volumeSnapshot,omitempty"`
}

// VolumeSnapshotOptions are the snapshots a backup takes first.
type VolumeSnapshotOptions struct {
	// volumeSnapshotClassName is the VolumeSnapshotClass of the snapshots. Empty means the
	// default class of the claims' CSI driver.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == '' || self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="volumeSnapshotClassName must be a DNS subdomain name"
	VolumeSnapshotClassName string `json:"volumeSnapshotClassName,omitempty"`
}

// CatalogSource is the storage a catalog sync reads records from, with the driver's own
// credentials: the driver reads the bucket itself, read-only.
type CatalogSource struct {
	// endpoint is the S3 endpoint: http://host:port, https://host[:port], or host[:port] (HTTPS).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Endpoint string `json:"endpoint"`

	// bucket holds the artifacts and their records.
	// +required
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	Bucket string `json:"bucket"`

	// prefix limits the sync to keys that start with it (e.g. "tenant-a/"); empty reads the whole
	// bucket.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Prefix string `json:"prefix,omitempty"`

	// region is the bucket's region; empty lets the client ask the server.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Region string `json:"region,omitempty"`

	// credentialsSecretName is a Secret in the driver's own namespace with the keys
	// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. Read-only credentials are enough, and best.
	// +required
	// +kubebuilder:validation:XValidation:rule="size(self) > 0 && size(self) <= 253",message="credentialsSecretName must be 1-253 characters"
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="credentialsSecretName must be a DNS subdomain name"
	CredentialsSecretName string `json:"credentialsSecretName"`

	// namespaceMapping maps a record's namespace (in the source cluster) to the namespace its
	// Backup is imported into here; a namespace it does not name keeps its name. A namespace that
	// does not exist here is skipped (the sync never creates namespaces) and reported.
	// +optional
	// +kubebuilder:validation:MaxProperties=256
	NamespaceMapping map[string]backupsv1.NamespaceName `json:"namespaceMapping,omitempty"`

	// parameters are the class parameters restores of imported Backups render their templates
	// with (their driverMetadata "param.<key>"), in place of the snapshot the record holds: a
	// record is read from the bucket, and its endpoint could otherwise send a restore's
	// credentials elsewhere. Give every parameter the restore template uses (e.g. the endpoint as
	// this cluster reaches the bucket, the bucket, the credentials Secret's name).
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	Parameters map[string]string `json:"parameters,omitempty"`

	// intervalSeconds is the time between two syncs. Unset means 300.
	// +optional
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=86400
	IntervalSeconds *int32 `json:"intervalSeconds,omitempty"`
}

// JobBackupStrategyStatus is what the driver observed of a strategy.
type JobBackupStrategyStatus struct {
	// catalog is the outcome of the last catalog sync, when spec.catalog is set.
	// +optional
	Catalog *backupsv1.CatalogStatus `json:"catalog,omitempty"`

	// conditions: CatalogSynced (True after a sync that read every record; False with the reason
	// a sync failed or was incomplete).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ArtifactOptions is how the agent stores artifacts.
type ArtifactOptions struct {
	// compressionLevel is the zstd level of new backups, on zstd's scale: 1 (fastest) to 22
	// (smallest); coffer-agent maps it onto its encoder's four speeds (1-2, 3-5, 6-9, 10-22).
	// 0 stores the tar uncompressed. Unset means 1, zstd's fastest (earlier agents used 3). Restores
	// read any level.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self >= 0 && self <= 22",message="compressionLevel must be 0 (no compression) to 22"
	CompressionLevel *int32 `json:"compressionLevel,omitempty"`

	// format is what new backups write. Tar (the default) stores each backup as one object: a
	// full copy every time. Chunked stores content-defined chunks, compressed and encrypted one by
	// one, in packs shared by the backups of the run's namespace (below the prefix, in
	// .coffer/<namespace>/): a backup reads only the files whose size, times or inode changed and
	// stores only the chunks the repository does not hold, and each Backup's artifact is an index
	// that restores on its own. With encryption, the Secret needs the key "chunkKey" too.
	// Deleting a chunked Backup deletes its index; its chunks go when maintenance finds that no
	// Backup names them (docs/driver-job.md). Restores read either format.
	// +optional
	// +kubebuilder:validation:Enum=Tar;Chunked
	Format ArtifactFormat `json:"format,omitempty"`

	// encryption encrypts new backups with age, client-side, to the public keys of a Secret, and
	// decrypts restores with its private keys. Unset means no encryption (restores still read
	// encrypted artifacts when the Secret is set).
	// +optional
	Encryption *ArtifactEncryption `json:"encryption,omitempty"`

	// objectLock writes every object a backup stores (its artifact and record, and with the
	// Chunked format its packs and pack list) with an S3 Object Lock retention: nobody, the
	// backup's own credentials included, can delete or overwrite them until it ends. The bucket
	// must have been created with object lock enabled. A Chunked backup extends the retention of
	// the older packs it names, so that every pack outlives the Backups that need it. Deletions
	// (retention, cleanup, maintenance) then only hide objects behind delete markers; the locked
	// versions stay until their date, when a bucket lifecycle rule on noncurrent versions removes
	// them (docs/driver-job.md).
	// +optional
	ObjectLock *ArtifactObjectLock `json:"objectLock,omitempty"`
}

// ArtifactObjectLock is the S3 Object Lock retention of a strategy's backups.
type ArtifactObjectLock struct {
	// mode is Compliance (the default: nobody can shorten the retention or delete a locked
	// version, not even the bucket's owner) or Governance (a user with
	// s3:BypassGovernanceRetention can).
	// +optional
	// +kubebuilder:validation:Enum=Compliance;Governance
	Mode ObjectLockMode `json:"mode,omitempty"`

	// retainFor is the longest a backup locks what it stores, from when it started. Each run
	// locks for what its Plan's retention can keep a Backup (its age bound, at least the class
	// floor's minAge), plus the floor's deletionDelay and a day, at most retainFor (a Plan whose
	// retention needs more gets a LockShorterThanRetention event); a run without a Plan or whose
	// retention has no age bound locks for retainFor. The verifier reports a Backup whose objects
	// are no longer locked. At most 10 years.
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('87600h')",message="retainFor must be 1s to 87600h (10 years)"
	RetainFor metav1.Duration `json:"retainFor"`
}

// ObjectLockMode is an S3 Object Lock retention mode.
type ObjectLockMode string

const (
	ObjectLockCompliance ObjectLockMode = "Compliance"
	ObjectLockGovernance ObjectLockMode = "Governance"
)

// ArtifactFormat is what a backup writes.
type ArtifactFormat string

const (
	// ArtifactFormatTar is one object per backup (coffer-agent's format 3).
	ArtifactFormatTar ArtifactFormat = "Tar"
	// ArtifactFormatChunked is an index per backup and chunks shared by a namespace's backups
	// (coffer-agent's format 4).
	ArtifactFormatChunked ArtifactFormat = "Chunked"
)

// ArtifactEncryption names the Secret of an artifact's keys.
type ArtifactEncryption struct {
	// secretName is a Secret in the namespace of each run (the application's) with the keys
	// "recipients" (age public keys, one per line; backups encrypt to them) and "identities" (age
	// private keys, one per line; restores decrypt with them), and for the Chunked format
	// "chunkKey" (a secret of at least 32 characters, the same for every backup of the namespace:
	// it names chunks and seals the records backups read). Backup Jobs see only the recipients
	// and the chunk key, restore Jobs only the identities, each as an environment variable read
	// from the Secret (secretKeyRef); the Job spec never holds a key.
	// +required
	// +kubebuilder:validation:XValidation:rule="size(self) > 0 && size(self) <= 253",message="secretName must be 1-253 characters"
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="secretName must be a DNS subdomain name"
	SecretName string `json:"secretName"`
}

// JobBackupStrategy is a cluster-scoped strategy run by the Coffer Job driver.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=jbs,categories=coffer
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Catalog",type=string,JSONPath=`.status.conditions[?(@.type=="CatalogSynced")].status`
// +kubebuilder:printcolumn:name="Imported",type=integer,JSONPath=`.status.catalog.imported`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type JobBackupStrategy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec JobBackupStrategySpec `json:"spec"`
	// +optional
	Status JobBackupStrategyStatus `json:"status,omitempty"`
}

// JobBackupStrategyList is a list of JobBackupStrategies.
// +kubebuilder:object:root=true
type JobBackupStrategyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []JobBackupStrategy `json:"items"`
}
