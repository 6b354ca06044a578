package view

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
)

var now = time.Date(2026, 4, 29, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(d)} }

func TestTimes(t *testing.T) {
	assert.Equal(t, "never", Ago(now, nil))
	assert.Equal(t, "5m ago", Ago(now, at(-5*time.Minute)))
	assert.Equal(t, "26h ago", Ago(now, at(-26*time.Hour)))
	assert.Equal(t, "-", Until(now, nil))
	assert.Equal(t, "in 42s", Until(now, at(42*time.Second)))
	assert.Equal(t, "3s overdue", Until(now, at(-3*time.Second)))
	assert.Equal(t, "[   12s]", Waited(12400*time.Millisecond))
}

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 262144 + 4096: "260.0 KiB", 5 << 30: "5.0 GiB"} {
		assert.Equal(t, want, Bytes(n), n)
	}
}

func cond(t, status, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: t, Status: metav1.ConditionStatus(status), Reason: reason, Message: msg}
}

func TestStates(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  State
		want string
		end  [2]bool // terminal, succeeded
	}{
		{"new BackupJob", BackupJobState(&backupsv1.BackupJob{}), "Pending", [2]bool{}},
		{"claimed", BackupJobState(&backupsv1.BackupJob{Status: backupsv1.BackupJobStatus{Phase: backupsv1.BackupJobRunning,
			Conditions: []metav1.Condition{cond("Accepted", "True", "Claimed", "Claimed by coffer-driver-velero")}}}),
			"Running (Claimed: Claimed by coffer-driver-velero)", [2]bool{}},
		{"succeeded", BackupJobState(&backupsv1.BackupJob{Status: backupsv1.BackupJobStatus{Phase: backupsv1.BackupJobSucceeded,
			Conditions: []metav1.Condition{cond("Accepted", "True", "Claimed", "Claimed by coffer-driver-velero"),
				cond("Ready", "True", "Succeeded", "Backup shop-1 is Ready")}}}),
			"Succeeded (Succeeded: Backup shop-1 is Ready)", [2]bool{true, true}},
		{"failed by core", BackupJobState(&backupsv1.BackupJob{Status: backupsv1.BackupJobStatus{Phase: backupsv1.BackupJobFailed,
			Message: "BackupClass \"nope\" not found:\n create it",
			Conditions: []metav1.Condition{cond("Accepted", "False", "BackupClassNotFound", "BackupClass \"nope\" not found"),
				cond("Ready", "False", "BackupClassNotFound", "BackupClass \"nope\" not found")}}}),
			`Failed (BackupClassNotFound: BackupClass "nope" not found: create it)`, [2]bool{true, false}},
		{"restore running", RestoreJobState(&backupsv1.RestoreJob{Status: backupsv1.RestoreJobStatus{Phase: backupsv1.RestoreJobRunning}}),
			"Running", [2]bool{}},
		{"verify running", VerifyRunState(&securityv1.BackupVerifyRun{Status: securityv1.BackupVerifyRunStatus{Phase: securityv1.RunRunning,
			Conditions: []metav1.Condition{cond("Progressing", "True", "RestoreInProgress", "waiting for Restore bvr-x")}}}),
			"Running (RestoreInProgress: waiting for Restore bvr-x)", [2]bool{}},
		// A mismatch is a run carried out (Succeeded, as ugallu has it) whose verdict is no success.
		{"verify mismatch", VerifyRunState(&securityv1.BackupVerifyRun{Status: securityv1.BackupVerifyRunStatus{Phase: securityv1.RunSucceeded,
			Message:    "checksum mismatch",
			Conditions: []metav1.Condition{cond("Progressing", "False", "BackupVerifyMismatch", "checksum mismatch"), cond("Ready", "False", "BackupVerifyMismatch", "checksum mismatch")}}}),
			"Succeeded (BackupVerifyMismatch: checksum mismatch)", [2]bool{true, false}},
		{"verify failed", VerifyRunState(&securityv1.BackupVerifyRun{Status: securityv1.BackupVerifyRunStatus{Phase: securityv1.RunFailed,
			Message:    "timed out",
			Conditions: []metav1.Condition{cond("Ready", "False", "BackupVerifyFailed", "timed out")}}}),
			"Failed (BackupVerifyFailed: timed out)", [2]bool{true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.got.String())
			assert.Equal(t, tc.end, [2]bool{tc.got.Terminal, tc.got.Succeeded})
		})
	}
	assert.Equal(t, "[    3s] backupjob.backups.cozystack.io/b1 Running",
		ProgressLine("backupjob.backups.cozystack.io/b1", State{Phase: "Running"}, 3*time.Second))
}

// TestBackupPhaseShowsVerification: the newest Backup's phase says what verification found.
func TestBackupPhaseShowsVerification(t *testing.T) {
	ready := func(conds ...metav1.Condition) *backupsv1.Backup {
		return &backupsv1.Backup{Status: backupsv1.BackupStatus{Phase: backupsv1.BackupReady, Conditions: conds}}
	}
	assert.Equal(t, "Ready", backupPhase(ready()))
	assert.Equal(t, "Ready (checksum verified)", backupPhase(ready(cond("Verified", "True", "ChecksumVerified", ""))))
	assert.Equal(t, "Ready (restore verified)", backupPhase(ready(cond("Verified", "True", "RestoreVerified", ""))))
	assert.Equal(t, "Ready (verification failed)", backupPhase(ready(cond("Verified", "False", "ChecksumMismatch", ""))))
	assert.Equal(t, "Ready (artifact missing)", backupPhase(ready(cond("Verified", "True", "RestoreVerified", ""), cond("ArtifactAvailable", "False", "ArtifactMissing", ""))))
}

func TestStatus(t *testing.T) {
	plans := []backupsv1.Plan{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "shop-nightly"},
			Spec: backupsv1.PlanSpec{Schedule: backupsv1.PlanSchedule{Cron: "0 2 * * *", TimeZone: ptr.To("Europe/Berlin")}},
			Status: backupsv1.PlanStatus{LastSuccessfulTime: at(-10 * time.Hour), NextScheduleTime: at(14 * time.Hour),
				LastBackupRef: &corev1.LocalObjectReference{Name: "shop-nightly-29623800"},
				LastRestorableBackup: &backupsv1.RestorablePoint{Name: "shop-nightly-29622360", TakenAt: *at(-34 * time.Hour),
					RestoreDuration: &metav1.Duration{Duration: 83 * time.Second}},
				Active:     []corev1.LocalObjectReference{{Name: "shop-nightly-manual-x7k2p"}},
				Conditions: []metav1.Condition{cond("Ready", "True", "Scheduling", "")}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "crm", Name: "db"},
			Spec: backupsv1.PlanSpec{Schedule: backupsv1.PlanSchedule{Cron: "*/5 * * * *"}, Suspend: ptr.To(true)},
			Status: backupsv1.PlanStatus{NextScheduleTime: at(time.Minute), LastBackupRef: &corev1.LocalObjectReference{Name: "db-gone"},
				Active:     []corev1.LocalObjectReference{{Name: "a"}, {Name: "b"}, {Name: "c"}},
				Conditions: []metav1.Condition{cond("Ready", "False", "Suspended", "spec.suspend is true")}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "fresh"},
			Spec: backupsv1.PlanSpec{Schedule: backupsv1.PlanSchedule{Cron: "@hourly"}}},
	}
	backups := map[types.NamespacedName]*backupsv1.Backup{
		{Namespace: "shop", Name: "shop-nightly-29623800"}: {Status: backupsv1.BackupStatus{Phase: backupsv1.BackupReady,
			Conditions: []metav1.Condition{cond("PartiallyFailed", "True", "PartiallyFailed", "2 errors")}}},
	}
	var buf bytes.Buffer
	require.NoError(t, WriteStatus(&buf, StatusRows(plans, backups, now), true))
	want := `NAMESPACE   PLAN           SCHEDULE                  LAST SUCCESS   NEXT     ACTIVE                      LAST BACKUP             PHASE                      RESTORABLE
crm         db             */5 * * * * (suspended)   never          -        a,b +1                      db-gone                 (deleted)                  -
shop        fresh          @hourly                   never          -        -                           -                       -                          -
shop        shop-nightly   0 2 * * * Europe/Berlin   10h ago        in 14h   shop-nightly-manual-x7k2p   shop-nightly-29623800   Ready (partially failed)   34h ago, RTO 1m23s
crm/db: Ready=False Suspended: spec.suspend is true
`
	assert.Equal(t, want, buf.String())

	buf.Reset()
	require.NoError(t, WriteStatus(&buf, StatusRows(plans[2:], nil, now), false))
	assert.Equal(t, "PLAN    SCHEDULE   LAST SUCCESS   NEXT   ACTIVE   LAST BACKUP   PHASE   RESTORABLE\nfresh   @hourly    never          -      -        -             -       -\n", buf.String())
}

func TestDescribe(t *testing.T) {
	d := &Description{
		Kind: "BackupJob", Namespace: "shop", Name: "shop-nightly-manual-x7k2p",
		State:   State{Phase: "Failed", Terminal: true, Reason: "BackupClassNotFound", Message: "BackupClass \"nope\" not found; create it"},
		Created: metav1.Time{Time: now.Add(-2 * time.Minute)}, Completed: at(-time.Minute),
		Fields: []Field{{"Plan", "shop-nightly (on demand)"}, {"Class", "nope"}},
		Conditions: []metav1.Condition{{Type: "Accepted", Status: "False", Reason: "BackupClassNotFound",
			Message: "BackupClass \"nope\" not found", LastTransitionTime: metav1.Time{Time: now.Add(-time.Minute)}}},
		Events: []Event{
			{Type: "Warning", Reason: "NoDriverClaimed", From: "coffer-core", Message: "failed", Count: 1, Last: now.Add(-time.Minute)},
			{Type: "Normal", Reason: "Created", From: "kubectl-coffer", Message: "created", Count: 3, Last: now.Add(-2 * time.Minute)},
		},
		Driver: []DriverObject{
			{Kind: "batch/v1 Job", Namespace: "shop", Name: "backup-x", Status: "Complete"},
			{Kind: "Pod", Name: "backup-x-abcde container agent", Status: "Succeeded", Log: "line 1\nline 2\n", Indent: true},
		},
		Notes: []string{"events not shown: forbidden"},
	}
	var buf bytes.Buffer
	require.NoError(t, WriteDescribe(&buf, d, now))
	want := `Name:       shop/shop-nightly-manual-x7k2p
Kind:       BackupJob
Phase:      Failed
Reason:     BackupClassNotFound
Message:    BackupClass "nope" not found; create it
Created:    2026-04-29T11:58:00Z (2m ago)
Completed:  2026-04-29T11:59:00Z (60s ago)
Plan:       shop-nightly (on demand)
Class:      nope
Conditions:
  TYPE      STATUS  REASON               AGE  MESSAGE
  Accepted  False   BackupClassNotFound  60s  BackupClass "nope" not found
Events:
  AGE      TYPE     REASON           FROM            MESSAGE
  2m (x3)  Normal   Created          kubectl-coffer  created
  60s      Warning  NoDriverClaimed  coffer-core     failed
Driver objects:
  batch/v1 Job shop/backup-x: Complete
    Pod backup-x-abcde container agent: Succeeded
      | line 1
      | line 2
Note: events not shown: forbidden
`
	assert.Equal(t, want, buf.String())
	assert.False(t, strings.Contains(buf.String(), "Started:"), "no start, no line")
}
