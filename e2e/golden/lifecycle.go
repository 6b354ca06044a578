package golden

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

// Application is the golden lifecycle's application: a Shop (a stand-in apps.cozystack.io kind)
// in its own namespace, with objects that carry the application's data.
const (
	AppNamespace = "shop"
	AppName      = "shop"
	PlanName     = "shop-minutely"
)

// Summary is what the lifecycle produced, for the demo's table and the tests' assertions.
type Summary struct {
	Plan        *backupsv1.Plan
	BackupJob   *backupsv1.BackupJob
	Backup      *backupsv1.Backup
	RestoreJob  *backupsv1.RestoreJob
	Runs        []*securityv1.BackupVerifyRun
	Results     []*securityv1.BackupVerifyResult
	Events      []securityv1.SecurityEvent
	PayloadSum  string
	RestoredSum string
	// Restored lists the application objects deleted and then found again with identical data.
	Restored []string
}

// appObjects are the application's objects; the payload is 256 KiB of seeded random bytes.
func appObjects() []client.Object {
	payload := make([]byte, 256<<10)
	r := rand.New(rand.NewPCG(7, 11))
	for i := range payload {
		payload[i] = byte(r.Uint32())
	}
	labels := map[string]string{"app.kubernetes.io/instance": AppName, "apps.cozystack.io/application.kind": "Shop"}
	return []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "catalog", Namespace: AppNamespace, Labels: labels},
			Data: map[string]string{"items": "tea,coffee,cocoa", "currency": "EUR"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "payload", Namespace: AppNamespace, Labels: labels},
			BinaryData: map[string][]byte{"blob": payload}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: AppNamespace, Labels: labels},
			Data: map[string][]byte{"password": []byte("correct horse battery staple")}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: AppNamespace, Labels: labels},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "shop/web:1.0"}}}}}},
	}
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

// Lifecycle runs the golden lifecycle: application → Plan with a one-minute cron → BackupJob →
// Velero Backup → Backup with size and SHA-256 → checksum-only and full-restore verification of
// the Velero backup, then of the Coffer Backup through the driver contract (its verdict on the
// Backup, the Plan's restorable point) → delete the application's objects → RestoreJob → every
// object back with identical data.
func (s *Stack) Lifecycle(ctx context.Context) (*Summary, error) {
	c := s.Client
	sum0 := &Summary{}
	shop := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Shop",
		"metadata": map[string]any{"name": AppName, "namespace": AppNamespace}, "spec": map[string]any{"size": "small"}}}
	objs := append([]client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: AppNamespace}}, shop}, appObjects()...)
	sum0.PayloadSum = sum(objs[3].(*corev1.ConfigMap).BinaryData["blob"])
	s.say("Creating the application: Shop %s/%s with ConfigMaps catalog and payload (256 KiB, %s…), Secret db, Deployment web",
		AppNamespace, AppName, sum0.PayloadSum[:19])
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return nil, fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	s.say("Creating VeleroBackupStrategy shop-namespace, BackupClass golden and Plan %s (cron \"* * * * *\")", PlanName)
	for _, o := range []client.Object{
		&veleroapi.VeleroBackupStrategy{ObjectMeta: metav1.ObjectMeta{Name: "shop-namespace"}, Spec: veleroapi.VeleroBackupStrategySpec{
			BackupTemplate: veleroapi.VeleroTemplate{Spec: runtime.RawExtension{Raw: []byte(`{"includedNamespaces": ["{{ .Application.metadata.namespace }}"], "snapshotVolumes": false}`)}},
		}},
		&backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: "golden"}, Spec: backupsv1.BackupClassSpec{Strategies: []backupsv1.BackupClassStrategy{{
			Application: backupsv1.ApplicationSelector{Kind: "Shop"},
			StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr.To(veleroapi.Group), Kind: veleroapi.Kind, Name: "shop-namespace"},
			Parameters:  map[string]string{"backupStorageLocationName": velerostack.BSLName},
		}}}},
		&backupsv1.Plan{ObjectMeta: metav1.ObjectMeta{Name: PlanName, Namespace: AppNamespace}, Spec: backupsv1.PlanSpec{
			ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: AppName}, BackupClassName: "golden",
			Schedule: backupsv1.PlanSchedule{Cron: "* * * * *"}, Retention: &backupsv1.RetentionPolicy{KeepLast: ptr.To[int32](5)},
		}},
	} {
		if err := c.Create(ctx, o); err != nil {
			return nil, fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}

	s.say("Waiting for the next minute: core-controller fires the Plan, driver-velero runs the BackupJob")
	var backup *backupsv1.Backup
	err := poll(ctx, 3*time.Minute, func() (bool, error) {
		list := &backupsv1.BackupList{}
		if err := c.List(ctx, list, client.InNamespace(AppNamespace)); err != nil {
			return false, err
		}
		for i := range list.Items {
			if list.Items[i].Status.Phase == backupsv1.BackupReady {
				backup = &list.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for the first scheduled Backup: %w", err)
	}
	sum0.Backup = backup
	// The driver creates the Backup before it records the BackupJob's outcome: wait for both.
	sum0.BackupJob = &backupsv1.BackupJob{}
	if err := poll(ctx, time.Minute, func() (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Namespace: AppNamespace, Name: backup.Name}, sum0.BackupJob)
		return sum0.BackupJob.IsTerminal(), err
	}); err != nil {
		return nil, fmt.Errorf("waiting for BackupJob %s to record its outcome: %w", backup.Name, err)
	}
	if sum0.BackupJob.Status.Phase != backupsv1.BackupJobSucceeded {
		return nil, fmt.Errorf("BackupJob %s ended %s although its Backup is Ready", backup.Name, sum0.BackupJob.Status.Phase)
	}
	sum0.Plan = &backupsv1.Plan{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: AppNamespace, Name: PlanName}, sum0.Plan); err != nil {
		return nil, err
	}
	s.say("Backup %s is Ready: %s, %d bytes, %s", backup.Name, backup.Status.Artifact.URI, backup.Status.Artifact.SizeBytes, backup.Status.Artifact.Checksum)

	veleroBackup := backup.Spec.DriverMetadata["veleroBackupName"]
	for _, m := range []securityv1.Mode{securityv1.ModeChecksumOnly, securityv1.ModeFullRestore} {
		run := &securityv1.BackupVerifyRun{ObjectMeta: metav1.ObjectMeta{Name: "golden-" + string(m), Namespace: "ugallu-system"},
			Spec: securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendVelero, Mode: m,
				BackupRef: securityv1.BackupRef{Name: veleroBackup, Namespace: velerostack.Namespace}}}
		if m == securityv1.ModeFullRestore {
			run.Spec.SandboxNamespace = "shop-bvsandbox"
			s.say("Verifying by full restore into the sandbox namespace %s", run.Spec.SandboxNamespace)
		} else {
			s.say("Verifying the artifact's checksum (BackupVerifyRun %s)", run.Name)
		}
		if err := s.verify(ctx, sum0, run); err != nil {
			return sum0, err
		}
	}
	s.say("Waiting for the verifier to delete its sandbox")
	if err := poll(ctx, 2*time.Minute, func() (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Name: "shop-bvsandbox"}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}); err != nil {
		return nil, fmt.Errorf("the sandbox was not deleted: %w", err)
	}

	if err := s.verifyCofferBackup(ctx, sum0, backup); err != nil {
		return sum0, err
	}

	s.say("Losing data: deleting the application's ConfigMaps, Secret and Deployment")
	before := map[string]client.Object{}
	for _, o := range appObjects() {
		live := o.DeepCopyObject().(client.Object)
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), live); err != nil {
			return nil, err
		}
		before[key(live)] = live
		if err := c.Delete(ctx, live); err != nil {
			return nil, err
		}
	}
	if err := poll(ctx, time.Minute, func() (bool, error) {
		for _, o := range appObjects() {
			if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
				return false, client.IgnoreNotFound(err)
			}
		}
		return true, nil
	}); err != nil {
		return nil, fmt.Errorf("the application's objects were not deleted: %w", err)
	}
	s.say("Restoring Backup %s (RestoreJob undo)", backup.Name)
	rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: "undo", Namespace: AppNamespace},
		Spec: backupsv1.RestoreJobSpec{BackupRef: corev1.LocalObjectReference{Name: backup.Name}}}
	if err := c.Create(ctx, rj); err != nil {
		return nil, err
	}
	if err := poll(ctx, 3*time.Minute, func() (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(rj), rj)
		return rj.IsTerminal(), err
	}); err != nil {
		return nil, fmt.Errorf("waiting for the restore: %w", err)
	}
	sum0.RestoreJob = rj
	if rj.Status.Phase != backupsv1.RestoreJobSucceeded {
		return sum0, fmt.Errorf("the restore ended %s: %s", rj.Status.Phase, rj.Status.Message)
	}
	for _, o := range appObjects() {
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			return sum0, fmt.Errorf("%s was not restored: %w", key(o), err)
		}
		if !sameData(before[key(o)], o) {
			return sum0, fmt.Errorf("%s came back with different data", key(o))
		}
		sum0.Restored = append(sum0.Restored, key(o))
		if cm, ok := o.(*corev1.ConfigMap); ok && cm.Name == "payload" {
			sum0.RestoredSum = sum(cm.BinaryData["blob"])
		}
	}
	s.say("Restored %d objects with identical data; payload %s…", len(sum0.Restored), sum0.RestoredSum[:19])
	return sum0, nil
}

// verify creates the run, waits for its end and records it in the summary with its Result and
// SecurityEvents; a run that did not succeed is an error.
func (s *Stack) verify(ctx context.Context, sum0 *Summary, run *securityv1.BackupVerifyRun) error {
	c, m := s.Client, run.Spec.Mode
	if err := c.Create(ctx, run); err != nil {
		return err
	}
	if err := poll(ctx, 4*time.Minute, func() (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(run), run)
		return run.Status.Phase.IsTerminal(), err
	}); err != nil {
		return fmt.Errorf("waiting for verification %s/%s (%s): %w", run.Namespace, run.Name, m, err)
	}
	sum0.Runs = append(sum0.Runs, run)
	if run.Status.Phase != securityv1.RunSucceeded {
		return fmt.Errorf("verification %s/%s (%s) ended %s: %s", run.Namespace, run.Name, m, run.Status.Phase, run.Status.Message)
	}
	res := &securityv1.BackupVerifyResult{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: run.Status.ResultName()}, res); err != nil {
		return err
	}
	sum0.Results = append(sum0.Results, res)
	events := &securityv1.SecurityEventList{}
	if err := c.List(ctx, events, client.MatchingLabels{securityv1.LabelRunUID: string(run.UID)}); err != nil {
		return err
	}
	sum0.Events = append(sum0.Events, events.Items...)
	s.say("  %s: worst severity %q, %s", m, res.Status.WorstSeverity, resultLine(res))
	return nil
}

// CofferSandbox is the sandbox of the golden Backup's full-restore through the driver contract.
const CofferSandbox = "shop-coffer-bvsandbox"

// verifyCofferBackup verifies the Coffer Backup itself (backend coffer): checksum-only, then a
// full-restore that the verifier asks of the Backup's driver with a RestoreJob into a sandbox.
// The verdict lands on the Backup (Verified=True, RestoreVerified) and the Plan records the Backup
// as its newest one proven restorable.
func (s *Stack) verifyCofferBackup(ctx context.Context, sum0 *Summary, backup *backupsv1.Backup) error {
	c := s.Client
	for _, m := range []securityv1.Mode{securityv1.ModeChecksumOnly, securityv1.ModeFullRestore} {
		run := &securityv1.BackupVerifyRun{ObjectMeta: metav1.ObjectMeta{Name: "golden-coffer-" + string(m), Namespace: AppNamespace},
			Spec: securityv1.BackupVerifyRunSpec{Backend: securityv1.BackendCoffer, Mode: m, BackupRef: securityv1.BackupRef{Name: backup.Name}}}
		if m == securityv1.ModeFullRestore {
			run.Spec.SandboxNamespace = CofferSandbox
			s.say("Verifying Backup %s by full restore through its driver: a RestoreJob into the sandbox %s", backup.Name, CofferSandbox)
		} else {
			s.say("Verifying Backup %s checksum-only (BackupVerifyRun %s/%s, backend coffer)", backup.Name, run.Namespace, run.Name)
		}
		if err := s.verify(ctx, sum0, run); err != nil {
			return err
		}
		if m == securityv1.ModeFullRestore {
			// The verifier compared the sandbox with the Backup's Velero backup by content (the
			// details of verifier/internal/coffercheck and velerocheck), not only the RestoreJob's end.
			d := sum0.Results[len(sum0.Results)-1].Spec.Details
			if n, _ := strconv.Atoi(d["objectsCompared"]); n <= 0 || !strings.HasPrefix(d["contentDiff"], "Velero backup ") {
				return fmt.Errorf("the full-restore of Backup %s compared no restored object by content with its Velero backup: details %v", backup.Name, d)
			}
			s.say("  the sandbox was compared with %s by content: %s objects identical", d["contentDiff"], d["objectsCompared"])
		}
	}
	if err := poll(ctx, time.Minute, func() (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(backup), backup)
		return backup.RestoreVerified(), err
	}); err != nil {
		return fmt.Errorf("Backup %s does not show Verified=True (RestoreVerified): %v: %w", backup.Name, backup.Status.Conditions, err)
	}
	sum0.Backup = backup
	if err := poll(ctx, 2*time.Minute, func() (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Namespace: AppNamespace, Name: PlanName}, sum0.Plan)
		r := sum0.Plan.Status.LastRestorableBackup
		return r != nil && r.Name == backup.Name, err
	}); err != nil {
		return fmt.Errorf("Plan %s does not record Backup %s as restorable: %w", PlanName, backup.Name, err)
	}
	r := sum0.Plan.Status.LastRestorableBackup
	s.say("Backup %s is Verified (RestoreVerified); Plan %s's newest Backup proven restorable was taken %s (restorable RPO %s)",
		backup.Name, PlanName, r.TakenAt.UTC().Format(time.RFC3339), time.Since(r.TakenAt.Time).Round(time.Second))
	if err := poll(ctx, 2*time.Minute, func() (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Name: CofferSandbox}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}); err != nil {
		return fmt.Errorf("the sandbox %s was not deleted: %w", CofferSandbox, err)
	}
	return nil
}

func key(o client.Object) string {
	return fmt.Sprintf("%T %s/%s", o, o.GetNamespace(), o.GetName())
}

// sameData compares what an object holds, not its server-set metadata.
func sameData(a, b client.Object) bool {
	switch x := a.(type) {
	case *corev1.ConfigMap:
		y := b.(*corev1.ConfigMap)
		return apiequality.Semantic.DeepEqual(x.Data, y.Data) && apiequality.Semantic.DeepEqual(x.BinaryData, y.BinaryData)
	case *corev1.Secret:
		return apiequality.Semantic.DeepEqual(x.Data, b.(*corev1.Secret).Data)
	case *appsv1.Deployment:
		return apiequality.Semantic.DeepEqual(x.Spec, b.(*appsv1.Deployment).Spec)
	}
	return false
}

func resultLine(r *securityv1.BackupVerifyResult) string {
	if r.Spec.Mode == securityv1.ModeChecksumOnly {
		return fmt.Sprintf("recorded %s, computed %s", r.Spec.RecordedChecksum, r.Spec.ComputedChecksum)
	}
	return fmt.Sprintf("%d of %d objects restored and compared", r.Spec.ObjectsRestored, r.Spec.ObjectsExpected)
}

func poll(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	return wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return cond() })
}
