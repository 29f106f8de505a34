package faults

import (
	"context"
	"io"
	"net"
	"sync"
	"time"
)

// A Link forwards the TCP connections accepted on its listener to one
// destination, and can lose or slow what it carries. The cell has a Link
// for each ordered pair of nodes (the connections node i opens to node
// j: i's Raft messages to j) and one per node for clients. Its methods are
// safe for concurrent use.
//
// Blocked, a link loses everything: open connections are cut (with what
// they had in flight) and new ones are accepted and read but lead
// nowhere, so a sender's messages vanish without an error, as on a path
// that drops packets. Unblock cuts those dead-end connections, and
// senders reconnect. A delay holds every chunk of bytes, in both
// directions, for that long before passing it on, in order.
type Link struct {
	name string
	ln   net.Listener
	dial func(ctx context.Context) (net.Conn, error)

	mu      sync.Mutex
	blocked bool
	delay   time.Duration
	conns   map[net.Conn]struct{} // open connections, both sides of each
	closed  bool
	running sync.WaitGroup // the accept loop and every connection's pumps
}

// dialTimeout bounds connecting to a link's destination.
const dialTimeout = time.Second

// newLink forwards what ln accepts to the connections dial makes, until
// Close.
func newLink(name string, ln net.Listener, dial func(ctx context.Context) (net.Conn, error)) *Link {
	l := &Link{name: name, ln: ln, dial: dial, conns: map[net.Conn]struct{}{}}
	l.running.Go(l.accept)
	return l
}

// Name says which way the link goes, such as "1->2".
func (l *Link) Name() string { return l.name }

// Addr is where the link accepts connections.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Block makes the link lose everything until Unblock.
func (l *Link) Block() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.blocked = true
	l.cutLocked()
}

// Unblock ends a Block: the dead-end connections are cut, and new ones
// are forwarded again.
func (l *Link) Unblock() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.blocked {
		l.blocked = false
		l.cutLocked()
	}
}

// SetDelay delays what the link carries from now on by d (0: none).
func (l *Link) SetDelay(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.delay = d
}

// Close stops accepting, cuts every connection and waits for the link's
// goroutines to end.
func (l *Link) Close() error {
	l.mu.Lock()
	l.closed = true
	l.cutLocked()
	l.mu.Unlock()
	err := l.ln.Close()
	l.running.Wait()
	return err
}

// cutLocked closes every open connection.
func (l *Link) cutLocked() {
	for c := range l.conns {
		c.Close()
		delete(l.conns, c)
	}
}

// track registers open connections so that Block and Close cut them; it
// closes them at once, and returns false, if the link closed meanwhile.
func (l *Link) track(cs ...net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		l.conns[c] = struct{}{}
	}
	return true
}

// untrack closes connections and forgets them.
func (l *Link) untrack(cs ...net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(l.conns, c)
	}
}

// open counts the open connections (both sides of forwarded ones).
func (l *Link) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

func (l *Link) state() (blocked bool, delay time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.blocked, l.delay
}

// accept serves the listener until it closes.
func (l *Link) accept() {
	for {
		in, err := l.ln.Accept()
		if err != nil {
			return // closed
		}
		l.running.Go(func() { l.serve(in) })
	}
}

// serve forwards one accepted connection, or swallows it while blocked.
func (l *Link) serve(in net.Conn) {
	if blocked, _ := l.state(); blocked {
		if l.track(in) {
			io.Copy(io.Discard, in) // until Unblock or Close cuts it
			l.untrack(in)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	out, err := l.dial(ctx)
	cancel()
	if err != nil {
		in.Close() // the destination is down: the sender sees its connection fail
		return
	}
	if !l.track(in, out) {
		return
	}
	// A block that came while dialling has already cut the tracked
	// connections, or cuts them now.
	if blocked, _ := l.state(); blocked {
		l.untrack(in, out)
		return
	}
	var pumps sync.WaitGroup
	pumps.Go(func() { l.pump(out, in) })
	pumps.Go(func() { l.pump(in, out) })
	pumps.Wait()
}

// chunk is bytes read from one side, due on the other at due.
type chunk struct {
	data []byte
	due  time.Time
}

// pump copies src to dst, each chunk held for the link's delay, until
// either side fails; then it closes both, which ends the opposite pump
// too.
func (l *Link) pump(dst, src net.Conn) {
	defer l.untrack(src, dst)
	queue := make(chan chunk, 64)
	var writer sync.WaitGroup
	writer.Go(func() {
		for c := range queue {
			time.Sleep(time.Until(c.due)) // the delay itself
			if _, err := dst.Write(c.data); err != nil {
				src.Close() // stop the reader; drain what is queued
			}
		}
	})
	var last time.Time
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			_, delay := l.state()
			due := time.Now().Add(delay)
			if due.Before(last) { // a shorter delay must not reorder bytes
				due = last
			}
			last = due
			queue <- chunk{data: buf[:n], due: due}
		}
		if err != nil {
			break
		}
	}
	close(queue)
	writer.Wait()
}
