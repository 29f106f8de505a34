package sim

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

// jobType is the object model's job type of a workload job.
func jobType(t workload.Type) troupev1.JobType {
	if t == workload.Service {
		return troupev1.JobType_JOB_TYPE_SERVICE
	}
	return troupev1.JobType_JOB_TYPE_BATCH
}

func timestampAt(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(epoch.Add(d)) }
