package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// The status a driver's catalog sync (contract rule BK-12) reports on the strategy that enables it,
// the same for every driver.

// NamespaceName is the name of a namespace.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
type NamespaceName string

// DefaultCatalogInterval is the time between two catalog syncs when intervalSeconds is unset.
const DefaultCatalogInterval = 300

// CatalogStatus counts what the last catalog sync found.
type CatalogStatus struct {
	// lastSyncTime is when the last sync ended.
	// +optional
	LastSyncTime *metav1.Time `json:"lastSyncTime,omitempty"`
	// records is how many records the sync found in storage.
	Records int32 `json:"records"`
	// imported is how many Backups of this catalog exist (made by this or an earlier sync).
	Imported int32 `json:"imported"`
	// created and removed are the Backups the last sync created, and removed because their
	// record (and so their artifact) is gone from the bucket.
	Created int32 `json:"created"`
	Removed int32 `json:"removed"`
	// own is how many records this cluster wrote itself (never imported).
	Own int32 `json:"own"`
	// skipped is how many records were not imported (invalid, a Backup of the same name that is
	// not their import, a missing namespace); the CatalogSynced message and Warning events say
	// which and why.
	Skipped int32 `json:"skipped"`
	// syncing says how far the sync under way is, once it has run for a while (a first sync of a
	// large bucket takes minutes); unset when no sync runs.
	// +optional
	Syncing *CatalogProgress `json:"syncing,omitempty"`
}

// Phases of a catalog sync under way.
const (
	// CatalogReading: the driver reads the records in storage (done: the records read so far),
	// and the catalog makes each record's Backup as soon as it is read.
	CatalogReading = "Reading"
	// CatalogImporting: every record is read, and the last Backups are made, or found made (done:
	// the records whose Backup is made, found made, or that are skipped).
	CatalogImporting = "Importing"
)

// CatalogProgress is how far a catalog sync under way is.
type CatalogProgress struct {
	// startTime is when the sync began.
	StartTime metav1.Time `json:"startTime"`
	// phase is Reading (the records in storage) or Importing (their Backups).
	// +kubebuilder:validation:Enum=Reading;Importing
	Phase string `json:"phase"`
	// done of total are the records read, or imported (or found imported), so far.
	Done  int32 `json:"done"`
	Total int32 `json:"total"`
}

// Condition type and reasons of a strategy's catalog.
const (
	ConditionCatalogSynced = "CatalogSynced"
	// ReasonCatalogSynced: every record was read; skipped ones are counted and named in events.
	ReasonCatalogSynced = "Synced"
	// ReasonCatalogUnreadable: the bucket or a record could not be read (credentials, endpoint,
	// network); nothing was removed.
	ReasonCatalogUnreadable = "StorageUnreadable"
	// ReasonCatalogCredentials: the credentials Secret is missing or lacks a key.
	ReasonCatalogCredentials = "CredentialsInvalid"
)
