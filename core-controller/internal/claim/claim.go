// Package claim holds what core's BackupJob and RestoreJob reconcilers share about runs that no
// driver claims: the default claim timeout, when it runs out, and the failed status core writes
// then (contract CORE-5 and CORE-7).
package claim

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// DefaultTimeout is how long a run may wait for a driver before core fails it.
const DefaultTimeout = 5 * time.Minute

// Deadline is when an unclaimed run created at created is failed: the claim timeout after its
// creation, or after this controller started if that is later, so that drivers brought back with
// core (after an outage, an upgrade) get a whole timeout to claim the runs left from before.
func Deadline(created, started time.Time, timeout time.Duration) time.Time {
	from := created
	if started.After(from) {
		from = started
	}
	return from.Add(timeout)
}

// RefuseAccepted sets Accepted=False with reason and msg, stamped with the run's generation: no
// driver took the run, for the reason given.
func RefuseAccepted(conds *[]metav1.Condition, generation int64, now time.Time, reason, msg string) {
	meta.SetStatusCondition(conds, metav1.Condition{
		Type: backupsv1.ConditionAccepted, Status: metav1.ConditionFalse, Reason: reason, Message: msg,
		ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now),
	})
}
