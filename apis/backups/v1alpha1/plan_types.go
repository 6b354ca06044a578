package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PlanScheduleType is the kind of schedule of a Plan.
// +kubebuilder:validation:Enum="";cron
type PlanScheduleType string

const (
	// PlanScheduleTypeEmpty means the default type, cron.
	PlanScheduleTypeEmpty PlanScheduleType = ""
	// PlanScheduleTypeCron schedules with a cron expression.
	PlanScheduleTypeCron PlanScheduleType = "cron"
)

// ConcurrencyPolicy says what a Plan does when a tick is due while an earlier BackupJob still runs.
// +kubebuilder:validation:Enum=Forbid;Allow
type ConcurrencyPolicy string

const (
	// ConcurrencyForbid skips (and records) a tick while a BackupJob of the Plan is not terminal.
	ConcurrencyForbid ConcurrencyPolicy = "Forbid"
	// ConcurrencyAllow lets BackupJobs of one Plan run side by side.
	ConcurrencyAllow ConcurrencyPolicy = "Allow"
)

// Defaults applied in code when the optional fields of a Plan are unset.
const (
	DefaultSuccessfulJobsHistoryLimit int32 = 3
	DefaultFailedJobsHistoryLimit     int32 = 1
)

// PlanSchedule says when a Plan fires.
// +kubebuilder:validation:XValidation:rule="has(self.cron) && size(self.cron) > 0",message="schedule.cron is required when schedule.type is cron"
type PlanSchedule struct {
	// type is the schedule type. Only "cron" is supported; unset means "cron".
	// +optional
	Type PlanScheduleType `json:"type,omitempty"`

	// cron is a standard five-field cron expression or a descriptor such as "@daily", in the
	// dialect of the Kubernetes CronJob. Required for the cron type.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Cron string `json:"cron,omitempty"`

	// timeZone is the IANA name of the zone the cron expression is read in, e.g. "Europe/Berlin".
	// Unset means UTC.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	TimeZone *string `json:"timeZone,omitempty"`
}

// RetentionPolicy bounds how many Backups of a Plan are kept. The rules apply to the Backups of
// each application apart (a Plan pointed at another application keeps Backups of both). A Backup is
// kept when any rule keeps it; the newest good Backup of each application (Backup.IsGood) is kept
// whatever the rules say, and an application without a good Backup loses none to maxAge. Unset
// rules keep nothing on their own; a Plan without retention keeps every Backup.
type RetentionPolicy struct {
	// keepLast keeps the newest N Backups.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	KeepLast *int32 `json:"keepLast,omitempty"`

	// keepDaily keeps the newest Backup of each of the last N days that have one (Plan's time zone).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	KeepDaily *int32 `json:"keepDaily,omitempty"`

	// keepWeekly keeps the newest Backup of each of the last N ISO weeks that have one.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	KeepWeekly *int32 `json:"keepWeekly,omitempty"`

	// keepMonthly keeps the newest Backup of each of the last N months that have one.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	KeepMonthly *int32 `json:"keepMonthly,omitempty"`

	// maxAge prunes Backups older than this duration (e.g. "720h") even if a keep rule holds them,
	// except the newest good Backup of each application. It must be longer than zero.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="self.matches('[1-9]')",message="maxAge must be longer than zero"
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`
}

// PlanSpec describes when, how and where to back up one application.
type PlanSpec struct {
	// applicationRef is the application to back up. An unset apiGroup means "apps.cozystack.io".
	// +required
	// +kubebuilder:validation:XValidation:rule="size(self.name) > 0 && size(self.name) <= 253",message="applicationRef.name must be 1-253 characters"
	// +kubebuilder:validation:XValidation:rule="size(self.kind) > 0 && size(self.kind) <= 63",message="applicationRef.kind must be 1-63 characters"
	// +kubebuilder:validation:XValidation:rule="!has(self.apiGroup) || size(self.apiGroup) <= 253",message="applicationRef.apiGroup must be at most 253 characters"
	ApplicationRef corev1.TypedLocalObjectReference `json:"applicationRef"`

	// backupClassName is the BackupClass resolved for the application to find the strategy and
	// its parameters.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	BackupClassName string `json:"backupClassName"`

	// schedule says when backups run.
	// +required
	Schedule PlanSchedule `json:"schedule"`

	// startingDeadlineSeconds bounds how late a missed tick may still fire. Unset means no bound
	// (the most recent missed tick always fires).
	// +optional
	// +kubebuilder:validation:Minimum=0
	StartingDeadlineSeconds *int64 `json:"startingDeadlineSeconds,omitempty"`

	// concurrencyPolicy is Forbid (unset) or Allow.
	// +optional
	ConcurrencyPolicy ConcurrencyPolicy `json:"concurrencyPolicy,omitempty"`

	// suspend stops new BackupJobs while true. Resuming fires no burst of old ticks.
	// +optional
	Suspend *bool `json:"suspend,omitempty"`

	// successfulJobsHistoryLimit is how many Succeeded BackupJobs are kept. Unset means 3.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	SuccessfulJobsHistoryLimit *int32 `json:"successfulJobsHistoryLimit,omitempty"`

	// failedJobsHistoryLimit is how many Failed BackupJobs are kept. Unset means 1.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	FailedJobsHistoryLimit *int32 `json:"failedJobsHistoryLimit,omitempty"`

	// retention prunes old Backups of this Plan. Unset keeps every Backup.
	// +optional
	Retention *RetentionPolicy `json:"retention,omitempty"`
}

// PlanStatus is the observed state of a Plan.
type PlanStatus struct {
	// observedGeneration is the generation of the spec last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// lastScheduleTime is the tick of the newest BackupJob created by this Plan.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`

	// lastSkippedTime is the newest tick that did not fire (missed or forbidden).
	// +optional
	LastSkippedTime *metav1.Time `json:"lastSkippedTime,omitempty"`

	// nextScheduleTime is the next tick.
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`

	// lastSuccessfulTime is when the newest Succeeded BackupJob of this Plan completed.
	// +optional
	LastSuccessfulTime *metav1.Time `json:"lastSuccessfulTime,omitempty"`

	// lastBackupRef is the newest Backup of this Plan.
	// +optional
	LastBackupRef *corev1.LocalObjectReference `json:"lastBackupRef,omitempty"`

	// lastRestorableBackup is the newest good Backup of this Plan that a full-restore
	// verification proved restorable (Backup.RestoreVerified): the recovery point the Plan can be
	// trusted to reach. Its age is the Plan's restorable RPO.
	// +optional
	LastRestorableBackup *RestorablePoint `json:"lastRestorableBackup,omitempty"`

	// pendingPrunes lists the Backups retention selected that wait out their class's
	// retentionFloor.deletionDelay before they are deleted, oldest selection first.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1000
	PendingPrunes []PendingPrune `json:"pendingPrunes,omitempty"`

	// active lists the BackupJobs of this Plan that are not terminal.
	// +optional
	// +listType=atomic
	Active []corev1.LocalObjectReference `json:"active,omitempty"`

	// skippedTicks counts the ticks that did not fire (missed past the deadline, or forbidden by
	// the concurrency policy) since the Plan was created.
	// +optional
	SkippedTicks int64 `json:"skippedTicks,omitempty"`

	// conditions: Ready (the schedule is valid, the Plan is scheduling, and its BackupClass
	// resolves to a strategy for its application) and TickSkipped.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PendingPrune is a Backup retention selected, held until deleteAfter.
type PendingPrune struct {
	// name of the Backup, in the Plan's namespace.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// since is when retention first selected it.
	// +required
	Since metav1.Time `json:"since"`
	// deleteAfter is when it is deleted if retention still selects it then.
	// +required
	DeleteAfter metav1.Time `json:"deleteAfter"`
	// reason is the rule that selected it.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Reason string `json:"reason,omitempty"`
}

// RestorablePoint names a Backup proven restorable and when it was taken.
type RestorablePoint struct {
	// name of the Backup, in the Plan's namespace.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// takenAt of the Backup.
	// +required
	TakenAt metav1.Time `json:"takenAt"`
	// restoreDuration is how long the full-restore verification that proved it restorable took
	// to restore it (VerificationVerdict.restoreDuration): the Plan's measured recovery time,
	// beside the restorable recovery point. Absent when that verification did not measure it.
	// +optional
	RestoreDuration *metav1.Duration `json:"restoreDuration,omitempty"`
}

// Plan schedules backups of one application.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=bplan,categories=coffer
// +kubebuilder:selectablefield:JSONPath=`.spec.applicationRef.apiGroup`
// +kubebuilder:selectablefield:JSONPath=`.spec.applicationRef.kind`
// +kubebuilder:selectablefield:JSONPath=`.spec.applicationRef.name`
// +kubebuilder:printcolumn:name="Application",type=string,JSONPath=`.spec.applicationRef.name`
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.backupClassName`
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule.cron`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Last",type=date,JSONPath=`.status.lastScheduleTime`
// +kubebuilder:printcolumn:name="Restorable",type=date,JSONPath=`.status.lastRestorableBackup.takenAt`
// +kubebuilder:printcolumn:name="RTO",type=string,JSONPath=`.status.lastRestorableBackup.restoreDuration`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Plan struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec PlanSpec `json:"spec"`
	// +optional
	Status PlanStatus `json:"status,omitempty"`
}

// PlanList is a list of Plans.
// +kubebuilder:object:root=true
type PlanList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Plan `json:"items"`
}
