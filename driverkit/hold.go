package driverkit

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// RetentionHoldOf returns how long retention can hold the run's Backup
// (RetentionPolicy.HeldUnder: the Plan's span, the class floor's minAge and deletionDelay), for a
// driver whose storage expires or locks artifacts on its own. It reads the run's Plan from plans
// (one get per run: an uncached reader does) and its BackupClass from classes. plan is nil when the
// run has no Plan or its Plan is gone (core's business): nothing then says how long to hold. A
// class that is gone has no floor.
func RetentionHoldOf(ctx context.Context, plans, classes client.Reader, job *backupsv1.BackupJob) (plan *backupsv1.Plan, hold backupsv1.RetentionHold, err error) {
	ref := job.Spec.PlanRef
	if ref == nil || ref.Name == "" {
		return nil, hold, nil
	}
	plan = &backupsv1.Plan{}
	if err := plans.Get(ctx, client.ObjectKey{Namespace: job.Namespace, Name: ref.Name}, plan); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, hold, nil
		}
		return nil, hold, fmt.Errorf("reading Plan %s/%s for its retention: %w", job.Namespace, ref.Name, err)
	}
	var floor *backupsv1.RetentionFloor
	class := &backupsv1.BackupClass{}
	switch err := classes.Get(ctx, client.ObjectKey{Name: job.Spec.BackupClassName}, class); {
	case err == nil:
		floor = class.Spec.RetentionFloor
	case !apierrors.IsNotFound(err):
		return nil, hold, fmt.Errorf("reading BackupClass %s for its retention floor: %w", job.Spec.BackupClassName, err)
	}
	return plan, plan.Spec.Retention.HeldUnder(floor), nil
}
