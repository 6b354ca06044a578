package velerocheck

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/verifier/internal/backend"
)

func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(content), 0o644))
	}
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// TestReaderDigestsWhatTheRepositoryHolds: the reader's digest of a restored tree equals the one
// the verifier builds from the repository's record of the same files (in any order), and differs
// when a file differs in content, size or path, is missing or added. Velero's marker at the root is
// not the backup's; links are not followed and only regular files are read.
func TestReaderDigestsWhatTheRepositoryHolds(t *testing.T) {
	files := map[string]string{"catalog.txt": "tea\ncoffee\n", "orders/2031/03.csv": "id,qty\n1,2\n", "orders/empty.csv": "", "media/blob.bin": strings.Repeat("x", 3<<20)}
	record := func(files map[string]string) *treeDigest {
		d := &treeDigest{}
		for _, p := range []string{"orders/empty.csv", "media/blob.bin", "catalog.txt", "orders/2031/03.csv"} { // not the walk's order
			if c, ok := files[p]; ok {
				d.add(p, int64(len(c)), sum(c))
			}
		}
		for p, c := range files {
			if !strings.Contains("orders/empty.csv media/blob.bin catalog.txt orders/2031/03.csv", p) {
				d.add(p, int64(len(c)), sum(c))
			}
		}
		d.seal()
		return d
	}
	dir := t.TempDir()
	writeTree(t, dir, files)
	writeTree(t, dir, map[string]string{".velero/6f1c": "", "orders/.velero/kept": "a tenant's own file of that name"})
	require.NoError(t, os.Symlink("/etc/hostname", filepath.Join(dir, "link")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	var seen []string
	got, err := digestTree(dir, func(p string, _ int64, _ string) { seen = append(seen, p) })
	require.NoError(t, err)
	want := map[string]string{"orders/.velero/kept": "a tenant's own file of that name"}
	for p, c := range files {
		want[p] = c
	}
	assert.Equal(t, record(want).Sum, got.Sum)
	assert.Equal(t, int64(5), got.Files)
	assert.Equal(t, int64(3<<20+22+len("a tenant's own file of that name")), got.Bytes)
	assert.ElementsMatch(t, []string{"catalog.txt", "media/blob.bin", "orders/.velero/kept", "orders/2031/03.csv", "orders/empty.csv"}, seen)

	for name, change := range map[string]func(map[string]string){
		"content": func(m map[string]string) { m["catalog.txt"] = "tea\ncocoa\n" },
		"missing": func(m map[string]string) { delete(m, "orders/empty.csv") },
		"added":   func(m map[string]string) { m["orders/extra"] = "" },
		"path":    func(m map[string]string) { m["catalog.TXT"] = m["catalog.txt"]; delete(m, "catalog.txt") },
	} {
		other := map[string]string{}
		for p, c := range want {
			other[p] = c
		}
		change(other)
		assert.NotEqual(t, record(other).Sum, got.Sum, name)
	}
}

// TestReaderCountsWhatItMayNotRead: a file or directory the reader's user may not open is counted
// and named, never read as empty. As root (CI), the test runs itself again as nobody, since modes
// keep root out of nothing.
func TestReaderCountsWhatItMayNotRead(t *testing.T) {
	dir := os.Getenv("COFFER_TEST_UNREADABLE_DIR")
	if dir == "" {
		dir = t.TempDir()
		writeTree(t, dir, map[string]string{"a": "1", "secret/b": "2", "c": "3"})
		require.NoError(t, os.Chmod(filepath.Join(dir, "c"), 0))
		require.NoError(t, os.Chmod(filepath.Join(dir, "secret"), 0))
		t.Cleanup(func() { _ = os.Chmod(filepath.Join(dir, "secret"), 0o755) })
		if os.Geteuid() == 0 {
			for d := dir; d != "/"; d = filepath.Dir(d) {
				if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o005 != 0o005 {
					require.NoError(t, os.Chmod(d, fi.Mode().Perm()|0o005))
					t.Cleanup(func() { _ = os.Chmod(d, fi.Mode().Perm()) })
				}
			}
			// The test binary, where nobody may run it.
			bin := filepath.Join(filepath.Dir(dir), "velerocheck.test")
			b, err := os.ReadFile(os.Args[0])
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(bin, b, 0o755))
			cmd := exec.Command(bin, "-test.run=^TestReaderCountsWhatItMayNotRead$", "-test.count=1")
			cmd.Env = append(os.Environ(), "COFFER_TEST_UNREADABLE_DIR="+dir)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			require.Contains(t, string(out), "PASS")
			return
		}
	}
	got, err := digestTree(dir, func(string, int64, string) {})
	require.NoError(t, err)
	assert.Equal(t, int64(1), got.Files)
	assert.Equal(t, int64(2), got.Unreadable)
	assert.Equal(t, "c", got.First)
}

// TestReaderReport: what the verifier reads of a reader's pod.
func TestReaderReport(t *testing.T) {
	pod := func(msg string, ended bool) *corev1.Pod {
		st := corev1.ContainerStatus{Name: ReaderContainer}
		if ended {
			st.State.Terminated = &corev1.ContainerStateTerminated{Message: msg, Reason: "Completed"}
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "sb", Name: "shop"}, Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{st}}}
	}
	d, why := readerReportOf(pod(`{"volumes":{"data":{"files":2,"bytes":5,"sum":"ab"}}}`, true), "data")
	require.Empty(t, why)
	assert.Equal(t, &treeDigest{Files: 2, Bytes: 5, Sum: "ab"}, d)
	d, why = readerReportOf(pod(`{"volumes":{"data":{"files":2,"bytes":5,"sum":"ab"}}}`, true), "logs")
	assert.Nil(t, d, "no such volume restored")
	assert.Empty(t, why)
	_, why = readerReportOf(pod(`{"volumes":{},"error":"volume data: input/output error"}`, true), "data")
	assert.Contains(t, why, "input/output error")
	_, why = readerReportOf(pod("", true), "data")
	assert.Contains(t, why, "without a report")
	_, why = readerReportOf(pod("", false), "data")
	assert.Contains(t, why, "did not run to its end")
}

// TestOnlyReadersMayRunInAVolumeSandbox: a pod is a reader when its one container is the reader
// of the verifier's image and its only init container Velero's restore helper.
func TestOnlyReadersMayRunInAVolumeSandbox(t *testing.T) {
	c := &Checker{ReaderImage: "coffer/verifier:v1"}
	reader := func() *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: restoreHelper, Image: "velero/velero-restore-helper:v1.18.3"}},
			Containers:     []corev1.Container{{Name: ReaderContainer, Image: "coffer/verifier:v1", Args: []string{ReadVolumesCommand}}}}}
	}
	assert.True(t, c.isReader(reader()))
	noHelper := reader()
	noHelper.Spec.InitContainers = nil
	assert.True(t, c.isReader(noHelper), "a pod without volume data has no helper")
	other := reader()
	other.Spec.Containers[0].Image = "coffer/verifier:v0"
	assert.Equal(t, "coffer/verifier:v0", c.readersOfAnotherImage(map[string]*corev1.Pod{"sb/a": reader(), "sb/b": other}),
		"a reader of another image is the ConfigMap's image, set up otherwise")
	assert.Empty(t, c.readersOfAnotherImage(map[string]*corev1.Pod{"sb/a": reader()}))
	tenant := reader()
	tenant.Spec.Containers[0].Image, tenant.Spec.Containers[0].Command = "shop:v2", []string{"/shop"}
	assert.Empty(t, c.readersOfAnotherImage(map[string]*corev1.Pod{"sb/a": tenant}), "anything else is no reader at all")
	for name, change := range map[string]func(*corev1.PodSpec){
		"another image":           func(s *corev1.PodSpec) { s.Containers[0].Image = "shop:v2" },
		"another command":         func(s *corev1.PodSpec) { s.Containers[0].Command = []string{"/bin/sh"} },
		"other arguments":         func(s *corev1.PodSpec) { s.Containers[0].Args = []string{"read-volumes", "/"} },
		"a second container":      func(s *corev1.PodSpec) { s.Containers = append(s.Containers, corev1.Container{Name: "shop"}) },
		"a tenant init container": func(s *corev1.PodSpec) { s.InitContainers = []corev1.Container{{Name: "migrate"}} },
		"an ephemeral container": func(s *corev1.PodSpec) {
			s.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug"}}}
		},
	} {
		p := reader()
		change(&p.Spec)
		assert.False(t, c.isReader(p), name)
	}
}

func TestVolumeSandboxNames(t *testing.T) {
	run := &securityv1.BackupVerifyRun{Spec: securityv1.BackupVerifyRunSpec{SandboxNamespace: "nightly" + securityv1.SandboxSuffix}}
	long := strings.Repeat("n", 63)
	got := volumeSandboxNames(run, []string{"shop", long})
	assert.Equal(t, "nightly-v-shop"+securityv1.SandboxSuffix, got["shop"])
	assert.LessOrEqual(t, len(got[long]), 63)
	assert.True(t, strings.HasSuffix(got[long], securityv1.SandboxSuffix))
	assert.NotEqual(t, got["shop"], got[long])
}

// TestVolumeReadersRunTheVerifiersImage: the shipped resource modifiers name the image the
// shipped Deployment runs (the verifier compares nothing where they differ).
func TestVolumeReadersRunTheVerifiersImage(t *testing.T) {
	var deploy struct {
		Spec struct {
			Template struct {
				Spec corev1.PodSpec `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	b, err := os.ReadFile("../../../deploy/verifier/manager/deployment.yaml")
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &deploy))
	image := deploy.Spec.Template.Spec.Containers[0].Image
	require.NotEmpty(t, image)
	var cm corev1.ConfigMap
	b, err = os.ReadFile("../../../deploy/verifier/velero/volume_readers.yaml")
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &cm))
	assert.Equal(t, VolumeReaders, cm.Name)
	require.Len(t, cm.Data, 1)
	for _, rules := range cm.Data {
		assert.Contains(t, rules, `"name": "`+ReaderContainer+`", "image": "`+image+`"`)
		assert.Contains(t, rules, `"args": ["`+ReadVolumesCommand+`"]`)
		// Claims are provisioned anew as a driver-velero restore has them (one patch for both).
		claims := veleroapi.RestoreClaimsModifierRules[strings.Index(veleroapi.RestoreClaimsModifierRules, `{"spec"`):]
		assert.Contains(t, rules, strings.TrimSpace(claims))
	}
}

// TestMoverReaderIsTheFileSystemReaders: the reader pod the verifier makes for a claim the data
// mover restored (moverReader) runs the container the shipped resource modifiers give the
// file-system readers: name, image, arguments, pull and termination-message policies, requests and
// limits, and the security context they force (the two are written in two places).
func TestMoverReaderIsTheFileSystemReaders(t *testing.T) {
	var cm corev1.ConfigMap
	b, err := os.ReadFile("../../../deploy/verifier/velero/volume_readers.yaml")
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &cm))
	var modifiers struct {
		Rules []struct {
			MergePatches []struct {
				PatchData string `json:"patchData"`
			} `json:"mergePatches"`
		} `json:"resourceModifierRules"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(cm.Data["volume-readers.yaml"]), &modifiers))
	var reader *corev1.Container
	var forced *corev1.SecurityContext
	var podContext *corev1.PodSecurityContext
	for _, r := range modifiers.Rules {
		for _, m := range r.MergePatches {
			var patch struct {
				Spec struct {
					Containers      []corev1.Container         `json:"containers"`
					SecurityContext *corev1.PodSecurityContext `json:"securityContext"`
					CofferApp       *struct {
						SecurityContext *corev1.SecurityContext `json:"securityContext"`
					} `json:"cofferApp"`
				} `json:"spec"`
			}
			require.NoError(t, json.Unmarshal([]byte(m.PatchData), &patch), m.PatchData)
			if len(patch.Spec.Containers) == 1 {
				reader, podContext = &patch.Spec.Containers[0], patch.Spec.SecurityContext
			}
			if patch.Spec.CofferApp != nil && patch.Spec.CofferApp.SecurityContext != nil {
				forced = patch.Spec.CofferApp.SecurityContext
			}
		}
	}
	require.NotNil(t, reader, "the modifiers' reader container")
	require.NotNil(t, forced, "the security context the modifiers force on it")
	require.NotNil(t, podContext)

	c := &Checker{ReaderImage: reader.Image}
	run := &securityv1.BackupVerifyRun{ObjectMeta: metav1.ObjectMeta{Name: "r", UID: "u"}}
	p := c.moverReader(run, "sb", volume{pod: "coffer-reader-u-db", claim: "db"}, nil)
	require.Len(t, p.Spec.Containers, 1)
	got := p.Spec.Containers[0]
	assert.Equal(t, reader.Name, got.Name)
	assert.Equal(t, reader.Image, got.Image)
	assert.Equal(t, reader.Args, got.Args)
	assert.Equal(t, reader.ImagePullPolicy, got.ImagePullPolicy)
	assert.Equal(t, reader.TerminationMessagePolicy, got.TerminationMessagePolicy)
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		assert.True(t, reader.Resources.Requests[name].Equal(got.Resources.Requests[name]), "request %s: %v, %v", name, reader.Resources.Requests, got.Resources.Requests)
		assert.True(t, reader.Resources.Limits[name].Equal(got.Resources.Limits[name]), "limit %s: %v, %v", name, reader.Resources.Limits, got.Resources.Limits)
	}
	require.NotNil(t, got.SecurityContext)
	assert.Equal(t, forced.AllowPrivilegeEscalation, got.SecurityContext.AllowPrivilegeEscalation)
	assert.Equal(t, forced.ReadOnlyRootFilesystem, got.SecurityContext.ReadOnlyRootFilesystem)
	assert.Equal(t, forced.Capabilities.Drop, got.SecurityContext.Capabilities.Drop)
	assert.Empty(t, got.SecurityContext.Capabilities.Add)
	assert.Equal(t, forced.RunAsNonRoot, p.Spec.SecurityContext.RunAsNonRoot)
	assert.Equal(t, podContext.RunAsNonRoot, p.Spec.SecurityContext.RunAsNonRoot)
	assert.Equal(t, podContext.SeccompProfile, p.Spec.SecurityContext.SeccompProfile)
}

// TestRestoredVolumesAreComparedWithTheRepository: each volume restored is compared with its
// snapshot's record in the repository, as its reader reported it: identical, changed, not
// restored (no pod, no volume), partly unreadable, or without a report.
func TestRestoredVolumesAreComparedWithTheRepository(t *testing.T) {
	rec := func(files map[string]string) *treeDigest {
		d := &treeDigest{}
		for p, c := range files {
			d.add(p, int64(len(c)), sum(c))
		}
		d.seal()
		return d
	}
	backup := rec(map[string]string{"a": "1", "b/c": "22"})
	report := func(volumes map[string]*treeDigest) string {
		b, err := json.Marshal(readerReport{Volumes: volumes})
		require.NoError(t, err)
		return string(b)
	}
	vol := volume{object: "velero.io/PodVolumeBackup velero/pvb", name: "volume data of pod shop/web", namespace: "shop", pod: "web", podVolume: "data", snapshot: "k1"}
	for name, tc := range map[string]struct {
		pods map[string]*corev1.Pod
		code string
		sev  securityv1.Severity
		text string
	}{
		"identical": {pods: map[string]*corev1.Pod{"sb/web": readerPod(report(map[string]*treeDigest{"data": rec(map[string]string{"b/c": "22", "a": "1"})}))},
			code: securityv1.CodeVolumeDataMatch, sev: securityv1.SeverityInfo, text: "all 2 file(s) identical"},
		"a file changed": {pods: map[string]*corev1.Pod{"sb/web": readerPod(report(map[string]*treeDigest{"data": rec(map[string]string{"a": "1", "b/c": "23"})}))},
			code: securityv1.CodeVolumeDataRestoreMismatch, sev: securityv1.SeverityCritical, text: "restored otherwise than the repository holds it"},
		"a file missing": {pods: map[string]*corev1.Pod{"sb/web": readerPod(report(map[string]*treeDigest{"data": rec(map[string]string{"a": "1"})}))},
			code: securityv1.CodeVolumeDataRestoreMismatch, sev: securityv1.SeverityCritical, text: "restored 1 file(s)"},
		"no pod": {pods: map[string]*corev1.Pod{},
			code: securityv1.CodeVolumeDataRestoreMismatch, sev: securityv1.SeverityCritical, text: "the restore brought no pod web"},
		"no such volume": {pods: map[string]*corev1.Pod{"sb/web": readerPod(report(map[string]*treeDigest{"logs": backup}))},
			code: securityv1.CodeVolumeDataRestoreMismatch, sev: securityv1.SeverityCritical, text: "found no volume data"},
		"unreadable files": {pods: map[string]*corev1.Pod{"sb/web": readerPod(report(map[string]*treeDigest{"data": {Files: 1, Bytes: 1, Sum: "x", Unreadable: 1, First: "b/c"}}))},
			code: securityv1.CodeVolumeDataNotRead, sev: securityv1.SeverityMedium, text: "may not read 1 file(s) or directories of it (b/c, for one)"},
		"no report": {pods: map[string]*corev1.Pod{"sb/web": readerPod("")},
			code: securityv1.CodeVolumeDataNotRead, sev: securityv1.SeverityMedium, text: "without a report"},
	} {
		out := &backend.Outcome{}
		compareVolumes(map[string][]volume{"shop": {vol}}, map[string]string{"shop": "sb"}, map[string]*treeDigest{"k1": backup}, tc.pods, "velero.io/Restore bvv", false, out)
		require.Len(t, out.Findings, 1, name)
		f := out.Findings[0]
		assert.Equal(t, tc.code, f.Code, name)
		assert.Equal(t, tc.sev, f.Severity, name)
		assert.Contains(t, f.Message, tc.text, name)
		if tc.code == securityv1.CodeVolumeDataMatch {
			assert.Equal(t, "1", out.Details[DetailVolumesRestored])
			assert.Equal(t, "2", out.Details[DetailVolumeFilesCompared])
		}
	}
	// A volume whose snapshot was not read (a finding of the read says why) is not compared.
	out := &backend.Outcome{}
	compareVolumes(map[string][]volume{"shop": {vol}}, map[string]string{"shop": "sb"}, map[string]*treeDigest{}, nil, "velero.io/Restore bvv", false, out)
	assert.Empty(t, out.Findings)
	// A pod missing from a restore that partially failed may be one the sandbox refused.
	out = &backend.Outcome{}
	compareVolumes(map[string][]volume{"shop": {vol}}, map[string]string{"shop": "sb"}, map[string]*treeDigest{"k1": backup}, nil, "velero.io/Restore bvv", true, out)
	require.Len(t, out.Findings, 1)
	assert.Equal(t, securityv1.CodeVolumeDataNotRead, out.Findings[0].Code)
	assert.Contains(t, out.Findings[0].Message, "partially failed")
}

func readerPod(msg string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "sb", Name: "web"}, Status: corev1.PodStatus{Phase: corev1.PodSucceeded,
		ContainerStatuses: []corev1.ContainerStatus{{Name: ReaderContainer, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: msg, Reason: "Completed"}}}}}}
}

// TestReaderThatCannotStart: a reader whose image the kubelet may not pull or cannot name is done
// with at once, one whose pull failed after readerPullGrace (not before), and the comparison says
// the volume was not read and why; a reader merely pending is waited for.
func TestReaderThatCannotStart(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	waiting := func(reason string, age time.Duration) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "sb", Name: "web", CreationTimestamp: metav1.Time{Time: now.Add(-age)}},
			Spec: corev1.PodSpec{NodeName: "n1"},
			Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: ReaderContainer,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "image coffer/verifier:dev not present"}}}}}}
	}
	for _, tc := range []struct {
		reason  string
		age     time.Duration
		settled bool
	}{
		{"ErrImageNeverPull", time.Second, true},
		{"InvalidImageName", time.Second, true},
		{"ErrImagePull", time.Second, false},
		{"ImagePullBackOff", time.Minute, false},
		{"ImagePullBackOff", readerPullGrace + time.Second, true},
		{"ContainerCreating", time.Hour, false},
		{"PodInitializing", time.Hour, false},
	} {
		p := waiting(tc.reason, tc.age)
		assert.Equal(t, tc.settled, readerSettled(p, now), "%s after %s", tc.reason, tc.age)
		if tc.settled {
			assert.Contains(t, readerStuck(p, now), "on node n1 ("+tc.reason+": image coffer/verifier:dev not present)")
		}
	}
	ended := readerPod("")
	assert.True(t, readerSettled(ended, now))
	assert.Empty(t, readerStuck(ended, now))

	// Compared, such a reader is a volume not read (medium), never a mismatch.
	backup := &treeDigest{Files: 1, Bytes: 1, Sum: "x"}
	vol := volume{object: "velero.io/PodVolumeBackup velero/pvb", name: "volume data of pod shop/web", namespace: "shop", pod: "web", podVolume: "data", snapshot: "k1"}
	out := &backend.Outcome{}
	compareVolumes(map[string][]volume{"shop": {vol}}, map[string]string{"shop": "sb"}, map[string]*treeDigest{"k1": backup},
		map[string]*corev1.Pod{"sb/web": waiting("ErrImageNeverPull", time.Second)}, "velero.io/Restore bvv", false, out)
	require.Len(t, out.Findings, 1)
	assert.Equal(t, securityv1.CodeVolumeDataNotRead, out.Findings[0].Code)
	assert.Equal(t, securityv1.SeverityMedium, out.Findings[0].Severity)
	assert.Contains(t, out.Findings[0].Message, "never ran: the kubelet cannot start it on node n1 (ErrImageNeverPull")
}

// TestDataMoverClaimsGetReadersOfTheirOwn: a claim the data mover moved is restored without a pod,
// and read by a reader pod the verifier makes: a reader by isReader's rules (so the sandbox admits
// it), restricted, the claim read-only, as the volume's owner (65532 for root); a claim the restore
// did not bring is critical when it completed, not compared when it partially failed.
func TestDataMoverClaimsGetReadersOfTheirOwn(t *testing.T) {
	run := &securityv1.BackupVerifyRun{ObjectMeta: metav1.ObjectMeta{UID: "4f1c7c1e-0000-4000-8000-000000000001"}}
	mover := volume{object: "velero.io/DataUpload velero/du", name: "claim shop/data", namespace: "shop", location: "default", uploader: "kopia",
		phase: "Completed", snapshot: "k2", method: veleroapi.VolumeMethodDataMover, claim: "data"}
	fsb := volume{object: "velero.io/PodVolumeBackup velero/pvb", name: "volume data of pod shop/web", namespace: "shop", uploader: "kopia",
		phase: "Completed", snapshot: "k1", method: veleroapi.VolumeMethodFileSystem, pod: "web", podVolume: "data"}
	failed := mover
	failed.phase, failed.claim = "Failed", "other"
	byNS := restorableVolumes(run, []volume{mover, fsb, failed}, []string{"shop"})
	require.Len(t, byNS["shop"], 2, "the file-system volume and the completed data movement")
	got := byNS["shop"][0]
	assert.Equal(t, moverReaderName(run, "data"), got.pod)
	assert.Contains(t, got.pod, string(run.UID), "named after the run, which no backup made before it can know")
	assert.Equal(t, moverVolume, got.podVolume)
	assert.Equal(t, fsb, byNS["shop"][1], "a file-system volume is read where its pod is restored")
	assert.Empty(t, restorableVolumes(run, []volume{mover}, []string{"cart"}), "only of the namespaces restored")

	c := &Checker{ReaderImage: "coffer/verifier:v1"}
	p := c.moverReader(run, "sb", got, &treeDigest{uid: 1001, gid: 1002})
	assert.True(t, c.isReader(p), "the sandbox's check takes it for a reader")
	assert.Equal(t, "sb", p.Namespace)
	assert.Equal(t, []int64{1001, 1002}, []int64{*p.Spec.SecurityContext.RunAsUser, *p.Spec.SecurityContext.RunAsGroup}, "the volume's owner")
	assert.True(t, *p.Spec.SecurityContext.RunAsNonRoot)
	assert.False(t, *p.Spec.AutomountServiceAccountToken)
	require.Len(t, p.Spec.Volumes, 1)
	assert.Equal(t, &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data", ReadOnly: true}, p.Spec.Volumes[0].PersistentVolumeClaim)
	r := p.Spec.Containers[0]
	assert.Equal(t, []corev1.VolumeMount{{Name: moverVolume, MountPath: restoresDir + "/" + moverVolume, ReadOnly: true}}, r.VolumeMounts)
	assert.False(t, *r.SecurityContext.AllowPrivilegeEscalation)
	assert.True(t, *r.SecurityContext.ReadOnlyRootFilesystem)
	assert.Equal(t, []corev1.Capability{"ALL"}, r.SecurityContext.Capabilities.Drop)
	root := c.moverReader(run, "sb", got, &treeDigest{})
	assert.Equal(t, []int64{65532, 65532}, []int64{*root.Spec.SecurityContext.RunAsUser, *root.Spec.SecurityContext.RunAsGroup}, "never root")

	// Compared as any reader's report; a claim the restore did not bring has no reader.
	backup := &treeDigest{}
	backup.add("a", 1, sum("1"))
	backup.seal()
	report, err := json.Marshal(readerReport{Volumes: map[string]*treeDigest{moverVolume: backup}})
	require.NoError(t, err)
	reader := readerPod(string(report))
	reader.Name = got.pod
	out := &backend.Outcome{}
	compareVolumes(map[string][]volume{"shop": {got}}, map[string]string{"shop": "sb"}, map[string]*treeDigest{"k2": backup},
		map[string]*corev1.Pod{"sb/" + got.pod: reader}, "velero.io/Restore bvv", false, out)
	require.Len(t, out.Findings, 1)
	assert.Equal(t, securityv1.CodeVolumeDataMatch, out.Findings[0].Code)
	for partial, want := range map[bool]string{false: securityv1.CodeVolumeDataRestoreMismatch, true: securityv1.CodeVolumeDataNotRead} {
		out := &backend.Outcome{}
		compareVolumes(map[string][]volume{"shop": {got}}, map[string]string{"shop": "sb"}, map[string]*treeDigest{"k2": backup}, nil, "velero.io/Restore bvv", partial, out)
		require.Len(t, out.Findings, 1)
		assert.Equal(t, want, out.Findings[0].Code, "partial %v", partial)
		assert.Contains(t, out.Findings[0].Message, "no bound claim data", "partial %v", partial)
		assert.Contains(t, out.Findings[0].Message, "volume sandbox sb", "partial %v", partial)
	}
}
