// Package kubectlnames proves the names users type with a real kubectl (built from source by
// `make testbin`, like the API server) against a real API server holding Coffer's and Velero's
// CRDs: `kubectl get coffer -A` lists every Coffer kind, `kubectl get backups NAME` gets a Coffer
// Backup (no category shadows the plural), and every short name resolves to its kind and clashes
// with nothing Kubernetes or Velero serves.
package kubectlnames

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	velerov1 "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

// Category is the one category of every Coffer kind.
const Category = "coffer"

// kinds are the Coffer kinds with the short names docs/kubectl-coffer.md lists.
var kinds = []struct {
	gvr    schema.GroupVersionResource
	kind   string
	shorts []string
}{
	{backupsv1.GroupVersion.WithResource("plans"), "Plan", []string{"bplan"}},
	{backupsv1.GroupVersion.WithResource("backupclasses"), "BackupClass", []string{"bclass"}},
	{backupsv1.GroupVersion.WithResource("backupjobs"), "BackupJob", []string{"bj"}},
	{backupsv1.GroupVersion.WithResource("backups"), "Backup", []string{"bk"}},
	{backupsv1.GroupVersion.WithResource("restorejobs"), "RestoreJob", []string{"rj"}},
	{velerov1.GroupVersion.WithResource("velerobackupstrategies"), "VeleroBackupStrategy", []string{"vbs"}},
	{jobv1.GroupVersion.WithResource("jobbackupstrategies"), "JobBackupStrategy", []string{"jbs"}},
	{securityv1.GroupVersion.WithResource("backupverifyruns"), "BackupVerifyRun", []string{"bvr"}},
	{securityv1.GroupVersion.WithResource("backupverifyresults"), "BackupVerifyResult", []string{"bvres"}},
	{securityv1.GroupVersion.WithResource("securityevents"), "SecurityEvent", []string{"se"}},
	{securityv1.GroupVersion.WithResource("backupverifypolicies"), "BackupVerifyPolicy", []string{"bvp"}},
}

// sampleBackup is the Backup deploy/samples ships.
const (
	sampleNamespace = "tenant-demo"
	sampleBackup    = "vm1-29623800"
)

func TestKubectlNames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	assets, err := cluster.AssetsDir()
	require.NoError(t, err)
	kubectlBin := filepath.Join(assets, "kubectl")
	_, err = os.Stat(kubectlBin)
	require.NoError(t, err, "%s lacks kubectl: run `make testbin`", assets)
	veleroAssets, err := velerostack.Assets()
	require.NoError(t, err)

	root, err := manifests.RepoRoot()
	require.NoError(t, err)
	crdDirs := manifests.CRDDirs(root, manifests.Components...)
	c, err := cluster.Start(ctx, cluster.Options{CRDDirectoryPaths: crdDirs})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop() })
	cl, err := client.New(c.Config, client.Options{Scheme: cluster.Scheme})
	require.NoError(t, err)
	require.NoError(t, velerostack.InstallCRDs(ctx, cl, filepath.Join(veleroAssets, "velero")), "installing Velero's CRDs")

	// One object of every kind: the samples, and the two kinds only the verifier writes.
	samples, err := manifests.Render(filepath.Join(root, "deploy", "samples"))
	require.NoError(t, err)
	require.NoError(t, manifests.Apply(ctx, cl, samples))
	require.NoError(t, cl.Create(ctx, &securityv1.BackupVerifyResult{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly-velero", Namespace: "ugallu-system"},
		Spec: securityv1.BackupVerifyResultSpec{RunRef: &securityv1.RunReference{Name: "nightly-velero"},
			Backend: securityv1.BackendVelero, BackupRef: &securityv1.BackupRef{Name: "vm1-29623800-5f3a"}, Mode: securityv1.ModeChecksumOnly},
	}))
	require.NoError(t, cl.Create(ctx, &securityv1.SecurityEvent{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly-velero-started"},
		Spec: securityv1.SecurityEventSpec{Type: securityv1.EventBackupVerifyStarted, Class: securityv1.ClassCompliance,
			Severity: securityv1.SeverityInfo, Source: securityv1.SourceRef{Kind: "ugallu-backup-verify", Name: "ugallu-backup-verify"}, DetectedAt: metav1.Now(),
			Subject: securityv1.EventSubject{Kind: securityv1.SubjectKindCluster, Namespace: "ugallu-system", Name: "cluster", Unresolved: true}},
	}))

	home := t.TempDir()
	kubectl := func(args ...string) (string, error) {
		t.Helper()
		cmd := exec.CommandContext(ctx, kubectlBin, append([]string{"--cache-dir=" + filepath.Join(home, "cache")}, args...)...)
		cmd.Env = []string{"KUBECONFIG=" + c.Kubeconfig, "HOME=" + home, "PATH=" + os.Getenv("PATH")}
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		shown := out.String()
		if lines := strings.SplitAfter(shown, "\n"); len(lines) > 40 {
			shown = strings.Join(lines[:3], "") + "...\n"
		}
		t.Logf("$ kubectl %s\n%s%s", strings.Join(args, " "), shown, errOut.String())
		if err != nil {
			return out.String(), &kubectlError{err: err, stderr: errOut.String()}
		}
		return out.String(), nil
	}

	t.Run("discovery: one category, short names that clash with nothing", func(t *testing.T) {
		_, lists, err := discovery.NewDiscoveryClientForConfigOrDie(c.Config).ServerGroupsAndResources()
		require.NoError(t, err)
		ours := map[schema.GroupResource]bool{}
		for _, k := range kinds {
			ours[k.gvr.GroupResource()] = true
		}
		// Every name kubectl resolves, by the resource that owns it.
		owners := map[string][]string{}
		found := map[schema.GroupResource]metav1.APIResource{}
		for _, l := range lists {
			gv, err := schema.ParseGroupVersion(l.GroupVersion)
			require.NoError(t, err)
			for _, r := range l.APIResources {
				if strings.Contains(r.Name, "/") {
					continue
				}
				gr := schema.GroupResource{Group: gv.Group, Resource: r.Name}
				if _, seen := found[gr]; seen {
					continue
				}
				found[gr] = r
				id := gr.String()
				for _, n := range append([]string{r.Name, r.SingularName}, r.ShortNames...) {
					if n != "" {
						owners[n] = append(owners[n], id)
					}
				}
				for _, cat := range r.Categories {
					owners["category "+cat] = append(owners["category "+cat], id)
				}
			}
		}
		for _, k := range kinds {
			r, ok := found[k.gvr.GroupResource()]
			if !assert.True(t, ok, "%s is served", k.gvr.GroupResource()) {
				continue
			}
			assert.Equal(t, []string{Category}, r.Categories, "%s: categories", k.kind)
			assert.ElementsMatch(t, k.shorts, r.ShortNames, "%s: short names", k.kind)
			for _, s := range k.shorts {
				assert.Equal(t, []string{k.gvr.GroupResource().String()}, owners[s], "short name %q is %s's alone", s, k.kind)
				assert.Empty(t, owners["category "+s], "short name %q is no category", s)
			}
			assert.Empty(t, owners["category "+r.Name], "the plural %q is no category (kubectl expands categories first)", r.Name)
		}
		assert.Empty(t, owners[Category], "category %q is no resource name", Category)
		var members []string
		for gr, r := range found {
			if slices.Contains(r.Categories, Category) {
				assert.True(t, ours[gr], "only Coffer kinds are in category %s, not %s", Category, gr)
				members = append(members, gr.String())
			}
		}
		assert.Len(t, members, len(kinds), "every Coffer kind is in category %s: %v", Category, members)
		var velero []string
		for gr, r := range found {
			if gr.Group == "velero.io" {
				velero = append(velero, r.ShortNames...)
			}
		}
		slices.Sort(velero)
		t.Logf("Velero's short names: %v", velero)
	})

	t.Run("kubectl get coffer -A lists every kind", func(t *testing.T) {
		out, err := kubectl("get", Category, "-A", "-o", "name")
		require.NoError(t, err)
		for _, k := range kinds {
			assert.Contains(t, out, strings.ToLower(k.kind)+"."+k.gvr.Group+"/", "%s listed", k.kind)
		}
		out, err = kubectl("get", Category, "-A")
		require.NoError(t, err)
		assert.Contains(t, out, sampleBackup)
	})

	t.Run("kubectl get backups NAME gets the Coffer Backup", func(t *testing.T) {
		out, err := kubectl("get", "backups", sampleBackup, "-n", sampleNamespace)
		require.NoError(t, err)
		assert.Contains(t, out, sampleBackup)
		out, err = kubectl("get", "backups", sampleBackup, "-n", sampleNamespace, "-o", "name")
		require.NoError(t, err)
		assert.Equal(t, "backup.backups.cozystack.io/"+sampleBackup, strings.TrimSpace(out))
		// Velero's kind stays reachable by its full name.
		_, err = kubectl("get", "backups.velero.io", "-A")
		require.NoError(t, err)
	})

	t.Run("every short name resolves to its kind", func(t *testing.T) {
		for _, k := range kinds {
			for _, s := range k.shorts {
				out, err := kubectl("get", s, "-A", "-o", "name")
				if assert.NoError(t, err, "kubectl get %s", s) {
					lines := strings.Fields(out)
					if assert.NotEmpty(t, lines, "kubectl get %s lists the %s", s, k.kind) {
						for _, l := range lines {
							assert.True(t, strings.HasPrefix(l, strings.ToLower(k.kind)+"."+k.gvr.Group+"/"), "kubectl get %s: %s is a %s", s, l, k.kind)
						}
					}
				}
				out, err = kubectl("explain", s)
				if assert.NoError(t, err, "kubectl explain %s", s) {
					assert.Contains(t, out, "KIND:       "+k.kind)
					assert.Contains(t, out, "GROUP:      "+k.gvr.Group)
				}
			}
		}
	})
}

// kubectlError carries kubectl's stderr into the failure message.
type kubectlError struct {
	err    error
	stderr string
}

func (e *kubectlError) Error() string { return e.err.Error() + ": " + strings.TrimSpace(e.stderr) }
