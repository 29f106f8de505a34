package sim

import (
	"errors"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Machine is one machine of the simulated cell.
type Machine struct {
	Name        string
	CPU, Memory int64 // millicores, bytes
	Labels      map[string]string
}

// JobType says which schedulers take a job.
type JobType int

// Job types.
const (
	JobBatch JobType = iota
	JobService
)

func (t JobType) String() string {
	if t == JobService {
		return "service"
	}
	return "batch"
}

func (t JobType) proto() troupev1.JobType {
	if t == JobService {
		return troupev1.JobType_JOB_TYPE_SERVICE
	}
	return troupev1.JobType_JOB_TYPE_BATCH
}

// Job is one job of the workload.
type Job struct {
	ID               string
	Submit           time.Duration // since the start of the run
	Type             JobType
	Priority         int32
	DistinctMachines bool
	Tasks            []Task
}

// Task is one task of a job.
type Task struct {
	Index       int32
	CPU, Memory int64         // millicores, bytes
	Duration    time.Duration // 0: runs to the end of the run
}

// ErrEnd is what a Source returns when it has no more jobs.
var ErrEnd = errors.New("sim: end of workload")

// Source yields a workload's jobs in submission order.
type Source interface {
	Next() (Job, error)
}

// SliceSource is a Source over jobs already in memory.
type SliceSource struct {
	Jobs []Job
	next int
}

// Next implements Source.
func (s *SliceSource) Next() (Job, error) {
	if s.next == len(s.Jobs) {
		return Job{}, ErrEnd
	}
	s.next++
	return s.Jobs[s.next-1], nil
}

func timestampAt(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(epoch.Add(d)) }
