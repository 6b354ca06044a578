package agent

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"

	jobv1 "github.com/coffer-backup/coffer/apis/jobdriver/v1alpha1"
)

// Maintenance of a chunked repository deletes the packs no Backup needs any more, never one a
// Backup that exists or a backup that may still be running relies on. It needs the chunk key and
// rights to list, read, write and delete below the repository, and to look up the artifacts
// (HEAD); never an age identity: what it reads is sealed with the chunk key.
//
// A Backup is live while its artifact exists; the packs it needs are listed in its files/ object,
// written before its artifact completes. A backup that started (sessions/<name>) but has no
// files/ object yet may still be running for as long as Margin after its start; it may refer to
// any pack it learnt of from index/ when it started, and to packs it is writing.
//
// Deletion takes two runs. A run condemns every pack no live Backup names, except those a running
// backup may be writing (newer than the oldest running backup's start): it removes them from
// index/ first, so that no backup starting later learns of them, and then records them, with the
// store's time, in maintenance/condemned. A later run deletes a condemned pack if no live Backup
// names it by then (a backup that learnt of it before it was condemned and has finished since
// names it, and saves it) and no backup that started before it was condemned may still be running.
// Every time is the store's (objects' LastModified), so clocks of pods do not matter.

// indexHead is what maintenance reads of an index/ object (runIndex): gob skips the rest.
type indexHead struct {
	Artifact string
	Packs    []struct{ Key string }
}

// MaintenanceReport is what a maintenance run did.
type MaintenanceReport struct {
	Repository   string `json:"repository"`
	Backups      int    `json:"backups"`
	Live         int    `json:"live"`
	Running      int    `json:"running"`
	Packs        int    `json:"packs"`
	Condemned    int    `json:"condemned"`
	Deleted      int    `json:"deleted"`
	DeletedBytes int64  `json:"deletedBytes"`
}

// session is a sessions/ object: a chunked backup that started.
type session struct{ Artifact string }

// condemnation is the maintenance/condemned object: packs and when they were condemned.
type condemnation struct{ Packs map[string]time.Time }

// DefaultMaintenanceMargin is how long a backup may run, by default: a backup that started
// longer ago and did not finish is taken for dead.
const DefaultMaintenanceMargin = 24 * time.Hour

// Maintain runs maintenance on the repository below bucket/repo (see above). margin is the longest
// a backup may run.
func (a *Agent) Maintain(ctx context.Context, bucket, repo string, margin time.Duration) (*MaintenanceReport, error) {
	secret := a.ChunkKey
	if secret == "" {
		secret = publicChunkKey
	}
	keys, err := deriveRepoKeys(secret)
	if err != nil {
		return nil, err
	}
	repo = strings.TrimSuffix(repo, "/")
	s := &chunkStore{a: a, ctx: ctx, bucket: bucket, repo: repo, keys: keys}
	m := &maintenance{s: s, report: &MaintenanceReport{Repository: ArtifactURI(bucket, repo)}}
	if err := m.run(margin); err != nil {
		return nil, fmt.Errorf("maintenance of %s: %w; nothing more was deleted", m.report.Repository, err)
	}
	r := m.report
	a.logf("maintained %s: %d backups (%d live, %d may be running), %d packs, %d condemned, %d deleted (%d bytes)",
		r.Repository, r.Backups, r.Live, r.Running, r.Packs, r.Condemned, r.Deleted, r.DeletedBytes)
	return r, nil
}

type maintenance struct {
	s      *chunkStore
	report *MaintenanceReport
}

// listedObject is what maintenance keeps of a listed object.
type listedObject struct {
	Size         int64
	LastModified time.Time
}

// list lists one directory of the repository: name → size and last modified.
func (m *maintenance) list(dir string) (map[string]listedObject, error) {
	out := map[string]listedObject{}
	prefix := m.s.repo + "/" + dir + "/"
	for o := range m.s.a.S3.ListObjects(m.s.ctx, m.s.bucket, minio.ListObjectsOptions{Prefix: prefix}) {
		if o.Err != nil {
			return nil, fmt.Errorf("listing %s: %w", prefix, o.Err)
		}
		out[strings.TrimPrefix(o.Key, prefix)] = listedObject{o.Size, o.LastModified}
	}
	return out, nil
}

// clock is the store's time now: the LastModified of an object written for it.
func (m *maintenance) clock() (time.Time, error) {
	key := m.s.repo + "/maintenance/clock"
	if _, err := m.s.a.S3.PutObject(m.s.ctx, m.s.bucket, key, bytes.NewReader(nil), 0, minio.PutObjectOptions{}); err != nil {
		return time.Time{}, fmt.Errorf("reading the store's clock: %w", err)
	}
	// A listing gives milliseconds; HEAD's Last-Modified only seconds.
	for o := range m.s.a.S3.ListObjects(m.s.ctx, m.s.bucket, minio.ListObjectsOptions{Prefix: key}) {
		if o.Err != nil {
			return time.Time{}, fmt.Errorf("reading the store's clock: %w", o.Err)
		}
		if o.Key == key {
			return o.LastModified, nil
		}
	}
	return time.Time{}, fmt.Errorf("reading the store's clock: %s was not listed", key)
}

// clockResolution is how far apart two of the store's times must be to be told apart: stores
// keep LastModified to the millisecond or the second.
const clockResolution = time.Second

func (m *maintenance) remove(key string) error {
	if err := m.s.a.S3.RemoveObject(m.s.ctx, m.s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		return fmt.Errorf("deleting %s: %w", key, err)
	}
	return nil
}

func (m *maintenance) run(margin time.Duration) error {
	s := m.s
	now, err := m.clock()
	if err != nil {
		return err
	}
	listed := map[string]map[string]listedObject{}
	for _, dir := range []string{"sessions", "files", "index", "packs", jobv1.PackListDir} {
		if listed[dir], err = m.list(dir); err != nil {
			return err
		}
	}
	sessions, files, indexes, packs := listed["sessions"], listed["files"], listed["index"], listed["packs"]
	m.report.Packs = len(packs)

	// Of each index/ object, its backup's artifact and the keys of its packs, not the places of
	// their chunks: memory grows with the packs, not the chunks. The few a run rewrites are read
	// again, whole.
	read := make(map[string]*indexHead, len(indexes))
	for n := range indexes {
		idx := &indexHead{}
		if err := s.readRepoObject(s.repo+"/index/"+n, idx); err != nil {
			return fmt.Errorf("index/%s: %w", n, err)
		}
		read[n] = idx
	}

	// Which backups are live, which may be running, and which packs the live ones name.
	names := map[string]bool{}
	for n := range sessions {
		names[n] = true
	}
	for n := range indexes {
		names[n] = true
	}
	m.report.Backups = len(names)
	referenced := map[string]bool{}
	var running []time.Time // starts of the backups that may be running
	dead := map[string]bool{}
	for n := range names {
		artifact, err := m.artifactOf(n, read)
		if err != nil {
			return err
		}
		_, err = s.a.S3.StatObject(s.ctx, s.bucket, artifact, minio.StatObjectOptions{})
		switch {
		case err == nil:
			if _, ok := files[n]; !ok {
				return fmt.Errorf("backup %s exists but files/%s does not: what it needs cannot be told", artifact, n)
			}
			r, _, err := s.openFilesRecord(s.ctx, s.repo+"/files/"+n)
			if err != nil {
				return fmt.Errorf("files/%s: %w", n, err)
			}
			packs, err := r.packs()
			r.close()
			if err != nil {
				return fmt.Errorf("files/%s: %w", n, err)
			}
			for _, p := range packs {
				referenced[p] = true
			}
			m.report.Live++
		case minio.ToErrorResponse(err).Code == minio.NoSuchKey:
			_, finished := files[n]
			st, started := sessions[n]
			if !finished && started && st.LastModified.After(now.Add(-margin)) {
				running = append(running, st.LastModified)
				m.report.Running++
			} else {
				dead[n] = true
			}
		default:
			return fmt.Errorf("looking up backup %s: %w", artifact, err)
		}
	}
	oldestRunning := now.Add(time.Hour) // after every pack
	if len(running) > 0 {
		oldestRunning = slices.MinFunc(running, func(a, b time.Time) int { return a.Compare(b) })
	}

	// Delete what earlier runs condemned, where nothing can need it any more.
	var cond condemnation
	condKey := s.repo + "/maintenance/condemned"
	if err := s.readRepoObject(condKey, &cond); err != nil && minio.ToErrorResponse(err).Code != minio.NoSuchKey {
		return fmt.Errorf("maintenance/condemned: %w", err)
	}
	still := map[string]time.Time{}
	for p, at := range cond.Packs {
		info, exists := packs[strings.TrimPrefix(p, s.repo+"/packs/")]
		switch {
		case !exists || referenced[p]:
			// gone already, or named by a backup that finished since: kept
		case !oldestRunning.After(at.Add(clockResolution)):
			still[p] = at // a backup that may still run started before it was condemned
		default:
			if err := m.remove(p); err != nil {
				return err
			}
			m.report.Deleted++
			m.report.DeletedBytes += info.Size
			delete(packs, strings.TrimPrefix(p, s.repo+"/packs/"))
		}
	}

	// Condemn the packs no live backup names and no running one may be writing.
	fresh := map[string]bool{}
	for name, info := range packs {
		p := s.repo + "/packs/" + name
		if _, ok := still[p]; !ok && !referenced[p] && info.LastModified.Before(oldestRunning.Add(-clockResolution)) {
			fresh[p] = true
		}
	}
	// First out of index/, so that backups starting from now do not learn of them; dead backups
	// whose packs are all gone leave the repository.
	gone := func(key string) bool {
		_, exists := packs[strings.TrimPrefix(key, s.repo+"/packs/")]
		_, condemned := still[key]
		return !exists || condemned || fresh[key]
	}
	for n, head := range read {
		key := s.repo + "/index/" + n
		kept := 0
		for _, p := range head.Packs {
			if !gone(p.Key) {
				kept++
			}
		}
		switch {
		case kept == 0 && dead[n]:
			if err := m.remove(key); err != nil {
				return err
			}
			delete(indexes, n)
		case kept != len(head.Packs):
			idx := &runIndex{}
			if err := s.readRepoObject(key, idx); err != nil {
				return fmt.Errorf("index/%s: %w", n, err)
			}
			idx.Packs = slices.DeleteFunc(idx.Packs, func(p runPack) bool { return gone(p.Key) })
			if err := s.putRepoObject("index", n, idx); err != nil {
				return err
			}
		}
	}
	for n := range dead {
		if _, ok := indexes[n]; ok {
			continue // some of its packs are still named by live backups
		}
		for _, dir := range []string{"files", "sessions", jobv1.PackListDir} {
			if _, ok := listed[dir][n]; ok {
				if err := m.remove(s.repo + "/" + dir + "/" + n); err != nil {
					return err
				}
			}
		}
	}
	if len(fresh) == 0 && len(still) == len(cond.Packs) {
		m.report.Condemned = len(still)
		return nil
	}
	at, err := m.clock() // after index/ was rewritten
	if err != nil {
		return err
	}
	for p := range fresh {
		still[p] = at
	}
	m.report.Condemned = len(still)
	if len(still) == 0 {
		if err := m.remove(condKey); err != nil && minio.ToErrorResponse(err).Code != minio.NoSuchKey {
			return err
		}
		return nil
	}
	return s.putRepoObject("maintenance", "condemned", &condemnation{Packs: still})
}

// artifactOf is the artifact key of backup n, from its index/ object (read) or its sessions/ one.
func (m *maintenance) artifactOf(n string, read map[string]*indexHead) (string, error) {
	if idx, ok := read[n]; ok {
		return idx.Artifact, nil
	}
	var ss session
	if err := m.s.readRepoObject(m.s.repo+"/sessions/"+n, &ss); err != nil {
		return "", fmt.Errorf("sessions/%s: %w", n, err)
	}
	return ss.Artifact, nil
}
