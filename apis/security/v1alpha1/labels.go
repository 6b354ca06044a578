package v1alpha1

// Label keys of the backup-verify objects.
const (
	// LabelRunUID on a sandbox namespace holds the UID of the run that created it; the verifier
	// deletes only namespaces carrying the UID of the run being cleaned up.
	LabelRunUID = Group + "/run-uid"
	// LabelRun on results, restores and events names the run they belong to.
	LabelRun = Group + "/run"
)
