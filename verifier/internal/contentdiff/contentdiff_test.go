package contentdiff

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// obj decodes JSON as the client and the tarball reader do (integers as int64).
func obj(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, utiljson.Unmarshal([]byte(s), &m))
	return m
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// TestNormalize: for each kind, the backup's copy and the sandbox's copy as a real restore leaves
// them normalize to the same object (or not, when the difference is real).
func TestNormalize(t *testing.T) {
	mapping := map[string]string{"prod": "prod-bvsandbox"}
	gk := func(group, kind string) schema.GroupKind { return schema.GroupKind{Group: group, Kind: kind} }
	for _, tt := range []struct {
		name          string
		gk            schema.GroupKind
		backup, live  string
		equal         bool
		normalBackupJ string // when set, what the backup's copy normalizes to
	}{
		{
			name:          "metadata and status are not compared, Velero's labels are dropped",
			gk:            gk("", "ConfigMap"),
			backup:        `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"prod","uid":"1","resourceVersion":"5","labels":{"app":"web"},"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{}"}},"data":{"k":"v"}}`,
			live:          `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"prod-bvsandbox","uid":"2","resourceVersion":"9","labels":{"app":"web","velero.io/backup-name":"b","velero.io/restore-name":"r"},"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{}"},"managedFields":[{}]},"data":{"k":"v"}}`,
			equal:         true,
			normalBackupJ: `{"data":{"k":"v"},"metadata":{"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{}"},"labels":{"app":"web"}}}`,
		},
		{
			name:   "a user label differs",
			gk:     gk("", "ConfigMap"),
			backup: `{"metadata":{"labels":{"app":"web"}},"data":{"k":"v"}}`,
			live:   `{"metadata":{"labels":{"app":"api","velero.io/restore-name":"r"}},"data":{"k":"v"}}`,
		},
		{
			name:   "only Velero's labels: same as none",
			gk:     gk("", "ConfigMap"),
			backup: `{"metadata":{"name":"a"},"data":{"k":"v"}}`,
			live:   `{"metadata":{"name":"a","labels":{"velero.io/backup-name":"b","velero.io/restore-name":"r"}},"data":{"k":"v"}}`,
			equal:  true,
		},
		{
			name:   "ConfigMap binaryData byte for byte",
			gk:     gk("", "ConfigMap"),
			backup: `{"binaryData":{"b":"` + b64("\x00\x01") + `"}}`,
			live:   `{"binaryData":{"b":"` + b64("\x00\x02") + `"}}`,
		},
		{
			name:   "Secret data byte for byte",
			gk:     gk("", "Secret"),
			backup: `{"type":"Opaque","data":{"password":"` + b64("hunter2") + `"}}`,
			live:   `{"type":"Opaque","data":{"password":"` + b64("hunter3") + `"}}`,
		},
		{
			name:   "Secret: same data",
			gk:     gk("", "Secret"),
			backup: `{"type":"Opaque","data":{"password":"` + b64("hunter2") + `"}}`,
			live:   `{"type":"Opaque","data":{"password":"` + b64("hunter2") + `"}}`,
			equal:  true,
		},
		{
			name:   "service-account-token Secret: what the token controller writes again",
			gk:     gk("", "Secret"),
			backup: `{"type":"kubernetes.io/service-account-token","metadata":{"annotations":{"kubernetes.io/service-account.name":"ci","kubernetes.io/service-account.uid":"1"}},"data":{"token":"` + b64("t1") + `","ca.crt":"` + b64("ca1") + `","namespace":"` + b64("prod") + `"}}`,
			live:   `{"type":"kubernetes.io/service-account-token","metadata":{"annotations":{"kubernetes.io/service-account.name":"ci","kubernetes.io/service-account.uid":"2"}},"data":{"token":"` + b64("t2") + `","ca.crt":"` + b64("ca2") + `","namespace":"` + b64("prod-bvsandbox") + `"}}`,
			equal:  true,
		},
		{
			name:   "Deployment: replicas zeroed by the sandbox",
			gk:     gk("apps", "Deployment"),
			backup: `{"spec":{"replicas":3,"template":{"spec":{"containers":[{"name":"web","image":"web:1"}]}}}}`,
			live:   `{"spec":{"replicas":0,"template":{"spec":{"containers":[{"name":"web","image":"web:1"}]}}}}`,
			equal:  true,
		},
		{
			name:   "Deployment: an image differs",
			gk:     gk("apps", "Deployment"),
			backup: `{"spec":{"replicas":3,"template":{"spec":{"containers":[{"name":"web","image":"web:1"}]}}}}`,
			live:   `{"spec":{"replicas":0,"template":{"spec":{"containers":[{"name":"web","image":"web:2"}]}}}}`,
		},
		{
			name:   "StatefulSet and ReplicaSet: replicas",
			gk:     gk("apps", "StatefulSet"),
			backup: `{"spec":{"replicas":1,"serviceName":"s"}}`,
			live:   `{"spec":{"replicas":0,"serviceName":"s"}}`,
			equal:  true,
		},
		{
			name:   "CronJob: suspended by the sandbox",
			gk:     gk("batch", "CronJob"),
			backup: `{"spec":{"schedule":"0 0 * * *"}}`,
			live:   `{"spec":{"schedule":"0 0 * * *","suspend":true}}`,
			equal:  true,
		},
		{
			name:   "CronJob: schedule differs",
			gk:     gk("batch", "CronJob"),
			backup: `{"spec":{"schedule":"0 0 * * *","suspend":false}}`,
			live:   `{"spec":{"schedule":"0 1 * * *","suspend":true}}`,
		},
		{
			name:   "Job: controller-uid selector and labels, suspend",
			gk:     gk("batch", "Job"),
			backup: `{"spec":{"suspend":false,"selector":{"matchLabels":{"batch.kubernetes.io/controller-uid":"1"}},"template":{"metadata":{"labels":{"app":"x","controller-uid":"1","batch.kubernetes.io/controller-uid":"1","job-name":"j"}}}}}`,
			live:   `{"spec":{"suspend":true,"selector":{"matchLabels":{"batch.kubernetes.io/controller-uid":"2"}},"template":{"metadata":{"labels":{"app":"x","controller-uid":"2","batch.kubernetes.io/controller-uid":"2","job-name":"j"}}}}}`,
			equal:  true,
		},
		{
			name:   "Service: cluster IPs and node ports are assigned again",
			gk:     gk("", "Service"),
			backup: `{"spec":{"type":"LoadBalancer","clusterIP":"10.0.0.1","clusterIPs":["10.0.0.1"],"healthCheckNodePort":31000,"ports":[{"port":80,"nodePort":30080}],"selector":{"app":"web"}}}`,
			live:   `{"spec":{"type":"LoadBalancer","clusterIP":"10.0.0.9","clusterIPs":["10.0.0.9"],"healthCheckNodePort":31555,"ports":[{"port":80,"nodePort":30999}],"selector":{"app":"web"}}}`,
			equal:  true,
		},
		{
			name:   "Service: headless stays headless",
			gk:     gk("", "Service"),
			backup: `{"spec":{"clusterIP":"None","clusterIPs":["None"]}}`,
			live:   `{"spec":{"clusterIP":"10.0.0.9","clusterIPs":["10.0.0.9"]}}`,
		},
		{
			name:   "Service: a port differs",
			gk:     gk("", "Service"),
			backup: `{"spec":{"clusterIP":"10.0.0.1","ports":[{"port":80}]}}`,
			live:   `{"spec":{"clusterIP":"10.0.0.9","ports":[{"port":81}]}}`,
		},
		{
			name:   "PersistentVolumeClaim: binding",
			gk:     gk("", "PersistentVolumeClaim"),
			backup: `{"metadata":{"annotations":{"pv.kubernetes.io/bind-completed":"yes","volume.kubernetes.io/selected-node":"n1"}},"spec":{"volumeName":"pv-1","resources":{"requests":{"storage":"1Gi"}}}}`,
			live:   `{"spec":{"resources":{"requests":{"storage":"1Gi"}}}}`,
			equal:  true,
		},
		{
			name:   "PersistentVolumeClaim: restored without volume data",
			gk:     gk("", "PersistentVolumeClaim"),
			backup: `{"spec":{"volumeName":"pv-1","dataSource":{"kind":"VolumeSnapshot","name":"s1","apiGroup":"snapshot.storage.k8s.io"},"dataSourceRef":{"kind":"VolumeSnapshot","name":"s1","apiGroup":"snapshot.storage.k8s.io"},"resources":{"requests":{"storage":"1Gi"}}}}`,
			live:   `{"spec":{"resources":{"requests":{"storage":"1Gi"}}}}`,
			equal:  true,
		},
		{
			name:   "PersistentVolumeClaim: the data mover's selector",
			gk:     gk("", "PersistentVolumeClaim"),
			backup: `{"spec":{"resources":{"requests":{"storage":"1Gi"}}}}`,
			live:   `{"spec":{"selector":{"matchLabels":{"velero.io/dynamic-pv-restore":"shop.data.x7k2p"}},"resources":{"requests":{"storage":"1Gi"}}}}`,
			equal:  true,
		},
		{
			name:   "PersistentVolumeClaim: a selector of its own, with the data mover's label",
			gk:     gk("", "PersistentVolumeClaim"),
			backup: `{"spec":{"selector":{"matchLabels":{"tier":"fast"}}}}`,
			live:   `{"spec":{"selector":{"matchLabels":{"tier":"fast","velero.io/dynamic-pv-restore":"shop.data.x7k2p"}}}}`,
			equal:  true,
		},
		{
			name:   "PersistentVolumeClaim: another selector differs",
			gk:     gk("", "PersistentVolumeClaim"),
			backup: `{"spec":{"selector":{"matchLabels":{"tier":"fast"}}}}`,
			live:   `{"spec":{"selector":{"matchLabels":{"tier":"slow"}}}}`,
		},
		{
			name:   "ServiceAccount: token Secrets",
			gk:     gk("", "ServiceAccount"),
			backup: `{"metadata":{"name":"ci"},"secrets":[{"name":"ci-token-abcde"}],"imagePullSecrets":[{"name":"reg"}]}`,
			live:   `{"metadata":{"name":"ci"},"imagePullSecrets":[{"name":"reg"}]}`,
			equal:  true,
		},
		{
			name:   "ServiceAccount: another Secret is content",
			gk:     gk("", "ServiceAccount"),
			backup: `{"metadata":{"name":"ci"},"secrets":[{"name":"ci-token-abcde"},{"name":"deploy-key"}]}`,
			live:   `{"metadata":{"name":"ci"}}`,
		},
		{
			name:   "RoleBinding: subjects in a mapped namespace",
			gk:     gk("rbac.authorization.k8s.io", "RoleBinding"),
			backup: `{"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"r"},"subjects":[{"kind":"ServiceAccount","name":"web","namespace":"prod"},{"kind":"ServiceAccount","name":"x","namespace":"other"}]}`,
			live:   `{"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"r"},"subjects":[{"kind":"ServiceAccount","name":"web","namespace":"prod-bvsandbox"},{"kind":"ServiceAccount","name":"x","namespace":"other"}]}`,
			equal:  true,
		},
		{
			name:   "RoleBinding: a subject left in the source namespace is a difference",
			gk:     gk("rbac.authorization.k8s.io", "RoleBinding"),
			backup: `{"subjects":[{"kind":"ServiceAccount","name":"web","namespace":"prod"}]}`,
			live:   `{"subjects":[{"kind":"ServiceAccount","name":"web","namespace":"prod"}]}`,
		},
		{
			name:   "Role rules",
			gk:     gk("rbac.authorization.k8s.io", "Role"),
			backup: `{"rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["get"]}]}`,
			live:   `{"rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["get","delete"]}]}`,
		},
		{
			name:   "numbers compare as numbers",
			gk:     gk("policy", "PodDisruptionBudget"),
			backup: `{"spec":{"minAvailable":1}}`,
			live:   `{"spec":{"minAvailable":1.0}}`,
			equal:  true,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := Normalize(obj(t, tt.backup), tt.gk, mapping)
			l := Normalize(obj(t, tt.live), tt.gk, nil)
			if tt.normalBackupJ != "" {
				j, err := json.Marshal(b)
				require.NoError(t, err)
				assert.JSONEq(t, tt.normalBackupJ, string(j))
			}
			bd, err := DigestOf(b)
			require.NoError(t, err)
			ld, err := DigestOf(l)
			require.NoError(t, err)
			assert.Equal(t, tt.equal, bd == ld, "digests")
			_, found := FirstDiff(b, l)
			assert.Equal(t, !tt.equal, found, "FirstDiff")
		})
	}
}

func TestFirstDiffDescribesWithoutSecretValues(t *testing.T) {
	cm := schema.GroupKind{Kind: "ConfigMap"}
	secret := schema.GroupKind{Kind: "Secret"}
	deploy := schema.GroupKind{Group: "apps", Kind: "Deployment"}
	for _, tt := range []struct {
		name         string
		gk           schema.GroupKind
		backup, live string
		want         string
	}{
		{"ConfigMap value, quoted", cm, `{"data":{"a":"1","mode":"prod"}}`, `{"data":{"a":"1","mode":"tampered"}}`,
			`data.mode differs (backup: "prod", sandbox: "tampered")`},
		{"ConfigMap dotted key, long value cut", cm, `{"data":{"app.properties":"` + strings.Repeat("x", 100) + `"}}`, `{"data":{"app.properties":"y"}}`,
			`data["app.properties"] differs (backup: "` + strings.Repeat("x", 40) + `"… (100 bytes), sandbox: "y")`},
		{"ConfigMap key missing", cm, `{"data":{"a":"1","b":"2"}}`, `{"data":{"a":"1"}}`,
			`data.b is missing from the sandbox (backup: "2")`},
		{"ConfigMap binaryData: sizes", cm, `{"binaryData":{"b":"` + b64("abc") + `"}}`, `{"binaryData":{"b":"` + b64("abcd") + `"}}`,
			`binaryData.b differs (backup: 3 bytes, sandbox: 4 bytes)`},
		{"Secret: key and sizes only", secret, `{"data":{"password":"` + b64("hunter2") + `"}}`, `{"data":{"password":"` + b64("s3cr3t-value") + `"}}`,
			`data.password differs (backup: 7 bytes, sandbox: 12 bytes)`},
		{"Secret key added", secret, `{"data":{}}`, `{"data":{"extra":"` + b64("hunter2") + `"}}`,
			`data.extra is in the sandbox but not in the backup (sandbox: 7 bytes)`},
		{"Secret annotation: no value", secret, `{"metadata":{"annotations":{"a":"hunter2"}}}`, `{"metadata":{"annotations":{"a":"s3cr3t-value"}}}`,
			`metadata.annotations.a differs`},
		{"nested list", deploy, `{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"web:1"}]}}}}`, `{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"web:2"}]}}}}`,
			`spec.template.spec.containers[0].image differs`},
		{"list grows", deploy, `{"spec":{"template":{"spec":{"containers":[{"name":"web"}]}}}}`, `{"spec":{"template":{"spec":{"containers":[{"name":"web"},{"name":"side"}]}}}}`,
			`spec.template.spec.containers[1] is in the sandbox but not in the backup`},
		{"a map where a string was", deploy, `{"spec":{"x":"1"}}`, `{"spec":{"x":{"y":"1"}}}`, `spec.x differs`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, found := FirstDiff(Normalize(obj(t, tt.backup), tt.gk, nil), Normalize(obj(t, tt.live), tt.gk, nil))
			require.True(t, found)
			msg := d.Describe(tt.gk)
			assert.Equal(t, tt.want, msg)
			if tt.gk == secret {
				assert.NotContains(t, msg, "hunter2")
				assert.NotContains(t, msg, "s3cr3t")
			}
		})
	}
}
