package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/troupe-cluster/troupe/cellstore/node"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// The store's operations: `troupe store members|backup|restore`.

// storeConn parses fs's flags, with --endpoint and --timeout, and connects
// to the store node at the endpoint.
func storeConn(fs *flag.FlagSet, args []string, timeout time.Duration) (*grpc.ClientConn, context.Context, context.CancelFunc, error) {
	cf := registerCLIFlags(fs)
	fs.DurationVar(&timeout, "timeout", timeout, "request timeout")
	if err := parseFlags(fs, args); err != nil {
		return nil, nil, nil, err
	}
	creds, err := cf.source()
	if err != nil {
		return nil, nil, nil, err
	}
	conn, err := grpc.NewClient(cf.endpoints()[0], grpc.WithTransportCredentials(pki.StoreCredentials(creds)))
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	return conn, ctx, cancel, nil
}

// runMembers lists, adds or removes the cell's members.
func runMembers(args []string) error {
	if len(args) == 0 {
		return errors.New("members: want list, add or remove")
	}
	fs := flag.NewFlagSet("members "+args[0], flag.ContinueOnError)
	var (
		id       uint64
		raftAddr string
		shards   uint
	)
	switch args[0] {
	case "list":
	case "add":
		fs.Uint64Var(&id, "node-id", 0, "the new node's ID (never one a removed node had); it joins as a non-voting member and the command waits until it votes")
		fs.StringVar(&raftAddr, "raft-addr", "", "host:port of the new node's Raft transport")
		fs.UintVar(&shards, "shards", 0, "the new node's shard count, checked against the cell's (0: unchecked)")
	case "remove":
		fs.Uint64Var(&id, "node-id", 0, "the node to remove; send the request to another member")
	default:
		return fmt.Errorf("members: unknown command %q: want list, add or remove", args[0])
	}
	conn, ctx, cancel, err := storeConn(fs, args[1:], time.Minute)
	if err != nil {
		return err
	}
	defer cancel()
	defer conn.Close()
	admin := storev1.NewAdminClient(conn)
	var members []*storev1.Member
	switch args[0] {
	case "list":
		var resp *storev1.ListMembersResponse
		if resp, err = admin.ListMembers(ctx, &storev1.ListMembersRequest{}); err == nil {
			members = resp.GetMembers()
		}
	case "add":
		var resp *storev1.AddMemberResponse
		if resp, err = admin.AddMember(ctx, &storev1.AddMemberRequest{NodeId: id, RaftAddress: raftAddr, ShardCount: uint32(shards)}); err == nil {
			members = resp.GetMembers()
		}
	case "remove":
		var resp *storev1.RemoveMemberResponse
		if resp, err = admin.RemoveMember(ctx, &storev1.RemoveMemberRequest{NodeId: id}); err == nil {
			members = resp.GetMembers()
		}
	}
	if err != nil {
		return fmt.Errorf("members %s: %w", args[0], err)
	}
	return printMembers(members)
}

// printMembers prints one line per member: the shards it holds a replica
// of, those of them where it does not vote yet (a new member catching up)
// and those it leads.
func printMembers(members []*storev1.Member) error {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 3, ' ', 0)
	fmt.Fprintln(w, "NODE\tRAFT ADDRESS\tSHARDS\tNON-VOTING\tLEADS")
	for _, m := range members {
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\n", m.GetNodeId(), m.GetRaftAddress(), shardRanges(m.GetShards()),
			shardRanges(m.GetNonVoting()), shardRanges(m.GetLeads()))
	}
	return w.Flush()
}

// shardRanges writes ascending shard indexes with runs as ranges: "0-3,7".
func shardRanges(shards []uint32) string {
	if len(shards) == 0 {
		return "-"
	}
	var parts []string
	for i := 0; i < len(shards); {
		j := i
		for j+1 < len(shards) && shards[j+1] == shards[j]+1 {
			j++
		}
		part := strconv.Itoa(int(shards[i]))
		if j > i {
			part += "-" + strconv.Itoa(int(shards[j]))
		}
		parts, i = append(parts, part), j+1
	}
	return strings.Join(parts, ",")
}

// runBackup writes a backup of every shard to a file, which appears only
// once complete.
func runBackup(args []string) error {
	fs := flag.NewFlagSet("backup", flag.ContinueOnError)
	out := fs.String("out", "", "backup file to write")
	conn, ctx, cancel, err := storeConn(fs, args, 30*time.Minute)
	if err != nil {
		return err
	}
	defer cancel()
	defer conn.Close()
	if *out == "" {
		return errors.New("backup: give --out FILE")
	}
	stream, err := storev1.NewAdminClient(conn).Backup(ctx, &storev1.BackupRequest{})
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(*out), filepath.Base(*out)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // fails harmlessly once renamed
	sum, err := node.WriteBackup(f, stream.Recv)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), *out)
	}
	if err != nil {
		return err
	}
	fmt.Printf("backup of %d shards at revisions %v written to %s\n", sum.Shards, sum.Revisions, *out)
	return nil
}

// runRestore creates a node's data directory from a backup file.
func runRestore(args []string) error {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	in := fs.String("in", "", "backup file to restore")
	dir := fs.String("data-dir", "", "the new node's data directory (empty or absent)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *in == "" || *dir == "" {
		return errors.New("restore: give --in FILE and --data-dir DIR")
	}
	f, err := os.Open(*in)
	if err != nil {
		return err
	}
	defer f.Close()
	sum, err := node.Restore(*dir, f, zap.NewNop())
	if err != nil {
		return err
	}
	fmt.Printf("restored %d shards at revisions %v into %s\n"+
		"start it as a one-node cell: troupe store --data-dir %s [--node-id ...]; add nodes with troupe store --join\n",
		sum.Shards, sum.Revisions, *dir, *dir)
	return nil
}
