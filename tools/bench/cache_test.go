package bench

import (
	"context"
	"testing"
	"time"
)

func TestRunCacheBenchSmall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := RunCacheBench(ctx, 20, 300)
	if err != nil {
		t.Fatal(err)
	}
	if res.Machines != 20 || res.Tasks != 300 || res.EventsPerSec <= 0 || res.SyncSeconds <= 0 {
		t.Fatalf("result: %+v", res)
	}
}
