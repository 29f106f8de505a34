package agent

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// A health check's interval and timeout that are unset, zero or negative
// are the defaults.
func TestHealthCheckTimes(t *testing.T) {
	for _, c := range []struct {
		hc                *troupev1.HealthCheck
		interval, timeout time.Duration
	}{
		{&troupev1.HealthCheck{Command: "true"}, DefaultHealthCheckInterval, DefaultHealthCheckTimeout},
		{&troupev1.HealthCheck{Interval: durationpb.New(0), Timeout: durationpb.New(-time.Second)}, DefaultHealthCheckInterval, DefaultHealthCheckTimeout},
		{&troupev1.HealthCheck{Interval: durationpb.New(-time.Minute), Timeout: durationpb.New(2 * time.Second)}, DefaultHealthCheckInterval, 2 * time.Second},
		{&troupev1.HealthCheck{Interval: durationpb.New(time.Minute), Timeout: durationpb.New(0)}, time.Minute, DefaultHealthCheckTimeout},
	} {
		if interval, timeout := healthCheckTimes(c.hc); interval != c.interval || timeout != c.timeout {
			t.Errorf("%v: interval %v, timeout %v; want %v, %v", c.hc, interval, timeout, c.interval, c.timeout)
		}
	}
}
