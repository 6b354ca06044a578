package realstack

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/verifier/internal/velerocheck"
)

// secretValue is the Secret's value in the content tests; no finding may ever quote it.
const secretValue = "correct-horse-battery-staple"

// namespaceOfManyKinds creates ns with objects of the kinds a namespace commonly holds, set the way
// users set them (kubectl's last-applied annotation, user labels and annotations). (Endpoints that
// hold a Pod's address are left out: without Nodes, the endpoints controllers list no Pod.)
func namespaceOfManyKinds(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": "web"}
	template := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web:1", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}}}
	never := *template.DeepCopy()
	never.Spec.RestartPolicy = corev1.RestartPolicyNever
	userMeta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"team": "payments"},
			Annotations: map[string]string{"example.com/owner": "alice", "kubectl.kubernetes.io/last-applied-configuration": `{"kind":"` + name + `"}`}}
	}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ConfigMap{ObjectMeta: userMeta("settings"), Data: map[string]string{"mode": "prod", "app.properties": "a=1\nb=2\n"},
			BinaryData: map[string][]byte{"blob": {0, 1, 2, 0xff}}},
		&corev1.Secret{ObjectMeta: userMeta("db"), Data: map[string][]byte{"password": []byte(secretValue), "user": []byte("app")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tls", Namespace: ns}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": []byte("cert"), "tls.key": []byte("key")}},
		&corev1.ServiceAccount{ObjectMeta: userMeta("web"), ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "web-long-lived", Namespace: ns, Annotations: map[string]string{corev1.ServiceAccountNameKey: "web"}},
			Type: corev1.SecretTypeServiceAccountToken},
		&rbacv1.Role{ObjectMeta: userMeta("reader"), Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}}}},
		&rbacv1.RoleBinding{ObjectMeta: userMeta("web-reads"), RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "reader"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "web", Namespace: ns}, {Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}},
		&appsv1.Deployment{ObjectMeta: userMeta("web"), Spec: appsv1.DeploymentSpec{Replicas: ptr(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template}},
		&appsv1.StatefulSet{ObjectMeta: userMeta("store"), Spec: appsv1.StatefulSetSpec{Replicas: ptr(int32(1)), ServiceName: "web-headless",
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "store"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "store"}}, Spec: template.Spec}}},
		&batchv1.Job{ObjectMeta: userMeta("migrate"), Spec: batchv1.JobSpec{Template: never}},
		&batchv1.CronJob{ObjectMeta: userMeta("nightly"), Spec: batchv1.CronJobSpec{Schedule: "0 3 * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: never}}}},
		&corev1.Service{ObjectMeta: userMeta("web"), Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}},
		&corev1.Service{ObjectMeta: userMeta("web-np"), Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: labels, Ports: []corev1.ServicePort{{Port: 80}}}},
		&corev1.Service{ObjectMeta: userMeta("web-lb"), Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Selector: labels, Ports: []corev1.ServicePort{{Port: 443}}}},
		&corev1.Service{ObjectMeta: userMeta("web-headless"), Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "store"}, Ports: []corev1.ServicePort{{Port: 80}}}},
		&corev1.Service{ObjectMeta: userMeta("db-external"), Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db." + ns + ".example.com"}},
		&corev1.PersistentVolumeClaim{ObjectMeta: userMeta("data"), Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}},
		&networkingv1.NetworkPolicy{ObjectMeta: userMeta("web-ingress"), Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: labels},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: ptr(intstr.FromInt32(8080))}}}}}},
		&networkingv1.Ingress{ObjectMeta: userMeta("web"), Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: "web.example.com",
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: ptr(networkingv1.PathTypePrefix),
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}}}}}}}}}},
		&policyv1.PodDisruptionBudget{ObjectMeta: userMeta("web"), Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels}}},
		&autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: userMeta("web"), Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}, MinReplicas: ptr(int32(2)), MaxReplicas: 5}},
		&corev1.LimitRange{ObjectMeta: userMeta("defaults"), Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{Type: corev1.LimitTypeContainer,
			Default: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}}}}},
		&corev1.ResourceQuota{ObjectMeta: userMeta("quota"), Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceSecrets: resource.MustParse("50")}}},
		&coordinationv1.Lease{ObjectMeta: userMeta("leader"), Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr("web-0"), LeaseDurationSeconds: ptr(int32(15))}},
	} {
		require.NoError(t, cl.Create(ctx, o), "%T %s", o, o.GetName())
	}
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		s := &corev1.Secret{}
		err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-long-lived"}, s)
		return err == nil && len(s.Data["token"]) > 0, err
	}), "the token controller fills the ServiceAccount token Secret")
}

// TestFullRestoreComparesContent: a full-restore compares every restored object with its copy in
// the backup. A good backup of a namespace of many kinds passes with no content finding (what the
// restore and the sandbox change is normalized away); a ConfigMap key and a Secret key changed
// in the sandbox between the Restore and the diff are each a content-mismatch, and no finding
// quotes the Secret's value.
func TestFullRestoreComparesContent(t *testing.T) {
	ns := uniq("cc")
	namespaceOfManyKinds(t, ns)
	vb := veleroBackup(t, ns, true, ns)

	t.Run("a good backup has no content finding", func(t *testing.T) {
		h := newHarness(t)
		run := veleroRun(t, "cc-good", vb.Name, securityv1.ModeFullRestore, ns+"-a-bvsandbox")
		h.finish(run)
		r := result(t, run)
		require.Equal(t, securityv1.RunSucceeded, run.Status.Phase, "%s\n%s", run.Status.Message, findingsOf(r.Spec.Findings))
		assert.Equal(t, []string{securityv1.CodeChecksumMatch}, codes(r.Spec.Findings), findingsOf(r.Spec.Findings))
		assert.Equal(t, r.Spec.ObjectsExpected, r.Spec.ObjectsRestored)
		compared, err := strconv.Atoi(r.Spec.Details[velerocheck.DetailObjectsCompared])
		require.NoError(t, err, "details: %v", r.Spec.Details)
		// 25 objects of the test, less the ones their controllers rewrite.
		assert.GreaterOrEqual(t, compared, 20, "details: %v", r.Spec.Details)
		assert.Empty(t, r.Spec.Details[velerocheck.DetailObjectsDiffering])
		assert.Contains(t, r.Spec.Findings[0].Message, "identical in content to the backup")
	})

	t.Run("tampered objects are content mismatches", func(t *testing.T) {
		h := newHarness(t)
		sandbox := ns + "-b-bvsandbox"
		called := tamperBeforeDiff(t, h, ns, sandbox)
		run := veleroRun(t, "cc-tampered", vb.Name, securityv1.ModeFullRestore, sandbox)
		h.finish(run)
		assert.Equal(t, 1, *called, "the hook runs once, when the Restore is over")
		assert.Equal(t, securityv1.RunSucceeded, run.Status.Phase)
		assert.Equal(t, securityv1.SeverityHigh, run.Status.WorstSeverity)
		r := result(t, run)
		require.Equal(t, []string{securityv1.CodeContentMismatch, securityv1.CodeContentMismatch}, codes(r.Spec.Findings), findingsOf(r.Spec.Findings))
		assertTampered(t, run, r, sandbox)
	})
}

// tamperBeforeDiff makes the diffs of h meet the sandbox tampered (tamper) once the restore of
// namespace ns into sandbox is over; it returns how many times the diff called it.
func tamperBeforeDiff(t *testing.T, h *harness, ns, sandbox string) *int {
	called := new(int)
	h.velero().Sandbox.BeforeDiff = func(ctx context.Context, sandboxes map[string]string) {
		*called++
		require.Equal(t, map[string]string{ns: sandbox}, sandboxes, "the source namespace, restored into the sandbox")
		tamper(t, sandbox)
	}
	return called
}

// tamper changes, in sandbox, one key of ConfigMap settings and one of Secret db
// (namespaceOfManyKinds), as if the restore had brought them back wrong.
func tamper(t *testing.T, sandbox string) {
	t.Helper()
	ctx := context.Background()
	cm := &corev1.ConfigMap{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: sandbox, Name: "settings"}, cm))
	cm.Data["mode"] = "tampered"
	require.NoError(t, cl.Update(ctx, cm))
	s := &corev1.Secret{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: sandbox, Name: "db"}, s))
	s.Data["password"] = []byte(secretValue + "-changed")
	require.NoError(t, cl.Update(ctx, s))
}

// assertTampered: what tamper changed is two content-mismatch findings (high), naming the keys;
// nothing is missing; and the Secret's value is nowhere: not in a finding, the run's status or its
// events.
func assertTampered(t *testing.T, run *securityv1.BackupVerifyRun, r *securityv1.BackupVerifyResult, sandbox string) {
	t.Helper()
	byObject := map[string]securityv1.Finding{}
	for _, f := range r.Spec.Findings {
		if f.Code == securityv1.CodeContentMismatch {
			assert.Equal(t, securityv1.SeverityHigh, f.Severity)
			byObject[f.Object] = f
		}
	}
	cm, ok := byObject["core/ConfigMap "+sandbox+"/settings"]
	require.True(t, ok, findingsOf(r.Spec.Findings))
	assert.Contains(t, cm.Message, `data.mode differs (backup: "prod", sandbox: "tampered")`)
	s, ok := byObject["core/Secret "+sandbox+"/db"]
	require.True(t, ok, findingsOf(r.Spec.Findings))
	assert.Contains(t, s.Message, "data.password differs")
	assert.Contains(t, s.Message, strconv.Itoa(len(secretValue))+" bytes")
	assert.Equal(t, "2", r.Spec.Details[velerocheck.DetailObjectsDiffering])
	assert.Equal(t, r.Spec.ObjectsExpected, r.Spec.ObjectsRestored, "nothing is missing")

	var seen []string
	for _, v := range []any{r.Spec, r.Status, run.Status} {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		seen = append(seen, string(b))
	}
	for _, evs := range securityEvents(t, run) {
		b, err := json.Marshal(evs)
		require.NoError(t, err)
		seen = append(seen, string(b))
	}
	for _, s := range seen {
		assert.NotContains(t, s, secretValue)
		assert.NotContains(t, s, base64.StdEncoding.EncodeToString([]byte(secretValue))[:20])
	}
}

func findingsOf(fs []securityv1.Finding) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(f.Code + " " + string(f.Severity) + " " + f.Object + ": " + f.Message + "\n")
	}
	return b.String()
}
