package clientlib_test

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/troupe-cluster/troupe/clientlib"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// captured is a Store that keeps the one request committed and commits
// every group.
type captured struct {
	clientlib.Store
	req *storev1.CommitRequest
}

func (c *captured) Commit(_ context.Context, req *storev1.CommitRequest) (*storev1.CommitResponse, error) {
	c.req = req
	resp := &storev1.CommitResponse{}
	for range req.GetGroups() {
		resp.Groups = append(resp.Groups, &storev1.GroupResult{Committed: true})
	}
	return resp, nil
}

// Groups built one after the other, interleaved, and past the arena's
// chunks each hold their own conditions and operations, in the order
// they were added: the groups' lists share arrays while they can, and
// never overwrite each other.
func TestTxnGroupsKeepTheirOwnOperations(t *testing.T) {
	for _, tc := range []struct {
		name       string
		groups     int
		perGroup   int
		interleave bool
	}{{"one op", 1, 1, false}, {"sequential", 300, 5, false}, {"large groups", 3, 700, false}, {"interleaved", 40, 9, true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := &captured{}
			tx := clientlib.NewTxn(s)
			want := &storev1.CommitRequest{}
			gs := make([]*clientlib.Group, tc.groups)
			wantGroups := make([]*storev1.Group, tc.groups)
			for i := range gs {
				gs[i] = tx.Group()
				wantGroups[i] = &storev1.Group{}
				want.Groups = append(want.Groups, wantGroups[i])
			}
			add := func(i, j int) {
				g, w := gs[i], wantGroups[i]
				key := fmt.Sprintf("/k/%d/%d", i, j)
				g.Require(key, uint64(j))
				w.Conditions = append(w.Conditions, &storev1.Condition{Key: key, Version: uint64(j)})
				switch j % 3 {
				case 0:
					g.Put(key, []byte(key))
					w.Ops = append(w.Ops, &storev1.Op{Op: &storev1.Op_Put{Put: &storev1.Put{Key: key, Value: []byte(key)}}})
				case 1:
					g.Add(key, int64(j), 0, 100)
					w.Ops = append(w.Ops, &storev1.Op{Op: &storev1.Op_Add{Add: &storev1.Add{Key: key, Delta: int64(j), Max: 100}}})
				default:
					g.Delete(key)
					w.Ops = append(w.Ops, &storev1.Op{Op: &storev1.Op_Delete{Delete: &storev1.Delete{Key: key}}})
				}
			}
			if tc.interleave {
				for j := range tc.perGroup {
					for i := range gs {
						add((i*7+j)%tc.groups, j) // groups in a varying order
					}
				}
			} else {
				for i := range gs {
					for j := range tc.perGroup {
						add(i, j)
					}
				}
			}
			if _, err := tx.Commit(context.Background()); err != nil {
				t.Fatal(err)
			}
			s.req.TxnId = ""
			if !proto.Equal(s.req, want) {
				t.Fatalf("request differs from the groups built:\n got %v\nwant %v", s.req, want)
			}
		})
	}
}
