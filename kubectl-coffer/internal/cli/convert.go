package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/coffer-backup/coffer/kubectl-coffer/internal/convert"
)

func newConvertCommand(o *Options) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "convert-strategy -f FILE",
		Short: "Convert Cozystack's Velero and Job strategies, and the BackupClasses naming them, into Coffer's",
		Long: `Read YAML or JSON documents (a file, or - for standard input) and write them to standard output
with every strategy.backups.cozystack.io Velero turned into a VeleroBackupStrategy
(velerodriver.backups.cozystack.io), every Job into a JobBackupStrategy (jobdriver.backups.cozystack.io),
and every BackupClass naming them pointed at the converted ones. Template fields Cozystack's drivers
name otherwise (.Release.Name, .Backup.ApplicationRef.Name, ...) are renamed; what cannot be carried
over (a template function Coffer's templates lack, a strategy kind no Coffer driver runs) is said on
standard error. Other documents pass through unchanged. Nothing is sent to a cluster.`,
		Example: `  kubectl coffer convert-strategy -f strategies.yaml > coffer-strategies.yaml
  kubectl get velero.strategy.backups.cozystack.io,backupclasses -o yaml | kubectl coffer convert-strategy -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var in io.Reader = cmd.InOrStdin()
			if file != "-" {
				f, err := os.Open(file)
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			res, err := convert.Convert(in)
			if err != nil {
				return err
			}
			for _, n := range res.Notes {
				fmt.Fprintln(cmd.ErrOrStderr(), "note:", n)
			}
			_, err = cmd.OutOrStdout().Write(res.Out)
			return err
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "File to convert, or - for standard input.")
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}
