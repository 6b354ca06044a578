//go:build e2e

// Package badinput feeds wrong objects to the golden stack (all four components running as
// processes under their ServiceAccounts) and checks the two lines of defence: the API server
// rejects what the schemas, CEL rules and admission policy can see, naming the field; what only
// a component can see ends in a False condition or a Failed phase with an UpperCamel reason and a
// message saying what to do. Afterwards every component is still running and none is busy: a
// failing object is not requeued in a hot loop.
package badinput

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/golden"
	"github.com/coffer-backup/coffer/e2e/harness/components"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

const (
	ns           = "badinput"
	verifyNS     = "ugallu-system"
	claimTimeout = 20 * time.Second
)

var upperCamel = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)

func TestBadInputThroughTheRealStack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir := t.TempDir()
	snapshots := filepath.Join(dir, "etcd-snapshots")
	require.NoError(t, os.MkdirAll(snapshots, 0o700))
	specs := golden.Default(snapshots)
	require.Equal(t, "core-controller", specs[0].Binary)
	specs[0].Args = []string{"--driver-claim-timeout=" + claimTimeout.String()}
	s, err := golden.Start(ctx, golden.Options{Dir: dir, Say: t.Logf, Components: specs})
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	for _, c := range s.Components {
		t.Cleanup(func() { components.StopAndCheck(t, c) })
	}
	c := s.Client
	for _, doc := range []string{
		`{apiVersion: v1, kind: Namespace, metadata: {name: ` + ns + `}}`,
		`{apiVersion: apps.cozystack.io/v1alpha1, kind: Shop, metadata: {name: shop, namespace: ` + ns + `}, spec: {size: small}}`,
	} {
		require.NoError(t, c.Create(ctx, object(doc)))
	}
	waitForSandboxPolicy(t, ctx, c)

	t.Run("the API server rejects invalid objects, naming the field", func(t *testing.T) { rejected(t, ctx, c) })
	t.Run("runtime errors end in False conditions and Failed phases with reasons", func(t *testing.T) { runtimeErrors(t, ctx, c) })
	t.Run("every component still runs and none loops", func(t *testing.T) { quiet(t, s) })
}

// object decodes a YAML document into an unstructured object.
func object(doc string) *unstructured.Unstructured {
	m := map[string]any{}
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		panic(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// waitForSandboxPolicy returns once the verifier's ValidatingAdmissionPolicy is enforced (policies
// take effect a moment after they are created). The probe is a checksum-only run of a backup that
// does not exist, harmless if the verifier sees it before it is deleted.
func waitForSandboxPolicy(t *testing.T, ctx context.Context, c client.Client) {
	probe := object(`{apiVersion: security.ugallu.io/v1alpha1, kind: BackupVerifyRun, metadata: {name: policy-probe, namespace: ` + ns + `},
spec: {backend: velero, backupRef: {name: policy-probe-none}, sandboxNamespace: kube-system}}`)
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.Create(ctx, probe.DeepCopy())
		if err == nil {
			return false, c.Delete(ctx, probe.DeepCopy())
		}
		return apierrors.IsInvalid(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy"), nil
	})
	require.NoError(t, err, "waiting for the sandbox admission policy to be enforced")
}

const (
	planHead    = "apiVersion: backups.cozystack.io/v1alpha1\nkind: Plan\nmetadata: {name: bad-plan}\n"
	planApp     = "  applicationRef: {kind: Shop, name: shop}\n  backupClassName: default\n"
	classHead   = "apiVersion: backups.cozystack.io/v1alpha1\nkind: BackupClass\nmetadata: {name: bad-class}\n"
	jobHead     = "apiVersion: backups.cozystack.io/v1alpha1\nkind: BackupJob\nmetadata: {name: bad-job}\n"
	restoreHead = "apiVersion: backups.cozystack.io/v1alpha1\nkind: RestoreJob\nmetadata: {name: bad-restore}\n"
	backupHead  = "apiVersion: backups.cozystack.io/v1alpha1\nkind: Backup\nmetadata: {name: bad-backup}\n"
	veleroHead  = "apiVersion: velerodriver.backups.cozystack.io/v1alpha1\nkind: VeleroBackupStrategy\nmetadata: {name: bad-velero}\n"
	veleroTmpl  = "  backupTemplate: {spec: {includedNamespaces: ['{{ .Application.metadata.namespace }}']}}\n"
	jobStrHead  = "apiVersion: jobdriver.backups.cozystack.io/v1alpha1\nkind: JobBackupStrategy\nmetadata: {name: bad-job-strategy}\n"
	jobStrTmpl  = "  template: {spec: {containers: [{name: c, image: busybox}]}}\n"
	runHead     = "apiVersion: security.ugallu.io/v1alpha1\nkind: BackupVerifyRun\nmetadata: {name: bad-run}\n"
)

// rejected applies one or more invalid objects of every kind and expects each to be refused as
// Invalid (or Forbidden) with a message that names the field.
func rejected(t *testing.T, ctx context.Context, c client.Client) {
	creates := []struct {
		name string
		doc  string
		want []string
	}{
		{"Plan: cron missing", planHead + "spec:\n" + planApp + "  schedule: {type: cron}",
			[]string{"spec.schedule", "schedule.cron is required when schedule.type is cron"}},
		{"Plan: unknown concurrency policy", planHead + "spec:\n" + planApp + "  schedule: {cron: '@daily'}\n  concurrencyPolicy: Replace",
			[]string{`spec.concurrencyPolicy: Unsupported value: "Replace"`}},
		{"Plan: negative starting deadline", planHead + "spec:\n" + planApp + "  schedule: {cron: '@daily'}\n  startingDeadlineSeconds: -5",
			[]string{"spec.startingDeadlineSeconds: Invalid value: -5"}},
		{"Plan: maxAge in days", planHead + "spec:\n" + planApp + "  schedule: {cron: '@daily'}\n  retention: {maxAge: 30d}",
			[]string{"spec.retention.maxAge: Invalid value"}},
		{"Plan: empty time zone", planHead + "spec:\n" + planApp + "  schedule: {cron: '@daily', timeZone: ''}",
			[]string{"spec.schedule.timeZone: Invalid value"}},
		{"Plan: no application", planHead + "spec:\n  backupClassName: default\n  schedule: {cron: '@daily'}",
			[]string{"spec.applicationRef: Required value"}},
		{"BackupClass: no strategies", classHead + "spec: {strategies: []}",
			[]string{"spec.strategies: Invalid value", "at least 1 items"}},
		{"BackupClass: strategy without driver group", classHead + "spec:\n  strategies:\n  - application: {kind: Shop}\n    strategyRef: {kind: VeleroBackupStrategy, name: s}",
			[]string{"spec.strategies[0].strategyRef", "strategyRef.apiGroup is required: it names the driver"}},
		{"BackupClass: application without kind", classHead + "spec:\n  strategies:\n  - application: {apiGroup: apps.cozystack.io}\n    strategyRef: {apiGroup: velerodriver.backups.cozystack.io, kind: VeleroBackupStrategy, name: s}",
			[]string{"spec.strategies[0].application.kind: Required value"}},
		{"BackupJob: no application", jobHead + "spec: {backupClassName: default}",
			[]string{"spec.applicationRef: Required value"}},
		{"BackupJob: empty class name", jobHead + "spec: {applicationRef: {kind: Shop, name: shop}, backupClassName: ''}",
			[]string{"spec.backupClassName: Invalid value"}},
		{"BackupJob: application without kind", jobHead + "spec: {applicationRef: {kind: '', name: shop}, backupClassName: default}",
			[]string{"spec.applicationRef", "applicationRef.kind must be 1-63 characters"}},
		{"RestoreJob: no backupRef", restoreHead + "spec: {targetApplicationRef: {kind: Shop, name: shop}}",
			[]string{"spec.backupRef: Required value"}},
		{"RestoreJob: empty backup name", restoreHead + "spec: {backupRef: {name: ''}}",
			[]string{"spec.backupRef", "backupRef.name must be 1-253 characters"}},
		{"Backup: no strategyRef", backupHead + "spec: {applicationRef: {kind: Shop, name: shop}, takenAt: '2026-04-29T02:00:00Z'}",
			[]string{"spec.strategyRef: Required value"}},
		{"Backup: no takenAt", backupHead + "spec: {applicationRef: {kind: Shop, name: shop}, strategyRef: {apiGroup: velerodriver.backups.cozystack.io, kind: VeleroBackupStrategy, name: s}}",
			[]string{"spec.takenAt: Required value"}},
		{"VeleroBackupStrategy: no backupTemplate", veleroHead + "spec: {veleroNamespace: velero}",
			[]string{"spec.backupTemplate: Required value"}},
		{"VeleroBackupStrategy: deadline in words", veleroHead + "spec:\n" + veleroTmpl + "  deadline: 1 day",
			[]string{"spec.deadline: Invalid value"}},
		{"VeleroBackupStrategy: Velero namespace too long", veleroHead + "spec:\n" + veleroTmpl + "  veleroNamespace: " + strings.Repeat("v", 64),
			[]string{"spec.veleroNamespace: Too long"}},
		{"JobBackupStrategy: no template", jobStrHead + "spec: {backoffLimit: 1}",
			[]string{"spec.template: Required value"}},
		{"JobBackupStrategy: backoffLimit too high", jobStrHead + "spec:\n" + jobStrTmpl + "  backoffLimit: 11",
			[]string{"spec.backoffLimit: Invalid value: 11"}},
		{"JobBackupStrategy: zero activeDeadlineSeconds", jobStrHead + "spec:\n" + jobStrTmpl + "  activeDeadlineSeconds: 0",
			[]string{"spec.activeDeadlineSeconds: Invalid value: 0"}},
		{"BackupVerifyRun: full restore into prod", runHead + "spec: {backend: velero, backupRef: {name: b}, mode: full-restore, sandboxNamespace: prod}",
			[]string{"ValidatingAdmissionPolicy", `spec.sandboxNamespace "prod" must end with -bvsandbox`}},
		{"BackupVerifyRun: sandbox is a system namespace", runHead + "spec: {backend: velero, backupRef: {name: b}, sandboxNamespace: kube-system}",
			[]string{`spec.sandboxNamespace "kube-system" must end with -bvsandbox`}},
		{"BackupVerifyRun: unknown mode", runHead + "spec: {backend: velero, backupRef: {name: b}, mode: deep}",
			[]string{`spec.mode: Unsupported value: "deep"`}},
		{"BackupVerifyRun: full restore without sandbox", runHead + "spec: {backend: velero, backupRef: {name: b}, mode: full-restore}",
			[]string{"spec", "sandboxNamespace is required for full-restore"}},
		{"BackupVerifyRun: etcd full restore", runHead + "spec: {backend: etcd-snapshot, backupRef: {name: b}, mode: full-restore, sandboxNamespace: x-bvsandbox}",
			[]string{"spec", "full-restore is supported only by the velero and coffer backends"}},
		{"BackupVerifyRun: no backup name", runHead + "spec: {backend: velero, backupRef: {namespace: velero}}",
			[]string{"spec.backupRef.name: Required value"}},
		// ugallu's smoke scenarios 1 and 2 (ninsun-labs/ugallu hack/backup-verify-smoke.sh), as written.
		{"ugallu smoke S1: backend restic", runHead + "spec: { backend: restic, backupRef: { name: x }, mode: checksum-only, timeout: 5m }",
			[]string{`spec.backend: Unsupported value: "restic"`}},
		{"ugallu smoke S2: full-restore without sandbox", runHead + "spec: { backend: velero, backupRef: { name: x, namespace: velero }, mode: full-restore, timeout: 5m }",
			[]string{"sandboxNamespace is required for full-restore"}},
	}
	for _, tt := range creates {
		t.Run(tt.name, func(t *testing.T) {
			obj := object(tt.doc)
			if ns := namespaceOf(obj); ns != "" {
				obj.SetNamespace(ns)
			}
			err := c.Create(ctx, obj)
			expectRejection(t, err, tt.want)
		})
	}

	updates := []struct {
		name   string
		doc    string
		mutate func(u *unstructured.Unstructured)
		status bool
		want   []string
	}{
		{name: "BackupJob: spec is immutable",
			doc: "apiVersion: backups.cozystack.io/v1alpha1\nkind: BackupJob\nmetadata: {name: frozen-job}\nspec: {applicationRef: {kind: Shop, name: shop}, backupClassName: frozen-no-such-class}",
			mutate: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "other", "spec", "backupClassName")
			},
			want: []string{"spec is immutable"}},
		{name: "BackupJob: status.phase is an enum",
			doc: "apiVersion: backups.cozystack.io/v1alpha1\nkind: BackupJob\nmetadata: {name: frozen-job-status}\nspec: {applicationRef: {kind: Shop, name: shop}, backupClassName: frozen-no-such-class}",
			mutate: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "Done", "status", "phase")
			},
			status: true, want: []string{`status.phase: Unsupported value: "Done"`}},
		{name: "RestoreJob: spec is immutable",
			doc: "apiVersion: backups.cozystack.io/v1alpha1\nkind: RestoreJob\nmetadata: {name: frozen-restore}\nspec: {backupRef: {name: frozen-no-such-backup}}",
			mutate: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "other", "spec", "backupRef", "name")
			},
			want: []string{"spec is immutable"}},
		{name: "Backup: spec is immutable",
			doc: "apiVersion: backups.cozystack.io/v1alpha1\nkind: Backup\nmetadata: {name: frozen-backup}\nspec: {applicationRef: {kind: Shop, name: shop}, strategyRef: {apiGroup: example.com, kind: Foreign, name: s}, takenAt: '2026-04-29T02:00:00Z'}",
			mutate: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedStringMap(u.Object, map[string]string{"k": "v"}, "spec", "driverMetadata")
			},
			want: []string{"spec is immutable"}},
		{name: "Backup: checksum must be sha256",
			doc: "apiVersion: backups.cozystack.io/v1alpha1\nkind: Backup\nmetadata: {name: frozen-backup-status}\nspec: {applicationRef: {kind: Shop, name: shop}, strategyRef: {apiGroup: example.com, kind: Foreign, name: s}, takenAt: '2026-04-29T02:00:00Z'}",
			mutate: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedMap(u.Object, map[string]any{"uri": "s3://b/k", "checksum": "md5:abc"}, "status", "artifact")
			},
			status: true, want: []string{"status.artifact.checksum: Invalid value"}},
		{name: "BackupVerifyRun: spec is immutable",
			doc: "apiVersion: security.ugallu.io/v1alpha1\nkind: BackupVerifyRun\nmetadata: {name: frozen-run}\nspec: {backend: velero, backupRef: {name: frozen-no-such-backup, namespace: velero}}",
			mutate: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "other", "spec", "backupRef", "name")
			},
			want: []string{"spec is immutable"}},
	}
	for _, tt := range updates {
		t.Run(tt.name, func(t *testing.T) {
			obj := object(tt.doc)
			obj.SetNamespace(ns)
			require.NoError(t, c.Create(ctx, obj))
			var err error
			// A component may write the object's status meanwhile: retry on a conflict.
			for range 10 {
				live := obj.DeepCopy()
				if err = c.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
					break
				}
				tt.mutate(live)
				if tt.status {
					err = c.Status().Update(ctx, live)
				} else {
					err = c.Update(ctx, live)
				}
				if !apierrors.IsConflict(err) {
					break
				}
			}
			expectRejection(t, err, tt.want)
		})
	}
}

func namespaceOf(u *unstructured.Unstructured) string {
	switch u.GetKind() {
	case "BackupClass", "VeleroBackupStrategy", "JobBackupStrategy":
		return ""
	}
	return ns
}

func expectRejection(t *testing.T, err error, want []string) {
	t.Helper()
	require.Error(t, err, "expected a rejection containing %q", want)
	assert.True(t, apierrors.IsInvalid(err) || apierrors.IsForbidden(err), "rejected as Invalid or Forbidden, got %v", err)
	for _, w := range want {
		assert.Contains(t, err.Error(), w)
	}
	t.Logf("rejected: %v", err)
}

// outcome is what one wrong object is expected to end in.
type outcome struct {
	obj client.Object
	// done reports whether the object reached its final state; check asserts on it.
	done  func() bool
	check func(t *testing.T)
}

func runtimeErrors(t *testing.T, ctx context.Context, c client.Client) {
	for _, doc := range []string{
		// A working Velero strategy, one whose template needs a parameter no class sets, and a Job
		// strategy whose template has no container.
		`{apiVersion: velerodriver.backups.cozystack.io/v1alpha1, kind: VeleroBackupStrategy, metadata: {name: badinput-velero},
  spec: {backupTemplate: {spec: {includedNamespaces: ['{{ .Application.metadata.namespace }}'], snapshotVolumes: false}}}}`,
		`{apiVersion: velerodriver.backups.cozystack.io/v1alpha1, kind: VeleroBackupStrategy, metadata: {name: badinput-velero-missing-param},
  spec: {backupTemplate: {spec: {includedNamespaces: ['{{ .Application.metadata.namespace }}'], labelSelector: {matchLabels: {tier: '{{ .Parameters.tier }}'}}}}}}`,
		`{apiVersion: jobdriver.backups.cozystack.io/v1alpha1, kind: JobBackupStrategy, metadata: {name: badinput-no-containers},
  spec: {template: {metadata: {labels: {app: '{{ .Application.metadata.name }}'}}, spec: {restartPolicy: Never, containers: []}}}}`,
		class("badinput-velero", "Shop", "velerodriver.backups.cozystack.io", "VeleroBackupStrategy", "badinput-velero"),
		class("badinput-velero-template", "Shop", "velerodriver.backups.cozystack.io", "VeleroBackupStrategy", "badinput-velero-missing-param"),
		class("badinput-missing-strategy", "Shop", "velerodriver.backups.cozystack.io", "VeleroBackupStrategy", "no-such-strategy"),
		class("badinput-job-empty", "Shop", "jobdriver.backups.cozystack.io", "JobBackupStrategy", "badinput-no-containers"),
		class("badinput-vm-only", "VirtualMachine", "velerodriver.backups.cozystack.io", "VeleroBackupStrategy", "badinput-velero"),
	} {
		require.NoError(t, c.Create(ctx, object(doc)))
	}
	time.Sleep(2 * time.Second) // the drivers read classes and strategies from their caches

	var outcomes []outcome
	plan := func(name, schedule, reason, mention string) {
		p := &backupsv1.Plan{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		require.NoError(t, yaml.Unmarshal([]byte(`{spec: {applicationRef: {kind: Shop, name: shop}, backupClassName: badinput-velero, schedule: `+schedule+`}}`), p))
		require.NoError(t, c.Create(ctx, p))
		outcomes = append(outcomes, outcome{obj: p,
			done: func() bool { return meta.FindStatusCondition(p.Status.Conditions, backupsv1.ConditionReady) != nil },
			check: func(t *testing.T) {
				ready := meta.FindStatusCondition(p.Status.Conditions, backupsv1.ConditionReady)
				assert.Equal(t, metav1.ConditionFalse, ready.Status)
				assert.Equal(t, reason, ready.Reason)
				assert.Contains(t, ready.Message, mention)
				assert.Nil(t, p.Status.NextScheduleTime, "an invalid Plan has no next tick")
				t.Logf("Plan %s: Ready=%s %s: %s", p.Name, ready.Status, ready.Reason, ready.Message)
			}})
	}
	plan("bad-zone", `{cron: '0 2 * * *', timeZone: Mars/Olympus_Mons}`, backupsv1.ReasonInvalidTimeZone, "schedule.timeZone")
	plan("bad-cron", `{cron: 'every day at noon'}`, backupsv1.ReasonInvalidSchedule, "schedule.cron")

	// No driver owns a run whose class is missing or has no strategy for the application: core-
	// controller fails it once the claim timeout has passed (contract CORE-5), saying what to fix.
	unclaimed := func(name, className, reason, mention string) {
		j := newJob(t, ctx, c, name, className, "shop")
		outcomes = append(outcomes, outcome{obj: j, done: j.IsTerminal,
			check: func(t *testing.T) {
				assert.Equal(t, backupsv1.BackupJobFailed, j.Status.Phase, "failed by core-controller")
				for _, typ := range []string{backupsv1.ConditionAccepted, backupsv1.ConditionReady} {
					cond := meta.FindStatusCondition(j.Status.Conditions, typ)
					if assert.NotNil(t, cond, "%s condition", typ) {
						assert.Equal(t, metav1.ConditionFalse, cond.Status, "%s", typ)
						assert.Equal(t, reason, cond.Reason, "%s reason", typ)
						assert.Contains(t, cond.Message, mention, "%s message", typ)
					}
				}
				assert.Contains(t, j.Status.Message, mention)
				assert.Contains(t, j.Status.Message, "create a new BackupJob", "the message says how to retry")
				assert.Empty(t, j.ClaimedBy(), "no driver claimed it")
				assert.Nil(t, j.Status.BackupRef)
				if assert.NotNil(t, j.Status.CompletedAt) {
					// Timestamps are stored to the second: allow one second of rounding.
					assert.GreaterOrEqual(t, j.Status.CompletedAt.Sub(j.CreationTimestamp.Time), claimTimeout-time.Second, "not failed before the claim timeout")
				}
				t.Logf("BackupJob %s: %s, Ready=False %s: %s", j.Name, j.Status.Phase, reason, j.Status.Message)
			}})
	}
	unclaimed("no-class", "no-such-class", backupsv1.ReasonBackupClassNotFound, `BackupClass "no-such-class" not found; create it`)
	unclaimed("no-strategy-for-kind", "badinput-vm-only", backupsv1.ReasonNoMatchingStrategy, `has no strategy for applications of kind "Shop"`)

	failed := func(name, className, app, reason, mention string) {
		j := newJob(t, ctx, c, name, className, app)
		outcomes = append(outcomes, outcome{obj: j, done: j.IsTerminal,
			check: func(t *testing.T) {
				assert.Equal(t, backupsv1.BackupJobFailed, j.Status.Phase)
				ready := meta.FindStatusCondition(j.Status.Conditions, backupsv1.ConditionReady)
				if assert.NotNil(t, ready) {
					assert.Equal(t, metav1.ConditionFalse, ready.Status)
					assert.Equal(t, reason, ready.Reason)
				}
				assert.Contains(t, j.Status.Message, mention)
				assert.NotNil(t, j.Status.CompletedAt)
				assert.Nil(t, j.Status.BackupRef)
				t.Logf("BackupJob %s: %s, Ready=False %s: %s", j.Name, j.Status.Phase, reason, j.Status.Message)
			}})
	}
	failed("no-app", "badinput-velero", "ghost", backupsv1.ReasonApplicationNotFound, "Shop badinput/ghost not found")
	failed("missing-strategy", "badinput-missing-strategy", "shop", backupsv1.ReasonStrategyNotFound, `VeleroBackupStrategy "no-such-strategy" not found`)
	failed("velero-template", "badinput-velero-template", "shop", backupsv1.ReasonTemplateRenderFailed, "badinput-velero-missing-param backupTemplate")
	failed("job-no-containers", "badinput-job-empty", "shop", backupsv1.ReasonTemplateRenderFailed, "has no containers")

	rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: "no-backup", Namespace: ns},
		Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: "ghost"}}}
	require.NoError(t, c.Create(ctx, rj))

	run := &securityv1.BackupVerifyRun{ObjectMeta: metav1.ObjectMeta{Name: "missing-velero-backup", Namespace: verifyNS},
		Spec: securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendVelero, BackupRef: securityv1.BackupRef{Name: "ghost", Namespace: velerostack.Namespace}}}
	require.NoError(t, c.Create(ctx, run))
	outcomes = append(outcomes, outcome{obj: run, done: func() bool { return run.Status.Phase.IsTerminal() },
		check: func(t *testing.T) {
			// As ugallu: a missing Velero backup is a verdict (Succeeded, Mismatch, high).
			assert.Equal(t, securityv1.RunSucceeded, run.Status.Phase)
			assert.Equal(t, securityv1.SeverityHigh, run.Status.WorstSeverity)
			assert.NotEmpty(t, run.Status.Message)
			res := &securityv1.BackupVerifyResult{}
			require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: verifyNS, Name: run.Status.ResultName()}, res))
			var codes []string
			for _, f := range res.Spec.Findings {
				codes = append(codes, f.Code)
			}
			assert.Contains(t, codes, securityv1.CodeVeleroBackupNotFound)
			assert.Equal(t, []string{securityv1.EventBackupVerifyMismatch}, terminalEvents(ctx, t, c, run), "ugallu smoke S4")
			t.Logf("BackupVerifyRun %s: %s, worst severity %s, findings %v: %s", run.Name, run.Status.Phase, run.Status.WorstSeverity, codes, run.Status.Message)
		}})
	outcomes = append(outcomes, ugalluSmoke(ctx, t, c)...)

	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, claimTimeout+3*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, o := range outcomes {
			if err := c.Get(ctx, client.ObjectKeyFromObject(o.obj), o.obj); err != nil {
				return false, err
			}
			if !o.done() {
				return false, nil
			}
		}
		return true, nil
	})
	for _, o := range outcomes {
		if !o.done() {
			t.Errorf("%T %s did not reach its final state: %+v", o.obj, o.obj.GetName(), statusOf(o.obj))
		}
	}
	require.NoError(t, err, "waiting for every wrong object's outcome")
	for _, o := range outcomes {
		t.Run(o.obj.GetName(), o.check)
	}

	t.Run("template failures create nothing", func(t *testing.T) {
		for _, name := range []string{"velero-template", "job-no-containers"} {
			j := &backupsv1.BackupJob{}
			require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, j))
			velero := &unstructured.UnstructuredList{}
			velero.SetAPIVersion("velero.io/v1")
			velero.SetKind("BackupList")
			require.NoError(t, c.List(ctx, velero, client.InNamespace(velerostack.Namespace), client.MatchingLabels{backupsv1.LabelBackupJobUID: string(j.UID)}))
			assert.Empty(t, velero.Items, "no velero Backup for %s", name)
			jobs := &batchv1.JobList{}
			require.NoError(t, c.List(ctx, jobs, client.InNamespace(ns), client.MatchingLabels{"jobdriver.backups.cozystack.io/run-uid": string(j.UID)}))
			assert.Empty(t, jobs.Items, "no batch/v1 Job for %s", name)
		}
	})

	t.Run("a RestoreJob of a missing Backup", func(t *testing.T) {
		// No driver can tell whether it is its own; core-controller fails it after the claim
		// timeout (contract CORE-7): its spec cannot change, so a new RestoreJob is the retry.
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, claimTimeout+time.Minute, true, func(ctx context.Context) (bool, error) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(rj), rj); err != nil {
				return false, err
			}
			return rj.IsTerminal(), nil
		})
		require.NoError(t, err, "the RestoreJob of a missing Backup never ended: %+v", rj.Status)
		assert.Equal(t, backupsv1.RestoreJobFailed, rj.Status.Phase)
		for _, typ := range []string{backupsv1.ConditionAccepted, backupsv1.ConditionReady} {
			cond := meta.FindStatusCondition(rj.Status.Conditions, typ)
			if assert.NotNil(t, cond, "%s condition", typ) {
				assert.Equal(t, metav1.ConditionFalse, cond.Status, "%s", typ)
				assert.Equal(t, backupsv1.ReasonBackupNotFound, cond.Reason, "%s reason", typ)
			}
		}
		assert.Contains(t, rj.Status.Message, `Backup "ghost" does not exist`)
		assert.Contains(t, rj.Status.Message, "create a new RestoreJob", "the message says how to retry")
		assert.Empty(t, rj.ClaimedBy(), "no driver claimed it")
		if assert.NotNil(t, rj.Status.CompletedAt) {
			assert.GreaterOrEqual(t, rj.Status.CompletedAt.Sub(rj.CreationTimestamp.Time), claimTimeout-time.Second, "not failed before the claim timeout")
		}
		t.Logf("RestoreJob %s: %s: %s", rj.Name, rj.Status.Phase, rj.Status.Message)
	})

	t.Run("every reason is UpperCamel and every False condition has a message", func(t *testing.T) {
		var conds []metav1.Condition
		var who []string
		add := func(kind, name string, cs []metav1.Condition) {
			for _, c := range cs {
				conds = append(conds, c)
				who = append(who, kind+" "+name)
			}
		}
		plans := &backupsv1.PlanList{}
		jobs := &backupsv1.BackupJobList{}
		restores := &backupsv1.RestoreJobList{}
		runs := &securityv1.BackupVerifyRunList{}
		require.NoError(t, c.List(ctx, plans, client.InNamespace(ns)))
		require.NoError(t, c.List(ctx, jobs, client.InNamespace(ns)))
		require.NoError(t, c.List(ctx, restores, client.InNamespace(ns)))
		require.NoError(t, c.List(ctx, runs))
		for _, p := range plans.Items {
			add("Plan", p.Name, p.Status.Conditions)
		}
		for _, j := range jobs.Items {
			add("BackupJob", j.Name, j.Status.Conditions)
		}
		for _, r := range restores.Items {
			add("RestoreJob", r.Name, r.Status.Conditions)
		}
		for _, r := range runs.Items {
			add("BackupVerifyRun", r.Name, r.Status.Conditions)
		}
		for i, cond := range conds {
			assert.Regexp(t, upperCamel, cond.Reason, "%s condition %s", who[i], cond.Type)
			if cond.Status == metav1.ConditionFalse {
				assert.NotEmpty(t, cond.Message, "%s condition %s=False %s says what to do", who[i], cond.Type, cond.Reason)
			}
		}
		t.Logf("%d conditions on %d Plans, %d BackupJobs, %d RestoreJobs, %d BackupVerifyRuns", len(conds),
			len(plans.Items), len(jobs.Items), len(restores.Items), len(runs.Items))
	})
}

func class(name, kind, group, strategyKind, strategy string) string {
	return `{apiVersion: backups.cozystack.io/v1alpha1, kind: BackupClass, metadata: {name: ` + name + `},
  spec: {strategies: [{application: {kind: ` + kind + `}, strategyRef: {apiGroup: ` + group + `, kind: ` + strategyKind + `, name: ` + strategy + `},
    parameters: {backupStorageLocationName: ` + velerostack.BSLName + `}}]}}`
}

func newJob(t *testing.T, ctx context.Context, c client.Client, name, className, app string) *backupsv1.BackupJob {
	t.Helper()
	j := &backupsv1.BackupJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: backupsv1.BackupJobSpec{
		ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: app}, BackupClassName: className}}
	require.NoError(t, c.Create(ctx, j))
	return j
}

func statusOf(o client.Object) any {
	switch x := o.(type) {
	case *backupsv1.Plan:
		return x.Status
	case *backupsv1.BackupJob:
		return x.Status
	case *backupsv1.RestoreJob:
		return x.Status
	case *securityv1.BackupVerifyRun:
		return x.Status
	}
	return nil
}

// quiet checks that every component still runs, never panicked, and is idle: the sum of
// controller_runtime_reconcile_total over its controllers barely moves in 20 s once the wrong
// objects have settled.
func quiet(t *testing.T, s *golden.Stack) {
	// Let the last status writes and the requeues they trigger pass.
	time.Sleep(10 * time.Second)
	before := map[string]float64{}
	for name, comp := range s.Components {
		require.False(t, comp.Exited(), "%s exited:\n%s", name, comp.Tail())
		n, err := reconciles(comp)
		require.NoError(t, err, name)
		before[name] = n
	}
	const window = 20 * time.Second
	time.Sleep(window)
	for name, comp := range s.Components {
		assert.False(t, comp.Exited(), "%s exited:\n%s", name, comp.Tail())
		assert.NotContains(t, comp.Log.String(), "panic", "%s panicked", name)
		after, err := reconciles(comp)
		require.NoError(t, err, name)
		t.Logf("%s: controller_runtime_reconcile_total %.0f → %.0f (+%.0f in %s)", name, before[name], after, after-before[name], window)
		assert.Less(t, after-before[name], 20.0, "%s reconciles in a loop", name)
	}
}

// reconciles sums controller_runtime_reconcile_total over every controller and result.
func reconciles(c *components.Component) (float64, error) {
	body, err := c.Metrics()
	if err != nil {
		return 0, err
	}
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "controller_runtime_reconcile_total{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, sc.Err()
}

// terminalEvents are the types of the SecurityEvents of run other than BackupVerifyStarted.
func terminalEvents(ctx context.Context, t *testing.T, c client.Client, run *securityv1.BackupVerifyRun) []string {
	t.Helper()
	list := &securityv1.SecurityEventList{}
	require.NoError(t, c.List(ctx, list, client.MatchingLabels{securityv1.LabelRunUID: string(run.UID)}))
	var types []string
	for _, e := range list.Items {
		if e.Spec.Type != securityv1.EventBackupVerifyStarted {
			types = append(types, e.Spec.Type)
		}
	}
	return types
}

// ugalluSmoke: ugallu's own smoke scenarios 3 and 5 for backup-verify (ninsun-labs/ugallu
// hack/backup-verify-smoke.sh; 1, 2 and 4 are above), their runs as the script writes them:
// a checksum-only run of an etcd snapshot that does not exist ends Failed with a
// BackupVerifyFailed event; a full-restore of a Velero backup that does not exist ends Succeeded
// with a Result (worstSeverity high) and a Mismatch, and leaves neither its sandbox nor a Restore.
func ugalluSmoke(ctx context.Context, t *testing.T, c client.Client) []outcome {
	missing := &securityv1.BackupVerifyRun{ObjectMeta: metav1.ObjectMeta{Name: "missing-file", Namespace: verifyNS},
		Spec: securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendEtcdSnapshot, BackupRef: securityv1.BackupRef{Name: "does-not-exist"},
			Mode: securityv1.ModeChecksumOnly, Timeout: &metav1.Duration{Duration: 30 * time.Second}}}
	require.NoError(t, c.Create(ctx, missing))
	sandbox := "bv-smoke-bvsandbox"
	full := &securityv1.BackupVerifyRun{ObjectMeta: metav1.ObjectMeta{Name: "velero-fullrestore", Namespace: verifyNS},
		Spec: securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendVelero, BackupRef: securityv1.BackupRef{Name: "smoke-not-real", Namespace: velerostack.Namespace},
			Mode: securityv1.ModeFullRestore, SandboxNamespace: sandbox, Timeout: &metav1.Duration{Duration: 3 * time.Minute}}}
	require.NoError(t, c.Create(ctx, full))
	return []outcome{
		{obj: missing, done: func() bool { return missing.Status.Phase.IsTerminal() }, check: func(t *testing.T) {
			assert.Equal(t, securityv1.RunFailed, missing.Status.Phase, missing.Status.Message)
			assert.Equal(t, []string{securityv1.EventBackupVerifyFailed}, terminalEvents(ctx, t, c, missing), "ugallu smoke S3")
		}},
		{obj: full, done: func() bool { return full.Status.Phase.IsTerminal() }, check: func(t *testing.T) {
			assert.Equal(t, securityv1.RunSucceeded, full.Status.Phase, full.Status.Message)
			res := &securityv1.BackupVerifyResult{}
			require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: verifyNS, Name: full.Status.ResultName()}, res))
			assert.Equal(t, securityv1.SeverityHigh, res.Status.WorstSeverity)
			assert.Equal(t, []string{securityv1.EventBackupVerifyMismatch}, terminalEvents(ctx, t, c, full), "ugallu smoke S5")
			assert.True(t, apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Name: sandbox}, &corev1.Namespace{})), "no sandbox left")
			restores := &unstructured.UnstructuredList{}
			restores.SetAPIVersion("velero.io/v1")
			restores.SetKind("RestoreList")
			require.NoError(t, c.List(ctx, restores, client.InNamespace(velerostack.Namespace)))
			for _, r := range restores.Items {
				assert.NotContains(t, r.GetName(), full.Name, "no Restore of the run left")
			}
		}},
	}
}
