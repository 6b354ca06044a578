package admission

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/manifests"
)

var (
	cl   client.Client
	cfg  *rest.Config
	root string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	var err error
	if root, err = manifests.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	crdDirs := manifests.CRDDirs(root, manifests.Components...)
	// kube-controller-manager computes ResourceQuota usage (TestTenantQuota).
	c, err := cluster.Start(ctx, cluster.Options{CRDDirectoryPaths: crdDirs, ControllerManager: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "admission tests need a real API server:", err)
		return 1
	}
	defer func() { _ = c.Stop() }()
	if cl, err = client.New(c.Config, client.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg = c.Config
	var policies []*unstructured.Unstructured
	// The admission policies and the roles for people that deploy/ ships.
	for _, comp := range []string{"verifier", "core-controller"} {
		var objs []*unstructured.Unstructured
		if objs, err = manifests.Render(filepath.Join(root, "deploy", comp)); err != nil {
			break
		}
		for _, o := range objs {
			switch {
			case strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy"),
				o.GetKind() == "ClusterRole" && (o.GetName() == "coffer-tenant" || o.GetName() == "coffer-viewer"):
				policies = append(policies, o)
			}
		}
	}
	if err == nil {
		err = manifests.Apply(ctx, cl, policies)
	}
	if err == nil {
		err = waitForSandboxPolicy(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "installing the verifier policies:", err)
		return 1
	}
	return m.Run()
}

// waitForSandboxPolicy returns once the API server enforces the ValidatingAdmissionPolicy (policies
// take effect asynchronously after creation).
func waitForSandboxPolicy(ctx context.Context) error {
	probe := mustObject(`
apiVersion: security.ugallu.io/v1alpha1
kind: BackupVerifyRun
metadata: {name: policy-probe, namespace: default}
spec: {backend: velero, backupRef: {name: b}, mode: full-restore, sandboxNamespace: prod}`)
	options := mustObject(`
apiVersion: backups.cozystack.io/v1alpha1
kind: RestoreJob
metadata: {name: policy-probe, namespace: default}
spec: {backupRef: {name: b}, options: {probe: [1]}}`)
	for _, probe := range []*unstructured.Unstructured{probe, options} {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			err := cl.Create(ctx, probe.DeepCopy())
			if err == nil {
				return false, cl.Delete(ctx, probe.DeepCopy())
			}
			return apierrors.IsInvalid(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy"), nil
		})
		if err != nil {
			return fmt.Errorf("%s %s: %w", probe.GetKind(), probe.GetName(), err)
		}
	}
	return nil
}

func mustObject(doc string) *unstructured.Unstructured {
	m := map[string]any{}
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		panic(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func namespace(t *testing.T) string {
	t.Helper()
	ns := mustObject(`{apiVersion: v1, kind: Namespace, metadata: {generateName: admission-}}`)
	require.NoError(t, cl.Create(context.Background(), ns))
	return ns.GetName()
}

// TestSamplesAccepted applies deploy/samples (the spec's examples among them) as written.
func TestSamplesAccepted(t *testing.T) {
	objs, err := manifests.Render(filepath.Join(root, "deploy", "samples"))
	require.NoError(t, err)
	kinds := map[string]bool{}
	for _, o := range objs {
		kinds[o.GetKind()] = true
	}
	for _, k := range []string{"Plan", "BackupClass", "BackupJob", "Backup", "RestoreJob", "VeleroBackupStrategy", "JobBackupStrategy", "BackupVerifyRun"} {
		assert.True(t, kinds[k], "deploy/samples has a %s", k)
	}
	require.NoError(t, manifests.Apply(context.Background(), cl, objs))
	run := mustObject(`{apiVersion: security.ugallu.io/v1alpha1, kind: BackupVerifyRun}`)
	require.NoError(t, cl.Get(context.Background(), client.ObjectKey{Namespace: "ugallu-system", Name: "nightly-velero"}, run))
	timeout, _, _ := unstructured.NestedString(run.Object, "spec", "timeout")
	assert.Equal(t, "10m", timeout, "the spec's example timeout is kept as written")
}

// createCase creates doc (in a fresh namespace when namespaced) and expects the exact rejection,
// or acceptance when want is empty.
type createCase struct {
	name string
	doc  string
	want []string // substrings of the rejection; empty means accepted
}

func TestCreateRules(t *testing.T) {
	const bvr = "apiVersion: security.ugallu.io/v1alpha1\nkind: BackupVerifyRun\nmetadata: {name: r}\n"
	const bvp = "apiVersion: security.ugallu.io/v1alpha1\nkind: BackupVerifyPolicy\nmetadata: {generateName: p-}\n"
	const plan = "apiVersion: backups.cozystack.io/v1alpha1\nkind: Plan\nmetadata: {name: p}\n"
	const planApp = "  applicationRef: {kind: VirtualMachine, name: vm1}\n  backupClassName: default\n"
	const class = "apiVersion: backups.cozystack.io/v1alpha1\nkind: BackupClass\nmetadata: {generateName: c-}\n"
	const job = "apiVersion: backups.cozystack.io/v1alpha1\nkind: BackupJob\nmetadata: {name: j}\n"
	const backup = "apiVersion: backups.cozystack.io/v1alpha1\nkind: Backup\nmetadata: {name: b}\n"
	const se = "apiVersion: security.ugallu.io/v1alpha1\nkind: SecurityEvent\nmetadata: {generateName: se-}\n"
	const result = "apiVersion: security.ugallu.io/v1alpha1\nkind: BackupVerifyResult\nmetadata: {name: res}\n"
	const strategyRef = "    strategyRef: {apiGroup: velerodriver.backups.cozystack.io, kind: VeleroBackupStrategy, name: s}\n"
	tests := []createCase{
		// BackupVerifyRun
		{"verify: spec example accepted", bvr + "spec: {backend: velero, backupRef: {name: nightly-2026-04-29, namespace: velero}, mode: full-restore, sandboxNamespace: bv-nightly-bvsandbox, timeout: 10m}", nil},
		{"verify: checksum-only without sandbox accepted", bvr + "spec: {backend: etcd-snapshot, backupRef: {name: snap.db}}", nil},
		{"verify: full-restore into prod rejected by policy", bvr + "spec: {backend: velero, backupRef: {name: b}, mode: full-restore, sandboxNamespace: prod}",
			[]string{"ValidatingAdmissionPolicy 'ugallu-backupverifyrun-sandbox-suffix'", `spec.sandboxNamespace "prod" must end with -bvsandbox`}},
		{"verify: suffix only as a prefix rejected", bvr + "spec: {backend: velero, backupRef: {name: b}, mode: full-restore, sandboxNamespace: bvsandbox-prod}",
			[]string{`spec.sandboxNamespace "bvsandbox-prod" must end with -bvsandbox`}},
		{"verify: checksum-only naming a non-sandbox rejected", bvr + "spec: {backend: velero, backupRef: {name: b}, sandboxNamespace: kube-system}",
			[]string{`spec.sandboxNamespace "kube-system" must end with -bvsandbox`}},
		{"verify: full-restore without sandbox rejected", bvr + "spec: {backend: velero, backupRef: {name: b}, mode: full-restore}",
			[]string{"sandboxNamespace is required for full-restore"}},
		{"verify: etcd full-restore rejected", bvr + "spec: {backend: etcd-snapshot, backupRef: {name: b}, mode: full-restore, sandboxNamespace: x-bvsandbox}",
			[]string{"full-restore is supported only by the velero and coffer backends"}},
		{"verify: etcd snapshot on a named node accepted", bvr + "spec: {backend: etcd-snapshot, backupRef: {name: snap.db, node: cp-2}}", nil},
		{"verify: a node for a velero backup rejected", bvr + "spec: {backend: velero, backupRef: {name: b, node: cp-2}}",
			[]string{"backupRef.node is only for the etcd-snapshot backend"}},
		{"verify: a node name that is none rejected", bvr + "spec: {backend: etcd-snapshot, backupRef: {name: snap.db, node: ../etc}}",
			[]string{"spec.backupRef.node: Invalid value"}},
		{"policy: velero backend accepted", bvp + "spec: {backend: velero, runNamespace: ops, velero: {backupSelector: {matchLabels: {velero.io/schedule-name: nightly}}}}", nil},
		{"policy: etcd backend without runNamespace rejected", bvp + "spec: {backend: etcd-snapshot}",
			[]string{"runNamespace is required for backends velero and etcd-snapshot"}},
		{"verify: coffer full-restore accepted", bvr + "spec: {backend: coffer, backupRef: {name: b}, mode: full-restore, sandboxNamespace: b-bvsandbox}", nil},
		{"verify: coffer full-restore without sandbox rejected", bvr + "spec: {backend: coffer, backupRef: {name: b}, mode: full-restore}",
			[]string{"sandboxNamespace is required for full-restore"}},
		{"policy: defaults accepted", bvp + "spec: {}", nil},
		{"policy: full-restore every 0 rejected", bvp + "spec: {fullRestore: {every: 0}}",
			[]string{"spec.fullRestore.every: Invalid value"}},
		{"policy: full-restore every required", bvp + "spec: {fullRestore: {}}",
			[]string{"spec.fullRestore.every: Required value"}},
		{"policy: no concurrency rejected", bvp + "spec: {maxConcurrentRuns: 0}",
			[]string{"spec.maxConcurrentRuns: Invalid value"}},
		{"policy: bad timeout rejected", bvp + "spec: {runTimeout: soon}",
			[]string{"spec.runTimeout: Invalid value"}},
		{"policy: name bounded", "apiVersion: security.ugallu.io/v1alpha1\nkind: BackupVerifyPolicy\nmetadata: {name: " + strings.Repeat("p", 64) + "}\nspec: {}",
			[]string{"must be at most 63 characters"}},
		{"verify: unknown backend rejected", bvr + "spec: {backend: restic, backupRef: {name: b}}",
			[]string{`spec.backend: Unsupported value: "restic"`}},
		{"verify: unknown mode rejected", bvr + "spec: {backend: velero, backupRef: {name: b}, mode: deep}",
			[]string{`spec.mode: Unsupported value: "deep"`}},
		{"verify: backupRef.name required", bvr + "spec: {backend: velero, backupRef: {namespace: velero}}",
			[]string{"spec.backupRef.name: Required value"}},
		{"verify: backend required", bvr + "spec: {backupRef: {name: b}}",
			[]string{"spec.backend: Required value"}},
		{"verify: sandbox name bounded", bvr + "spec: {backend: velero, backupRef: {name: b}, mode: full-restore, sandboxNamespace: " + strings.Repeat("a", 60) + "-bvsandbox}",
			[]string{"spec.sandboxNamespace: Too long"}},
		{"verify: timeout must be a duration", bvr + "spec: {backend: velero, backupRef: {name: b}, timeout: ten minutes}",
			[]string{"spec.timeout: Invalid value"}},
		// Plan
		{"plan: minimal accepted", plan + "spec:\n" + planApp + "  schedule: {cron: '@daily'}", nil},
		{"plan: cron required", plan + "spec:\n" + planApp + "  schedule: {type: cron}",
			[]string{"schedule.cron is required when schedule.type is cron"}},
		{"plan: unknown schedule type", plan + "spec:\n" + planApp + "  schedule: {type: interval, cron: '@daily'}",
			[]string{`spec.schedule.type: Unsupported value: "interval"`}},
		{"plan: unknown concurrency policy", plan + "spec:\n" + planApp + "  schedule: {cron: '@daily'}\n  concurrencyPolicy: Replace",
			[]string{`spec.concurrencyPolicy: Unsupported value: "Replace"`}},
		{"plan: class name required", plan + "spec:\n  applicationRef: {kind: VirtualMachine, name: vm1}\n  schedule: {cron: '@daily'}",
			[]string{"spec.backupClassName: Required value"}},
		{"plan: class name bounded", plan + "spec:\n  applicationRef: {kind: VirtualMachine, name: vm1}\n  backupClassName: " + strings.Repeat("c", 254) + "\n  schedule: {cron: '@daily'}",
			[]string{"spec.backupClassName: Too long"}},
		{"plan: application name non-empty", plan + "spec:\n  applicationRef: {kind: VirtualMachine, name: ''}\n  backupClassName: default\n  schedule: {cron: '@daily'}",
			[]string{"applicationRef.name must be 1-253 characters"}},
		{"plan: negative retention rejected", plan + "spec:\n" + planApp + "  schedule: {cron: '@daily'}\n  retention: {keepLast: -1}",
			[]string{"spec.retention.keepLast: Invalid value: -1"}},
		{"plan: keepLast 0 rejected", plan + "spec:\n" + planApp + "  schedule: {cron: '@daily'}\n  retention: {keepLast: 0}",
			[]string{"spec.retention.keepLast: Invalid value: 0", "greater than or equal to 1"}},
		{"plan: keepDaily 0 rejected", plan + "spec:\n" + planApp + "  schedule: {cron: '@daily'}\n  retention: {keepDaily: 0}",
			[]string{"spec.retention.keepDaily: Invalid value: 0", "greater than or equal to 1"}},
		{"plan: keepWeekly 0 rejected", plan + "spec:\n" + planApp + "  schedule: {cron: '@daily'}\n  retention: {keepWeekly: 0}",
			[]string{"spec.retention.keepWeekly: Invalid value: 0", "greater than or equal to 1"}},
		{"plan: keepMonthly 0 rejected", plan + "spec:\n" + planApp + "  schedule: {cron: '@daily'}\n  retention: {keepMonthly: 0}",
			[]string{"spec.retention.keepMonthly: Invalid value: 0", "greater than or equal to 1"}},
		{"plan: maxAge 0s rejected", plan + "spec:\n" + planApp + "  schedule: {cron: '@daily'}\n  retention: {maxAge: 0s}",
			[]string{"spec.retention.maxAge: Invalid value", "maxAge must be longer than zero"}},
		{"plan: maxAge of zero parts rejected", plan + "spec:\n" + planApp + "  schedule: {cron: '@daily'}\n  retention: {maxAge: 0h0m0.00s}",
			[]string{"maxAge must be longer than zero"}},
		{"plan: smallest retention accepted", plan + "spec:\n" + planApp + "  schedule: {cron: '@daily'}\n  retention: {keepLast: 1, keepDaily: 1, keepWeekly: 1, keepMonthly: 1, maxAge: 0.5h}", nil},
		{"plan: negative deadline rejected", plan + "spec:\n" + planApp + "  schedule: {cron: '@daily'}\n  startingDeadlineSeconds: -5",
			[]string{"spec.startingDeadlineSeconds: Invalid value: -5"}},
		{"plan: maxAge must be a duration", plan + "spec:\n" + planApp + "  schedule: {cron: '@daily'}\n  retention: {maxAge: 30d}",
			[]string{"spec.retention.maxAge: Invalid value"}},
		{"plan: cron bounded", plan + "spec:\n" + planApp + "  schedule: {cron: '" + strings.Repeat("*", 257) + "'}",
			[]string{"spec.schedule.cron: Too long"}},
		// BackupClass
		{"class: no strategies rejected", class + "spec: {strategies: []}",
			[]string{"spec.strategies: Invalid value", "at least 1 items"}},
		{"class: strategy without driver group rejected", class + "spec:\n  strategies:\n  - application: {kind: VirtualMachine}\n    strategyRef: {kind: VeleroBackupStrategy, name: s}",
			[]string{"strategyRef.apiGroup is required: it names the driver"}},
		{"class: application kind required", class + "spec:\n  strategies:\n  - application: {apiGroup: apps.cozystack.io}\n" + strategyRef,
			[]string{"spec.strategies[0].application.kind: Required value"}},
		// BackupJob and Backup
		{"job: application required", job + "spec: {backupClassName: default}",
			[]string{"spec.applicationRef: Required value"}},
		{"backup: strategy required", backup + "spec: {applicationRef: {kind: VirtualMachine, name: vm1}, takenAt: '2026-04-29T02:00:00Z'}",
			[]string{"spec.strategyRef: Required value"}},
		{"backup: takenAt required", backup + "spec:\n  applicationRef: {kind: VirtualMachine, name: vm1}\n" + strings.Replace(strategyRef, "    ", "  ", 1),
			[]string{"spec.takenAt: Required value"}},
		// SecurityEvent and BackupVerifyResult
		{"event: unknown severity rejected", se + "spec: {type: BackupVerifyStarted, class: Audit, severity: urgent, source: {kind: ugallu-backup-verify, name: ugallu-backup-verify}, clusterIdentity: {}, subject: {kind: Cluster, name: cluster, unresolved: true}, detectedAt: '2026-04-29T02:00:00Z'}",
			[]string{`spec.severity: Unsupported value: "urgent"`}},
		{"event: unknown class rejected", se + "spec: {type: BackupVerifyStarted, class: Gossip, severity: info, source: {kind: ugallu-backup-verify, name: ugallu-backup-verify}, clusterIdentity: {}, subject: {kind: Cluster, name: cluster, unresolved: true}, detectedAt: '2026-04-29T02:00:00Z'}",
			[]string{`spec.class: Unsupported value: "Gossip"`}},
		{"event: type must be UpperCamel", se + "spec: {type: backup verify, class: Audit, severity: info, source: {kind: ugallu-backup-verify, name: ugallu-backup-verify}, clusterIdentity: {}, subject: {kind: Cluster, name: cluster, unresolved: true}, detectedAt: '2026-04-29T02:00:00Z'}",
			[]string{"spec.type: Invalid value"}},
		{"result: finding code must be kebab", result + "spec: {runRef: {name: r}, backend: velero, backupRef: {name: b}, mode: checksum-only, findings: [{code: Bad Code, severity: high}]}",
			[]string{"spec.findings[0].code: Invalid value"}},
		{"result: finding severity enum", result + "spec: {runRef: {name: r}, backend: velero, backupRef: {name: b}, mode: checksum-only, findings: [{code: checksum-mismatch, severity: severe}]}",
			[]string{`spec.findings[0].severity: Unsupported value: "severe"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := mustObject(tt.doc)
			if obj.GetKind() != "BackupClass" && obj.GetKind() != "SecurityEvent" && obj.GetKind() != "BackupVerifyPolicy" {
				obj.SetNamespace(namespace(t))
			}
			err := cl.Create(context.Background(), obj)
			expectRejection(t, err, tt.want)
		})
	}
}

func expectRejection(t *testing.T, err error, want []string) {
	t.Helper()
	if len(want) == 0 {
		require.NoError(t, err)
		return
	}
	require.Error(t, err, "expected a rejection containing %q", want)
	assert.True(t, apierrors.IsInvalid(err), "rejected as Invalid, got %v", err)
	for _, w := range want {
		assert.Contains(t, err.Error(), w)
	}
}

// TestUpdateRules creates a valid object, mutates it, and expects the exact rejection.
func TestUpdateRules(t *testing.T) {
	tests := []struct {
		name   string
		doc    string
		mutate func(u *unstructured.Unstructured)
		status bool // the mutation goes through the status subresource
		want   []string
	}{
		{name: "backupjob spec immutable",
			doc: "apiVersion: backups.cozystack.io/v1alpha1\nkind: BackupJob\nmetadata: {name: j}\nspec: {applicationRef: {kind: VirtualMachine, name: vm1}, backupClassName: default}",
			mutate: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "other", "spec", "backupClassName")
			},
			want: []string{"spec is immutable"}},
		{name: "backupjob status writable",
			doc: "apiVersion: backups.cozystack.io/v1alpha1\nkind: BackupJob\nmetadata: {name: j}\nspec: {applicationRef: {kind: VirtualMachine, name: vm1}, backupClassName: default}",
			mutate: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "Running", "status", "phase")
			},
			status: true},
		{name: "backupjob phase enum",
			doc: "apiVersion: backups.cozystack.io/v1alpha1\nkind: BackupJob\nmetadata: {name: j}\nspec: {applicationRef: {kind: VirtualMachine, name: vm1}, backupClassName: default}",
			mutate: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "Done", "status", "phase")
			},
			status: true, want: []string{`status.phase: Unsupported value: "Done"`}},
		{name: "backup spec immutable",
			doc: "apiVersion: backups.cozystack.io/v1alpha1\nkind: Backup\nmetadata: {name: b}\nspec: {applicationRef: {kind: VirtualMachine, name: vm1}, strategyRef: {apiGroup: g.io, kind: K, name: s}, takenAt: '2026-04-29T02:00:00Z'}",
			mutate: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedStringMap(u.Object, map[string]string{"k": "v"}, "spec", "driverMetadata")
			},
			want: []string{"spec is immutable"}},
		{name: "backup checksum must be sha256",
			doc: "apiVersion: backups.cozystack.io/v1alpha1\nkind: Backup\nmetadata: {name: b}\nspec: {applicationRef: {kind: VirtualMachine, name: vm1}, strategyRef: {apiGroup: g.io, kind: K, name: s}, takenAt: '2026-04-29T02:00:00Z'}",
			mutate: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedMap(u.Object, map[string]any{"uri": "s3://b/k", "checksum": "md5:abc"}, "status", "artifact")
			},
			status: true, want: []string{"status.artifact.checksum: Invalid value"}},
		{name: "backup artifact with sha256 accepted",
			doc: "apiVersion: backups.cozystack.io/v1alpha1\nkind: Backup\nmetadata: {name: b}\nspec: {applicationRef: {kind: VirtualMachine, name: vm1}, strategyRef: {apiGroup: g.io, kind: K, name: s}, takenAt: '2026-04-29T02:00:00Z'}",
			mutate: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedMap(u.Object, map[string]any{"uri": "s3://b/k", "sizeBytes": int64(10), "checksum": "sha256:" + strings.Repeat("ab", 32)}, "status", "artifact")
				_ = unstructured.SetNestedField(u.Object, "Ready", "status", "phase")
			},
			status: true},
		{name: "restorejob spec immutable",
			doc: "apiVersion: backups.cozystack.io/v1alpha1\nkind: RestoreJob\nmetadata: {name: r}\nspec: {backupRef: {name: b}}",
			mutate: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "other", "spec", "backupRef", "name")
			},
			want: []string{"spec is immutable"}},
		{name: "verify run spec immutable",
			doc: "apiVersion: security.ugallu.io/v1alpha1\nkind: BackupVerifyRun\nmetadata: {name: r}\nspec: {backend: velero, backupRef: {name: b}}",
			mutate: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "other", "spec", "backupRef", "name")
			},
			want: []string{"spec is immutable"}},
		{name: "verify run timeout immutable",
			doc:    "apiVersion: security.ugallu.io/v1alpha1\nkind: BackupVerifyRun\nmetadata: {name: r}\nspec: {backend: velero, backupRef: {name: b}, timeout: 10m}",
			mutate: func(u *unstructured.Unstructured) { _ = unstructured.SetNestedField(u.Object, "1h", "spec", "timeout") },
			want:   []string{"spec is immutable"}},
		{name: "verify run status writable",
			doc: "apiVersion: security.ugallu.io/v1alpha1\nkind: BackupVerifyRun\nmetadata: {name: r}\nspec: {backend: velero, backupRef: {name: b}}",
			mutate: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "Running", "status", "phase")
				_ = unstructured.SetNestedField(u.Object, "2026-04-29T02:00:00Z", "status", "startTime")
			},
			status: true},
		{name: "verify result worst severity enum",
			doc: "apiVersion: security.ugallu.io/v1alpha1\nkind: BackupVerifyResult\nmetadata: {name: res}\nspec: {runRef: {name: r}, backend: velero, backupRef: {name: b}, mode: checksum-only}",
			mutate: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "severe", "status", "worstSeverity")
			},
			status: true, want: []string{`status.worstSeverity: Unsupported value: "severe"`}},
		{name: "security event immutable",
			doc: "apiVersion: security.ugallu.io/v1alpha1\nkind: SecurityEvent\nmetadata: {generateName: se-}\nspec: {type: BackupVerifyStarted, class: Audit, severity: info, source: {kind: ugallu-backup-verify, name: ugallu-backup-verify}, clusterIdentity: {}, subject: {kind: Cluster, name: cluster, unresolved: true}, detectedAt: '2026-04-29T02:00:00Z'}",
			mutate: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "critical", "spec", "severity")
			},
			want: []string{"spec is immutable"}},
		{name: "plan spec stays mutable",
			doc:    "apiVersion: backups.cozystack.io/v1alpha1\nkind: Plan\nmetadata: {name: p}\nspec: {applicationRef: {kind: VirtualMachine, name: vm1}, backupClassName: default, schedule: {cron: '@daily'}}",
			mutate: func(u *unstructured.Unstructured) { _ = unstructured.SetNestedField(u.Object, true, "spec", "suspend") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			obj := mustObject(tt.doc)
			if obj.GetKind() != "SecurityEvent" {
				obj.SetNamespace(namespace(t))
			}
			require.NoError(t, cl.Create(ctx, obj))
			tt.mutate(obj)
			var err error
			if tt.status {
				err = cl.Status().Update(ctx, obj)
			} else {
				err = cl.Update(ctx, obj)
			}
			expectRejection(t, err, tt.want)
		})
	}
}
