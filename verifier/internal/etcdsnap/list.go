package etcdsnap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/coffer-backup/coffer/verifier/internal/backend"
)

// ListCommand is the verifier's subcommand that lists a snapshot directory and prints the
// listing: what a lister pod runs (ListMain).
const ListCommand = "etcd-snapshot-list"

// ListerLabelValue is the app.kubernetes.io/name of lister pods.
const ListerLabelValue = "coffer-etcd-list"

// LabelPolicyUID marks a lister pod with the UID of the policy it lists for.
const LabelPolicyUID = "security.ugallu.io/policy-uid"

// File is a snapshot file of a listing.
type File struct {
	Name string `json:"n"`
	Size int64  `json:"s"`
	// ModTime is its modification time, in Unix nanoseconds.
	ModTime int64 `json:"m"`
}

// Modified is the file's modification time.
func (f File) Modified() time.Time { return time.Unix(0, f.ModTime) }

// ID is the file's identity: its size and modification time. A snapshot saved again under the
// same name is another snapshot.
func (f File) ID() string {
	return strconv.FormatInt(f.Size, 36) + "." + strconv.FormatInt(f.ModTime, 36)
}

// Listing is the snapshot files of a directory that a pattern selects, newest first.
type Listing struct {
	Files []File `json:"files"`
	// Omitted counts the oldest files left out to fit a lister pod's termination message: the
	// listing is complete when it is zero.
	Omitted int `json:"omitted,omitempty"`
	// Error says why the directory could not be listed (from a lister pod).
	Error string `json:"error,omitempty"`
}

// Has tells whether the listing holds the file name whose identity is id.
func (l *Listing) Has(name, id string) bool {
	for _, f := range l.Files {
		if f.Name == name && f.ID() == id {
			return true
		}
	}
	return false
}

// Skipped tells the files of a snapshot directory that are never snapshots of their own:
// sidecars, hidden files, and files being written by etcdctl (.part) or others (.tmp).
func Skipped(name string) bool {
	return strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".sha256") || strings.HasSuffix(name, ".part") || strings.HasSuffix(name, ".tmp")
}

// ListFiles lists the regular files of dir that pattern selects, but for those Skipped, newest
// first.
func ListFiles(dir, pattern string) (*Listing, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	l := &Listing{Files: []File{}}
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || Skipped(name) {
			continue
		}
		if ok, _ := path.Match(pattern, name); !ok {
			continue
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since the listing
		} else if err != nil {
			return nil, fmt.Errorf("reading %s: %w", name, err)
		}
		l.Files = append(l.Files, File{Name: name, Size: info.Size(), ModTime: info.ModTime().UnixNano()})
	}
	sort.Slice(l.Files, func(a, c int) bool {
		if l.Files[a].ModTime != l.Files[c].ModTime {
			return l.Files[a].ModTime > l.Files[c].ModTime
		}
		return l.Files[a].Name < l.Files[c].Name
	})
	return l, nil
}

// ListMain is the lister pod: it lists --dir for --pattern, writes the listing to the termination
// message (and stdout), and exits 0 when it could write it.
func ListMain(args []string, stdout io.Writer) int {
	fs := flag.NewFlagSet(ListCommand, flag.ContinueOnError)
	dir := fs.String("dir", podSnapshotDir, "the snapshot directory")
	pattern := fs.String("pattern", "*", "the files to list (Go's path.Match)")
	out := fs.String("result", "/dev/termination-log", "where the listing goes")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	l, err := ListFiles(*dir, *pattern)
	if err != nil {
		l = &Listing{Files: []File{}, Error: backend.Truncate(err.Error(), 1024)}
	}
	b := encodeListing(l)
	_, _ = stdout.Write(append(b, '\n'))
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "writing the listing:", err)
		return 1
	}
	return 0
}

// encodeListing encodes l within the termination message's bound, leaving out its oldest files
// when it must (and counting them).
func encodeListing(l *Listing) []byte {
	b, _ := json.Marshal(l)
	for len(b) > maxMessage && len(l.Files) > 0 {
		// Drop about as many files as the excess takes, at least one.
		per := len(b) / len(l.Files)
		drop := min(len(l.Files), max(1, (len(b)-maxMessage+per-1)/per))
		l.Files = l.Files[:len(l.Files)-drop]
		l.Omitted += drop
		b, _ = json.Marshal(l)
	}
	return b
}

// ListerPodName is the name of the pod listing node's directory for pattern, for the policy
// whose UID is uid: one at a time per policy, node and pattern.
func ListerPodName(uid types.UID, node, pattern string) string {
	sum := sha256.Sum256([]byte(string(uid) + "\x00" + node + "\x00" + pattern))
	return "bv-etcd-list-" + hex.EncodeToString(sum[:])[:20]
}

const (
	// listDeadline bounds a lister pod once it runs.
	listDeadline = 2 * time.Minute
	// listFresh is how old a lister pod's listing may be when it is read; an older one (the
	// verifier was down) is listed again.
	listFresh = 2 * time.Minute
	// listStuck is how long a lister pod may stay without ending before it is given up (a node
	// down, an image that cannot be pulled, a directory the node lacks).
	listStuck = 3 * time.Minute
)

// List returns node's snapshot files that pattern selects, as a lister pod on that node read them
// for the policy whose UID is uid: it starts the pod, and returns nil (and no error) until the pod
// has ended; then it returns the listing and deletes the pod. A pod that could not list (a node
// down, a directory it cannot read) is an error naming the node.
func (b *PodBackend) List(ctx context.Context, uid types.UID, node, pattern string) (*Listing, error) {
	name := ListerPodName(uid, node, pattern)
	pod := &corev1.Pod{}
	err := b.Reader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: name}, pod)
	if apierrors.IsNotFound(err) {
		p := b.pod(name, map[string]string{LabelPolicyUID: string(uid), "app.kubernetes.io/name": ListerLabelValue}, node,
			[]string{ListCommand, "--dir=" + podSnapshotDir, "--pattern=" + pattern}, int64(listDeadline.Seconds()), resource.MustParse("64Mi"))
		if err := b.Client.Create(ctx, p); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, backend.APIError("creating the lister pod on node "+node, err)
		}
		return nil, nil
	}
	if err != nil {
		return nil, backend.APIError("reading the lister pod", err)
	}
	if pod.Labels[LabelPolicyUID] != string(uid) || pod.Labels["app.kubernetes.io/name"] != ListerLabelValue {
		return nil, fmt.Errorf("pod %s/%s is not this policy's lister pod", pod.Namespace, pod.Name)
	}
	if !pod.DeletionTimestamp.IsZero() { // read, or given up, and not yet gone
		return nil, b.dropLister(ctx, pod, nil)
	}
	var term *corev1.ContainerStateTerminated
	waiting := ""
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Terminated != nil {
			term = cs.State.Terminated
		}
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			waiting = w.Reason + ": " + w.Message
		}
	}
	now := b.clock().Now()
	switch {
	case term == nil && pod.Status.Phase == corev1.PodFailed:
		return nil, b.dropLister(ctx, pod, fmt.Errorf("the lister pod on node %s failed before it listed (%s: %s)", node, pod.Status.Reason, pod.Status.Message))
	case term == nil && now.Sub(pod.CreationTimestamp.Time) > listStuck:
		if waiting == "" {
			waiting = string(pod.Status.Phase)
		}
		return nil, b.dropLister(ctx, pod, fmt.Errorf("the lister pod on node %s did not list within %s (%s)", node, listStuck, waiting))
	case term == nil:
		return nil, nil
	case !term.FinishedAt.IsZero() && now.Sub(term.FinishedAt.Time) > listFresh:
		return nil, b.dropLister(ctx, pod, nil) // listed long ago: listed again
	case term.Reason == "OOMKilled":
		return nil, b.dropLister(ctx, pod, fmt.Errorf("the lister pod on node %s ran out of memory", node))
	}
	l := &Listing{}
	if err := json.Unmarshal([]byte(term.Message), l); err != nil || l.Files == nil {
		return nil, b.dropLister(ctx, pod, fmt.Errorf("the lister pod on node %s exited %d (%s) without a listing (%q)", node, term.ExitCode, term.Reason, backend.Truncate(term.Message, 200)))
	}
	if l.Error != "" {
		return nil, b.dropLister(ctx, pod, fmt.Errorf("node %s: %s", node, l.Error))
	}
	return l, b.dropLister(ctx, pod, nil)
}

// dropLister deletes a lister pod at once (its container has ended, or never ran: nothing is left
// to stop gracefully) so that the next listing finds its name free; err is returned when the pod
// is gone.
func (b *PodBackend) dropLister(ctx context.Context, pod *corev1.Pod, err error) error {
	if derr := b.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}, client.GracePeriodSeconds(0)); derr != nil && !apierrors.IsNotFound(derr) {
		return backend.APIError("deleting the lister pod", derr)
	}
	return err
}
