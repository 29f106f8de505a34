package clientlib

import (
	"strings"

	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// JobStopsPrefix holds the jobs' stop keys. A job's stop key
// (/jobstops/<namespace>/<job>, on the job's shard) says whether work of
// the job may still start: "1" once the job is stopped or deleted, "0"
// or absent while it runs. Every typed write of a job keeps it, in the
// same group (PutObject and DeleteObject of Jobs), and the writes that
// start work on a job's behalf (the job controller creating its tasks, a
// scheduler placing them, an agent starting them) carry
// RequireJobRunning: once a job's stop or deletion is committed, no task
// of it is created, placed or started, whatever was decided before.
const JobStopsPrefix = "/jobstops/"

// JobStopKey returns the stop key of job in namespace.
func JobStopKey(namespace, job string) string { return JobStopsPrefix + namespace + "/" + job }

// RequireJobRunning makes g's commit conditional on the job not being
// stopped or deleted: an Add of 0 to its stop key within [0, 0], which
// the store checks without writing (it needs only read permission).
func RequireJobRunning(g *Group, namespace, job string) *Group {
	return g.Add(JobStopKey(namespace, job), 0, 0, 0)
}

// JobStopped reports whether conflict c is a RequireJobRunning that
// failed: the job was stopped or deleted.
func JobStopped(c *Conflict) bool {
	return c != nil && c.Reason == storev1.FailureReason_FAILURE_REASON_BOUND_EXCEEDED && strings.HasPrefix(c.Key, JobStopsPrefix)
}

// putJobStop writes j's stop key beside j: stopped or not.
func putJobStop(g *Group, j *troupev1.Job) {
	v := "0"
	if j.GetSpec().GetStopped() {
		v = "1"
	}
	g.Put(JobStopKey(j.GetMetadata().GetNamespace(), j.GetMetadata().GetName()), []byte(v))
}

// deleteJobStop marks a deleted job stopped. The key outlives the job
// until the garbage collector finds no task of it left.
func deleteJobStop(g *Group, j *troupev1.Job) {
	g.Put(JobStopKey(j.GetMetadata().GetNamespace(), j.GetMetadata().GetName()), []byte("1"))
}
