package verifyrun

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/coffer-backup/coffer/apis/cachetrim"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
)

// TrimEndedRun cuts an ended run the verifier caches (obj; any other object, and a run in flight,
// pass unchanged) to what is read of it once it ended: its metadata (of the labels, the policy's,
// the Backup UID's and LabelSettled) and spec, and of its status the phase, times, Result, worst
// severity and the Ready condition's status and reason; repeated strings are shared
// (cachetrim.Intern). The message (up to 32 KiB), the other conditions and labels are dropped.
// The runs cached ended are those not settled (made by hand, of another backend, or whose verdict
// is not on their Backup yet): a settled run is not cached at all (verifyrun.Unsettled). Nothing
// writes an ended run but its settling and its deletion; the verdict controller reads the run
// whole, uncached, when it has a verdict to record (VerdictReconciler).
func TrimEndedRun(obj any) {
	run, ok := obj.(*securityv1.BackupVerifyRun)
	if !ok || !run.Status.Phase.IsTerminal() {
		return
	}
	st := &run.Status
	kept := securityv1.BackupVerifyRunStatus{Phase: securityv1.RunPhase(cachetrim.Intern(string(st.Phase))), StartTime: st.StartTime,
		CompletionTime: st.CompletionTime, ResultRef: st.ResultRef, WorstSeverity: securityv1.Severity(cachetrim.Intern(string(st.WorstSeverity)))}
	if ready := meta.FindStatusCondition(st.Conditions, securityv1.ConditionReady); ready != nil {
		kept.Conditions = []metav1.Condition{{Type: securityv1.ConditionReady, Status: ready.Status, Reason: cachetrim.Intern(ready.Reason),
			ObservedGeneration: ready.ObservedGeneration, LastTransitionTime: ready.LastTransitionTime}}
	}
	run.Status = kept
	run.Namespace = cachetrim.Intern(run.Namespace)
	// Of the labels, those an ended run is found and judged by: its policy (the policy's
	// watch and its list of ended runs), its Backup's UID (prune, the verdict) and whether it is
	// settled.
	var labels map[string]string
	for _, k := range []string{securityv1.LabelPolicy, securityv1.LabelBackupUID, securityv1.LabelSettled} {
		if v, ok := run.Labels[k]; ok {
			if labels == nil {
				labels = make(map[string]string, 3)
			}
			labels[k] = v
		}
	}
	if p, ok := labels[securityv1.LabelPolicy]; ok {
		labels[securityv1.LabelPolicy] = cachetrim.Intern(p)
	}
	run.Labels = labels
	sp := &run.Spec
	sp.Backend = securityv1.Backend(cachetrim.Intern(string(sp.Backend)))
	sp.Mode = securityv1.Mode(cachetrim.Intern(string(sp.Mode)))
	sp.BackupRef.Namespace = cachetrim.Intern(sp.BackupRef.Namespace)
}
