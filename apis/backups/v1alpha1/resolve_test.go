package v1alpha1

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func ptr[T any](v T) *T { return &v }

func TestApplicationAPIGroup(t *testing.T) {
	tests := []struct {
		name  string
		group *string
		want  string
	}{
		{"unset defaults", nil, DefaultApplicationAPIGroup},
		{"empty defaults", ptr(""), DefaultApplicationAPIGroup},
		{"explicit kept", ptr("kubevirt.io"), "kubevirt.io"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ref := corev1.TypedLocalObjectReference{APIGroup: tt.group, Kind: "VM", Name: "a"}
			assert.Equal(t, tt.want, ApplicationAPIGroup(ref))
			norm := NormalizeApplicationRef(ref)
			require.NotNil(t, norm.APIGroup)
			assert.Equal(t, tt.want, *norm.APIGroup)
			assert.Equal(t, ref.Kind, norm.Kind)
			assert.Equal(t, ref.Name, norm.Name)
			assert.Equal(t, tt.group, ref.APIGroup, "the input is not modified")
		})
	}
}

func TestResolveStrategy(t *testing.T) {
	velero := corev1.TypedLocalObjectReference{APIGroup: ptr("velerodriver.backups.cozystack.io"), Kind: "VeleroBackupStrategy", Name: "vm"}
	job := corev1.TypedLocalObjectReference{APIGroup: ptr("jobdriver.backups.cozystack.io"), Kind: "JobBackupStrategy", Name: "db"}
	jobToo := corev1.TypedLocalObjectReference{APIGroup: ptr("jobdriver.backups.cozystack.io"), Kind: "JobBackupStrategy", Name: "db-second"}
	class := &BackupClass{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: BackupClassSpec{Strategies: []BackupClassStrategy{
			{StrategyRef: velero, Application: ApplicationSelector{Kind: "VirtualMachine"}, Parameters: map[string]string{"backupStorageLocationName": "default"}},
			{StrategyRef: job, Application: ApplicationSelector{APIGroup: ptr("db.example.com"), Kind: "Postgres"}},
			{StrategyRef: jobToo, Application: ApplicationSelector{APIGroup: ptr("db.example.com"), Kind: "Postgres"}},
		}},
	}
	tests := []struct {
		name       string
		class      *BackupClass
		app        corev1.TypedLocalObjectReference
		want       *corev1.TypedLocalObjectReference
		wantParams map[string]string
		wantReason string
	}{
		{name: "default group matches selector without group", class: class,
			app: corev1.TypedLocalObjectReference{Kind: "VirtualMachine", Name: "vm1"}, want: &velero,
			wantParams: map[string]string{"backupStorageLocationName": "default"}},
		{name: "explicit default group matches", class: class,
			app: corev1.TypedLocalObjectReference{APIGroup: ptr(DefaultApplicationAPIGroup), Kind: "VirtualMachine", Name: "vm1"}, want: &velero,
			wantParams: map[string]string{"backupStorageLocationName": "default"}},
		{name: "first matching strategy wins", class: class,
			app: corev1.TypedLocalObjectReference{APIGroup: ptr("db.example.com"), Kind: "Postgres", Name: "pg"}, want: &job,
			wantParams: map[string]string{}},
		{name: "same kind in another group does not match", class: class,
			app:        corev1.TypedLocalObjectReference{APIGroup: ptr("other.io"), Kind: "VirtualMachine", Name: "vm1"},
			wantReason: ReasonNoMatchingStrategy},
		{name: "kind is case-sensitive", class: class,
			app:        corev1.TypedLocalObjectReference{Kind: "virtualmachine", Name: "vm1"},
			wantReason: ReasonNoMatchingStrategy},
		{name: "missing class", class: nil,
			app:        corev1.TypedLocalObjectReference{Kind: "VirtualMachine", Name: "vm1"},
			wantReason: ReasonBackupClassNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ResolveStrategy("default", tt.class, tt.app)
			if tt.wantReason != "" {
				require.Error(t, err)
				assert.Nil(t, got)
				assert.Equal(t, tt.wantReason, ResolutionReason(err))
				assert.Contains(t, err.Error(), `"default"`)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, *tt.want, got.StrategyRef)
			assert.Equal(t, "default", got.ClassName)
			assert.Equal(t, tt.wantParams, got.Parameters)
		})
	}
}

func TestResolveStrategyCopiesParameters(t *testing.T) {
	class := &BackupClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: BackupClassSpec{Strategies: []BackupClassStrategy{{
		StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr("g"), Kind: "K", Name: "n"},
		Application: ApplicationSelector{Kind: "A"}, Parameters: map[string]string{"k": "v"},
	}}}}
	got, err := ResolveStrategy("c", class, corev1.TypedLocalObjectReference{Kind: "A", Name: "a"})
	require.NoError(t, err)
	got.Parameters["k"] = "changed"
	assert.Equal(t, "v", class.Spec.Strategies[0].Parameters["k"], "the class is not aliased")
}

func TestResolutionReasonOfOtherErrors(t *testing.T) {
	assert.Equal(t, "", ResolutionReason(errors.New("boom")))
	assert.Equal(t, "", ResolutionReason(nil))
}

func TestStrategyIs(t *testing.T) {
	ref := corev1.TypedLocalObjectReference{APIGroup: ptr("velerodriver.backups.cozystack.io"), Kind: "VeleroBackupStrategy", Name: "x"}
	assert.True(t, StrategyIs(ref, "velerodriver.backups.cozystack.io", "VeleroBackupStrategy"))
	assert.False(t, StrategyIs(ref, "jobdriver.backups.cozystack.io", "VeleroBackupStrategy"))
	assert.False(t, StrategyIs(ref, "velerodriver.backups.cozystack.io", "JobBackupStrategy"))
	ref.APIGroup = nil
	assert.False(t, StrategyIs(ref, "velerodriver.backups.cozystack.io", "VeleroBackupStrategy"), "a strategy never defaults its group")
}

func TestAllowsNamespace(t *testing.T) {
	class := func(sel *metav1.LabelSelector) *BackupClass {
		return &BackupClass{ObjectMeta: metav1.ObjectMeta{Name: "gold"}, Spec: BackupClassSpec{NamespaceSelector: sel}}
	}
	tier := map[string]string{"tier": "gold", "team": "a"}
	tests := []struct {
		name    string
		sel     *metav1.LabelSelector
		labels  map[string]string
		allowed bool
	}{
		{"no selector allows every namespace", nil, nil, true},
		{"empty selector allows every namespace", &metav1.LabelSelector{}, nil, true},
		{"matchLabels matches", &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}, tier, true},
		{"matchLabels other value", &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "silver"}}, tier, false},
		{"matchLabels on a namespace without labels", &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}, nil, false},
		{"In", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"silver", "gold"}}}}, tier, true},
		{"NotIn", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"gold"}}}}, tier, false},
		{"NotIn with the key absent", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "zone", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"x"}}}}, tier, true},
		{"Exists", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: metav1.LabelSelectorOpExists}}}, tier, true},
		{"DoesNotExist", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: metav1.LabelSelectorOpDoesNotExist}}}, tier, false},
		{"an invalid selector allows nothing", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Gt"}}}, tier, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := class(tt.sel).AllowsNamespace("ns", tt.labels)
			if tt.allowed {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Equal(t, ReasonBackupClassNotAllowed, ResolutionReason(err))
			assert.Contains(t, err.Error(), `BackupClass "gold" may not be used in namespace "ns"`)
		})
	}
}
