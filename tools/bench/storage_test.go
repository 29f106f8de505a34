package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// storageSystem is a memSystem whose storage writes 100 WAL bytes and 50
// flushed bytes each time it is asked.
type storageSystem struct {
	*memSystem
	asked uint64
}

func (s *storageSystem) StorageWrites() StorageWrites {
	s.asked++
	return StorageWrites{WAL: 100 * s.asked, Flush: 50 * s.asked}
}

func TestRunReportsStorageWritesPerOp(t *testing.T) {
	w, err := NewWorkload(WorkloadSeq, testParams())
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	sys := &storageSystem{memSystem: newMemSystem("troupe")}
	// Asked before and after 5 ops: 100 WAL and 50 flushed bytes in all;
	// found through the renamed system's Unwrap, as benchcompare's.
	if _, err := Run(context.Background(), renamed{sys, "troupe-insecure"}, w, Config{MaxOps: 5, Log: &log}); err != nil {
		t.Fatal(err)
	}
	if want := "troupe-insecure/seq: state databases wrote WAL 20, flushes 10, compactions 0 bytes per op\n"; !strings.Contains(log.String(), want) {
		t.Fatalf("log %q lacks %q", log.String(), want)
	}
	// A system that cannot say prints nothing of it.
	log.Reset()
	if _, err := Run(context.Background(), newMemSystem("etcd"), w, Config{MaxOps: 5, Log: &log}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(log.String(), "state databases") {
		t.Fatalf("log of a system without storage figures: %q", log.String())
	}
}

func TestStorageWritesSinceAReopen(t *testing.T) {
	before := StorageWrites{WAL: 1000, Flush: 500, Compaction: 300}
	// The compaction counter started again (a replica's database reopened).
	got := StorageWrites{WAL: 1500, Flush: 600, Compaction: 100}.since(before)
	if want := (StorageWrites{WAL: 500, Flush: 100}); got != want {
		t.Fatalf("since = %+v, want %+v", got, want)
	}
}
