package cachetrim_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	"github.com/coffer-backup/coffer/apis/cachetrim"
)

func TestTransform(t *testing.T) {
	rj := &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns",
		Labels:        map[string]string{"team": "a"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		Annotations: map[string]string{
			"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 200<<10),
			strings.Clone(backupsv1.AnnotationScheduledTime):   "2026-04-29T02:00:00Z",      // a key of its own, as decoded
			backupsv1.AnnotationAdopted:                        strings.Repeat("true", 100), // named, but longer than its bound
		}},
		Spec: backupsv1.RestoreJobSpec{Options: backupsv1.StringOptions(map[string]string{"targetNamespace": "b"})}}
	dropOptions := func(obj any) { obj.(*backupsv1.RestoreJob).Spec.Options = nil }
	out, err := cachetrim.Transform(cachetrim.Keep{backupsv1.AnnotationScheduledTime: 64, backupsv1.AnnotationAdopted: 8}, dropOptions)(rj)
	require.NoError(t, err)
	got := out.(*backupsv1.RestoreJob)
	assert.Nil(t, got.ManagedFields)
	assert.Equal(t, map[string]string{backupsv1.AnnotationScheduledTime: "2026-04-29T02:00:00Z"}, got.Annotations)
	for k := range got.Annotations {
		assert.Equal(t, unsafe.StringData(backupsv1.AnnotationScheduledTime), unsafe.StringData(k), "a kept key is keep's string, not the decoded one")
	}
	assert.Equal(t, map[string]string{"team": "a"}, got.Labels, "labels are kept")
	assert.Nil(t, got.Spec.Options)

	none, err := cachetrim.Transform(cachetrim.Keep{})(&backupsv1.Plan{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"a": "b"}}})
	require.NoError(t, err)
	assert.Nil(t, none.(*backupsv1.Plan).Annotations)

	tombstone := struct{ Key string }{"ns/r"}
	same, err := cachetrim.Transform(cachetrim.Keep{})(tombstone)
	require.NoError(t, err)
	assert.Equal(t, tombstone, same, "what is not an object passes unchanged")
}

func TestMerge(t *testing.T) {
	assert.Equal(t, cachetrim.Keep{"a": 10, "b": 5}, cachetrim.Merge(cachetrim.Keep{"a": 3, "b": 5}, cachetrim.Keep{"a": 10}))
}

// InternPtr shares one pointer per value while its table has room, and past its bound still
// returns the value (interned as a string), never a wrong or nil one.
func TestInternPtr(t *testing.T) {
	fresh := func(s string) *string { v := string([]byte(s)); return &v }
	a, b := cachetrim.InternPtr(fresh("apps.cozystack.io")), cachetrim.InternPtr(fresh("apps.cozystack.io"))
	assert.Same(t, a, b)
	assert.Nil(t, cachetrim.InternPtr(nil))
	var last *string
	for i := range 3000 {
		v := fmt.Sprintf("group-%d.example.com", i)
		last = cachetrim.InternPtr(fresh(v))
		require.Equal(t, v, *last)
	}
	assert.Equal(t, "group-2999.example.com", *cachetrim.InternPtr(fresh("group-2999.example.com")))
	assert.Same(t, a, cachetrim.InternPtr(fresh("apps.cozystack.io")), "what was shared stays shared")
	assert.Equal(t, "", cachetrim.Intern(""))
}

// Maps alike are shared, whatever their order of insertion; others are not.
func TestInternMapSharesMapsAlike(t *testing.T) {
	same := func(a, b map[string]string) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	a := cachetrim.InternMap(map[string]string{"param.bucket": "coffer", "param.region": "eu"})
	b := cachetrim.InternMap(map[string]string{"param.region": "eu", "param.bucket": "coffer"})
	c := cachetrim.InternMap(map[string]string{"param.bucket": "other"})
	assert.True(t, same(a, b), "two maps alike are shared")
	assert.False(t, same(a, c))
	assert.Equal(t, map[string]string{"param.bucket": "other"}, c)
	assert.Nil(t, cachetrim.InternMap(nil))
}
