// Package demo is the program behind `make demo`: it starts the local cluster of real processes
// (package golden), walks a newcomer through the golden lifecycle, applies deploy/samples, shows
// that the admission rules hold, and prints the objects of every Coffer kind as `kubectl get` would.
package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	velerov1 "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/golden"
	"github.com/coffer-backup/coffer/e2e/harness/components"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
)

// Kinds are the ten Coffer kinds, as group/version and plural resource.
var Kinds = []schema.GroupVersionResource{
	backupsv1.GroupVersion.WithResource("plans"),
	backupsv1.GroupVersion.WithResource("backupclasses"),
	backupsv1.GroupVersion.WithResource("backupjobs"),
	backupsv1.GroupVersion.WithResource("backups"),
	backupsv1.GroupVersion.WithResource("restorejobs"),
	velerov1.GroupVersion.WithResource("velerobackupstrategies"),
	jobv1.GroupVersion.WithResource("jobbackupstrategies"),
	securityv1.GroupVersion.WithResource("backupverifyruns"),
	securityv1.GroupVersion.WithResource("backupverifyresults"),
	securityv1.GroupVersion.WithResource("securityevents"),
}

// Options of a demo run.
type Options struct {
	// Dir holds the cluster's state and logs; empty means a new temp dir.
	Dir string
	// Components run as processes; nil: golden.Default.
	Components []components.Spec
}

// Run brings the stack up, walks through the golden lifecycle with a progress line per step,
// prints the lifecycle's table, applies deploy/samples, shows the sandbox admission policy, and
// prints every Coffer kind. The caller stops the returned stack (also on error, when not nil).
func Run(ctx context.Context, out io.Writer, opts Options) (*golden.Stack, *golden.Summary, error) {
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(out, "[%6s] %s\n", time.Since(start).Round(time.Second), fmt.Sprintf(format, args...))
	}
	dir := opts.Dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "coffer-demo-"); err != nil {
			return nil, nil, err
		}
	}
	s, err := golden.Start(ctx, golden.Options{Dir: dir, Say: say, Components: opts.Components})
	if err != nil {
		return s, nil, err
	}
	// The caller stops the stack it gets back; a panic would leave it running with nobody to.
	defer func() {
		if r := recover(); r != nil {
			s.Stop()
			panic(r)
		}
	}()
	say("Stack up: %d components running as processes", len(s.Components))
	sum, err := s.Lifecycle(ctx)
	if sum != nil {
		fmt.Fprintln(out)
		sum.Table(out)
		fmt.Fprintln(out)
	}
	if err != nil {
		return s, sum, err
	}
	say("Golden lifecycle done")
	samples, err := manifests.Render(filepath.Join(s.Root, "deploy", "samples"))
	if err != nil {
		return s, sum, err
	}
	if err := manifests.Apply(ctx, s.Client, samples); err != nil {
		return s, sum, err
	}
	say("Applied deploy/samples: %d objects (their applications do not exist here: their runs fail with ApplicationNotFound, as they should)", len(samples))
	if err := checkSandboxPolicy(ctx, s.Client, out); err != nil {
		return s, sum, err
	}
	return s, sum, PrintKinds(ctx, s.Cluster.Config, out)
}

// checkSandboxPolicy shows the spec's example run accepted and the same run aimed at a production
// namespace refused by the ValidatingAdmissionPolicy.
func checkSandboxPolicy(ctx context.Context, cl client.Client, out io.Writer) error {
	run := &securityv1.BackupVerifyRun{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "ugallu-system", Name: "nightly-velero"}, run); err != nil {
		return fmt.Errorf("the spec's example BackupVerifyRun was not stored: %w", err)
	}
	fmt.Fprintf(out, "Accepted: BackupVerifyRun %s/%s (full-restore into %s)\n", run.Namespace, run.Name, run.Spec.SandboxNamespace)
	bad := &securityv1.BackupVerifyRun{
		TypeMeta:   metav1.TypeMeta{APIVersion: securityv1.GroupVersion.String(), Kind: "BackupVerifyRun"},
		ObjectMeta: metav1.ObjectMeta{Namespace: run.Namespace, Name: "nightly-velero-into-prod"},
		Spec:       run.Spec,
	}
	bad.Spec.SandboxNamespace = "prod"
	var rejection error
	// Admission policies take effect a moment after they are created.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := cl.Create(ctx, bad.DeepCopy())
		if err == nil {
			return false, cl.Delete(ctx, bad.DeepCopy())
		}
		if apierrors.IsInvalid(err) {
			rejection = err
			return true, nil
		}
		return false, err
	})
	if err != nil {
		return fmt.Errorf("the -bvsandbox policy did not reject a full-restore into prod: %w", err)
	}
	fmt.Fprintf(out, "Rejected: the same run with sandboxNamespace prod:\n  %v\n", rejection)
	return nil
}

// PrintKinds prints the objects of every Coffer kind through the API server's own table
// rendering (the printer columns of each CRD), as `kubectl get` does.
func PrintKinds(ctx context.Context, cfg *rest.Config, out io.Writer) error {
	for _, gvr := range Kinds {
		rc, err := restClientFor(cfg, gvr.GroupVersion())
		if err != nil {
			return err
		}
		table := &metav1.Table{}
		err = rc.Get().AbsPath("apis", gvr.Group, gvr.Version, gvr.Resource).
			SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").
			Do(ctx).Into(table)
		if err != nil {
			return fmt.Errorf("listing %s: %w", gvr.Resource, err)
		}
		fmt.Fprintf(out, "\n# %s.%s\n", gvr.Resource, gvr.Group)
		printTable(out, table)
	}
	return nil
}

func printTable(out io.Writer, t *metav1.Table) {
	if len(t.Rows) == 0 {
		fmt.Fprintln(out, "No resources found.")
		return
	}
	w := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
	namespaced := false
	for _, r := range t.Rows {
		if m, ok := objectMeta(r); ok && m.Namespace != "" {
			namespaced = true
		}
	}
	var head []string
	if namespaced {
		head = append(head, "NAMESPACE")
	}
	for _, c := range t.ColumnDefinitions {
		if c.Priority == 0 {
			head = append(head, strings.ToUpper(c.Name))
		}
	}
	fmt.Fprintln(w, strings.Join(head, "\t"))
	for _, r := range t.Rows {
		var cells []string
		if namespaced {
			m, _ := objectMeta(r)
			cells = append(cells, m.Namespace)
		}
		for i, c := range t.ColumnDefinitions {
			if c.Priority != 0 || i >= len(r.Cells) {
				continue
			}
			cell := r.Cells[i]
			if cell == nil {
				cell = "<none>"
			}
			cells = append(cells, fmt.Sprint(cell))
		}
		fmt.Fprintln(w, strings.Join(cells, "\t"))
	}
	_ = w.Flush()
}

func objectMeta(r metav1.TableRow) (*metav1.PartialObjectMetadata, bool) {
	m := &metav1.PartialObjectMetadata{}
	if len(r.Object.Raw) == 0 {
		return m, false
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(r.Object.Raw); err != nil {
		return m, false
	}
	m.Namespace, m.Name = u.GetNamespace(), u.GetName()
	return m, true
}

func restClientFor(cfg *rest.Config, gv schema.GroupVersion) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	c.NegotiatedSerializer = tableSerializer
	return rest.RESTClientFor(c)
}
