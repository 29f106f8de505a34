package faults

import (
	"context"
	"net"

	"github.com/troupe-cluster/troupe/tools/linkproxy"
)

// A Link forwards the TCP connections accepted on its listener to one
// destination, and can lose or slow what it carries (linkproxy.Link:
// Block, Unblock, SetDelay, Close). The cell has a Link for each ordered
// pair of nodes (the connections node i opens to node j: i's Raft
// messages to j) and one per node for clients.
type Link struct{ *linkproxy.Link }

// newLink forwards what ln accepts to the connections dial makes, until
// Close.
func newLink(name string, ln net.Listener, dial func(ctx context.Context) (net.Conn, error)) *Link {
	return &Link{linkproxy.New(name, ln, dial)}
}

// open counts the open connections (both sides of forwarded ones).
func (l *Link) open() int { return l.Open() }
