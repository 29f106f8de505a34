package server

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/troupe-cluster/troupe/cellstore/statemachine"
	"github.com/troupe-cluster/troupe/cellstore/storeerr"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Tests of backups' freezes as the server sees them: commits held back
// and proposed again, admitted prepares, a dead driver's freeze lapsing,
// the cut's rounds, recovery during a freeze.

// smCluster pins the state machines of a MemBackend; beforePin, if set,
// runs before each pin.
type smCluster struct {
	fakeCluster
	b         *MemBackend
	beforePin func(shard uint32)
}

func (c *smCluster) PinShard(_ context.Context, shard uint32) (ShardSnapshot, error) {
	if c.beforePin != nil {
		c.beforePin(shard)
	}
	return c.b.StateMachine(shard).PinBackup()
}

// freezeShards proposes FREEZE id on shards, lapsing after the server's
// FreezeTimeout, as a backup's driver does first.
func (x *crossShardServer) freezeShards(t *testing.T, id string, shards ...uint32) {
	t.Helper()
	now := x.cfg.Now()
	for _, sh := range shards {
		out, err := x.backend.Propose(context.Background(), sh, &storev1.Proposal{TxnId: id, Phase: storev1.Phase_PHASE_FREEZE,
			NowUnixNanos: now.UnixNano(), FreezeUntilUnixNanos: now.Add(x.cfg.FreezeTimeout).UnixNano()})
		if err != nil || !out.GetFrozen() {
			t.Fatalf("freeze shard %d: %v %v", sh, out, err)
		}
	}
}

func (x *crossShardServer) thawShards(t *testing.T, id string, shards ...uint32) {
	t.Helper()
	for _, sh := range shards {
		if _, err := x.backend.Propose(context.Background(), sh, &storev1.Proposal{TxnId: id, Phase: storev1.Phase_PHASE_THAW,
			NowUnixNanos: x.cfg.Now().UnixNano()}); err != nil {
			t.Fatal(err)
		}
	}
}

// commitHeld commits req in the background and waits until a frozen
// shard has refused it; the result comes on the channel.
func (x *crossShardServer) commitHeld(t *testing.T, req *storev1.CommitRequest) <-chan error {
	t.Helper()
	refused := testutil.ToFloat64(x.cfg.Metrics.frozen)
	done := x.commitAsync(req)
	wait.Until(t.Context(), t, "a frozen shard to refuse the commit", func() bool {
		return testutil.ToFloat64(x.cfg.Metrics.frozen) != refused
	})
	return done
}

// commitAsync commits req in the background; the result comes on the
// channel.
func (x *crossShardServer) commitAsync(req *storev1.CommitRequest) <-chan error {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := x.Commit(ctx, req)
		if err == nil && !resp.GetGroups()[0].GetCommitted() {
			err = errors.New(resp.String())
		}
		done <- err
	}()
	return done
}

func waitResult(t *testing.T, what string, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer", what)
	}
}

func (x *crossShardServer) preparedOn(t *testing.T, sh uint32) []string {
	t.Helper()
	res, err := x.backend.Read(context.Background(), sh, statemachine.OverdueQuery{Now: math.MaxInt64, Limit: 10}, true)
	if err != nil {
		t.Fatal(err)
	}
	return res.(*statemachine.OverdueResult).IDs
}

// A commit on a frozen shard waits and is proposed again: it fails with
// UNAVAILABLE, having applied nothing, if its deadline comes first, and
// commits once the shard thaws. A cross-shard transaction one of whose
// participants prepared before its freeze is admitted by the frozen one
// and commits during the freeze; one that every participant refuses
// prepares nowhere, and commits as new after the thaw.
func TestCommitsDuringAFreeze(t *testing.T) {
	x := newCrossShardServer(t)
	a, b, c := x.keyOn("/machines/a%d", 0), x.keyOn("/machines/b%d", 3), x.keyOn("/machines/c%d", 2)
	x.freezeShards(t, "b1", 3)

	single := &storev1.CommitRequest{TxnId: "single", Groups: []*storev1.Group{groupOf(nil, put(b, "1"))}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	_, err := x.Commit(ctx, single)
	cancel()
	if status.Code(err) != codes.Unavailable || !storeerr.Is(err, storeerr.Frozen) {
		t.Fatalf("commit on a frozen shard past its deadline: %v", err)
	}
	if v, _ := x.value(t, b); v != "" {
		t.Fatalf("a refused commit applied: %s = %q", b, v)
	}
	// Shard 0 prepares, shard 3 refuses, then admits.
	resp := x.commit(t, &storev1.CommitRequest{TxnId: "across", Groups: []*storev1.Group{groupOf(nil, addOp(a, 5), addOp(b, 5))}})
	if !resp.GetGroups()[0].GetCommitted() {
		t.Fatalf("cross-shard commit with one participant frozen: %v", resp)
	}
	if va, _ := x.value(t, a); va != "5" {
		t.Fatalf("%s = %q, want 5", a, va)
	}

	held := x.commitHeld(t, single)
	x.thawShards(t, "b1", 3)
	waitResult(t, "a commit held back until the thaw", held)
	if v, _ := x.value(t, b); v != "1" {
		t.Fatalf("%s = %q after the thaw, want 1", b, v)
	}

	// Every participant refuses: nothing is prepared, and the request
	// commits as new once they thaw.
	x.freezeShards(t, "b2", 2, 3)
	both := &storev1.CommitRequest{TxnId: "both", Groups: []*storev1.Group{groupOf(nil, put(b, "2"), put(c, "2"))}}
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	_, err = x.Commit(ctx, both)
	cancel()
	if status.Code(err) != codes.Unavailable || !storeerr.Is(err, storeerr.Frozen) {
		t.Fatalf("cross-shard commit on frozen shards past its deadline: %v", err)
	}
	for _, sh := range []uint32{2, 3} {
		if ids := x.preparedOn(t, sh); len(ids) > 0 {
			t.Fatalf("a refused transaction is prepared on shard %d: %q", sh, ids)
		}
	}
	x.thawShards(t, "b2", 2, 3)
	if resp := x.commit(t, both); !resp.GetGroups()[0].GetCommitted() || resp.GetDuplicate() {
		t.Fatalf("the refused transaction after the thaw: %v", resp)
	}
}

// A backup's driver that dies after FREEZE leaves the cell frozen only
// until the freeze lapses: a commit waiting meanwhile goes through once
// the proposers' clock passes it, and so does the next backup.
func TestDeadBackupDriverFreezeLapses(t *testing.T) {
	x := newCrossShardServer(t)
	x.freezeShards(t, "dead", 0, 1, 2, 3) // ... and the driver dies
	a, b := x.keyOn("/machines/a%d", 1), x.keyOn("/machines/b%d", 2)
	req := &storev1.CommitRequest{TxnId: "t", Groups: []*storev1.Group{groupOf(nil, put(a, "1"), put(b, "1"))}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	if _, err := x.Commit(ctx, req); status.Code(err) != codes.Unavailable {
		t.Fatalf("commit while frozen: %v", err)
	}
	cancel()
	held := x.commitHeld(t, req)
	x.clock.Add(int64(x.cfg.FreezeTimeout))
	waitResult(t, "a commit once the freeze lapsed", held)
	if va, _ := x.value(t, a); va != "1" {
		t.Fatalf("%s = %q, want 1", a, va)
	}
	admin := NewAdmin(x.Server, &smCluster{b: x.backend.MemBackend})
	if err := admin.Backup(&storev1.BackupRequest{}, &chunkStream{}); err != nil {
		t.Fatalf("backup after a dead driver's freeze lapsed: %v", err)
	}
}

// backupRevisions runs a backup through admin and returns each shard's
// revision as its last chunk says.
func backupRevisions(admin *Admin) ([]uint64, error) {
	stream := &chunkStream{}
	if err := admin.Backup(&storev1.BackupRequest{}, stream); err != nil {
		return nil, err
	}
	var revs []uint64
	for _, c := range stream.chunks {
		if c.GetLast() {
			revs = append(revs, c.GetRevision())
		}
	}
	return revs, nil
}

// The cut is two looks at the shards that agree (the FREEZEs' outcomes,
// then a round of pins, or two rounds of pins): a transaction that
// commits on a frozen shard between two looks (an admitted one, late)
// makes the driver pin again, and the backup holds it. The cell is
// thawed after.
func TestBackupPinsUntilTwoRoundsAgree(t *testing.T) {
	x := newCrossShardServer(t)
	a, b := x.keyOn("/machines/a%d", 1), x.keyOn("/machines/b%d", 2)
	x.commit(t, &storev1.CommitRequest{TxnId: "first", Groups: []*storev1.Group{groupOf(nil, put(a, "1"))}})
	var mu sync.Mutex
	pins := map[uint32]int{}
	late := func(sh uint32) {
		mu.Lock()
		pins[sh]++
		first := sh == 1 && pins[sh] == 1
		mu.Unlock()
		if !first {
			return
		}
		p := &storev1.Proposal{TxnId: "late", Phase: storev1.Phase_PHASE_PREPARE, Admit: true, NowUnixNanos: x.cfg.Now().UnixNano(),
			DedupeWindowNanos: int64(x.cfg.DedupeWindow), Participants: []uint32{1}, DeadlineUnixNanos: x.cfg.Now().Add(time.Hour).UnixNano(),
			Groups: []*storev1.Group{groupOf(nil, put(a, "late"))}, GroupIndexes: []uint32{0}}
		for _, p := range []*storev1.Proposal{p, x.resolveProposal("late", &storev1.Outcome{Groups: []*storev1.GroupResult{{Committed: true}}, GroupIndexes: []uint32{0}})} {
			if _, err := x.backend.Propose(context.Background(), 1, p); err != nil {
				t.Error(err)
			}
		}
	}
	admin := NewAdmin(x.Server, &smCluster{b: x.backend.MemBackend, beforePin: late})
	revs, err := backupRevisions(admin)
	if err != nil {
		t.Fatal(err)
	}
	if len(pins) != 4 || pins[0] != 2 || pins[1] != 2 {
		t.Fatalf("pins by shard %v, want two rounds", pins)
	}
	if _, ver := x.value(t, a); revs[1] != ver || ver != 2 {
		t.Fatalf("backup at revisions %v; %s is at version %d", revs, a, ver)
	}
	if resp := x.commit(t, &storev1.CommitRequest{TxnId: "after", Groups: []*storev1.Group{groupOf(nil, put(b, "1"))}}); !resp.GetGroups()[0].GetCommitted() {
		t.Fatalf("commit after the backup: %v", resp)
	}
}

// A transaction whose driver died after preparing holds up the cut: the
// recovery of overdue transactions settles it while the cell is frozen,
// and the backup completes with it resolved. Another backup's freeze
// makes a backup give up after its attempts.
func TestBackupWaitsForRecovery(t *testing.T) {
	x := newCrossShardServer(t)
	x.cfg.TxnTimeout, x.cfg.FreezeTimeout = time.Second, time.Hour
	c, d := x.keyOn("/machines/c%d", 1), x.keyOn("/machines/d%d", 2)
	x.backend.failOn(true, storev1.Phase_PHASE_RESOLVE, 1, 2)
	if _, err := x.Commit(context.Background(), &storev1.CommitRequest{TxnId: "u", Groups: []*storev1.Group{groupOf(nil, addOp(c, 3), addOp(d, 4))}}); !errors.Is(err, errDriverDied) {
		t.Fatalf("commit dying before resolution: %v", err)
	}
	x.backend.failOn(false, storev1.Phase_PHASE_RESOLVE, 1, 2)

	admin := NewAdmin(x.Server, &smCluster{b: x.backend.MemBackend})
	type result struct {
		revs []uint64
		err  error
	}
	done := make(chan result, 1)
	go func() {
		revs, err := backupRevisions(admin)
		done <- result{revs, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wait.Until(ctx, t, "the backup to freeze shard 1", func() bool {
		pin, err := x.backend.StateMachine(1).PinBackup()
		if err != nil {
			t.Fatal(err)
		}
		defer pin.Close()
		return pin.Status().Frozen()
	})
	x.clock.Add(int64(x.cfg.TxnTimeout) + 1)
	if n, err := x.ResolveOverdue(ctx, 1); err != nil || n != 1 {
		t.Fatalf("recovery while frozen: %d %v", n, err)
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if _, ver := x.value(t, d); r.revs[2] != ver || ver == 0 {
			t.Fatalf("backup at revisions %v; %s is at version %d", r.revs, d, ver)
		}
	case <-ctx.Done():
		t.Fatal("the backup did not complete after recovery")
	}

	// Another backup's freeze holds shard 3 throughout (the clock stands
	// still): every attempt fails, FreezeTimeout apart.
	x.freezeShards(t, "other", 3)
	x.cfg.FreezeTimeout = 10 * time.Millisecond
	err := admin.Backup(&storev1.BackupRequest{}, &chunkStream{})
	if status.Code(err) != codes.Unavailable || !storeerr.Is(err, storeerr.NoConsistentCut) || !strings.Contains(err.Error(), "another backup") {
		t.Fatalf("backup while another holds the cell: %v", err)
	}
	if resp := x.commit(t, &storev1.CommitRequest{TxnId: "v", Groups: []*storev1.Group{groupOf(nil, put(c, "x"))}}); !resp.GetGroups()[0].GetCommitted() {
		t.Fatalf("commit on a shard the failed backup froze: %v", resp)
	}
}
