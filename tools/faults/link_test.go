package faults

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
)

// echoServer echoes every connection on loopback and counts them.
type echoServer struct {
	ln       net.Listener
	accepted atomic.Int32
}

func startEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.accepted.Add(1)
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return e
}

// startLink puts a link in front of e.
func startLink(t *testing.T, e *echoServer) *Link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newLink("test", ln, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", e.ln.Addr().String())
	})
	t.Cleanup(func() { l.Close() })
	return l
}

func dialLink(t *testing.T, l *Link) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second)) // a broken link fails the test rather than hanging it
	return c
}

// roundTrip writes msg and reads it back.
func roundTrip(c net.Conn, msg string) error {
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	return readBack(c, msg)
}

// readBack reads len(want) bytes and checks they are want.
func readBack(c net.Conn, want string) error {
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != want {
		return fmt.Errorf("read %q, want %q", buf, want)
	}
	return nil
}

func TestLinkForwardsBlocksAndUnblocks(t *testing.T) {
	e := startEcho(t)
	l := startLink(t, e)
	before := dialLink(t, l)
	if err := roundTrip(before, "ping"); err != nil {
		t.Fatalf("through an open link: %v", err)
	}

	l.Block()
	if _, err := before.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection open when the link was blocked is still up")
	}
	during := dialLink(t, l) // accepted, but a dead end
	if _, err := during.Write([]byte("lost")); err != nil {
		t.Fatalf("write into a blocked link: %v (want it swallowed)", err)
	}
	wait.Until(t.Context(), t, "the link to hold the dead end", func() bool { return l.open() == 1 })

	l.Unblock()
	if _, err := during.Read(make([]byte, 1)); err == nil {
		t.Fatal("a dead-end connection got an answer, or was not cut on Unblock")
	}
	after := dialLink(t, l)
	if err := roundTrip(after, "pong"); err != nil {
		t.Fatalf("through the unblocked link: %v", err)
	}
	if n := e.accepted.Load(); n != 2 {
		t.Errorf("the server accepted %d connections, want 2 (none while blocked)", n)
	}
}

func TestLinkDelays(t *testing.T) {
	const delay = 50 * time.Millisecond
	l := startLink(t, startEcho(t))
	c := dialLink(t, l)
	l.SetDelay(delay)
	start := time.Now()
	if err := roundTrip(c, "slow"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 2*delay {
		t.Errorf("a round trip took %v, want at least %v (delayed both ways)", took, 2*delay)
	}
	// Bytes sent after the delay shrinks do not overtake earlier ones.
	if _, err := c.Write([]byte("first")); err != nil {
		t.Fatal(err)
	}
	l.SetDelay(0)
	if _, err := c.Write([]byte("second")); err != nil {
		t.Fatal(err)
	}
	if err := readBack(c, "firstsecond"); err != nil {
		t.Error(err)
	}
}
