package v1alpha1

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func recordedBackup() *Backup {
	group := "jobdriver.backups.cozystack.io"
	return &Backup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "db-29500000", UID: "0f4b",
			Labels: map[string]string{LabelApplicationKind: "MariaDB", LabelApplicationName: "db", LabelPlan: "nightly", "team": "x"}},
		Spec: BackupSpec{
			ApplicationRef: corev1.TypedLocalObjectReference{Kind: "MariaDB", Name: "db"},
			PlanRef:        &corev1.LocalObjectReference{Name: "nightly"},
			StrategyRef:    corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "JobBackupStrategy", Name: "files"},
			TakenAt:        metav1.NewTime(time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)),
			DriverMetadata: map[string]string{"artifact.format": "2"},
		},
		Status: BackupStatus{Phase: BackupReady, Artifact: &BackupArtifact{URI: "s3://b/tenant-a/db.tar", SizeBytes: 42,
			Checksum: "sha256:" + strings.Repeat("ab", 32)}},
	}
}

// TestArtifactRecordRoundTrip: a record made from a Backup parses back to the same Backup spec,
// artifact and contract labels, and keeps no other label.
func TestArtifactRecordRoundTrip(t *testing.T) {
	r, err := NewArtifactRecord(recordedBackup(), SourceCluster{ID: "5d1c", Name: "prod-a"})
	if err != nil {
		t.Fatal(err)
	}
	data, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseArtifactRecord(data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	b := recordedBackup()
	if got.Namespace != b.Namespace || got.Name != b.Name || got.UID != b.UID || got.SourceCluster.ID != "5d1c" || got.SourceCluster.Name != "prod-a" {
		t.Errorf("identity: %+v", got)
	}
	if !got.Spec.TakenAt.Equal(&b.Spec.TakenAt) || got.Spec.PlanRef.Name != "nightly" || *got.Spec.StrategyRef.APIGroup != *b.Spec.StrategyRef.APIGroup ||
		got.Spec.DriverMetadata["artifact.format"] != "2" || got.Artifact != *b.Status.Artifact {
		t.Errorf("spec or artifact differ: %+v", got)
	}
	if len(got.Labels) != 3 || got.Labels["team"] != "" || got.Labels[LabelPlan] != "nightly" {
		t.Errorf("labels: %v", got.Labels)
	}
}

// TestArtifactRecordRefusesHostileInput: a record is read from storage anyone with write access
// to the bucket could have written; every malformed one is refused with a reason.
func TestArtifactRecordRefusesHostileInput(t *testing.T) {
	r, err := NewArtifactRecord(recordedBackup(), SourceCluster{ID: "5d1c"})
	if err != nil {
		t.Fatal(err)
	}
	good, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(*ArtifactRecord)) []byte {
		c := *r
		c.Spec = *r.Spec.DeepCopy()
		f(&c)
		data, err := jsonMarshal(&c)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	cases := map[string]struct {
		data []byte
		want string
	}{
		"too long":          {append(good, make([]byte, MaxRecordBytes)...), "more than"},
		"not JSON":          {[]byte("{"), "not an ArtifactRecord"},
		"unknown field":     {[]byte(strings.Replace(string(good), `"format"`, `"evil": 1, "format"`, 1)), "unknown field"},
		"trailing data":     {append(good, []byte(`{}`)...), "after its JSON object"},
		"another kind":      {edit(func(c *ArtifactRecord) { c.Kind = "Secret" }), "not backups.cozystack.io/v1alpha1 ArtifactRecord"},
		"a future format":   {edit(func(c *ArtifactRecord) { c.Format = 2 }), "format 2"},
		"no source cluster": {edit(func(c *ArtifactRecord) { c.SourceCluster.ID = "" }), "no source cluster"},
		"namespace escape":  {edit(func(c *ArtifactRecord) { c.Namespace = "../kube-system" }), "not a namespace name"},
		"bad name":          {edit(func(c *ArtifactRecord) { c.Name = "Db/x" }), "not an object name"},
		"bad label":         {edit(func(c *ArtifactRecord) { c.Labels = map[string]string{LabelPlan: "a b"} }), "not a label value"},
		"foreign label":     {edit(func(c *ArtifactRecord) { c.Labels = map[string]string{LabelManagedBy: "x"} }), "records do not carry"},
		"no strategy group": {edit(func(c *ArtifactRecord) { c.Spec.StrategyRef.APIGroup = nil }), "no strategy"},
		"no application":    {edit(func(c *ArtifactRecord) { c.Spec.ApplicationRef.Name = "" }), "no application"},
		"no takenAt":        {edit(func(c *ArtifactRecord) { c.Spec.TakenAt = metav1.Time{} }), "no takenAt"},
		"no URI":            {edit(func(c *ArtifactRecord) { c.Artifact.URI = "" }), "URI is empty"},
		"negative size":     {edit(func(c *ArtifactRecord) { c.Artifact.SizeBytes = -1 }), "negative"},
		"bad checksum":      {edit(func(c *ArtifactRecord) { c.Artifact.Checksum = "md5:00" }), "not sha256"},
	}
	for name, tc := range cases {
		_, err := ParseArtifactRecord(tc.data)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, tc.want)
		}
	}
	if _, err := NewArtifactRecord(&Backup{}, SourceCluster{ID: "x"}); err == nil {
		t.Error("a Backup without an artifact made a record")
	}
}

// jsonMarshal encodes a record without Marshal's validation, as a hostile writer would.
func jsonMarshal(r *ArtifactRecord) ([]byte, error) { return json.Marshal(r) }
