package cli

import (
	"context"
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
			backups, err := lastBackups(ctx, c, ns, plans.Items)
			if err != nil {
				return err
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

// fewPlans is up to how many Plans' newest Backups status reads one by one; beyond, it lists.
const fewPlans = 20

// statusPageSize is how many Backups one page of status's list holds.
const statusPageSize = 500

// lastBackups reads the newest Backup of each Plan (status.lastBackupRef), by namespace and name;
// one missing from the map was deleted. For a few Plans it reads each; for more, it lists the
// Backups that Plans made (those with the plan label) in ns ("" is every namespace), in pages,
// and keeps only those the Plans name: a few requests for thousands of Plans, where one Get
// each would take minutes at a client's rate limit, and never more than a page in memory beyond
// what it keeps. A named Backup the list did not return (its label removed) is read by itself.
func lastBackups(ctx context.Context, c client.Reader, ns string, plans []backupsv1.Plan) (map[types.NamespacedName]*backupsv1.Backup, error) {
	want := map[types.NamespacedName]string{}
	for _, p := range plans {
		if p.Status.LastBackupRef != nil {
			want[types.NamespacedName{Namespace: p.Namespace, Name: p.Status.LastBackupRef.Name}] = p.Name
		}
	}
	backups := map[types.NamespacedName]*backupsv1.Backup{}
	if len(want) > fewPlans {
		page := &backupsv1.BackupList{}
		for cont := ""; ; {
			if err := c.List(ctx, page, client.InNamespace(ns), client.HasLabels{backupsv1.LabelPlan},
				client.Limit(statusPageSize), client.Continue(cont)); err != nil {
				return nil, fmt.Errorf("listing the Backups of Plans: %w", err)
			}
			for i := range page.Items {
				if key := client.ObjectKeyFromObject(&page.Items[i]); want[key] != "" {
					backups[key] = page.Items[i].DeepCopy()
				}
			}
			if cont = page.Continue; cont == "" {
				break
			}
		}
	}
	for key, plan := range want {
		if backups[key] != nil {
			continue
		}
		b := &backupsv1.Backup{}
		switch err := c.Get(ctx, key, b); {
		case err == nil:
			backups[key] = b
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading Backup %s of Plan %s: %w", key, plan, err)
		}
	}
	return backups, nil
}
