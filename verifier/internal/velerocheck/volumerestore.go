package velerocheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/verifier/internal/backend"
	"github.com/coffer-backup/coffer/verifier/internal/sandbox"
)

// Full-restore of volume data. The object Restore leaves Pods out, so it restores no volume data:
// Velero's file-system restore writes a volume's files only into a pod that mounts it, through its
// restore helper (the init container restore-wait that Velero's restore item action puts first).
// So, once the objects are compared, a second Restore of the same backup (VolumeRestoreName)
// brings only the pods and claims (and the Secrets and ConfigMaps the pods' volumes name) of the
// namespaces whose volumes Velero backed up by file system into volume sandboxes of their own
// (volumeSandboxNames: confined as any sandbox, Pod Security "restricted", deny-all, but with a
// ResourceQuota of exactly as many pods as the backup holds there), and applies the resource
// modifiers of the ConfigMap VolumeReaders (deploy/verifier/velero): claims are provisioned anew,
// and every pod loses its containers, init containers and identity for one container of the
// verifier's own image (ReaderContainer, ReadVolumesCommand, non-root, read-only), keeping only
// Velero's restore helper, run non-root too, and, for the reader, the helper's mounts of the
// volumes restored. Nothing of the backup's runs there. A claim whose CSI snapshot Velero's data
// mover moved needs no pod: the same Restore brings the claim, and the data mover fills and binds
// it; the verifier then creates one reader pod of its own per such claim (moverReader: the claim
// mounted read-only, as the volume's owner in the repository's record). Each reader digests the
// files of each volume once it may (after the node agent or the data mover restored the data) and
// ends; its report is its termination message. The verifier reads the same volumes' snapshots whole from
// the repository (as checksum-only does) and compares: count, bytes and a digest of every file's
// path, size and SHA-256 (treeDigest). A volume not restored or restored otherwise than the
// repository holds it is critical; files the reader's user may not read are a medium finding
// saying the comparison does not cover them.

// VolumeReaders is the ConfigMap of Velero resource modifiers, in Velero's namespace, that makes
// the pods of a volume restore run the verifier's reader.
const VolumeReaders = "coffer-verifier-volume-readers"

// restoreHelper is the name Velero gives its restore helper init container.
const restoreHelper = "restore-wait"

// Details of a full-restore that restored volume data.
const (
	DetailVolumesRestored     = "volumesRestored"
	DetailVolumeFilesCompared = "volumeFilesCompared"
)

// VolumeRestoreName is the name of the Velero Restore of run's volume data.
func VolumeRestoreName(run *securityv1.BackupVerifyRun) string {
	return backupsv1.BoundedName(backupsv1.MaxGeneratedNameLength, "bvv", run.Namespace, run.Name)
}

// volumeSandboxNames maps each source namespace whose volume data is restored to its volume
// sandbox: "<sandbox stem>-v-<source>-bvsandbox", bounded to 63.
func volumeSandboxNames(run *securityv1.BackupVerifyRun, sources []string) map[string]string {
	stem := strings.TrimSuffix(run.Spec.SandboxNamespace, securityv1.SandboxSuffix)
	out := map[string]string{}
	for _, src := range sources {
		out[src] = backupsv1.BoundedName(63-len(securityv1.SandboxSuffix), stem, "v", src) + securityv1.SandboxSuffix
	}
	return out
}

// restorableVolumes are the volume data of vols that a volume restore brings back: complete,
// written by kopia, with a snapshot, of a namespace the backup restores; by namespace. A
// file-system backup's volume is read by the reader its restored pod becomes; a claim whose CSI
// snapshot the data mover moved is restored by Velero's data mover alone (no pod), and read by a
// reader pod of the verifier's own (pod and podVolume set to moverReader's).
func restorableVolumes(run *securityv1.BackupVerifyRun, vols []volume, sources []string) map[string][]volume {
	out := map[string][]volume{}
	for _, v := range vols {
		if v.phase != string(velerov1.PodVolumeBackupPhaseCompleted) || v.uploader != "kopia" || v.snapshot == "" || !slices.Contains(sources, v.namespace) {
			continue
		}
		switch {
		case v.method == string(veleroapi.VolumeMethodFileSystem) && v.pod != "":
		case v.moved() && v.claim != "":
			v.pod, v.podVolume = moverReaderName(run, v.claim), moverVolume
		default:
			continue
		}
		out[v.namespace] = append(out[v.namespace], v)
	}
	return out
}

// moverVolume is the pod volume, and the directory under /restores, of the claim a mover reader
// reads.
const moverVolume = "claim"

// moverReaderName names the reader pod of run that reads restored claim: the run's UID in it, so
// no pod of a backup (made before the run) can have taken the name.
func moverReaderName(run *securityv1.BackupVerifyRun, claim string) string {
	return backupsv1.BoundedName(backupsv1.MaxGeneratedNameLength, "coffer-reader", string(run.UID), claim)
}

// moverReader is the reader pod of volume v (a claim the data mover moved) in volume sandbox ns:
// the verifier's reader, alone, non-root and restricted, mounting the restored claim read-only. It
// runs as the user and group that own the volume's root in the repository's record of it (the
// user an application writing there runs as, most likely), 65532 for root.
func (c *Checker) moverReader(run *securityv1.BackupVerifyRun, ns string, v volume, owner *treeDigest) *corev1.Pod {
	user, group := int64(65532), int64(65532)
	if owner != nil && owner.uid != 0 {
		user = int64(owner.uid)
	}
	if owner != nil && owner.gid != 0 {
		group = int64(owner.gid)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: v.pod, Namespace: ns, Labels: map[string]string{securityv1.LabelRunUID: string(run.UID)}},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			EnableServiceLinks:           ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: &user, RunAsGroup: &group,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Volumes: []corev1.Volume{{Name: moverVolume, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.claim, ReadOnly: true}}}},
			Containers: []corev1.Container{{
				Name: ReaderContainer, Image: c.ReaderImage, ImagePullPolicy: corev1.PullIfNotPresent, Args: []string{ReadVolumesCommand},
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				VolumeMounts: []corev1.VolumeMount{{Name: moverVolume, MountPath: restoresDir + "/" + moverVolume, ReadOnly: true}},
			}},
		},
	}
}

// startMoverReaders makes sure every claim of byNS the data mover restored has its reader pod in
// its volume sandbox (mapping; restoredPods: the pods there, by sandbox/name), once that claim is
// bound. started is true when one was created, or a claim is not bound yet by a restore that
// completed (the data mover binds it once it wrote the data): there is more to wait for. A claim
// not restored or not bound (by a restore that partially failed: its data mover gave up) has no
// reader, and compareVolumes says so.
func (c *Checker) startMoverReaders(ctx context.Context, run *securityv1.BackupVerifyRun, byNS map[string][]volume, mapping map[string]string,
	restoredPods map[string]*corev1.Pod, partial bool, owners func() (map[string]*treeDigest, error)) (started bool, _ error) {
	for _, src := range slices.Sorted(maps.Keys(byNS)) {
		sb := mapping[src]
		for _, v := range byNS[src] {
			if !v.moved() || restoredPods[sb+"/"+v.pod] != nil {
				continue
			}
			pvc := &corev1.PersistentVolumeClaim{}
			err := c.Reader.Get(ctx, client.ObjectKey{Namespace: sb, Name: v.claim}, pvc)
			switch {
			case apierrors.IsNotFound(err):
				continue
			case err != nil:
				return false, backend.APIError("reading claim "+v.claim+" in volume sandbox "+sb, err)
			case pvc.Status.Phase != corev1.ClaimBound:
				started = started || (pvc.Status.Phase == corev1.ClaimPending && !partial)
				continue
			}
			digests, err := owners()
			if err != nil {
				return false, err
			}
			err = c.Client.Create(ctx, c.moverReader(run, sb, v, digests[v.snapshot]))
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return false, backend.APIError("creating reader pod "+v.pod+" in volume sandbox "+sb, err)
			}
			started = true
		}
	}
	return started, nil
}

// isReader tells whether a pod of a volume sandbox is one the resource modifiers made: one
// container, the reader of the verifier's image, and no init container but Velero's restore helper.
func (c *Checker) isReader(p *corev1.Pod) bool {
	return readerOf(p, c.ReaderImage)
}

// readerOf tells whether pod p is a reader of image: one container, the reader running that image,
// and no init container but Velero's restore helper.
func readerOf(p *corev1.Pod, image string) bool {
	if len(p.Spec.Containers) != 1 || len(p.Spec.InitContainers) > 1 || len(p.Spec.EphemeralContainers) > 0 {
		return false
	}
	r := p.Spec.Containers[0]
	if r.Name != ReaderContainer || r.Image != image || len(r.Command) > 0 || !slices.Equal(r.Args, []string{ReadVolumesCommand}) {
		return false
	}
	return len(p.Spec.InitContainers) == 0 || p.Spec.InitContainers[0].Name == restoreHelper
}

// readersOfAnotherImage returns the image of a reader among pods that is a reader in every way but
// its image, which is not the verifier's ("" when there is none).
func (c *Checker) readersOfAnotherImage(pods map[string]*corev1.Pod) string {
	for _, p := range pods {
		if len(p.Spec.Containers) == 1 {
			if image := p.Spec.Containers[0].Image; image != c.ReaderImage && readerOf(p, image) {
				return image
			}
		}
	}
	return ""
}

// volumesInFlight tells whether run's volume restore, or one of its readers, has not ended (or is
// being deleted): nothing is to be read until they have.
func (c *Checker) volumesInFlight(ctx context.Context, run *securityv1.BackupVerifyRun, ns string) (bool, error) {
	key := client.ObjectKey{Namespace: ns, Name: VolumeRestoreName(run)}
	vr := &velerov1.Restore{}
	err := c.Reader.Get(ctx, key, vr)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, backend.APIError("reading Velero restore "+key.String(), err)
	case vr.Labels[securityv1.LabelRunUID] != string(run.UID):
		return false, nil
	case !restoreTerminal(vr.Status.Phase) || !vr.DeletionTimestamp.IsZero():
		return true, nil
	}
	for _, sb := range vr.Spec.NamespaceMapping {
		pods := &corev1.PodList{}
		if err := c.Reader.List(ctx, pods, client.InNamespace(sb)); err != nil {
			return false, backend.APIError("listing the pods of volume sandbox "+sb, err)
		}
		for i := range pods.Items {
			if !readerSettled(&pods.Items[i], time.Now()) {
				return true, nil
			}
		}
	}
	return false, nil
}

func podEnded(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// readerPullGrace is how long a reader whose image the kubelet failed to pull is waited for (the
// kubelet retries with back-off, and a registry's hiccup passes) before it counts as never to run.
const readerPullGrace = 2 * time.Minute

// readerSettled tells whether a reader pod is done with: ended, or never to run (readerStuck).
func readerSettled(p *corev1.Pod, now time.Time) bool {
	return podEnded(p) || readerStuck(p, now) != ""
}

// readerStuck says why the reader of pod p will never run on its own (its image cannot be had on
// its node: the kubelet's reason and message), or "" when it may yet. An image the kubelet may not
// pull (pull policy Never) or cannot name is final at once; a failed pull, after readerPullGrace.
// The restore helper is Velero's image, and the restore does not complete without it; so once the
// restore did, only the reader's image is at stake.
func readerStuck(p *corev1.Pod, now time.Time) string {
	if podEnded(p) {
		return ""
	}
	for _, s := range p.Status.ContainerStatuses {
		w := s.State.Waiting
		if s.Name != ReaderContainer || w == nil {
			continue
		}
		switch w.Reason {
		case "ErrImageNeverPull", "InvalidImageName":
		case "ErrImagePull", "ImagePullBackOff":
			if now.Sub(p.CreationTimestamp.Time) < readerPullGrace {
				return ""
			}
		default:
			return ""
		}
		return fmt.Sprintf("the kubelet cannot start it on node %s (%s: %s)", p.Spec.NodeName, w.Reason, backend.Truncate(w.Message, 200))
	}
	return ""
}

// restoreVolumes is the volume phase of a full-restore (see above). It returns with out.Done false
// while the restore or its readers go on, and the volumes it restores by source namespace
// (findings say how each went).
func (c *Checker) restoreVolumes(ctx context.Context, run *securityv1.BackupVerifyRun, vb *velerov1.Backup, bsl *velerov1.BackupStorageLocation,
	objects map[string][]objectRef, sources []string, out *backend.Outcome) (map[string][]volume, error) {
	object := "velero.io/Backup " + vb.Namespace + "/" + vb.Name
	vols, err := c.volumesOf(ctx, vb)
	var denied locationError
	switch {
	case errors.As(err, &denied):
		out.Add(securityv1.CodeVolumeDataNotRead, securityv1.SeverityMedium, object, "the backup's volume data, if it has any, was not restored: "+string(denied))
		return nil, nil
	case err != nil:
		return nil, err
	}
	byNS := restorableVolumes(run, vols, sources)
	if len(byNS) == 0 {
		return byNS, nil
	}
	if c.ReaderImage == "" {
		out.Add(securityv1.CodeVolumeDataNotRead, securityv1.SeverityMedium, object,
			"the backup's volume data was not restored: the verifier does not know its own image, which the volume readers run (set --pod-name, POD_NAME)")
		return byNS, nil
	}
	restored := slices.Sorted(maps.Keys(byNS))
	mapping := volumeSandboxNames(run, restored)
	pods := map[string]int{}
	for _, src := range restored {
		n := 0
		for _, o := range objects[src] {
			if o.gvk.Group == "" && o.gvk.Kind == "Pod" {
				n++
			}
		}
		for _, v := range byNS[src] {
			if v.moved() {
				n++ // its reader
			}
		}
		pods[mapping[src]] = n
	}
	if ready, refused, err := c.Sandbox.EnsureWithPods(ctx, run, pods, out); !ready {
		if refused != nil {
			return byNS, sandbox.Refused(out, *refused)
		}
		return byNS, err
	}
	noCluster := false
	vr, err := c.ensureRestoreNamed(ctx, run, VolumeRestoreName(run), velerov1.RestoreSpec{
		BackupName:              vb.Name,
		IncludedNamespaces:      restored,
		NamespaceMapping:        mapping,
		IncludeClusterResources: &noCluster,
		IncludedResources:       []string{"pods", "persistentvolumeclaims", "secrets", "configmaps"},
		ResourceModifier:        &corev1.TypedLocalObjectReference{Kind: "ConfigMap", Name: VolumeReaders},
	})
	if err != nil {
		return byNS, err
	}
	what := "velero.io/Restore " + vr.Name
	switch vr.Status.Phase {
	case velerov1.RestorePhaseCompleted:
	case velerov1.RestorePhasePartiallyFailed:
		out.Add(securityv1.CodeRestorePartiallyFailed, securityv1.SeverityHigh, what,
			fmt.Sprintf("the restore of the volume data completed with %d error(s) and %d warning(s)", vr.Status.Errors, vr.Status.Warnings))
	case velerov1.RestorePhaseFailedValidation:
		if v := strings.Join(vr.Status.ValidationErrors, "; "); strings.Contains(v, VolumeReaders) {
			out.Add(securityv1.CodeVolumeDataNotRead, securityv1.SeverityMedium, what, fmt.Sprintf(
				"the backup's volume data was not restored: the restore cannot use the volume readers' resource modifiers (%s); apply deploy/verifier/velero in Velero's namespace %s (ConfigMap %s)",
				v, vr.Namespace, VolumeReaders))
			return byNS, nil
		}
		fallthrough
	case velerov1.RestorePhaseFailed:
		out.Add(securityv1.CodeRestoreFailed, securityv1.SeverityCritical, what,
			fmt.Sprintf("the restore of the volume data %s: %s%s", vr.Status.Phase, vr.Status.FailureReason, strings.Join(vr.Status.ValidationErrors, "; ")))
		return byNS, nil
	default:
		out.Done = false
		// While Velero restores, the repository is read (as the comparison needs it once the
		// readers ended): the two take their time at once rather than one after the other.
		_, err := c.repositoryRead(ctx, run, vb, bsl, vols, false)
		return byNS, err
	}
	// The recovery time covers the data too.
	out.RestoreTook(vr.CreationTimestamp, vr.Status.CompletionTimestamp)
	restoredPods := map[string]*corev1.Pod{} // sandbox/name → pod
	now := time.Now()
	for _, sb := range mapping {
		list := &corev1.PodList{}
		if err := c.Reader.List(ctx, list, client.InNamespace(sb)); err != nil {
			return byNS, backend.APIError("listing the pods of volume sandbox "+sb, err)
		}
		for i := range list.Items {
			p := &list.Items[i]
			if !readerSettled(p, now) {
				out.Done = false
				return byNS, nil
			}
			restoredPods[sb+"/"+p.Name] = p
		}
	}
	started, err := c.startMoverReaders(ctx, run, byNS, mapping, restoredPods, vr.Status.Phase == velerov1.RestorePhasePartiallyFailed, func() (map[string]*treeDigest, error) {
		read, err := c.repositoryRead(ctx, run, vb, bsl, vols, false)
		if err != nil {
			return nil, err
		}
		return read.digests, nil
	})
	if err != nil || started {
		out.Done = false
		return byNS, err
	}
	if image := c.readersOfAnotherImage(restoredPods); image != "" {
		// Set up, not tampered with: the shipped ConfigMap names another image than the verifier
		// runs (one was changed without the other).
		out.Add(securityv1.CodeVolumeDataNotRead, securityv1.SeverityMedium, what, fmt.Sprintf(
			"the restored volume data was not compared: the readers ran image %s, and the verifier runs %s; set the verifier's image in ConfigMap %s/%s",
			image, c.ReaderImage, vr.Namespace, VolumeReaders))
		return byNS, nil
	}
	tampered, err := c.Sandbox.CheckWithPods(ctx, run, pods, c.isReader)
	if err != nil {
		return byNS, err
	}
	if len(tampered) > 0 {
		out.Findings = append(out.Findings, tampered...)
		return byNS, nil
	}
	read, err := c.repositoryRead(ctx, run, vb, bsl, vols, true)
	if err != nil {
		return byNS, err
	}
	out.Findings = append(out.Findings, read.out.Findings...)
	out.Merge(&read.out)
	compareVolumes(byNS, mapping, read.digests, restoredPods, what, vr.Status.Phase == velerov1.RestorePhasePartiallyFailed, out)
	return byNS, nil
}

// repositoryRead is what the repository holds of the volumes a run restores: every snapshot read
// whole, as checksum-only reads it (the read's findings and details, and each snapshot's digest).
type repositoryRead struct {
	out     backend.Outcome
	digests map[string]*treeDigest
}

// repositoryRead reads vols from the repository for run once: the reading made while Velero
// restored (kept in memory, by the run's UID: a restarted verifier reads again) serves the
// comparison; take hands it over (and forgets it). A snapshot whose record the verifier
// remembers (recallRecord) is not read.
func (c *Checker) repositoryRead(ctx context.Context, run *securityv1.BackupVerifyRun, vb *velerov1.Backup, bsl *velerov1.BackupStorageLocation,
	vols []volume, take bool) (*repositoryRead, error) {
	c.mu.Lock()
	read := c.reads[run.UID]
	if take {
		delete(c.reads, run.UID)
	}
	c.mu.Unlock()
	if read != nil {
		return read, nil
	}
	read = &repositoryRead{digests: map[string]*treeDigest{}}
	// A snapshot an earlier verification read whole and found sound is not read again: its
	// record is what the restore must give.
	unread := make([]volume, 0, len(vols))
	remembered := 0
	for _, v := range vols {
		if d := c.recallRecord(bsl, v); d != nil {
			read.digests[v.snapshot] = d
			remembered++
			continue
		}
		unread = append(unread, v)
	}
	if remembered > 0 {
		read.out.Detail(DetailVolumeRecordsRemembered, strconv.Itoa(remembered))
	}
	if _, err := c.readVolumes(ctx, vb, bsl, unread, "", &read.out, read.digests); err != nil {
		return nil, err
	}
	if !take {
		c.mu.Lock()
		if c.reads == nil {
			c.reads = map[types.UID]*repositoryRead{}
		}
		c.reads[run.UID] = read
		c.mu.Unlock()
	}
	return read, nil
}

// forgetRead drops what repositoryRead kept for run (it ended).
func (c *Checker) forgetRead(run *securityv1.BackupVerifyRun) {
	c.mu.Lock()
	delete(c.reads, run.UID)
	c.mu.Unlock()
}

// snapshotsOf returns the kopia snapshots of the volumes restoreVolumes restores.
func snapshotsOf(byNS map[string][]volume) []string {
	var snapshots []string
	for _, vols := range byNS {
		for _, v := range vols {
			snapshots = append(snapshots, v.snapshot)
		}
	}
	return snapshots
}

// startVolumes starts the volume phase ahead of the comparison, which does it again in full: the
// volume data is restored at the same time as the objects (as a user's restore brings both at
// once) rather than once they are compared. What it finds is not kept.
func (c *Checker) startVolumes(ctx context.Context, run *securityv1.BackupVerifyRun, vb *velerov1.Backup, bsl *velerov1.BackupStorageLocation,
	objects map[string][]objectRef, sources []string) {
	_, _ = c.restoreVolumes(ctx, run, vb, bsl, objects, sources, &backend.Outcome{})
}

// compareVolumes compares each volume restored (byNS, into the sandboxes of mapping) with the
// digest of its snapshot in the repository (digests, by snapshot ID; one missing was not read, and
// a finding says why), as the reader in its restored pod (restoredPods, by sandbox/name) reported
// it; what names the volume Restore. When it partially failed, a pod it did not bring may be one
// the sandbox refused (a volume type Pod Security "restricted" does not allow): not a fact about
// the backup, so the volume is said not compared rather than not restored.
func compareVolumes(byNS map[string][]volume, mapping map[string]string, digests map[string]*treeDigest, restoredPods map[string]*corev1.Pod,
	what string, partial bool, out *backend.Outcome) {
	var compared, files int64
	for _, src := range slices.Sorted(maps.Keys(byNS)) {
		for _, v := range byNS[src] {
			want := digests[v.snapshot]
			if want == nil {
				continue // not read: a finding says why
			}
			p := restoredPods[mapping[src]+"/"+v.pod]
			if p == nil && v.moved() {
				if partial {
					out.Add(securityv1.CodeVolumeDataNotRead, securityv1.SeverityMedium, v.object, fmt.Sprintf(
						"the restored data of %s was not compared: the restore, which partially failed, brought no bound claim %s into volume sandbox %s (see its errors: %s)",
						v.name, v.claim, mapping[src], what))
					continue
				}
				out.Add(securityv1.CodeVolumeDataRestoreMismatch, securityv1.SeverityCritical, v.object,
					fmt.Sprintf("%s was not restored: the restore brought no bound claim %s into volume sandbox %s", v.name, v.claim, mapping[src]))
				continue
			}
			if p == nil && partial {
				out.Add(securityv1.CodeVolumeDataNotRead, securityv1.SeverityMedium, v.object, fmt.Sprintf(
					"the restored data of %s was not compared: the restore, which partially failed, brought no pod %s into volume sandbox %s (see its errors: %s)",
					v.name, v.pod, mapping[src], what))
				continue
			}
			if p == nil {
				out.Add(securityv1.CodeVolumeDataRestoreMismatch, securityv1.SeverityCritical, v.object,
					fmt.Sprintf("%s was not restored: the restore brought no pod %s into volume sandbox %s", v.name, v.pod, mapping[src]))
				continue
			}
			got, why := readerReportOf(p, v.podVolume)
			switch {
			case why != "":
				out.Add(securityv1.CodeVolumeDataNotRead, securityv1.SeverityMedium, v.object,
					fmt.Sprintf("the restored data of %s was not compared: %s", v.name, why))
			case got == nil:
				out.Add(securityv1.CodeVolumeDataRestoreMismatch, securityv1.SeverityCritical, v.object,
					fmt.Sprintf("%s was not restored: its reader in pod %s/%s found no volume %s", v.name, p.Namespace, p.Name, v.podVolume))
			case got.Unreadable > 0:
				out.Add(securityv1.CodeVolumeDataNotRead, securityv1.SeverityMedium, v.object, fmt.Sprintf(
					"the restored data of %s was not compared: the reader's user may not read %d file(s) or directories of it (%s, for one), so the comparison would not cover them",
					v.name, got.Unreadable, got.First))
			case got.Files != want.Files || got.Bytes != want.Bytes || got.Sum != want.Sum:
				out.Add(securityv1.CodeVolumeDataRestoreMismatch, securityv1.SeverityCritical, v.object, fmt.Sprintf(
					"%s restored otherwise than the repository holds it (kopia snapshot %s): restored %s, the backup's record %s; the reader's log in pod %s/%s lists every file it read",
					v.name, v.snapshot, got, want, p.Namespace, p.Name))
			default:
				compared++
				files += got.Files
			}
		}
	}
	out.Detail(DetailVolumesRestored, strconv.FormatInt(compared, 10))
	out.Detail(DetailVolumeFilesCompared, strconv.FormatInt(files, 10))
	if compared > 0 {
		out.Add(securityv1.CodeVolumeDataMatch, securityv1.SeverityInfo, what, fmt.Sprintf(
			"%d volume(s) restored into the volume sandboxes by Velero (file-system restore, data mover): all %d file(s) identical in path, size and SHA-256 to the backup's own record of them in the repository",
			compared, files))
	}
}

// readerReportOf reads the report of pod p's reader on volume name: nil when it found no such
// volume, or why the report says nothing.
func readerReportOf(p *corev1.Pod, name string) (*treeDigest, string) {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name != ReaderContainer {
			continue
		}
		t := s.State.Terminated
		if t == nil {
			if why := readerStuck(p, time.Now()); why != "" {
				return nil, fmt.Sprintf("its reader in pod %s/%s never ran: %s", p.Namespace, p.Name, why)
			}
			return nil, fmt.Sprintf("its reader in pod %s/%s did not run to its end", p.Namespace, p.Name)
		}
		var rep readerReport
		if err := json.Unmarshal([]byte(t.Message), &rep); err != nil {
			return nil, fmt.Sprintf("its reader in pod %s/%s ended (%s, exit code %d) without a report", p.Namespace, p.Name, t.Reason, t.ExitCode)
		}
		if rep.Error != "" {
			return nil, fmt.Sprintf("its reader in pod %s/%s could not read it: %s", p.Namespace, p.Name, backend.Truncate(rep.Error, 300))
		}
		return rep.Volumes[name], ""
	}
	return nil, fmt.Sprintf("pod %s/%s has no reader", p.Namespace, p.Name)
}
