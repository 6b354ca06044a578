package velerocheck

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	securityv1 "github.com/coffer-backup/coffer/apis/security/v1alpha1"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/velerokit/volumes"
	"github.com/coffer-backup/coffer/verifier/internal/backend"
	"github.com/coffer-backup/coffer/verifier/internal/kopiarepo"
)

// Volume data: a Velero backup's file-system backups (PodVolumeBackups) and data movement
// (DataUploads) put each volume's data in a kopia repository per namespace under the storage
// location (volumes.RepositoryPrefix). Checksum-only reads every file of every such snapshot to its
// end through the kopia library, which verifies each content it reads; a content that does not
// verify or is gone is a finding naming the volume, trouble reaching the store is an error.
//
// What it reads, it reads from Velero's own objects in Velero's namespace (found by the backup's
// UID label, as Velero keeps it through a backup sync), with Velero's repository password and the
// verifier's own read-only store credentials (StorageSecret), each Secret by name
// (VolumeDataRole): the verifier holds no other Secret of Velero's namespace, and opens the
// repository read-only.

// VolumeDataRole is the Role, in Velero's namespace, that lets the verifier list the volume
// records of backups and read the two Secrets a repository opens with (deploy/verifier/velero).
const VolumeDataRole = "coffer-verifier-volume-data"

// Velero's names for what opens its repositories.
const (
	RepoCredentialsSecret = "velero-repo-credentials"
	RepoPasswordKey       = "repository-password"
)

// StorageSecret is the Secret, in Velero's namespace, that holds the verifier's own credentials
// for the object store: a credentials file in the AWS format (as Velero's aws plugin reads its own,
// with the profile the location's config names, else "default") under the key named as the
// storage location, else under StorageDefaultKey. The verifier never reads Velero's store
// credentials (Velero's identity may write and delete every backup): its identity needs only to
// read the locations' kopia repositories (velerokit/volumes.ReadPolicy).
const (
	StorageSecret     = "coffer-verifier-storage"
	StorageDefaultKey = "cloud"
)

// Details of a checksum-only Result of a backup with volume data.
const (
	DetailVolumeSnapshots = "volumeSnapshotsRead"
	DetailVolumeFiles     = "volumeFilesRead"
	DetailVolumeBytes     = "volumeBytesRead"
)

// volume is one volume's data as Velero recorded it.
type volume struct {
	object    string // the record, as findings name objects
	name      string // the volume, as a person names it
	namespace string // the namespace its repository is of
	location  string
	uploader  string
	phase     string
	snapshot  string
	// method is how Velero moved it (veleroapi.VolumeMethod...); pod and podVolume name the pod
	// volume of a file-system backup; claim the claim whose snapshot the data mover moved.
	method, pod, podVolume, claim string
}

// moved tells whether the data mover moved v (from a CSI snapshot of its claim).
func (v volume) moved() bool { return v.method == string(veleroapi.VolumeMethodDataMover) }

// volumesOf lists the volume data of Velero backup vb (volumes.Records).
func (c *Checker) volumesOf(ctx context.Context, vb *velerov1.Backup) ([]volume, error) {
	records, err := volumes.Records(ctx, c.Reader, vb)
	var lerr *volumes.ListError
	if errors.As(err, &lerr) {
		return nil, c.volumeAPIError(lerr.What, vb.Namespace, lerr.Err)
	}
	vols := make([]volume, 0, len(records))
	for _, r := range records {
		vols = append(vols, volume{object: volumes.Object(r, vb.Namespace), name: volumes.Describe(r), namespace: r.Namespace,
			location: r.StorageLocation, uploader: volumes.Uploader(r), phase: r.Phase, snapshot: r.SnapshotID,
			method: string(r.Method), pod: r.Pod, podVolume: r.PodVolume, claim: r.PersistentVolumeClaim})
	}
	return vols, err
}

// volumeAPIError is trouble listing volume records, except a refusal: the verifier without
// VolumeDataRole (deploy/verifier/velero not applied since it was added) still verifies what it
// may read, and says what it did not (a locationError).
func (c *Checker) volumeAPIError(what, ns string, err error) error {
	if apierrors.IsForbidden(err) {
		return locationError(fmt.Sprintf("%s is forbidden to the verifier: apply deploy/verifier/velero (Role %s/%s)", what, ns, VolumeDataRole))
	}
	return backend.APIError(what, err)
}

// checkVolumes reads the volume data of Velero backup vb (stored in bsl) and adds what it found
// to out. With onlyNamespace set, data of volumes of other namespaces is not read (a Backup of
// driver-velero is of its own namespace only). It returns the snapshot IDs of the volume records it
// found, nil when it may not list them.
func (c *Checker) checkVolumes(ctx context.Context, vb *velerov1.Backup, bsl *velerov1.BackupStorageLocation, onlyNamespace string, out *backend.Outcome) (map[string]bool, error) {
	vols, err := c.volumesOf(ctx, vb)
	var denied locationError
	if errors.As(err, &denied) {
		// Not a fact about the backup, and no reason to fail the rest of its verification.
		out.Add(securityv1.CodeVolumeDataNotRead, securityv1.SeverityMedium, "velero.io/Backup "+vb.Namespace+"/"+vb.Name,
			"the backup's volume data, if it has any, was not read: "+string(denied))
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return c.readVolumes(ctx, vb, bsl, vols, onlyNamespace, out, nil)
}

// readVolumes is checkVolumes on the volume records vols, already listed. With digests set, each
// snapshot read whole gets the digest of its files there (by snapshot ID), which a full-restore
// compares with what was restored. Every snapshot read whole and sound is remembered
// (rememberRecord), every damaged one forgotten.
func (c *Checker) readVolumes(ctx context.Context, vb *velerov1.Backup, bsl *velerov1.BackupStorageLocation, vols []volume, onlyNamespace string,
	out *backend.Outcome, digests map[string]*treeDigest) (map[string]bool, error) {
	seen := map[string]bool{}
	if len(vols) == 0 {
		return seen, nil
	}
	for _, v := range vols {
		seen[v.snapshot] = true
	}
	var snapshots, files, bytesRead int64
	var damaged bool
	repos := map[string]*kopiarepo.Repository{}
	defer func() {
		for _, r := range repos {
			r.Close(context.WithoutCancel(ctx))
		}
	}()
	for _, v := range vols {
		notRead := func(why string) {
			out.Add(securityv1.CodeVolumeDataNotRead, securityv1.SeverityMedium, v.object, fmt.Sprintf("the data of %s was not read: %s", v.name, why))
		}
		switch {
		case onlyNamespace != "" && v.namespace != onlyNamespace:
			notRead("it is of namespace " + v.namespace + ", not of the Backup's " + onlyNamespace)
			continue
		case v.phase != string(velerov1.PodVolumeBackupPhaseCompleted):
			notRead(fmt.Sprintf("Velero records it %q, not Completed", v.phase))
			continue
		case v.uploader != "kopia":
			notRead(fmt.Sprintf("it was uploaded by %q; checksum-only reads kopia repositories", v.uploader))
			continue
		case v.snapshot == "":
			continue // an empty volume: Velero stores no snapshot of it
		case v.location != "" && v.location != bsl.Name:
			notRead(fmt.Sprintf("it is stored in location %q, not in the backup's %q", v.location, bsl.Name))
			continue
		}
		key := v.namespace
		rep, ok := repos[key]
		if !ok {
			loc, err := c.repository(ctx, bsl, v.namespace)
			var lerr locationError
			if errors.As(err, &lerr) {
				notRead(string(lerr))
				continue
			}
			if err != nil {
				return nil, err
			}
			rep, err = kopiarepo.Open(ctx, loc)
			var d *kopiarepo.Damage
			if errors.As(err, &d) {
				damaged = true
				c.rememberRecord(bsl, v, nil)
				out.Add(securityv1.CodeVolumeDataMissing, securityv1.SeverityCritical, v.object,
					fmt.Sprintf("the data of %s (kopia snapshot %s) is gone: %v", v.name, v.snapshot, d))
				continue
			}
			if err != nil {
				return nil, c.storageError(bsl, "opening the kopia repository of namespace "+v.namespace, err)
			}
			repos[key] = rep
		}
		d := &treeDigest{}
		st, err := rep.Read(ctx, v.snapshot, func(f kopiarepo.File) error {
			d.add(f.Path, f.Size, f.SHA256)
			return nil
		})
		var dmg *kopiarepo.Damage
		switch {
		case errors.As(err, &dmg):
			damaged = true
			c.rememberRecord(bsl, v, nil)
			code := securityv1.CodeVolumeDataCorrupt
			if dmg.Missing {
				code = securityv1.CodeVolumeDataMissing
			}
			out.Add(code, securityv1.SeverityCritical, v.object, backend.Truncate(fmt.Sprintf("the data of %s (kopia snapshot %s in repository %s) does not read back: %v",
				v.name, v.snapshot, volumes.RepositoryPrefix(bslPrefix(bsl), v.namespace), dmg), 2048))
			continue
		case err != nil:
			return nil, c.storageError(bsl, fmt.Sprintf("reading kopia snapshot %s of %s", v.snapshot, v.name), err)
		}
		d.seal()
		d.uid, d.gid = st.RootUID, st.RootGID
		c.rememberRecord(bsl, v, d)
		if digests != nil {
			digests[v.snapshot] = d
		}
		snapshots++
		files += st.Files
		bytesRead += st.Bytes
	}
	out.Detail(DetailVolumeSnapshots, strconv.FormatInt(snapshots, 10))
	out.Detail(DetailVolumeFiles, strconv.FormatInt(files, 10))
	out.Detail(DetailVolumeBytes, strconv.FormatInt(bytesRead, 10))
	if snapshots > 0 && !damaged {
		out.Add(securityv1.CodeVolumeDataMatch, securityv1.SeverityInfo, "velero.io/Backup "+vb.Namespace+"/"+vb.Name,
			fmt.Sprintf("%d volume snapshot(s) read whole from their kopia repositories: %d file(s), %d byte(s), every content verified", snapshots, files, bytesRead))
	}
	return seen, nil
}

// locationError says why volume data cannot be read by this verifier as it is set up (a
// storage location it cannot open, a permission or Secret it lacks): not trouble, since retrying
// does not change it, and not a fact about the backup, so it becomes a volume-data-not-read
// finding.
type locationError string

func (e locationError) Error() string { return string(e) }

func bslPrefix(bsl *velerov1.BackupStorageLocation) string {
	if bsl.Spec.ObjectStorage != nil {
		return bsl.Spec.ObjectStorage.Prefix
	}
	return bsl.Spec.Config["prefix"]
}

// repository is where Velero keeps the kopia repository of namespace ns under storage location
// bsl, and what opens it: as Velero's unified repository provider computes them (an S3 location,
// s3Url, region, caCert), with the verifier's own credentials for the location (StorageSecret) and
// Velero's repository password.
func (c *Checker) repository(ctx context.Context, bsl *velerov1.BackupStorageLocation, ns string) (kopiarepo.Location, error) {
	var loc kopiarepo.Location
	if p := bsl.Spec.Provider; p != "aws" && p != "velero.io/aws" {
		return loc, locationError(fmt.Sprintf("its storage location %s is of provider %q; checksum-only reads volume data in S3 locations (aws)", bsl.Name, p))
	}
	cfg := bsl.Spec.Config
	if bsl.Spec.ObjectStorage != nil {
		loc.Bucket = bsl.Spec.ObjectStorage.Bucket
	}
	loc.Prefix = volumes.RepositoryPrefix(bslPrefix(bsl), ns)
	loc.Region = cfg["region"]
	if s := cfg["s3Url"]; s != "" {
		u, err := url.Parse(s)
		if err != nil || u.Host == "" {
			return loc, locationError(fmt.Sprintf("the s3Url %q of storage location %s does not parse", s, bsl.Name))
		}
		loc.Endpoint, loc.Insecure = u.Host, u.Scheme == "http"
	} else {
		if loc.Region == "" {
			return loc, locationError(fmt.Sprintf("storage location %s sets neither s3Url nor region", bsl.Name))
		}
		loc.Endpoint = "s3-" + loc.Region + ".amazonaws.com"
	}
	if v, _ := strconv.ParseBool(cfg["insecureSkipTLSVerify"]); v {
		return loc, locationError(fmt.Sprintf("storage location %s skips TLS verification (insecureSkipTLSVerify); the verifier does not read data it cannot authenticate the store of", bsl.Name))
	}
	ca, err := c.storageCA(ctx, bsl)
	if err != nil {
		return loc, err
	}
	loc.CA = ca
	creds, key, err := c.storageIdentity(ctx, bsl)
	if err != nil {
		return loc, err
	}
	profile := cfg["profile"]
	if profile == "" {
		profile = "default"
	}
	if loc.AccessKey, loc.SecretKey, loc.Token, err = awsCredentials(creds, profile); err != nil {
		return loc, locationError(fmt.Sprintf("the verifier's credentials for storage location %s (Secret %s/%s, key %s): %v", bsl.Name, bsl.Namespace, StorageSecret, key, err))
	}
	pw, err := c.secretKey(ctx, bsl.Namespace, RepoCredentialsSecret, RepoPasswordKey)
	if err != nil {
		return loc, err
	}
	loc.Password = string(pw)
	return loc, nil
}

// storageIdentity is the verifier's own credentials file for storage location bsl
// (StorageSecret: the key named as the location, else StorageDefaultKey) and the key it was under.
func (c *Checker) storageIdentity(ctx context.Context, bsl *velerov1.BackupStorageLocation) ([]byte, string, error) {
	sec, err := c.secret(ctx, bsl.Namespace, StorageSecret)
	if err != nil {
		return nil, "", err
	}
	for _, key := range []string{bsl.Name, StorageDefaultKey} {
		if v, ok := sec.Data[key]; ok {
			return v, key, nil
		}
	}
	return nil, "", locationError(fmt.Sprintf("Secret %s/%s has neither key %q nor key %q: add the verifier's read-only credentials for storage location %s (docs/verifier.md)",
		bsl.Namespace, StorageSecret, bsl.Name, StorageDefaultKey, bsl.Name))
}

// secretKey reads one key of a Secret the VolumeDataRole names.
func (c *Checker) secretKey(ctx context.Context, ns, name, key string) ([]byte, error) {
	sec, err := c.secret(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	v, ok := sec.Data[key]
	if !ok {
		return nil, locationError(fmt.Sprintf("Secret %s/%s has no key %q", ns, name, key))
	}
	return v, nil
}

// secret reads a Secret the VolumeDataRole names; one the verifier may not read or that does not
// exist is a locationError saying what to do.
func (c *Checker) secret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	sec := &corev1.Secret{}
	if err := c.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sec); err != nil {
		what := fmt.Sprintf("reading Secret %s/%s", ns, name)
		switch {
		case apierrors.IsForbidden(err):
			return nil, locationError(fmt.Sprintf("%s is forbidden to the verifier: add %q to the resourceNames of Role %s/%s (deploy/verifier/velero)", what, name, ns, VolumeDataRole))
		case apierrors.IsNotFound(err) && name == StorageSecret:
			return nil, locationError(fmt.Sprintf("Secret %s/%s, the verifier's own read-only credentials for the object store, does not exist: create it (docs/verifier.md, \"Volume data\")", ns, name))
		case apierrors.IsNotFound(err):
			return nil, locationError(fmt.Sprintf("Secret %s/%s, which opens Velero's repositories, does not exist", ns, name))
		}
		return nil, backend.APIError(what, err)
	}
	return sec, nil
}

// awsCredentials reads a profile of an AWS shared credentials file (the format of Velero's
// credentials for its aws plugin).
func awsCredentials(file []byte, profile string) (id, secret, token string, err error) {
	sc := bufio.NewScanner(bytes.NewReader(file))
	var in bool
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			name := strings.TrimSpace(strings.Trim(line, "[]"))
			in = name == profile || name == "profile "+profile
		case in:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				continue
			}
			switch strings.ToLower(strings.TrimSpace(k)) {
			case "aws_access_key_id":
				id = strings.TrimSpace(v)
			case "aws_secret_access_key":
				secret = strings.TrimSpace(v)
			case "aws_session_token":
				token = strings.TrimSpace(v)
			}
		}
	}
	if id == "" || secret == "" {
		return "", "", "", fmt.Errorf("profile %q has no aws_access_key_id and aws_secret_access_key", profile)
	}
	return id, secret, token, nil
}
