package v1alpha1

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseArtifactReport(t *testing.T) {
	sum := "sha256:" + strings.Repeat("ab", 32)
	cases := []struct {
		name, msg, err string
	}{
		{"valid", `{"uri":"s3://bucket/a/b.tar","sizeBytes":10,"checksum":"` + sum + `"}`, ""},
		{"valid with whitespace", "\n {\"uri\":\"s3://b/k\",\"sizeBytes\":0,\"checksum\":\"" + sum + "\"}\n", ""},
		{"empty", "", "empty"},
		{"not json", "done", "not an artifact report"},
		{"unknown field", `{"uri":"s3://b/k","sizeBytes":1,"checksum":"` + sum + `","extra":1}`, "unknown field"},
		{"two values", `{"uri":"s3://b/k","sizeBytes":1,"checksum":"` + sum + `"} {}`, "more than one"},
		{"no uri", `{"sizeBytes":1,"checksum":"` + sum + `"}`, "uri is empty"},
		{"uri without scheme", `{"uri":"bucket/key","sizeBytes":1,"checksum":"` + sum + `"}`, "scheme and a host"},
		{"negative size", `{"uri":"s3://b/k","sizeBytes":-1,"checksum":"` + sum + `"}`, "negative"},
		{"upper-case hex", `{"uri":"s3://b/k","sizeBytes":1,"checksum":"` + strings.ToUpper(sum) + `"}`, "checksum"},
		{"short checksum", `{"uri":"s3://b/k","sizeBytes":1,"checksum":"sha256:abc"}`, "checksum"},
		{"md5", `{"uri":"s3://b/k","sizeBytes":1,"checksum":"md5:` + strings.Repeat("a", 32) + `"}`, "checksum"},
		{"too long", `{"uri":"s3://b/` + strings.Repeat("k", MaxReportBytes) + `","sizeBytes":1,"checksum":"` + sum + `"}`, "more than"},
		{"metadata", `{"uri":"s3://b/k","sizeBytes":1,"checksum":"` + sum + `","metadata":{"format":"2","uncompressedBytes":"10"}}`, ""},
		{"metadata key", `{"uri":"s3://b/k","sizeBytes":1,"checksum":"` + sum + `","metadata":{"a/b":"x"}}`, "metadata key"},
		{"metadata value", `{"uri":"s3://b/k","sizeBytes":1,"checksum":"` + sum + `","metadata":{"a":"` + strings.Repeat("v", MaxMetadataValueLength+1) + `"}}`, "more than"},
		{"metadata entries", `{"uri":"s3://b/k","sizeBytes":1,"checksum":"` + sum + `","metadata":{` + manyEntries(MaxMetadataEntries+1) + `}}`, "entries"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseArtifactReport(tc.msg)
			if tc.err == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if r.Checksum != sum || r.URI == "" {
					t.Fatalf("decoded %+v", r)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want one containing %q", err, tc.err)
			}
		})
	}
}

func TestParamEnvName(t *testing.T) {
	for in, want := range map[string]string{
		"endpoint":          "COFFER_PARAM_ENDPOINT",
		"credentialsSecret": "COFFER_PARAM_CREDENTIALSSECRET",
		"s3.region-name":    "COFFER_PARAM_S3_REGION_NAME",
		"a_b9":              "COFFER_PARAM_A_B9",
	} {
		if got := ParamEnvName(in); got != want {
			t.Errorf("ParamEnvName(%q) = %q, want %q", in, got, want)
		}
	}
}

func manyEntries(n int) string {
	var parts []string
	for i := range n {
		parts = append(parts, fmt.Sprintf(`"k%d":"v"`, i))
	}
	return strings.Join(parts, ",")
}

func TestParseCheckReport(t *testing.T) {
	cases := []struct {
		name, msg, err string
		want           CheckReport
	}{
		{"exists", `{"exists":true,"sizeBytes":4096}`, "", CheckReport{Exists: true, SizeBytes: 4096}},
		{"gone", " {\"exists\":false,\"sizeBytes\":0}\n", "", CheckReport{}},
		{"empty", "", "empty", CheckReport{}},
		{"an error message", "check failed: access denied", "not a check report", CheckReport{}},
		{"unknown field", `{"exists":true,"sizeBytes":1,"uri":"s3://b/k"}`, "unknown field", CheckReport{}},
		{"no exists", `{"sizeBytes":1}`, "exists is missing", CheckReport{}},
		{"no size", `{"exists":true}`, "sizeBytes is missing", CheckReport{}},
		{"negative size", `{"exists":true,"sizeBytes":-1}`, "negative", CheckReport{}},
		{"two values", `{"exists":true,"sizeBytes":1} {}`, "more than one", CheckReport{}},
		{"too long", `{"exists":true,` + strings.Repeat(" ", MaxReportBytes) + `"sizeBytes":1}`, "more than", CheckReport{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseCheckReport(tc.msg)
			if tc.err == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if *r != tc.want {
					t.Fatalf("decoded %+v, want %+v", *r, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want one containing %q", err, tc.err)
			}
		})
	}
}

func TestParseVerifyReport(t *testing.T) {
	good := `{"uri":"s3://b/k.tar","format":3,"files":7,"compared":6,"mismatched":1,"differences":["a: SHA-256 x restored, the backup holds y"]}`
	r, err := ParseVerifyReport(good)
	if err != nil || r.Files != 7 || r.Compared != 6 || r.Mismatched != 1 || len(r.Differences) != 1 || r.Format != 3 {
		t.Fatalf("ParseVerifyReport(%s) = %+v, %v", good, r, err)
	}
	ten := strings.Repeat(`"d",`, MaxVerifyDifferences)
	for _, tc := range []struct{ name, msg, err string }{
		{"empty", "", "empty"},
		{"an error message", "verify failed: wrong key", "not a verify report"},
		{"unknown field", `{"uri":"u","format":3,"files":1,"compared":1,"mismatched":0,"extra":1}`, "unknown field"},
		{"no format", `{"uri":"u","files":1,"compared":1,"mismatched":0}`, "format is missing"},
		{"negative", `{"uri":"u","format":3,"files":1,"compared":-1,"mismatched":0}`, "negative"},
		{"differences without a count", `{"uri":"u","format":3,"files":1,"compared":1,"mismatched":0,"differences":["d"]}`, "counts none"},
		{"too many differences", `{"uri":"u","format":3,"files":1,"compared":0,"mismatched":20,"differences":[` + ten + `"d"]}`, "more than"},
		{"more compared than restored", `{"uri":"u","format":3,"files":1,"compared":2,"mismatched":0}`, "compared 2 files but restored 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseVerifyReport(tc.msg); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want one containing %q", err, tc.err)
			}
		})
	}
}
