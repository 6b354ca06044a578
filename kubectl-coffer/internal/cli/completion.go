package cli

import (
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// completeNames completes the first argument with the names of the objects of list in the
// namespace of -n. Completion is best effort: an unreachable cluster completes nothing.
func (o *Options) completeNames(cmd *cobra.Command, args []string, list client.ObjectList) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	c, ns, err := o.clientAndNamespace()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	if err := c.List(cmd.Context(), list, client.InNamespace(ns)); err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return names(list), cobra.ShellCompDirectiveNoFileComp
}

// completeNamespaces completes a namespace flag.
func (o *Options) completeNamespaces(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
	c, err := o.Client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	list := &corev1.NamespaceList{}
	if err := c.List(cmd.Context(), list); err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return names(list), cobra.ShellCompDirectiveNoFileComp
}

func names(list client.ObjectList) []string {
	objs, err := meta.ExtractList(list)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		if m, err := meta.Accessor(o); err == nil {
			out = append(out, m.GetName())
		}
	}
	return out
}
