// Package kubectlcoffer drives the kubectl plugin, built from its module, against the golden stack
// (core-controller and driver-velero as processes, a real Velero and MinIO): `backup PLAN --wait`
// makes a BackupJob of the Plan that succeeds, `status` shows the Plan's last success, `restore
// BACKUP --wait` brings deleted data back, `verify BACKUP` creates the BackupVerifyRun the verifier
// expects (and the sandbox policy admits), `describe` explains a run core failed, and every
// `-o yaml` parses. A tenant (admin of the namespace only) backs up, restores and reads status; the
// real kubectl finds the plugin on the PATH.
package kubectlcoffer

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/golden"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/components"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

const (
	ns           = "shop"
	plan         = "shop-yearly"
	brokenPlan   = "shop-broken"
	tenant       = "alice"
	claimTimeout = 10 * time.Second
)

var catalog = map[string]string{"items": "tea,coffee,cocoa", "currency": "EUR"}

// plugin runs the kubectl-coffer binary against the stack.
type plugin struct {
	t          *testing.T
	bin        string
	kubeconfig string
	home       string
}

// run runs the plugin with args and returns stdout, stderr and the error of a non-zero exit.
func (p *plugin) run(ctx context.Context, args ...string) (string, string, error) {
	p.t.Helper()
	full := append([]string{"--kubeconfig=" + p.kubeconfig}, args...)
	if args[0] == "__complete" {
		// Completion takes the word to complete last.
		full = append(append(args[:len(args)-1:len(args)-1], "--kubeconfig="+p.kubeconfig), args[len(args)-1])
	}
	cmd := exec.CommandContext(ctx, p.bin, full...)
	cmd.Env = []string{"HOME=" + p.home, "PATH=" + os.Getenv("PATH")}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := cmd.Run()
	p.t.Logf("$ kubectl coffer %s   (%s, exit %d)\n%s%s", strings.Join(args, " "), time.Since(start).Round(100*time.Millisecond),
		cmd.ProcessState.ExitCode(), out.String(), errOut.String())
	return out.String(), errOut.String(), err
}

func TestKubectlCoffer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s, err := golden.Start(ctx, golden.Options{Say: t.Logf, Components: []components.Spec{
		{Module: "core-controller", Binary: "core-controller", Namespace: "coffer-system", Args: []string{"--driver-claim-timeout=" + claimTimeout.String()}},
		{Module: "driver-velero", Binary: "driver-velero", Namespace: "coffer-system"},
	}})
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	for _, c := range s.Components {
		t.Cleanup(func() { components.StopAndCheck(t, c) })
	}
	c := s.Client
	bin, err := components.Build(s.Root, "kubectl-coffer", "kubectl-coffer", t.TempDir())
	require.NoError(t, err)
	p := &plugin{t: t, bin: bin, kubeconfig: s.Cluster.Kubeconfig, home: t.TempDir()}
	setup(t, ctx, c)

	t.Log("1. backup PLAN --wait, as a tenant: a BackupJob of the Plan, run by driver-velero to success")
	out, _, err := p.run(ctx, "backup", plan, "-n", ns, "--wait", "--timeout=3m", "--as="+tenant)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^backupjob\.backups\.cozystack\.io/(\S+) created$`).FindStringSubmatch(out)
	require.NotNil(t, m, "the plugin names the BackupJob it created")
	job := &backupsv1.BackupJob{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: m[1]}, job))
	assert.Equal(t, backupsv1.BackupJobSucceeded, job.Status.Phase, job.Status.Message)
	assert.Equal(t, backupsv1.PlanLabelValue(plan), job.Labels[backupsv1.LabelPlan], "labelled for the Plan")
	require.NotNil(t, job.Spec.PlanRef)
	assert.Equal(t, plan, job.Spec.PlanRef.Name)
	assert.Equal(t, "golden", job.Spec.BackupClassName)
	planObj := &backupsv1.Plan{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: plan}, planObj))
	assert.True(t, metav1.IsControlledBy(job, planObj), "controlled by the Plan, like a tick's BackupJob")
	require.NotNil(t, job.Status.BackupRef)
	backup := &backupsv1.Backup{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: job.Status.BackupRef.Name}, backup))
	assert.Equal(t, backupsv1.BackupReady, backup.Status.Phase)
	assert.Regexp(t, `\] backupjob\.backups\.cozystack\.io/\S+ Succeeded`, out, "progress lines until the end")
	assert.Contains(t, out, "Backup "+backup.Name+": Ready, ", "the Backup it made")

	t.Log("2. status: the Plan with its last success and its Backup (core counts the BackupJob in the Plan's history)")
	var status string
	require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		status, _, err = p.run(ctx, "status", "-n", ns, "--as="+tenant)
		return err == nil && regexp.MustCompile(plan+` .* ago .*`+backup.Name+` +Ready`).MatchString(status), nil
	}), "status shows the Plan's last success and Backup: %s", status)
	assert.Regexp(t, `(?m)^PLAN +SCHEDULE +LAST SUCCESS +NEXT +ACTIVE +LAST BACKUP +PHASE +RESTORABLE$`, status)
	assert.Regexp(t, `(?m)^`+plan+` +0 0 1 1 \* +\d+s ago +in \S+ +- +`+backup.Name+` +Ready +-$`, status, "no Backup proven restorable yet")
	all, _, err := p.run(ctx, "status", "-A")
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^`+ns+` +`+brokenPlan+` +0 0 1 1 \* +never `, all)
	assert.Regexp(t, `(?m)^`+ns+`/`+brokenPlan+`: Ready=False BackupClassNotFound: BackupClass "missing" not found`, all, "a Plan that is not Ready says why")

	out, _, err = p.run(ctx, "__complete", "backup", "-n", ns, "")
	require.NoError(t, err)
	assert.Equal(t, []string{brokenPlan, plan, ":4"}, strings.Fields(out), "shell completion names the Plans")

	t.Log("3. restore BACKUP --wait, as the tenant: the deleted ConfigMap comes back with its data")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "catalog", Namespace: ns}}
	require.NoError(t, c.Delete(ctx, cm))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}))
	out, _, err = p.run(ctx, "restore", backup.Name, "-n", ns, "--wait", "--timeout=3m", "--as="+tenant)
	require.NoError(t, err)
	assert.Regexp(t, `\] restorejob\.backups\.cozystack\.io/\S+ Succeeded`, out)
	assert.Regexp(t, `Restored into `+ns+`: [1-9]\d* restored, `, out)
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(cm), cm), "the ConfigMap is back")
	assert.Equal(t, catalog, cm.Data, "with its data")

	t.Log("4. verify BACKUP: a BackupVerifyRun of the Velero backup (the verifier does not run here); --full gets a sandbox the policy admits")
	veleroBackup := backup.Spec.DriverMetadata["veleroBackupName"]
	require.NotEmpty(t, veleroBackup)
	out, _, err = p.run(ctx, "verify", backup.Name, "-n", ns)
	require.NoError(t, err)
	m = regexp.MustCompile(`(?m)^backupverifyrun\.security\.ugallu\.io/(\S+) created$`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	run := &securityv1.BackupVerifyRun{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "ugallu-system", Name: m[1]}, run))
	assert.Equal(t, securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendVelero, Mode: securityv1.ModeChecksumOnly,
		BackupRef: securityv1.BackupRef{Name: veleroBackup, Namespace: velerostack.Namespace},
		Timeout:   &metav1.Duration{Duration: 15 * time.Minute}}, run.Spec, "the timeout is the CRD's default, as ugallu's")
	out, _, err = p.run(ctx, "verify", backup.Name, "-n", ns, "--full", "-o", "yaml")
	require.NoError(t, err, "admitted by the sandbox policy")
	full := &securityv1.BackupVerifyRun{}
	require.NoError(t, yaml.UnmarshalStrict([]byte(out), full), "-o yaml parses")
	assert.Equal(t, securityv1.ModeFullRestore, full.Spec.Mode)
	assert.Regexp(t, `^`+ns+`-[a-z0-9]{5}-bvsandbox$`, full.Spec.SandboxNamespace)
	assert.Equal(t, veleroBackup, full.Spec.BackupRef.Name)
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(full), full), "created")
	jobBackup := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "by-job-driver", Namespace: ns}, Spec: backupsv1.BackupSpec{
		ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"}, TakenAt: metav1.Now(),
		StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr.To(jobapi.Group), Kind: jobapi.Kind, Name: "volume-tar"}}}
	require.NoError(t, c.Create(ctx, jobBackup))
	_, errOut, err := p.run(ctx, "verify", jobBackup.Name, "-n", ns)
	require.Error(t, err, "a Backup of another driver is refused")
	assert.Contains(t, errOut, "was made by a JobBackupStrategy (jobdriver.backups.cozystack.io), and the verifier verifies Velero backups only")

	t.Log("5. backup --wait of a Plan whose class is missing exits non-zero; describe prints the reason and message core wrote")
	out, errOut, err = p.run(ctx, "backup", brokenPlan, "-n", ns, "--wait", "--timeout=2m", "--as="+tenant)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 1, exit.ExitCode())
	assert.Contains(t, errOut, "Failed (BackupClassNotFound: ")
	m = regexp.MustCompile(`(?m)^backupjob\.backups\.cozystack\.io/(\S+) created$`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	failed := &backupsv1.BackupJob{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: m[1]}, failed))
	require.Equal(t, backupsv1.BackupJobFailed, failed.Status.Phase)
	out, _, err = p.run(ctx, "describe", failed.Name, "-n", ns, "--as="+tenant)
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^Phase: +Failed$`, out)
	assert.Regexp(t, `(?m)^Reason: +BackupClassNotFound$`, out)
	assert.Regexp(t, `(?m)^Message: +`+regexp.QuoteMeta(strings.Join(strings.Fields(failed.Status.Message), " "))+`$`, out)
	assert.Regexp(t, `(?m)^  Accepted +False +BackupClassNotFound `, out, "the conditions")
	assert.Regexp(t, `(?m)^Plan: +`+brokenPlan+` \(on demand\)$`, out)

	t.Log("6. describe of the Velero run names the Velero Backup and its phase; -o yaml parses")
	out, _, err = p.run(ctx, "describe", "bj/"+job.Name, "-n", ns)
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^  velero\.io Backup `+velerostack.Namespace+`/\S+: Completed$`, out)
	assert.Regexp(t, `(?m)^Claimed by: +coffer-driver-velero$`, out)
	out, _, err = p.run(ctx, "describe", job.Name, "-n", ns, "-o", "yaml")
	require.NoError(t, err)
	described := &backupsv1.BackupJob{}
	require.NoError(t, yaml.UnmarshalStrict([]byte(out), described))
	assert.Equal(t, job.UID, described.UID)
	out, _, err = p.run(ctx, "status", "-A", "-o", "yaml")
	require.NoError(t, err)
	list := &corev1.List{}
	require.NoError(t, yaml.UnmarshalStrict([]byte(out), list))
	assert.Len(t, list.Items, 2, "two Plans")

	t.Log("7. the real kubectl runs the plugin from the PATH")
	assets, err := cluster.AssetsDir()
	require.NoError(t, err)
	kubectl := exec.CommandContext(ctx, filepath.Join(assets, "kubectl"), "coffer", "status", "-n", ns, "--kubeconfig="+s.Cluster.Kubeconfig)
	kubectl.Env = []string{"HOME=" + p.home, "PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH")}
	b, err := kubectl.CombinedOutput()
	t.Logf("$ kubectl coffer status -n %s\n%s", ns, b)
	require.NoError(t, err, "%s lacks kubectl? run `make testbin`", assets)
	assert.Contains(t, string(b), backup.Name)

	for name, comp := range s.Components {
		assert.False(t, comp.Exited(), "%s is running", name)
	}
}

// setup makes the Shop, a Velero strategy and class, a Plan that does not fire during the test and
// one whose class is missing, and gives the tenant the admin role in the namespace.
func setup(t *testing.T, ctx context.Context, c client.Client) {
	shop := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Shop",
		"metadata": map[string]any{"name": "shop", "namespace": ns}, "spec": map[string]any{"size": "small"}}}
	strategy := corev1.TypedLocalObjectReference{APIGroup: ptr.To(veleroapi.Group), Kind: veleroapi.Kind, Name: "shop-namespace"}
	app := corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		shop,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "catalog", Namespace: ns}, Data: catalog},
		&veleroapi.VeleroBackupStrategy{ObjectMeta: metav1.ObjectMeta{Name: strategy.Name}, Spec: veleroapi.VeleroBackupStrategySpec{
			BackupTemplate: veleroapi.VeleroTemplate{Spec: runtime.RawExtension{Raw: []byte(`{"includedNamespaces": ["{{ .Application.metadata.namespace }}"], "snapshotVolumes": false}`)}},
		}},
		&backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: "golden"}, Spec: backupsv1.BackupClassSpec{Strategies: []backupsv1.BackupClassStrategy{{
			Application: backupsv1.ApplicationSelector{Kind: "Shop"}, StrategyRef: strategy,
			Parameters: map[string]string{"backupStorageLocationName": velerostack.BSLName},
		}}}},
		&backupsv1.Plan{ObjectMeta: metav1.ObjectMeta{Name: plan, Namespace: ns}, Spec: backupsv1.PlanSpec{
			ApplicationRef: app, BackupClassName: "golden", Schedule: backupsv1.PlanSchedule{Cron: "0 0 1 1 *"}}},
		&backupsv1.Plan{ObjectMeta: metav1.ObjectMeta{Name: brokenPlan, Namespace: ns}, Spec: backupsv1.PlanSpec{
			ApplicationRef: app, BackupClassName: "missing", Schedule: backupsv1.PlanSchedule{Cron: "0 0 1 1 *"}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice-admin", Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: tenant}}},
	} {
		require.NoError(t, c.Create(ctx, o), "creating %T %s", o, o.GetName())
	}
}
