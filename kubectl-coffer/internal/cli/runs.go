package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/kubectl-coffer/internal/runs"
	"github.com/coffer-backup/coffer/kubectl-coffer/internal/view"
)

// createAttempts bounds the names drawn for a new run when one is taken.
const createAttempts = 3

// create creates the object build makes with a fresh suffix, drawing another when the name is taken.
func (o *Options) create(ctx context.Context, c client.Client, build func(suffix string) (client.Object, error)) (client.Object, error) {
	for i := 0; ; i++ {
		obj, err := build(o.Suffix())
		if err != nil {
			return nil, err
		}
		err = c.Create(ctx, obj)
		if err == nil || !apierrors.IsAlreadyExists(err) || i == createAttempts-1 {
			return obj, err
		}
	}
}

// resource is how kubectl names an object: "backupjob.backups.cozystack.io/NAME".
func resource(obj client.Object) string {
	gvk, err := clientGVK(obj)
	if err != nil {
		return obj.GetName()
	}
	return strings.ToLower(gvk.Kind) + "." + gvk.Group + "/" + obj.GetName()
}

// report prints a new run: the object with -o, else kubectl's "<resource> created".
func (o *Options) report(obj client.Object, out *output) error {
	if out.objects() {
		return out.printer().PrintObj(obj, o.Out)
	}
	_, err := fmt.Fprintf(o.Out, "%s created\n", resource(obj))
	return err
}

func newBackupCommand(o *Options) *cobra.Command {
	wf := &waitFlags{}
	out := &output{}
	cmd := &cobra.Command{
		Use:   "backup PLAN",
		Short: "Back up a Plan's application now",
		Long: `Create a BackupJob now, as the Plan's next tick would: the Plan's application and class,
spec.planRef and the Plan's label, controlled by the Plan. It counts in the Plan's history (active
runs, last success, history limits, and its Backup in retention) but moves no tick.`,
		Example: `  kubectl coffer backup shop-nightly -n shop --wait`,
		Args:    cobra.ExactArgs(1),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
			return o.completeNames(cmd, args, &backupsv1.PlanList{})
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			c, ns, err := o.clientAndNamespace()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			plan := &backupsv1.Plan{}
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: args[0]}, plan); err != nil {
				return notFound(err, "Plan", ns, args[0])
			}
			obj, err := o.create(ctx, c, func(s string) (client.Object, error) { return runs.PlanBackupJob(plan, s), nil })
			if err != nil {
				return fmt.Errorf("creating a BackupJob of Plan %s: %w", plan.Name, err)
			}
			job := obj.(*backupsv1.BackupJob)
			return o.follow(ctx, c, job, wf, out, func() view.State { return view.BackupJobState(job) }, func(w io.Writer, werr error) {
				if werr == nil && job.Status.BackupRef != nil {
					b := &backupsv1.Backup{}
					if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: job.Status.BackupRef.Name}, b); err == nil {
						fmt.Fprintf(w, "Backup %s: %s\n", b.Name, backupSummary(b))
					}
				}
			})
		},
	}
	wf.addFlags(cmd, "BackupJob")
	out.addFlag(cmd)
	return cmd
}

func newRestoreCommand(o *Options) *cobra.Command {
	wf := &waitFlags{}
	out := &output{}
	var toNamespace string
	cmd := &cobra.Command{
		Use:   "restore BACKUP",
		Short: "Restore a Backup into its application, or into another namespace",
		Long: `Create a RestoreJob of a Backup of the namespace. With --to-namespace the restore writes into that
namespace instead (the standard option targetNamespace): the admission policy coffer-restore-target
admits it only when you may create RestoreJobs there too.`,
		Example: `  kubectl coffer restore shop-nightly-29623800 -n shop --wait
  kubectl coffer restore shop-nightly-29623800 -n shop --to-namespace shop-copy --wait`,
		Args: cobra.ExactArgs(1),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
			return o.completeNames(cmd, args, &backupsv1.BackupList{})
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			c, ns, err := o.clientAndNamespace()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			b := &backupsv1.Backup{}
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: args[0]}, b); err != nil {
				return notFound(err, "Backup", ns, args[0])
			}
			if err := runs.CheckRestorable(b); err != nil {
				return err
			}
			obj, err := o.create(ctx, c, func(s string) (client.Object, error) { return runs.RestoreJob(b, toNamespace, s), nil })
			if err != nil {
				return fmt.Errorf("creating a RestoreJob of Backup %s: %w", b.Name, err)
			}
			rj := obj.(*backupsv1.RestoreJob)
			return o.follow(ctx, c, rj, wf, out, func() view.State { return view.RestoreJobState(rj) }, func(w io.Writer, werr error) {
				if werr == nil && rj.Status.Items != nil {
					fmt.Fprintf(w, "Restored into %s: %s\n", rj.TargetNamespace(), items(rj.Status.Items))
				}
			})
		},
	}
	cmd.Flags().StringVar(&toNamespace, "to-namespace", "", "Restore into this namespace instead of the Backup's own (option targetNamespace).")
	_ = cmd.RegisterFlagCompletionFunc("to-namespace", o.completeNamespaces)
	wf.addFlags(cmd, "RestoreJob")
	out.addFlag(cmd)
	return cmd
}

func newVerifyCommand(o *Options) *cobra.Command {
	wf := &waitFlags{}
	out := &output{}
	var full bool
	runNamespace := runs.DefaultVerifyNamespace
	cmd := &cobra.Command{
		Use:   "verify BACKUP",
		Short: "Verify a Velero-made Backup: its checksum, or a full restore into a sandbox",
		Long: `Create a BackupVerifyRun of a Backup made by driver-velero: backend velero, backupRef the Velero
backup named in the Backup's driverMetadata. By default the verifier checks the artifact's SHA-256;
with --full it restores the backup into a new sandbox namespace "<namespace>-<random>-bvsandbox" that
it creates, diffs it with the backup, and deletes it. Backups of other drivers are refused.
Verification kinds are for cluster admins: the run is created in --verify-namespace.`,
		Example: `  kubectl coffer verify shop-nightly-29623800 -n shop
  kubectl coffer verify shop-nightly-29623800 -n shop --full --wait`,
		Args: cobra.ExactArgs(1),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
			return o.completeNames(cmd, args, &backupsv1.BackupList{})
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			c, ns, err := o.clientAndNamespace()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			b := &backupsv1.Backup{}
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: args[0]}, b); err != nil {
				return notFound(err, "Backup", ns, args[0])
			}
			obj, err := o.create(ctx, c, func(s string) (client.Object, error) { return runs.VerifyRun(b, runNamespace, full, s) })
			if errors.Is(err, runs.ErrNotVerifiable) {
				return err
			}
			if err != nil {
				return fmt.Errorf("creating a BackupVerifyRun of Backup %s: %w", b.Name, err)
			}
			run := obj.(*securityv1.BackupVerifyRun)
			return o.follow(ctx, c, run, wf, out, func() view.State { return view.VerifyRunState(run) }, func(w io.Writer, _ error) {
				if run.Status.Phase.IsTerminal() {
					worst := string(run.Status.WorstSeverity)
					if worst == "" {
						worst = "none"
					}
					fmt.Fprintf(w, "Worst finding: %s; the findings are in BackupVerifyResult %s/%s\n", worst, run.Namespace, run.Status.ResultName())
				}
			})
		},
	}
	cmd.Flags().BoolVar(&full, "full", false, "Restore into a sandbox namespace and compare it with the backup, instead of checking the checksum only.")
	cmd.Flags().StringVar(&runNamespace, "verify-namespace", runNamespace, "Namespace of the BackupVerifyRun (the verifier's).")
	wf.addFlags(cmd, "verification")
	out.addFlag(cmd)
	return cmd
}

// follow ends a command that created obj: without --wait it reports obj; with --wait it re-reads
// obj until state says it is terminal, printing progress, then lets done print a summary
// (given the wait's error) and prints obj if -o asks for objects.
func (o *Options) follow(ctx context.Context, c client.Client, obj client.Object, wf *waitFlags, out *output,
	state func() view.State, done func(w io.Writer, werr error)) error {
	if !wf.wait {
		return o.report(obj, out)
	}
	if !out.objects() {
		fmt.Fprintf(o.Out, "%s created\n", resource(obj))
	}
	w := o.progress(out)
	_, werr := o.waitFor(ctx, w, resource(obj), wf.timeout, func(ctx context.Context) (view.State, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		return state(), err
	})
	done(w, werr)
	if out.objects() {
		if err := out.printer().PrintObj(obj, o.Out); err != nil {
			return err
		}
	}
	return werr
}

// clientAndNamespace is the client and the namespace of -n.
func (o *Options) clientAndNamespace() (client.Client, string, error) {
	c, err := o.Client()
	if err != nil {
		return nil, "", err
	}
	ns, err := o.Namespace()
	return c, ns, err
}

// notFound says plainly that an object is not there; other errors are wrapped.
func notFound(err error, kind, ns, name string) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%s %q not found in namespace %s", kind, name, ns)
	}
	return fmt.Errorf("reading %s %s/%s: %w", kind, ns, name, err)
}

// backupSummary is a Backup's phase and artifact on one line.
func backupSummary(b *backupsv1.Backup) string {
	s := string(b.Status.Phase)
	if s == "" {
		s = string(backupsv1.BackupPending)
	}
	if a := b.Status.Artifact; a != nil {
		s += ", " + view.Bytes(a.SizeBytes)
		if a.Checksum != "" {
			s += ", " + a.Checksum
		}
		s += ", " + a.URI
	}
	return s
}

func items(i *backupsv1.RestoreItems) string {
	return fmt.Sprintf("%d restored, %d skipped, %d failed", i.Restored, i.Skipped, i.Failed)
}
