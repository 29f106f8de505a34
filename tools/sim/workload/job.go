package workload

import (
	"errors"
	"fmt"
	"io"
	"time"
)

// Type is a job's kind, which says which scheduler places it.
type Type int8

const (
	// Batch jobs run to completion (troupev1.JobType_JOB_TYPE_BATCH).
	Batch Type = iota
	// Service jobs run until stopped (troupev1.JobType_JOB_TYPE_SERVICE).
	Service
)

func (t Type) String() string {
	switch t {
	case Batch:
		return "batch"
	case Service:
		return "service"
	}
	return fmt.Sprintf("Type(%d)", int8(t))
}

// ParseType reads "batch" or "service".
func ParseType(s string) (Type, error) {
	switch s {
	case "batch":
		return Batch, nil
	case "service":
		return Service, nil
	}
	return 0, fmt.Errorf("type %q is neither batch nor service", s)
}

// Job is one job submission: tasks that arrive together.
type Job struct {
	// ID is unique within a workload.
	ID string
	// Submit is when the job arrives, from the start of the workload.
	Submit time.Duration
	Type   Type
	// Priority is on Troupe's scale: framework.ProductionPriority (100)
	// starts the production band.
	Priority int32
	Tasks    []Task
	// DistinctMachines puts at most one of the job's tasks on a machine.
	DistinctMachines bool
	// MatchLabels, if set, are machine labels the job's tasks require.
	MatchLabels map[string]string
}

// Task is one task of a job.
type Task struct {
	// Index is the task's index within its job (unique, not necessarily
	// dense: a trace may skip indices).
	Index int32
	// CPU in millicores and Memory in bytes, as TaskTemplate.requests.
	CPU, Memory int64
	// Duration is how long the task runs once placed; 0 means until the
	// end of the simulation.
	Duration time.Duration
}

// Machine is one machine of the simulated cell.
type Machine struct {
	Name string
	// CPU in millicores and Memory in bytes, as MachineSpec.capacity.
	CPU, Memory int64
	Labels      map[string]string
}

// Source hands out a workload's jobs in order of Submit (equal times in
// a fixed order). Next returns io.EOF after the last job; any other error
// is final. Jobs are read-only for the caller: a Source may share them
// (FromJobs hands out the slice's own jobs). One goroutine calls Next.
type Source interface {
	Next() (Job, error)
}

// FromJobs returns a Source over jobs, which must be in Submit order.
func FromJobs(jobs []Job) Source { return &sliceSource{jobs: jobs} }

type sliceSource struct {
	jobs []Job
	next int
}

func (s *sliceSource) Next() (Job, error) {
	if s.next == len(s.jobs) {
		return Job{}, io.EOF
	}
	s.next++
	return s.jobs[s.next-1], nil
}

// Collect reads src to its end.
func Collect(src Source) ([]Job, error) {
	var jobs []Job
	for {
		j, err := src.Next()
		if errors.Is(err, io.EOF) {
			return jobs, nil
		}
		if err != nil {
			return jobs, err
		}
		jobs = append(jobs, j)
	}
}
