package etcdsnap

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	"github.com/coffer-backup/coffer/verifier/internal/backend"
)

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get

// CheckCommand is the verifier's subcommand that checks one snapshot and prints its report: what
// a check pod runs (PodMain).
const CheckCommand = "etcd-snapshot-check"

// PodLabelValue is the app.kubernetes.io/name of check pods.
const PodLabelValue = "coffer-etcd-check"

// podSnapshotDir is where a check pod mounts the node's snapshot directory.
const podSnapshotDir = "/snapshots"

// maxMessage is the kubelet's bound on a container's termination message.
const maxMessage = 4096

// podResult is what a check pod prints (its termination message): the report, and the kind of
// trouble when the check could not be carried out.
type podResult struct {
	Report *Report `json:"report"`
	// Kind: "" (checked), not-found, ref-invalid, unreadable, killed, not-started, failed.
	Kind  string `json:"kind,omitempty"`
	Error string `json:"error,omitempty"`
}

var kinds = []struct {
	kind string
	err  error
}{{"not-found", ErrNotFound}, {"ref-invalid", ErrRefInvalid}, {"unreadable", ErrUnreadable}, {"killed", ErrCheckKilled}, {"not-started", ErrCheckNotStarted}}

// PodMain is the check pod: it verifies --ref under --dir, writes the result to the termination
// message (and stdout), and exits 0 when it could write it.
func PodMain(args []string, stdout io.Writer) int {
	fs := flag.NewFlagSet(CheckCommand, flag.ContinueOnError)
	dir := fs.String("dir", podSnapshotDir, "the snapshot directory")
	ref := fs.String("ref", "", "the snapshot, relative to --dir")
	out := fs.String("result", "/dev/termination-log", "where the result goes")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	rep, err := Verify(context.Background(), *dir, *ref)
	res := podResult{Report: rep}
	if err != nil {
		res.Kind, res.Error = "failed", err.Error()
		for _, k := range kinds {
			if errors.Is(err, k.err) {
				res.Kind = k.kind
				break
			}
		}
	}
	b := encodeBounded(&res)
	_, _ = stdout.Write(append(b, '\n'))
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "writing the result:", err)
		return 1
	}
	return 0
}

// encodeBounded encodes res within the termination message's bound, shortening the findings'
// messages (then dropping details) when it must.
func encodeBounded(res *podResult) []byte {
	b, _ := json.Marshal(res)
	for limit := 512; len(b) > maxMessage && limit >= 32; limit /= 2 {
		for i := range res.Report.Findings {
			res.Report.Findings[i].Message = backend.Truncate(res.Report.Findings[i].Message, limit)
		}
		res.Error = backend.Truncate(res.Error, limit)
		b, _ = json.Marshal(res)
	}
	if len(b) > maxMessage {
		res.Report.Details = nil
		b, _ = json.Marshal(res)
	}
	return b
}

// decode turns a check pod's result back into Verify's report and error.
func decode(msg string) (*Report, error) {
	var res podResult
	if err := json.Unmarshal([]byte(msg), &res); err != nil || res.Report == nil {
		return nil, fmt.Errorf("the check pod's result is not one (%q)", backend.Truncate(msg, 200))
	}
	if res.Kind == "" {
		return res.Report, nil
	}
	for _, k := range kinds {
		if k.kind == res.Kind {
			return res.Report, fmt.Errorf("%w: %s", k.err, res.Error)
		}
	}
	return res.Report, errors.New(res.Error)
}

// PodBackend is the etcd-snapshot backend whose checks run on the node that holds the snapshot,
// as a short-lived pod: snapshots saved by etcdctl (and kubeadm, k3s, RKE2) are 0600 and
// root-owned, which the verifier (user 65532) cannot read, and on an HA control plane each node
// keeps its own. The pod reads the node's snapshot directory through a read-only hostPath as user
// 0 with every capability dropped but CAP_DAC_READ_SEARCH (Kubernetes gives added capabilities
// to a non-root user only as ambient capabilities, which it never sets), no service account
// token, no privilege escalation, a read-only root filesystem; it reports through its
// termination message, which only the kubelet writes, in the verifier's own namespace, where
// tenants create no pods.
type PodBackend struct {
	// Reader reads pods and nodes directly (uncached).
	Reader client.Reader
	// Client creates and deletes check pods.
	Client client.Client
	// Namespace is the verifier's own namespace, where check pods run.
	Namespace string
	// Image is the verifier's image: a check pod runs its CheckCommand.
	Image string
	// HostDir is the snapshot directory on every node.
	HostDir string
	// Node is the verifier's own node: a run without backupRef.node is checked there.
	Node string
	// Memory bounds a check pod (the bbolt walk maps the file): 512Mi when zero.
	Memory resource.Quantity
	// Clock tells how old a lister pod's listing is; nil: the real clock.
	Clock clock.PassiveClock
}

var _ backend.Backend = (*PodBackend)(nil)

// PodName is the name of run's check pod: one per run.
func PodName(run *securityv1.BackupVerifyRun) string {
	return "bv-etcd-check-" + string(run.UID)
}

// Waiting says what a run waits for.
func (b *PodBackend) Waiting(run *securityv1.BackupVerifyRun) string {
	return "the check pod " + b.Namespace + "/" + PodName(run) + " on node " + b.nodeOf(run)
}

func (b *PodBackend) nodeOf(run *securityv1.BackupVerifyRun) string {
	if n := run.Spec.BackupRef.Node; n != "" {
		return n
	}
	return b.Node
}

// Checksum starts the run's check pod, or reads its result and deletes it. Trouble (the API
// server, a pod that could not run the check) is a failed run, never a finding about the snapshot.
func (b *PodBackend) Checksum(ctx context.Context, run *securityv1.BackupVerifyRun) (backend.Outcome, error) {
	node := b.nodeOf(run)
	if node == "" {
		return backend.Outcome{}, reconcile.TerminalError(errors.New("no node to check the snapshot on: set backupRef.node (the verifier does not know its own node: NODE_NAME)"))
	}
	pod := &corev1.Pod{}
	err := b.Reader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: PodName(run)}, pod)
	if apierrors.IsNotFound(err) {
		return b.start(ctx, run, node)
	}
	if err != nil {
		return backend.Outcome{}, backend.APIError("reading the check pod", err)
	}
	if pod.Labels[securityv1.LabelRunUID] != string(run.UID) {
		return backend.Outcome{}, reconcile.TerminalError(fmt.Errorf("pod %s/%s is not this run's check pod", pod.Namespace, pod.Name))
	}
	var term *corev1.ContainerStateTerminated
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Terminated != nil {
			term = cs.State.Terminated
		}
	}
	if term == nil {
		if pod.Status.Phase == corev1.PodFailed { // evicted, or its deadline passed before it ran
			return backend.Outcome{}, b.ended(ctx, pod, reconcile.TerminalError(fmt.Errorf("the check pod on node %s failed before it ran (%s: %s)", node, pod.Status.Reason, pod.Status.Message)))
		}
		return backend.Outcome{}, nil // pending or running: polled again
	}
	rep, err := decode(term.Message)
	switch {
	case term.Reason == "OOMKilled":
		mem := b.memory()
		err = fmt.Errorf("%w: the check pod on node %s ran out of memory (limit %s)", ErrCheckKilled, node, mem.String())
	case rep == nil:
		err = fmt.Errorf("the check pod on node %s exited %d (%s) without a result: %w", node, term.ExitCode, term.Reason, err)
	}
	if rep == nil {
		rep = &Report{}
	}
	out, err := outcome(rep, err, ctx.Err() != nil)
	if err != nil && !errors.Is(err, reconcile.TerminalError(nil)) {
		err = reconcile.TerminalError(err) // a pod ran it: running it again fails the same way
	}
	return out, b.ended(ctx, pod, err)
}

// ended deletes a check pod that ended; err is the run's outcome, returned when the pod is gone.
func (b *PodBackend) ended(ctx context.Context, pod *corev1.Pod, err error) error {
	if derr := b.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); derr != nil && !apierrors.IsNotFound(derr) {
		return backend.APIError("deleting the check pod (its result is read again)", derr)
	}
	return err
}

func (b *PodBackend) memory() resource.Quantity {
	if b.Memory.IsZero() {
		return resource.MustParse("512Mi")
	}
	return b.Memory
}

func (b *PodBackend) start(ctx context.Context, run *securityv1.BackupVerifyRun, node string) (backend.Outcome, error) {
	n := &metav1.PartialObjectMetadata{}
	n.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	if err := b.Reader.Get(ctx, client.ObjectKey{Name: node}, n); apierrors.IsNotFound(err) {
		return backend.Outcome{}, reconcile.TerminalError(fmt.Errorf("node %s does not exist: backupRef.node names the node that holds the snapshot", node))
	} else if err != nil {
		return backend.Outcome{}, backend.APIError("reading node "+node, err)
	}
	if strings.TrimSpace(run.Spec.BackupRef.Name) == "" {
		return backend.Outcome{}, reconcile.TerminalError(ErrRefInvalid)
	}
	deadline := int64(15 * 60)
	if d, ok := ctx.Deadline(); ok {
		deadline = max(1, int64(time.Until(d).Seconds())+1)
	}
	pod := b.pod(PodName(run), map[string]string{securityv1.LabelRunUID: string(run.UID), securityv1.LabelRun: backupsv1.BoundedName(63, run.Name),
		"app.kubernetes.io/name": PodLabelValue}, node, []string{CheckCommand, "--dir=" + podSnapshotDir, "--ref=" + run.Spec.BackupRef.Name}, deadline, b.memory())
	if err := b.Client.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return backend.Outcome{}, backend.APIError("creating the check pod on node "+node, err)
	}
	return backend.Outcome{}, nil
}

// pod is a pod of this backend (a check or a lister) on node, running the verifier's image with
// args: it reads the node's snapshot directory through a read-only hostPath as user 0 with every
// capability dropped but CAP_DAC_READ_SEARCH, no service account token, no privilege escalation,
// a read-only root filesystem, within deadline seconds and mem, and reports through its
// termination message.
func (b *PodBackend) pod(name string, labels map[string]string, node string, args []string, deadline int64, mem resource.Quantity) *corev1.Pod {
	labels["app.kubernetes.io/part-of"] = "coffer"
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.Namespace, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName: node, RestartPolicy: corev1.RestartPolicyNever, ActiveDeadlineSeconds: &deadline,
			AutomountServiceAccountToken: ptr.To(false), EnableServiceLinks: ptr.To(false),
			Tolerations:     []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			SecurityContext: &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Volumes: []corev1.Volume{{Name: "snapshots", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: b.HostDir, Type: ptr.To(corev1.HostPathDirectory)}}}},
			Containers: []corev1.Container{{
				Name: "check", Image: b.Image, ImagePullPolicy: corev1.PullIfNotPresent, Args: args,
				VolumeMounts: []corev1.VolumeMount{{Name: "snapshots", MountPath: podSnapshotDir, ReadOnly: true}},
				SecurityContext: &corev1.SecurityContext{
					RunAsUser: ptr.To(int64(0)), RunAsNonRoot: ptr.To(false), Privileged: ptr.To(false),
					AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"DAC_READ_SEARCH"}},
				},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceMemory: minQuantity(resource.MustParse("64Mi"), mem), corev1.ResourceCPU: resource.MustParse("50m")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: mem},
				},
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
		},
	}
}

func minQuantity(a, b resource.Quantity) resource.Quantity {
	if a.Cmp(b) <= 0 {
		return a
	}
	return b
}

func (b *PodBackend) clock() clock.PassiveClock {
	if b.Clock != nil {
		return b.Clock
	}
	return clock.RealClock{}
}

// PodSweeper deletes the check pods whose run is gone or ended (a run deleted, or timed out,
// while its pod ran), once they are a minute old. It runs on the leader, every 10 minutes.
type PodSweeper struct {
	// Reader lists check pods (directly: nothing caches pods).
	Reader client.Reader
	// Runs lists the BackupVerifyRuns (the manager's cache).
	Runs      client.Reader
	Client    client.Writer
	Namespace string
	Clock     clock.PassiveClock
}

// Start sweeps every 10 minutes until ctx ends (a manager.Runnable).
func (s *PodSweeper) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("etcd-check-pods")
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if n, err := s.Sweep(ctx); err != nil {
			log.Error(err, "Sweeping check pods; retrying at the next pass")
		} else if n > 0 {
			log.Info("Deleted check pods whose run is gone or ended, and stale lister pods", "deleted", n)
		}
	}, 10*time.Minute)
	return nil
}

// Sweep deletes the check pods no live run will read, and the lister pods older than any
// listing is read from (their policy gone, or the verifier down), and reports how many.
func (s *PodSweeper) Sweep(ctx context.Context) (int, error) {
	ours, err := labels.NewRequirement("app.kubernetes.io/name", selection.In, []string{PodLabelValue, ListerLabelValue})
	if err != nil {
		return 0, err
	}
	pods := &corev1.PodList{}
	if err := s.Reader.List(ctx, pods, client.InNamespace(s.Namespace), client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*ours)}); err != nil {
		return 0, fmt.Errorf("listing check and lister pods: %w", err)
	}
	var live map[types.UID]bool
	n := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		age := s.Clock.Since(p.CreationTimestamp.Time)
		if p.Labels["app.kubernetes.io/name"] == ListerLabelValue {
			if age < 2*(listStuck+listFresh) {
				continue
			}
		} else {
			if live == nil {
				if live, err = backend.LiveRuns(ctx, s.Runs); err != nil {
					return n, err
				}
			}
			if live[types.UID(p.Labels[securityv1.LabelRunUID])] || age < time.Minute {
				continue
			}
		}
		if err := s.Client.Delete(ctx, p, client.Preconditions{UID: &p.UID}); client.IgnoreNotFound(err) != nil {
			return n, fmt.Errorf("deleting pod %s: %w", p.Name, err)
		}
		n++
	}
	return n, nil
}
