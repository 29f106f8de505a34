package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/cellstore/node"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// The store's operations: `troupe store members|backup|restore`.

// membersCommand is `troupe store members list|add|remove`.
func (a *app) membersCommand() *cobra.Command {
	list := a.memberCommand("list", "List the cell's members: their Raft addresses, shards, and those they lead", nil,
		func(ctx context.Context, admin storev1.AdminClient) ([]*storev1.Member, error) {
			resp, err := admin.ListMembers(ctx, &storev1.ListMembersRequest{})
			return resp.GetMembers(), err
		})
	var (
		id       uint64
		raftAddr string
		shards   uint
	)
	add := a.memberCommand("add", "Add a node as a member (it joins non-voting and the command waits until it votes)",
		func(cmd *cobra.Command) {
			cmd.Flags().Uint64Var(&id, "node-id", 0, "the new node's ID (never one a removed node had); it joins as a non-voting member and the command waits until it votes")
			cmd.Flags().StringVar(&raftAddr, "raft-addr", "", "host:port of the new node's Raft transport")
			cmd.Flags().UintVar(&shards, "shards", 0, "the new node's shard count, checked against the cell's (0: unchecked)")
		},
		func(ctx context.Context, admin storev1.AdminClient) ([]*storev1.Member, error) {
			resp, err := admin.AddMember(ctx, &storev1.AddMemberRequest{NodeId: id, RaftAddress: raftAddr, ShardCount: uint32(shards)})
			return resp.GetMembers(), err
		})
	var removeID uint64
	remove := a.memberCommand("remove", "Remove a member (send the request to another member)",
		func(cmd *cobra.Command) {
			cmd.Flags().Uint64Var(&removeID, "node-id", 0, "the node to remove; send the request to another member")
		},
		func(ctx context.Context, admin storev1.AdminClient) ([]*storev1.Member, error) {
			resp, err := admin.RemoveMember(ctx, &storev1.RemoveMemberRequest{NodeId: removeID})
			return resp.GetMembers(), err
		})
	return group(&cobra.Command{
		Use:   "members",
		Short: "List, add or remove the cell's members",
	}, list, add, remove)
}

// memberCommand is one of `troupe store members`: flags defines its
// flags, call makes its request of the first endpoint, whose answer (the
// members) it prints.
func (a *app) memberCommand(name, short string, flags func(*cobra.Command),
	call func(ctx context.Context, admin storev1.AdminClient) ([]*storev1.Member, error)) *cobra.Command {
	var cf *connFlags
	cmd := &cobra.Command{
		Use:   name,
		Short: short,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, admin, done, err := a.adminClient(cmd, cf)
			if err != nil {
				return err
			}
			defer done()
			members, err := call(ctx, admin)
			if err != nil {
				return err
			}
			return printMembers(a.out, members)
		},
	}
	if flags != nil {
		flags(cmd)
	}
	cf = a.addConnFlags(cmd, time.Minute, "request timeout")
	return cmd
}

// adminClient connects to the store of cmd's flags for an administrative
// call, and returns the call's context (bounded by --timeout) and what
// releases both.
func (a *app) adminClient(cmd *cobra.Command, cf *connFlags) (context.Context, storev1.AdminClient, func(), error) {
	t, err := a.target(cmd, cf)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), cf.timeout)
	conn, err := a.storeConn(ctx, t, cf.timeout)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return ctx, storev1.NewAdminClient(conn), func() { conn.Close(); cancel() }, nil
}

// printMembers prints one line per member: the gRPC address it published
// ("-": none yet), its Raft address, the shards it holds a replica of,
// those of them where it does not vote yet (a new member catching up),
// those it leads, and the version it published.
func printMembers(out io.Writer, members []*storev1.Member) error {
	w := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
	fmt.Fprintln(w, "NODE\tGRPC ADDRESS\tRAFT ADDRESS\tSHARDS\tNON-VOTING\tLEADS\tVERSION")
	for _, m := range members {
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", m.GetNodeId(), dash(m.GetGrpcAddress()), m.GetRaftAddress(), shardRanges(m.GetShards()),
			shardRanges(m.GetNonVoting()), shardRanges(m.GetLeads()), dash(m.GetVersion()))
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

// backupCommand is `troupe store backup --out FILE`: a backup of every
// shard, written to a file that appears only once complete.
func (a *app) backupCommand() *cobra.Command {
	var (
		out string
		cf  *connFlags
	)
	cmd := &cobra.Command{
		Use:   "backup --out FILE",
		Short: "Write a backup of every shard to a file",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return usagef("give --out FILE")
			}
			ctx, admin, done, err := a.adminClient(cmd, cf)
			if err != nil {
				return err
			}
			defer done()
			stream, err := admin.Backup(ctx, &storev1.BackupRequest{})
			if err != nil {
				return err
			}
			f, err := os.CreateTemp(filepath.Dir(out), filepath.Base(out)+".*.tmp")
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
				err = os.Rename(f.Name(), out)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(a.out, "backup of %d shards at revisions %v written to %s\n", sum.Shards, sum.Revisions, out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "backup file to write")
	cf = a.addConnFlags(cmd, 30*time.Minute, "request timeout")
	return cmd
}

// restoreCommand is `troupe store restore --in FILE --data-dir DIR`: a
// node's data directory made from a backup file.
func (a *app) restoreCommand() *cobra.Command {
	var in, dir string
	cmd := &cobra.Command{
		Use:   "restore --in FILE --data-dir DIR",
		Short: "Make a new node's data directory from a backup file",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if in == "" || dir == "" {
				return usagef("give --in FILE and --data-dir DIR")
			}
			f, err := os.Open(in)
			if err != nil {
				return err
			}
			defer f.Close()
			sum, err := node.Restore(dir, f, zap.NewNop())
			if err != nil {
				return err
			}
			fmt.Fprintf(a.out, "restored %d shards at revisions %v into %s\n"+
				"start it as a one-node cell: troupe store --data-dir %s [--node-id ...]; add nodes with troupe store --join\n",
				sum.Shards, sum.Revisions, dir, dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&in, "in", "", "backup file to restore")
	cmd.Flags().StringVar(&dir, "data-dir", "", "the new node's data directory (empty or absent)")
	return cmd
}
