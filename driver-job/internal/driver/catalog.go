package driver

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"unique"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	jobapi "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
	"github.com/coffer-backup/coffer/driver-job/internal/agent"
	"github.com/coffer-backup/coffer/driver-job/internal/names"
	"github.com/coffer-backup/coffer/driverkit"
)

// CatalogCredentialsSecret is the credentials Secret the driver's shipped Role lets it read (get,
// resourceNames) in its own namespace: the one a catalog's credentialsSecretName should name. An
// admin who names another adds it to the Role (docs/disaster-recovery.md).
const CatalogCredentialsSecret = "catalog-readonly"

// Catalog keeps the catalogs of JobBackupStrategies with spec.catalog (contract BK-12): every
// interval it lists the bucket, reads the records it has not read yet (by ETag), and hands them to
// driverkit's Catalog, which imports the Backups of other clusters.
type Catalog struct {
	Client client.Client
	// Cache, when set, is the cache Client reads: a sync walks the Backups it imported before in
	// its store (driverkit.Catalog.Cache). Nil lists them with Client.
	Cache cache.Cache
	// Live reads uncached: the credentials Secret (the driver watches no Secret), and a Backup
	// the catalog writes (its cache holds Backups trimmed).
	Live     client.Reader
	Recorder events.EventRecorder
	Clock    clock.PassiveClock
	// Namespace is the driver's own, where credentials Secrets are read.
	Namespace string
	// Kit gives this cluster's identity (records of this cluster are never imported).
	Kit *Kit
	// ReadThreads is how many records are read at once (default 8).
	ReadThreads int

	mu    sync.Mutex
	known map[string]map[string]knownRecord // strategy → record key → what it held at its ETag
}

// knownRecord is what the catalog keeps of a record it read, at the ETag it read: enough to know,
// at the next sync, which Backup it makes and whether that Backup is already imported, without
// reading it again; not the record (a catalog may hold 100,000). The record is read again, at the
// same ETag, when its Backup must be made or completed.
type knownRecord struct {
	etag string
	// skip says why the record is never imported at this ETag (not a valid record, or not of its
	// key's namespace or artifact); empty for a valid record.
	skip string
	// The valid record's identity (driverkit.CatalogEntry).
	namespace, name, cluster string
	uid                      types.UID
}

// SetupWithManager registers the catalog controller. Only spec changes wake it (and its own
// RequeueAfter): its status writes must not start another sync at once.
func (c *Catalog) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named(names.DriverName+"-catalog").
		For(&jobapi.JobBackupStrategy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).Complete(c)
}

// Reconcile syncs one strategy's catalog and comes back after its interval.
func (c *Catalog) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	strat := &jobapi.JobBackupStrategy{}
	if err := c.Client.Get(ctx, req.NamespacedName, strat); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	src := strat.Spec.Catalog
	if src == nil || !strat.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	return driverkit.SyncCatalog(ctx, c.Client, c.Recorder, metav1.NewTime(c.Clock.Now()), strat, &strat.Status.Conditions, &strat.Status.Catalog,
		src.IntervalSeconds, fmt.Sprintf("s3://%s/%s", src.Bucket, src.Prefix), func(p driverkit.Progress) (driverkit.CatalogResult, string, error) {
			return c.sync(ctx, strat, p)
		})
}

// sync lists and reads the records and imports them. An error with a reason is the storage's or
// the credentials' (said on the strategy); one without is the API server's.
func (c *Catalog) sync(ctx context.Context, strat *jobapi.JobBackupStrategy, progress driverkit.Progress) (driverkit.CatalogResult, string, error) {
	src := strat.Spec.Catalog
	secret := &corev1.Secret{}
	if err := c.Live.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: src.CredentialsSecretName}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return driverkit.CatalogResult{}, backupsv1.ReasonCatalogCredentials, fmt.Errorf("the credentials Secret %s/%s does not exist", c.Namespace, src.CredentialsSecretName)
		}
		if apierrors.IsForbidden(err) {
			return driverkit.CatalogResult{}, backupsv1.ReasonCatalogCredentials, fmt.Errorf(
				"the driver may not read the credentials Secret %s/%s: its Role coffer-driver-job grants get on the Secret %s only; name that Secret, or add %s to the Role's resourceNames",
				c.Namespace, src.CredentialsSecretName, CatalogCredentialsSecret, src.CredentialsSecretName)
		}
		return driverkit.CatalogResult{}, "", fmt.Errorf("reading the credentials Secret %s/%s: %w", c.Namespace, src.CredentialsSecretName, err)
	}
	id, key := string(secret.Data[agent.EnvAccessKeyID]), string(secret.Data[agent.EnvSecretAccessKey])
	if id == "" || key == "" {
		return driverkit.CatalogResult{}, backupsv1.ReasonCatalogCredentials, fmt.Errorf("the credentials Secret %s/%s lacks %s or %s", c.Namespace, src.CredentialsSecretName, agent.EnvAccessKeyID, agent.EnvSecretAccessKey)
	}
	s3, err := agent.NewClient(src.Endpoint, src.Region, id, key)
	if err != nil {
		return driverkit.CatalogResult{}, backupsv1.ReasonCatalogCredentials, fmt.Errorf("the catalog's endpoint: %w", err)
	}
	// Streamed: of the listing, only the records and whether each has its artifact are kept.
	records, err := listRecords(ctx, s3, src.Bucket, src.Prefix)
	if err != nil {
		return driverkit.CatalogResult{}, backupsv1.ReasonCatalogUnreadable, err
	}
	self, err := c.Kit.SourceCluster(ctx)
	if err != nil {
		return driverkit.CatalogResult{}, "", err
	}
	cat := driverkit.Catalog{Client: c.Client, Cache: c.Cache, Live: c.Live, Driver: names.DriverName, Name: strat.Name,
		StrategyRef:      corev1.TypedLocalObjectReference{APIGroup: ptr.To(jobapi.Group), Kind: jobapi.Kind, Name: strat.Name},
		NamespaceMapping: map[string]string{}, Progress: progress}
	for from, to := range src.NamespaceMapping {
		cat.NamespaceMapping[from] = string(to)
	}
	if strat.Spec.CleanupTemplate != nil {
		cat.Finalizer = names.Finalizer
	}
	// The record's parameters (its cluster's class, as the record says) never reach a restore
	// here: the catalog's do.
	cat.DriverMetadata = func(recorded map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range recorded {
			if !strings.HasPrefix(k, names.MetaParamPrefix) {
				out[k] = v
			}
		}
		for k, v := range src.Parameters {
			out[names.MetaParamPrefix+k] = v
		}
		return out
	}
	res, err := cat.Sync(ctx, self, len(records), c.records(ctx, s3, strat.Name, src.Bucket, records))
	if err != nil {
		return res, "", err
	}
	if res.Unreadable > 0 {
		return res, backupsv1.ReasonCatalogUnreadable, fmt.Errorf("%d of %d record(s) in s3://%s/%s could not be read (the driver's log names them); the others were imported, and no imported Backup was removed", res.Unreadable, res.Records, src.Bucket, src.Prefix)
	}
	return res, "", nil
}

// records yields the entries of the records listed (in key order): from what the catalog knows
// of a record at its ETag, or else read, ReadThreads at once, as the catalog imports those yielded
// before. What it read is known at the next sync.
func (c *Catalog) records(ctx context.Context, s3 *minio.Client, strategy, bucket string, records []listedRecord) driverkit.CatalogRecords {
	return func(yield func(driverkit.CatalogEntry) bool) {
		// What the catalog knows is updated in place (a second map beside it would double its
		// memory for the sync, 32 MB at 100,000 records), and forgets the records no longer listed.
		c.mu.Lock()
		if c.known == nil {
			c.known = map[string]map[string]knownRecord{}
		}
		known := c.known[strategy]
		if known == nil {
			known = make(map[string]knownRecord, len(records))
			c.known[strategy] = known
		}
		c.mu.Unlock()
		var mu sync.Mutex
		lookup := func(l listedRecord) (knownRecord, bool) {
			mu.Lock()
			defer mu.Unlock()
			kr, ok := known[l.key]
			return kr, ok && kr.etag == l.etag
		}
		remember := func(k string, kr knownRecord) {
			mu.Lock()
			known[k] = kr
			mu.Unlock()
		}
		defer func() {
			mu.Lock()
			defer mu.Unlock()
			for k := range known {
				if _, ok := listed(records, k); !ok {
					delete(known, k)
				}
			}
		}()

		// Each key gets a slot, in order; a slot is filled from memory or by a reader, and the
		// slots are yielded in order. At most window records are read ahead of the catalog.
		threads := c.ReadThreads
		if threads <= 0 {
			threads = 8
		}
		type read struct {
			listedRecord
			slot chan driverkit.CatalogEntry
		}
		ctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		slots := make(chan chan driverkit.CatalogEntry, 4*threads)
		work := make(chan read)
		for range threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for rd := range work {
					kr, r, err := readRecord(ctx, s3, bucket, rd.key, rd.etag)
					if err != nil {
						rd.slot <- driverkit.CatalogEntry{Location: agent.ArtifactURI(bucket, rd.key), Unreadable: err}
						continue
					}
					remember(rd.key, kr)
					e := c.entry(s3, bucket, rd.key, kr, rd.artifact)
					if e.Skip == "" && e.Unreadable == nil {
						e.Record = r
					}
					rd.slot <- e
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(slots)
			defer close(work)
			for _, l := range records {
				slot := make(chan driverkit.CatalogEntry, 1)
				select {
				case slots <- slot:
				case <-ctx.Done():
					return
				}
				if kr, ok := lookup(l); ok {
					slot <- c.entry(s3, bucket, l.key, kr, l.artifact)
					continue
				}
				select {
				case work <- read{l, slot}:
				case <-ctx.Done():
					return
				}
			}
		}()
		for slot := range slots {
			select {
			case e := <-slot:
				if !yield(e) {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}
}

// entry is the catalog entry of the record at key, as kr says (Load reads it again at kr's ETag),
// or the reason it is skipped.
func (c *Catalog) entry(s3 *minio.Client, bucket, key string, kr knownRecord, withArtifact bool) driverkit.CatalogEntry {
	loc := agent.ArtifactURI(bucket, key)
	switch {
	case kr.skip != "":
		return driverkit.CatalogEntry{Location: loc, Skip: kr.skip}
	case !withArtifact:
		return driverkit.CatalogEntry{Location: loc, Skip: "its artifact " + agent.ArtifactURI(bucket, strings.TrimSuffix(key, jobapi.RecordSuffix)) + " is gone (a cleanup left the record)"}
	}
	return driverkit.CatalogEntry{Location: loc, Namespace: kr.namespace, Name: kr.name, SourceCluster: kr.cluster, UID: kr.uid,
		Load: func(ctx context.Context) (*backupsv1.ArtifactRecord, error) {
			again, r, err := readRecord(ctx, s3, bucket, key, kr.etag)
			if err != nil {
				return nil, err
			}
			if again.skip != "" {
				return nil, fmt.Errorf("the record no longer is what was read at ETag %s: %s", kr.etag, again.skip)
			}
			return r, nil
		}}
}

// beside reports whether a record's artifact URI names the object key in bucket, read by the one
// strict parser of artifact URIs.
func beside(uri, bucket, key string) bool {
	b, k, err := backupsv1.ParseS3URI(uri)
	return err == nil && b == bucket && k == key
}

// readRecord reads and parses the record at key, at ETag etag only (the store refuses the read if
// the record changed since it was listed), and checks it against its key. A record that is not
// valid, or not of its key, is remembered as such (at its ETag), so it is not read again until it
// changes; a read that failed is an error.
func readRecord(ctx context.Context, s3 *minio.Client, bucket, key, etag string) (knownRecord, *backupsv1.ArtifactRecord, error) {
	opts := minio.GetObjectOptions{}
	if err := opts.SetMatchETag(etag); err != nil {
		return knownRecord{}, nil, err
	}
	obj, err := s3.GetObject(ctx, bucket, key, opts)
	if err != nil {
		return knownRecord{}, nil, err
	}
	defer obj.Close()
	data, err := io.ReadAll(io.LimitReader(obj, backupsv1.MaxRecordBytes+1))
	if err != nil {
		return knownRecord{}, nil, err
	}
	r, perr := backupsv1.ParseArtifactRecord(data)
	kr := knownRecord{etag: etag}
	artifactKey := strings.TrimSuffix(key, jobapi.RecordSuffix)
	switch {
	case perr != nil:
		kr.skip = perr.Error()
	case !beside(r.Artifact.URI, bucket, artifactKey):
		kr.skip = fmt.Sprintf("the record names the artifact %s, not the object beside it (%s)", r.Artifact.URI, agent.ArtifactURI(bucket, artifactKey))
	case jobapi.FirstSegment(key) != r.Namespace:
		// A record maps to the namespace of the first segment of its key under the bucket,
		// whatever the catalog's prefix: whoever may write below one namespace's segment cannot
		// plant Backups in another's, nor take the name of another's genuine record.
		kr.skip = fmt.Sprintf("the record says namespace %s, but its key is below %s/, not %s/: a record is imported only from below its own namespace (s3://%s/<namespace>/...)",
			r.Namespace, jobapi.FirstSegment(key), r.Namespace, bucket)
	default:
		// Interned: the records of a catalog share a few clusters and namespaces.
		kr.namespace, kr.name, kr.cluster, kr.uid = unique.Make(r.Namespace).Value(), r.Name, unique.Make(r.SourceCluster.ID).Value(), r.UID
		return kr, r, nil
	}
	return kr, nil, nil
}
