package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/kubectl-coffer/internal/view"
)

func newStatusCommand(o *Options) *cobra.Command {
	var all bool
	out := &output{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show every Plan: schedule, last success, next tick, active runs, last Backup",
		Long: `Show the Plans of the namespace (or of every namespace with -A), one line each: the schedule,
when a backup last succeeded, the next tick, the BackupJobs running now, and the newest Backup with
its phase. Plans that are not Ready are listed below the table with the reason.`,
		Example: `  kubectl coffer status -n shop
  kubectl coffer status -A
  kubectl coffer status -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			c, err := o.Client()
			if err != nil {
				return err
			}
			ns := ""
			if !all {
				if ns, err = o.Namespace(); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			plans := &backupsv1.PlanList{}
			if err := c.List(ctx, plans, client.InNamespace(ns)); err != nil {
				return fmt.Errorf("listing Plans: %w", err)
			}
			if out.objects() {
				return out.printer().PrintObj(asList(plans.Items), o.Out)
			}
			if len(plans.Items) == 0 {
				if all {
					fmt.Fprintln(o.ErrOut, "No Plans found.")
				} else {
					fmt.Fprintf(o.ErrOut, "No Plans found in namespace %s.\n", ns)
				}
				return nil
			}
			backups := map[types.NamespacedName]*backupsv1.Backup{}
			for _, p := range plans.Items {
				if p.Status.LastBackupRef == nil {
					continue
				}
				key := types.NamespacedName{Namespace: p.Namespace, Name: p.Status.LastBackupRef.Name}
				b := &backupsv1.Backup{}
				switch err := c.Get(ctx, key, b); {
				case err == nil:
					backups[key] = b
				case !apierrors.IsNotFound(err):
					return fmt.Errorf("reading Backup %s of Plan %s: %w", key, p.Name, err)
				}
			}
			return view.WriteStatus(o.Out, view.StatusRows(plans.Items, backups, o.Clock.Now()), all)
		},
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "Show the Plans of every namespace.")
	out.addFlag(cmd)
	return cmd
}

// asList is a v1 List of plans, each with its apiVersion and kind, as kubectl prints lists.
func asList(plans []backupsv1.Plan) *corev1.List {
	list := &corev1.List{}
	for i := range plans {
		p := plans[i].DeepCopy()
		p.SetGroupVersionKind(backupsv1.GroupVersion.WithKind("Plan"))
		list.Items = append(list.Items, runtime.RawExtension{Object: p})
	}
	return list
}
