// Package cli is the command line of kubectl-coffer: the cobra commands, the cluster access (the
// kubectl flags of cli-runtime's ConfigFlags) and --wait. Objects are built by package runs and
// printed by package view.
package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	velerov1 "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
)

// Scheme knows the built-in kinds and every Coffer kind.
var Scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(backupsv1.AddToScheme(s))
	utilruntime.Must(velerov1.AddToScheme(s))
	utilruntime.Must(jobv1.AddToScheme(s))
	utilruntime.Must(securityv1.AddToScheme(s))
	return s
}()

// Options are what every command shares: the kubectl flags, the streams, the clock.
type Options struct {
	ConfigFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
	Clock clock.Clock
	// PollInterval is how often --wait reads the run.
	PollInterval time.Duration
	// Suffix draws the random suffix of a new object's name.
	Suffix func() string

	client    client.Client
	clientset kubernetes.Interface
}

// NewRootCommand is `kubectl coffer` with its subcommands.
func NewRootCommand(streams genericiooptions.IOStreams) *cobra.Command {
	return newRootCommand(&Options{
		ConfigFlags:  genericclioptions.NewConfigFlags(true),
		IOStreams:    streams,
		Clock:        clock.RealClock{},
		PollInterval: time.Second,
		Suffix:       func() string { return utilrand.String(5) },
	})
}

func newRootCommand(o *Options) *cobra.Command {
	streams := o.IOStreams
	cmd := &cobra.Command{
		Use:   "kubectl-coffer",
		Short: "Back up, restore and verify applications with Coffer",
		Long: `kubectl coffer drives Coffer (backups.cozystack.io): the state of every Plan, a backup now,
a restore, a verification of a Velero backup, what happened to a run, and Cozystack's own
strategies converted into Coffer's.`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl coffer"},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cmd.SetIn(streams.In)
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	o.ConfigFlags.AddFlags(cmd.PersistentFlags())
	_ = cmd.RegisterFlagCompletionFunc("namespace", o.completeNamespaces)
	cmd.AddCommand(
		newStatusCommand(o),
		newBackupCommand(o),
		newRestoreCommand(o),
		newVerifyCommand(o),
		newDescribeCommand(o),
		newConvertCommand(o),
	)
	return cmd
}

// Client is a client of the cluster the kubectl flags name.
func (o *Options) Client() (client.Client, error) {
	if o.client != nil {
		return o.client, nil
	}
	cfg, err := o.ConfigFlags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	mapper, err := o.ConfigFlags.ToRESTMapper()
	if err != nil {
		return nil, err
	}
	if o.client, err = client.New(cfg, client.Options{Scheme: Scheme, Mapper: mapper}); err != nil {
		return nil, err
	}
	return o.client, nil
}

// Clientset is a client-go clientset of that cluster, for what a generic client cannot do (logs).
func (o *Options) Clientset() (kubernetes.Interface, error) {
	if o.clientset != nil {
		return o.clientset, nil
	}
	cfg, err := o.ConfigFlags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	if o.clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	return o.clientset, nil
}

// Namespace is the namespace of -n, else the kubeconfig context's, else "default".
func (o *Options) Namespace() (string, error) {
	ns, _, err := o.ConfigFlags.ToRawKubeConfigLoader().Namespace()
	return ns, err
}

// output is the -o flag of commands that print objects.
type output struct{ format string }

func (f *output) addFlag(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&f.format, "output", "o", "", "Output format: json or yaml (the object, instead of the human-readable text).")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
}

func (f *output) validate() error {
	switch f.format {
	case "", "json", "yaml":
		return nil
	}
	return fmt.Errorf("unknown output format %q: use json or yaml", f.format)
}

// objects reports whether objects are printed instead of text.
func (f *output) objects() bool { return f.format != "" }

// printer prints objects in the chosen format, apiVersion and kind set from Scheme.
func (f *output) printer() printers.ResourcePrinter {
	var p printers.ResourcePrinter = &printers.YAMLPrinter{}
	if f.format == "json" {
		p = &printers.JSONPrinter{}
	}
	return printers.NewTypeSetter(Scheme).ToPrinter(p)
}

// progress is where text goes while objects are printed: stderr, so stdout parses.
func (o *Options) progress(f *output) io.Writer {
	if f.objects() {
		return o.ErrOut
	}
	return o.Out
}
