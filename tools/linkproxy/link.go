// Package linkproxy is a user-space TCP forwarder that can lose or delay
// what it carries: the fault harness's links between store nodes
// (tools/faults), and the benchmark's delayed links (troupe bench
// -link-delay), which stand in for a network where the kernel has no
// netem qdisc to delay packets.
//
// A delay is a delay line, not a sleep per connection: each direction of
// each connection holds every chunk of bytes it reads (what one Read
// returned) until the chunk's read time plus the delay, while it goes on
// reading the chunks behind it, so a delayed link keeps its throughput
// and only adds latency, as a long wire does. Chunks leave in the order
// they came, whatever the delay was when each came.
package linkproxy

import (
	"context"
	"io"
	"net"
	"sync"
	"time"
)

// A Link forwards the TCP connections accepted on its listener to one
// destination, and can lose or slow what it carries. Its methods are safe
// for concurrent use.
//
// Blocked, a link loses everything: open connections are cut (with what
// they had in flight) and new ones are accepted and read but lead
// nowhere, so a sender's messages vanish without an error, as on a path
// that drops packets. Unblock cuts those dead-end connections, and
// senders reconnect. A delay holds every chunk of bytes, in both
// directions, for that long before passing it on, in order: a one-way
// delay in each direction, so a request and its answer through one link
// take twice the delay more than without it.
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

// DialTimeout bounds connecting to a link's destination.
const DialTimeout = time.Second

// New forwards what ln accepts to the connections dial makes, until
// Close. name says which way the link goes, such as "1->2".
func New(name string, ln net.Listener, dial func(ctx context.Context) (net.Conn, error)) *Link {
	l := &Link{name: name, ln: ln, dial: dial, conns: map[net.Conn]struct{}{}}
	l.running.Go(l.accept)
	return l
}

// Forward listens on listenAddr (host:port; port 0 picks a free one) and
// forwards what it accepts to target over TCP, delayed by delay.
func Forward(name, listenAddr, target string, delay time.Duration) (*Link, error) {
	ln, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return nil, err
	}
	l := New(name, ln, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", target)
	})
	l.SetDelay(delay)
	return l, nil
}

// Name says which way the link goes.
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

// SetDelay delays what the link carries from now on by d (0: none), in
// each direction.
func (l *Link) SetDelay(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.delay = d
}

// Delay is the link's delay in force.
func (l *Link) Delay() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.delay
}

// Open counts the open connections (both sides of forwarded ones, and
// the dead ends of a blocked link).
func (l *Link) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
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

func (l *Link) isBlocked() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.blocked
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
	if l.isBlocked() {
		if l.track(in) {
			io.Copy(io.Discard, in) // until Unblock or Close cuts it
			l.untrack(in)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), DialTimeout)
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
	if l.isBlocked() {
		l.untrack(in, out)
		return
	}
	var pumps sync.WaitGroup
	pumps.Go(func() { l.pump(out, in) })
	pumps.Go(func() { l.pump(in, out) })
	pumps.Wait()
}

// pump copies src to dst through a delay line of the link's delay until
// either side fails; then it closes both, which ends the opposite pump
// too.
func (l *Link) pump(dst, src net.Conn) {
	defer l.untrack(src, dst)
	line := delayLine{delay: l.Delay, now: time.Now, wait: sleepUntil, queue: queueChunks}
	line.run(dst, src, func() { src.Close() })
}

// queueChunks bounds the chunks a direction of a connection holds (at
// most readSize bytes each): past it, the delay line stops reading and
// the sender's writes back up, as on a full link.
const queueChunks = 1024

// readSize is the most one chunk holds.
const readSize = 32 << 10

func sleepUntil(t time.Time) {
	if d := time.Until(t); d > 0 {
		time.Sleep(d)
	}
}

// A delayLine carries src to dst, holding each chunk (what one Read
// returned) until its due time: the time it was read plus the delay then
// in force, or the previous chunk's due time if that is later (a delay
// that shrinks must not reorder bytes). A reader and a writer run at once,
// so chunks read while earlier ones wait are queued behind them, not
// delayed by them.
type delayLine struct {
	delay func() time.Duration
	now   func() time.Time
	wait  func(until time.Time) // returns at until or later
	queue int                   // chunks held at most
}

// chunk is bytes read from src, due on dst at due.
type chunk struct {
	data []byte
	due  time.Time
}

// run copies until src fails (io.EOF included) and every chunk read
// before has been written or dropped. A write that fails calls
// stopReading (which must make src's Read fail) and drops what is queued
// after it.
func (d delayLine) run(dst io.Writer, src io.Reader, stopReading func()) {
	queue := make(chan chunk, d.queue)
	var writer sync.WaitGroup
	writer.Go(func() {
		failed := false
		for c := range queue {
			if failed {
				continue // drain
			}
			d.wait(c.due) // the delay itself
			if _, err := dst.Write(c.data); err != nil {
				failed = true
				stopReading()
			}
		}
	})
	buf := make([]byte, readSize)
	var last time.Time
	for {
		n, err := src.Read(buf)
		if n > 0 {
			due := d.now().Add(d.delay())
			if due.Before(last) {
				due = last
			}
			last = due
			queue <- chunk{data: append([]byte(nil), buf[:n]...), due: due}
		}
		if err != nil {
			break
		}
	}
	close(queue)
	writer.Wait()
}
