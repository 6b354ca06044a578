package driver

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
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
	// Live reads the credentials Secret uncached: the driver watches no Secret.
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

type knownRecord struct {
	etag   string
	record *backupsv1.ArtifactRecord
	err    error
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
	entries, skipped, failed, err := c.read(ctx, s3, strat.Name, src, progress)
	if err != nil {
		return driverkit.CatalogResult{}, backupsv1.ReasonCatalogUnreadable, err
	}
	self, err := c.Kit.SourceCluster(ctx)
	if err != nil {
		return driverkit.CatalogResult{}, "", err
	}
	cat := driverkit.Catalog{Client: c.Client, Driver: names.DriverName, Name: strat.Name,
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
	res, err := cat.Sync(ctx, self, entries, failed == 0)
	if err != nil {
		return res, "", err
	}
	for k, v := range skipped {
		res.Skipped[k] = v
	}
	res.Records += len(skipped) + failed
	if failed > 0 {
		return res, backupsv1.ReasonCatalogUnreadable, fmt.Errorf("%d of %d record(s) in s3://%s/%s could not be read (the driver's log names them); the others were imported, and no imported Backup was removed", failed, res.Records, src.Bucket, src.Prefix)
	}
	return res, "", nil
}

// read lists the bucket under the prefix and returns the valid records whose artifact is beside
// them, the reasons the others are skipped, and how many records could not be read.
func (c *Catalog) read(ctx context.Context, s3 *minio.Client, strategy string, src *jobapi.CatalogSource, progress driverkit.Progress) ([]driverkit.CatalogEntry, map[string]string, int, error) {
	if progress == nil {
		progress = func(string, int, int) {}
	}
	// Streamed: of the listing, only the records and whether each has its artifact are kept.
	records, withArtifact, err := listRecords(ctx, s3, src.Bucket, src.Prefix)
	if err != nil {
		return nil, nil, 0, err
	}
	c.mu.Lock()
	if c.known == nil {
		c.known = map[string]map[string]knownRecord{}
	}
	known := c.known[strategy]
	c.mu.Unlock()
	next := map[string]knownRecord{}
	var todo []string
	for k, etag := range records {
		if kr, ok := known[k]; ok && kr.etag == etag {
			next[k] = kr
			continue
		}
		todo = append(todo, k)
	}
	// Read what is new, a few at once.
	threads := c.ReadThreads
	if threads <= 0 {
		threads = 8
	}
	var mu sync.Mutex
	failed, read := 0, 0
	work := make(chan string)
	var wg sync.WaitGroup
	for range min(threads, max(len(todo), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				kr, readErr := readRecord(ctx, s3, src.Bucket, k, records[k])
				mu.Lock()
				if readErr != nil {
					failed++
					ctrl.LoggerFrom(ctx).Info("Reading a record failed", "record", agent.ArtifactURI(src.Bucket, k), "error", readErr.Error())
				} else {
					next[k] = kr
				}
				read++
				n := read
				mu.Unlock()
				progress(backupsv1.CatalogReading, n, len(todo))
			}
		}()
	}
	for _, k := range todo {
		work <- k
	}
	close(work)
	wg.Wait()
	c.mu.Lock()
	c.known[strategy] = next
	c.mu.Unlock()

	var entries []driverkit.CatalogEntry
	skipped := map[string]string{}
	for k, kr := range next {
		loc := agent.ArtifactURI(src.Bucket, k)
		artifactKey := strings.TrimSuffix(k, jobapi.RecordSuffix)
		switch {
		case kr.err != nil:
			skipped[loc] = kr.err.Error()
		case !beside(kr.record.Artifact.URI, src.Bucket, artifactKey):
			skipped[loc] = fmt.Sprintf("the record names the artifact %s, not the object beside it (%s)", kr.record.Artifact.URI, agent.ArtifactURI(src.Bucket, artifactKey))
		case jobapi.FirstSegment(k) != kr.record.Namespace:
			// A record maps to the namespace of the first segment of its key under the bucket,
			// whatever the catalog's prefix: whoever may write below one namespace's segment
			// cannot plant Backups in another's, nor take the name of another's genuine record.
			skipped[loc] = fmt.Sprintf("the record says namespace %s, but its key is below %s/, not %s/: a record is imported only from below its own namespace (s3://%s/<namespace>/...)",
				kr.record.Namespace, jobapi.FirstSegment(k), kr.record.Namespace, src.Bucket)
		case !withArtifact[k]:
			skipped[loc] = "its artifact " + agent.ArtifactURI(src.Bucket, artifactKey) + " is gone (a cleanup left the record)"
		default:
			entries = append(entries, driverkit.CatalogEntry{Record: kr.record, Location: loc})
		}
	}
	return entries, skipped, failed, nil
}

// beside reports whether a record's artifact URI names the object key in bucket, read by the one
// strict parser of artifact URIs.
func beside(uri, bucket, key string) bool {
	b, k, err := backupsv1.ParseS3URI(uri)
	return err == nil && b == bucket && k == key
}

// readRecord reads and parses one record. A record that is not valid is remembered as such (at
// its ETag), so it is not read again until it changes; a read that failed is an error.
func readRecord(ctx context.Context, s3 *minio.Client, bucket, key, etag string) (knownRecord, error) {
	obj, err := s3.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return knownRecord{}, err
	}
	defer obj.Close()
	data, err := io.ReadAll(io.LimitReader(obj, backupsv1.MaxRecordBytes+1))
	if err != nil {
		return knownRecord{}, err
	}
	r, perr := backupsv1.ParseArtifactRecord(data)
	return knownRecord{etag: etag, record: r, err: perr}, nil
}
