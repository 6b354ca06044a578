package driverkit

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupsv1 "github.com/coffer-backup/coffer/apis/backups/v1alpha1"
)

// ClusterIDNamespace is the namespace whose UID identifies a cluster in the records of its
// artifacts (contract rule BK-11): every cluster has it, and it is never made twice.
const ClusterIDNamespace = "kube-system"

// ClusterIdentity reads the identity of the cluster c talks to, named name (an admin's flag; may be
// empty). It needs get on the namespace ClusterIDNamespace.
func ClusterIdentity(ctx context.Context, c client.Reader, name string) (backupsv1.SourceCluster, error) {
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: ClusterIDNamespace}, ns); err != nil {
		return backupsv1.SourceCluster{}, fmt.Errorf("reading namespace %s, whose UID identifies this cluster in the records of its artifacts: %w", ClusterIDNamespace, err)
	}
	return backupsv1.SourceCluster{ID: string(ns.UID), Name: name}, nil
}

// clusterOnce caches a kit's cluster identity: it never changes while the process runs.
type clusterOnce struct {
	mu sync.Mutex
	id *backupsv1.SourceCluster
}

// SourceCluster is this cluster's identity, read once (ClusterIdentity with k.ClusterName).
func (k *Kit[S]) SourceCluster(ctx context.Context) (backupsv1.SourceCluster, error) {
	k.cluster.mu.Lock()
	defer k.cluster.mu.Unlock()
	if k.cluster.id != nil {
		return *k.cluster.id, nil
	}
	var r client.Reader = k.Client
	if k.APIReader != nil {
		r = k.APIReader
	}
	id, err := ClusterIdentity(ctx, r, k.ClusterName)
	if err != nil {
		return id, err
	}
	k.cluster.id = &id
	return id, nil
}

// RecordTemplate is the record (contract rule BK-11) of the Backup that run will make, for a driver
// whose backup process stores the record itself next to the artifact it writes (driver-job's
// agent): everything but the artifact, which that process fills in, with driverMetadata as the
// driver will report it (the process may add its own). The Backup made later from the result has
// the same namespace, name, labels and spec.
func (k *Kit[S]) RecordTemplate(ctx context.Context, run *BackupRun[S], driverMetadata map[string]string) (*backupsv1.ArtifactRecord, error) {
	cluster, err := k.SourceCluster(ctx)
	if err != nil {
		return nil, err
	}
	b := k.newBackup(run, &BackupResult{DriverMetadata: driverMetadata})
	b.Status.Artifact = &backupsv1.BackupArtifact{}
	r, _ := backupsv1.NewArtifactRecord(b, cluster) // the artifact is the process's to fill in
	r.Artifact = backupsv1.BackupArtifact{}
	return r, nil
}
