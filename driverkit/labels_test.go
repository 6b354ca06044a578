package driverkit_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// Every Backup the kit creates names its application in labels that are valid whatever the name's
// length, and is found by them, and by the Backup CRD's field selectors on spec.applicationRef.
func TestBackupsAreLabelledWithTheirApplication(t *testing.T) {
	f := newFixture(t)
	f.driver.backup = stored
	long := strings.Repeat("shop-", 20) + "x" // 101 characters: too long for a label value
	backups := map[string]*backupsv1.Backup{}
	for _, app := range []string{"shop", "shop-2", long} {
		job := &backupsv1.BackupJob{ObjectMeta: metav1.ObjectMeta{GenerateName: "job-", Namespace: f.ns},
			Spec: backupsv1.BackupJobSpec{ApplicationRef: corev1.TypedLocalObjectReference{Kind: "Shop", Name: app}, BackupClassName: f.class}}
		f.create(job)
		_, err := f.reconcileJob(job)
		require.NoError(t, err)
		require.Equal(t, backupsv1.BackupJobSucceeded, job.Status.Phase, job.Status.Message)
		b := &backupsv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: job.Status.BackupRef.Name}}
		f.get(b)
		for _, key := range []string{backupsv1.LabelApplicationKind, backupsv1.LabelApplicationName} {
			assert.Empty(t, validation.IsValidLabelValue(b.Labels[key]), "%s=%q is a valid label value", key, b.Labels[key])
		}
		assert.Equal(t, "Shop", b.Labels[backupsv1.LabelApplicationKind])
		assert.Equal(t, backupsv1.LabelValue(app), b.Labels[backupsv1.LabelApplicationName])
		backups[app] = b
	}
	assert.Equal(t, "shop", backups["shop"].Labels[backupsv1.LabelApplicationName], "a short name is the label as it is")
	assert.NotEqual(t, long, backups[long].Labels[backupsv1.LabelApplicationName], "a long one is cut and hashed")

	names := func(opts ...client.ListOption) []string {
		t.Helper()
		list := &backupsv1.BackupList{}
		require.NoError(t, cl.List(f.ctx, list, append(opts, client.InNamespace(f.ns))...))
		var out []string
		for _, b := range list.Items {
			out = append(out, b.Name)
		}
		return out
	}
	for app, b := range backups {
		assert.Equal(t, []string{b.Name}, names(client.MatchingLabels(backupsv1.ApplicationLabels(b.Spec.ApplicationRef))), "by labels: %s", app)
		assert.Equal(t, []string{b.Name}, names(client.MatchingFields{"spec.applicationRef.kind": "Shop", "spec.applicationRef.name": app}),
			"by field selectors: %s", app)
	}
	assert.Len(t, names(client.MatchingFields{"spec.applicationRef.kind": "Shop"}), 3)
	assert.Empty(t, names(client.MatchingFields{"spec.applicationRef.kind": "VirtualMachine"}))
}
