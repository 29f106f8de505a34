package keyspace

import (
	"slices"
	"strings"
	"testing"
)

func TestShardKey(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"/machines/m1", "m/m1"},
		{"/leases/m1", "m/m1"},
		{"/alloc/m1/cpu", "m/m1"},
		{"/bindings/m1/ns/job/3", "m/m1"},
		{"/runs/m1/t", "m/m1"},
		{"/machineevents/m1/0001-ab", "m/m1"},
		{"/jobs/ns/job", "j/ns/job"},
		{"/tasks/ns/job/17", "j/ns/job"},
		{"/events/ns/job/0001-ab", "j/ns/job"},
		{"/jobstops/ns/job", "j/ns/job"},
		{"/scheduling/ns/job", "j/ns/job"},
		{"/schedulers/batch-1", "/schedulers/batch-1"},
		{"/schedulers/batch-1/stats", "/schedulers/batch-1"},
		{"/toplevel", "/toplevel"},
		{"plain", "plain"},
	} {
		if got := ShardKey(tc.key); got != tc.want {
			t.Errorf("ShardKey(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
}

// Every key of one machine, and of one job, lands on one shard.
func TestRouterKeepsFamiliesTogether(t *testing.T) {
	r := NewRouter(16)
	for _, group := range [][]string{
		{"/machines/m7", "/leases/m7", "/alloc/m7/cpu", "/alloc/m7/memory", "/bindings/m7/a/b/0", "/runs/m7/a/b/0",
			"/machineevents/m7/0001-ab"},
		{"/jobs/ns/web", "/tasks/ns/web/0", "/tasks/ns/web/99", "/events/ns/web/0001-ab",
			"/jobstops/ns/web", "/scheduling/ns/web"},
	} {
		for _, k := range group[1:] {
			if r.Shard(k) != r.Shard(group[0]) {
				t.Errorf("%q on shard %d, %q on %d", k, r.Shard(k), group[0], r.Shard(group[0]))
			}
		}
	}
	seen := map[uint32]bool{}
	for i := range 200 {
		seen[r.Shard("/machines/m"+string(rune('a'+i%26))+string(rune('a'+i/26)))] = true
	}
	if len(seen) < 12 {
		t.Errorf("200 machines fell on only %d of 16 shards", len(seen))
	}
}

func TestPrefixShards(t *testing.T) {
	r := NewRouter(4)
	for _, tc := range []struct {
		prefix string
		one    bool
	}{
		{"/bindings/m1/", true},
		{"/bindings/m1", false}, // also /bindings/m10...
		{"/tasks/ns/job/", true},
		{"/tasks/ns/", false},
		{"/events/ns/job/", true},
		{"/scheduling/ns/", false},
		{"/machineevents/m1/", true},
		{"/", false},
		{"", false},
		{"/schedulers/s/", true},
	} {
		got := r.PrefixShards(tc.prefix)
		if tc.one && (len(got) != 1 || got[0] != r.Shard(tc.prefix+"x")) {
			t.Errorf("PrefixShards(%q) = %v, want the one shard %d", tc.prefix, got, r.Shard(tc.prefix+"x"))
		}
		if !tc.one && !slices.Equal(got, []uint32{0, 1, 2, 3}) {
			t.Errorf("PrefixShards(%q) = %v, want all shards", tc.prefix, got)
		}
	}
	if got := NewRouter(1).PrefixShards("/bindings/m1/"); !slices.Equal(got, []uint32{0}) {
		t.Errorf("one-shard cell: %v", got)
	}
}

func TestCursorRoundTrip(t *testing.T) {
	c := Cursor{0, 5, 1 << 40}
	got, err := DecodeCursor(c.Encode(), 3)
	if err != nil || !slices.Equal(got, c) {
		t.Fatalf("round trip: %v %v", got, err)
	}
	for _, bad := range [][]byte{nil, {9}, c.Encode()[:3], append(c.Encode(), 0)} {
		if _, err := DecodeCursor(bad, 3); err == nil {
			t.Errorf("DecodeCursor(%v) accepted", bad)
		}
	}
	if _, err := DecodeCursor(c.Encode(), 4); err == nil {
		t.Error("cursor of a 3-shard cell accepted by a 4-shard one")
	}
}

func TestKeyOn(t *testing.T) {
	r := NewRouter(4)
	for sh := range uint32(4) {
		if k := r.KeyOn(sh, "/machines/m%d"); r.Shard(k) != sh || !strings.HasPrefix(k, "/machines/m") {
			t.Errorf("KeyOn(%d) = %q on shard %d", sh, k, r.Shard(k))
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("KeyOn of a shard out of range did not panic")
		}
	}()
	r.KeyOn(4, "/machines/m%d")
}
