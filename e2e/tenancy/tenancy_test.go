//go:build e2e

// Package tenancy attacks Coffer's tenant boundaries with data moving through the real stack
// (API server, Velero server, MinIO, core-controller and driver-velero as processes under their
// shipped RBAC, the shipped admission policies and roles for people). Three users, impersonated,
// hold only the shipped coffer-tenant role: alice in tenant-a, bob in tenant-b, carol in tenant-a
// and tenant-c.
//
//   - alice backs up her application through a class whose Velero template names no namespace:
//     the tarball in MinIO holds tenant-a's objects and nothing of tenant-b (read from the
//     tarball itself);
//   - a class whose template names tenant-b: alice's run fails NamespaceNotAllowed and no Velero
//     Backup exists;
//   - alice restores into tenant-b or kube-system: refused at admission, nothing is created;
//   - carol, allowed in both, restores alice's Backup into tenant-c: the data lands in tenant-c,
//     and tenant-a and tenant-b are as they were;
//   - bob cannot read tenant-a's Backups, RestoreJobs or BackupJobs.
//
// The rights of every component's ServiceAccount are proven separately, against the same shipped
// RBAC, by e2e/security.
package tenancy

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
	veleroapi "github.com/coffer-backup/coffer/apis/velerodriver/v1alpha1"
	"github.com/coffer-backup/coffer/e2e/golden"
	"github.com/coffer-backup/coffer/e2e/harness/cluster"
	"github.com/coffer-backup/coffer/e2e/harness/components"
	"github.com/coffer-backup/coffer/e2e/harness/velerostack"
)

const (
	nsA, nsB, nsC = "tenant-a", "tenant-b", "tenant-c"
	openClass     = "tenancy-open"
	narrowClass   = "tenancy-names-b"
)

var shopRef = corev1.TypedLocalObjectReference{Kind: "Shop", Name: "shop"}

func TestTenantBoundariesWithData(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s, err := golden.Start(ctx, golden.Options{Say: t.Logf, Components: []components.Spec{
		{Module: "core-controller", Binary: "core-controller", Namespace: "coffer-system", Args: []string{"--driver-claim-timeout=1m"}},
		{Module: "driver-velero", Binary: "driver-velero", Namespace: "coffer-system"},
	}})
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	for _, c := range s.Components {
		t.Cleanup(func() { components.StopAndCheck(t, c) })
	}
	admin := s.Client
	setup(t, ctx, admin)
	alice := as(t, s.Cluster, "alice", nsA)
	bob := as(t, s.Cluster, "bob", nsB)
	carol := as(t, s.Cluster, "carol", nsA, nsC)

	var backup *backupsv1.Backup
	t.Run("a template naming no namespace backs up the run's namespace only", func(t *testing.T) {
		j := backupJob(t, ctx, alice, "a1", openClass)
		wait4(t, ctx, admin, j, 3*time.Minute)
		require.Equal(t, backupsv1.BackupJobSucceeded, j.Status.Phase, "a1: %s", j.Status.Message)
		backup = &backupsv1.Backup{}
		require.NoError(t, alice.Get(ctx, client.ObjectKey{Namespace: nsA, Name: j.Status.BackupRef.Name}, backup), "alice reads her Backup")
		veleroName := backup.Spec.DriverMetadata["veleroBackupName"]
		require.NotEmpty(t, veleroName)
		entries := tarball(t, ctx, s.Velero.S3, velerostack.ObjectKey(veleroName))
		var namespaced, cluster []string
		kinds := map[string]bool{} // the resources of the namespaced objects, e.g. shops.apps.cozystack.io
		for _, e := range entries {
			_, rest, ok := strings.Cut(e, "resources/")
			if !ok {
				continue
			}
			// resources/<resource>[/<version>-preferredversion]/{namespaces/<ns>,cluster}/<name>.json
			parts := strings.Split(rest, "/")
			if len(parts) > 2 && strings.HasSuffix(parts[1], "-preferredversion") {
				parts = append(parts[:1:1], parts[2:]...)
			}
			switch {
			case len(parts) == 4 && parts[1] == "namespaces":
				namespaced = append(namespaced, e)
				kinds[parts[0]] = true
				assert.Equal(t, nsA, parts[2], "the backup of a tenant-a run holds %s", e)
			case len(parts) == 3 && parts[1] == "cluster":
				cluster = append(cluster, parts[0]+"/"+parts[2])
			}
		}
		assert.True(t, slices.ContainsFunc(namespaced, func(e string) bool {
			return strings.HasPrefix(e, "resources/configmaps/") && strings.HasSuffix(e, "/namespaces/tenant-a/catalog.json")
		}), "tenant-a's ConfigMap is in the backup: %v", entries)
		// Velero adds the tenant's namespace and the definitions of the custom kinds it holds (the
		// drivers restore no cluster-scoped object); nothing else cluster-wide.
		for _, e := range cluster {
			crd, isCRD := strings.CutPrefix(e, "customresourcedefinitions.apiextensions.k8s.io/")
			ok := e == "namespaces/tenant-a.json" || isCRD && kinds[strings.TrimSuffix(crd, ".json")]
			assert.True(t, ok, "the backup of a tenant-a run holds the cluster-scoped %s", e)
		}
		t.Logf("%d objects of tenant-a in the tarball, cluster-scoped: %v", len(namespaced), cluster)
	})

	t.Run("a template naming another tenant's namespace fails the run", func(t *testing.T) {
		j := backupJob(t, ctx, alice, "a2", narrowClass)
		wait4(t, ctx, admin, j, 2*time.Minute)
		require.Equal(t, backupsv1.BackupJobFailed, j.Status.Phase)
		ready := meta.FindStatusCondition(j.Status.Conditions, backupsv1.ConditionReady)
		require.NotNil(t, ready)
		assert.Equal(t, "NamespaceNotAllowed", ready.Reason, "%s", ready.Message)
		assert.Contains(t, ready.Message, nsB, "the message names the namespace refused")
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion("velero.io/v1")
		list.SetKind("BackupList")
		require.NoError(t, admin.List(ctx, list, client.InNamespace(velerostack.Namespace), client.MatchingLabels{backupsv1.LabelBackupJobUID: string(j.UID)}))
		assert.Empty(t, list.Items, "no Velero Backup was created for a2")
	})

	t.Run("alice cannot restore into tenant-b or kube-system", func(t *testing.T) {
		require.NotNil(t, backup, "needs the first subtest's Backup")
		for _, target := range []string{nsB, "kube-system"} {
			rj := restoreJob("into-"+target, nsA, backup.Name, target)
			err := alice.Create(ctx, rj)
			require.Error(t, err, "a RestoreJob of alice's into %s", target)
			assert.True(t, apierrors.IsInvalid(err) || apierrors.IsForbidden(err), "refused at admission: %v", err)
			assert.Contains(t, err.Error(), target, "the refusal names the target")
			err = admin.Get(ctx, client.ObjectKeyFromObject(rj), &backupsv1.RestoreJob{})
			assert.True(t, apierrors.IsNotFound(err), "nothing was created (%v)", err)
		}
	})

	t.Run("a user allowed in both namespaces restores across them, and the data lands where asked", func(t *testing.T) {
		require.NotNil(t, backup, "needs the first subtest's Backup")
		rj := restoreJob("to-c", nsA, backup.Name, nsC)
		require.NoError(t, carol.Create(ctx, rj), "carol may create RestoreJobs in tenant-a and tenant-c")
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			err := admin.Get(ctx, client.ObjectKeyFromObject(rj), rj)
			return rj.IsTerminal(), err
		}), "waiting for carol's restore (phase %q)", rj.Status.Phase)
		require.Equal(t, backupsv1.RestoreJobSucceeded, rj.Status.Phase, "to-c: %s", rj.Status.Message)
		for ns, owner := range map[string]string{nsC: "a", nsA: "a", nsB: "b"} {
			cm := &corev1.ConfigMap{}
			require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "catalog"}, cm), "catalog in %s", ns)
			assert.Equal(t, owner, cm.Data["owner"], "catalog in %s", ns)
		}
		secrets := &corev1.SecretList{}
		require.NoError(t, admin.List(ctx, secrets, client.InNamespace(nsC)))
		for _, sec := range secrets.Items {
			assert.NotEqual(t, "b-token", sec.Name, "nothing of tenant-b reached tenant-c")
		}
	})

	t.Run("bob cannot read tenant-a's runs or Backups", func(t *testing.T) {
		for _, l := range []client.ObjectList{&backupsv1.BackupList{}, &backupsv1.BackupJobList{}, &backupsv1.RestoreJobList{}} {
			err := bob.List(ctx, l, client.InNamespace(nsA))
			assert.True(t, apierrors.IsForbidden(err), "bob lists %T in tenant-a: %v", l, err)
		}
		if backup != nil {
			err := bob.Get(ctx, client.ObjectKeyFromObject(backup), &backupsv1.Backup{})
			assert.True(t, apierrors.IsForbidden(err), "bob reads alice's Backup: %v", err)
		}
	})
}

// setup creates the tenants' namespaces and data, and the administrator's strategies and classes.
func setup(t *testing.T, ctx context.Context, c client.Client) {
	t.Helper()
	var objs []client.Object
	for ns, owner := range map[string]string{nsA: "a", nsB: "b", nsC: ""} {
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if owner == "" {
			continue
		}
		objs = append(objs,
			&unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Shop",
				"metadata": map[string]any{"name": shopRef.Name, "namespace": ns}, "spec": map[string]any{"size": "small"}}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "catalog", Namespace: ns}, Data: map[string]string{"owner": owner}})
	}
	objs = append(objs,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "b-token", Namespace: nsB}, StringData: map[string]string{"token": "tenant-b only"}},
		strategy("tenancy-open", `{"snapshotVolumes": false}`),
		strategy("tenancy-names-b", `{"includedNamespaces": ["`+nsB+`"], "snapshotVolumes": false}`),
		class(openClass, "tenancy-open"),
		class(narrowClass, "tenancy-names-b"),
	)
	for _, o := range objs {
		require.NoError(t, c.Create(ctx, o), "creating %T %s", o, o.GetName())
	}
}

func strategy(name, template string) *veleroapi.VeleroBackupStrategy {
	return &veleroapi.VeleroBackupStrategy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: veleroapi.VeleroBackupStrategySpec{
		BackupTemplate: veleroapi.VeleroTemplate{Spec: runtime.RawExtension{Raw: []byte(template)}},
	}}
}

func class(name, strategy string) *backupsv1.BackupClass {
	return &backupsv1.BackupClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: backupsv1.BackupClassSpec{Strategies: []backupsv1.BackupClassStrategy{{
		Application: backupsv1.ApplicationSelector{Kind: shopRef.Kind},
		StrategyRef: corev1.TypedLocalObjectReference{APIGroup: ptr.To(veleroapi.Group), Kind: veleroapi.Kind, Name: strategy},
		Parameters:  map[string]string{"backupStorageLocationName": velerostack.BSLName},
	}}}}
}

// as binds user to the shipped coffer-tenant role in each of namespaces, as a namespace's admin
// role would through aggregation, and returns a client impersonating the user.
func as(t *testing.T, c *cluster.Cluster, user string, namespaces ...string) client.Client {
	t.Helper()
	admin, err := client.New(c.Config, client.Options{})
	require.NoError(t, err)
	for _, ns := range namespaces {
		require.NoError(t, admin.Create(context.Background(), &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "coffer-tenant-" + user, Namespace: ns},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "coffer-tenant"},
		}))
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	u, err := client.New(cfg, client.Options{Scheme: cluster.Scheme})
	require.NoError(t, err)
	// Bindings take effect through the API server's informers.
	require.NoError(t, wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return u.List(ctx, &backupsv1.BackupList{}, client.InNamespace(namespaces[0])) == nil, nil
	}), "%s's role binding never took effect", user)
	return u
}

func backupJob(t *testing.T, ctx context.Context, c client.Client, name, class string) *backupsv1.BackupJob {
	t.Helper()
	j := &backupsv1.BackupJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nsA},
		Spec: backupsv1.BackupJobSpec{ApplicationRef: shopRef, BackupClassName: class}}
	require.NoError(t, c.Create(ctx, j), "alice creates BackupJob %s", name)
	return j
}

func restoreJob(name, ns, backup, target string) *backupsv1.RestoreJob {
	return &backupsv1.RestoreJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: backupsv1.RestoreJobSpec{
		BackupRef: corev1.LocalObjectReference{Name: backup},
		Options:   backupsv1.StringOptions(map[string]string{backupsv1.OptionTargetNamespace: target}),
	}}
}

func wait4(t *testing.T, ctx context.Context, c client.Client, j *backupsv1.BackupJob, timeout time.Duration) {
	t.Helper()
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(j), j)
		return j.IsTerminal(), err
	}), "waiting for %s to finish (phase %q, conditions %v)", j.Name, j.Status.Phase, j.Status.Conditions)
}

// tarball lists the entries of the gzipped tarball stored at key.
func tarball(t *testing.T, ctx context.Context, s3 *minio.Client, key string) []string {
	t.Helper()
	obj, err := s3.GetObject(ctx, velerostack.Bucket, key, minio.GetObjectOptions{})
	require.NoError(t, err)
	defer obj.Close()
	gz, err := gzip.NewReader(obj)
	require.NoError(t, err, "reading %s", key)
	tr := tar.NewReader(gz)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		names = append(names, h.Name)
	}
	require.NotEmpty(t, names, "%s is an empty tarball", key)
	return names
}
