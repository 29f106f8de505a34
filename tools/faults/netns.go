package faults

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// netns is a network namespace of the harness's: its own loopback
// interface, up, and nothing else. One store node runs in each, so every
// node can listen on the same addresses, and the only way out of a
// namespace is through the harness's Links listening in it (see doc.go).
// Creating and entering namespaces needs CAP_SYS_ADMIN (root).
type netns struct {
	fd int // an open nsfs file: keeps the namespace alive while open
}

// newNetns creates a network namespace and brings its loopback up.
func newNetns() (*netns, error) {
	fd := -1
	err := onThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare a network namespace (needs CAP_SYS_ADMIN): %w", err)
		}
		var err error
		if fd, err = unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			return fmt.Errorf("open the new network namespace: %w", err)
		}
		return loopbackUp()
	})
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("faults: %w", err)
	}
	return &netns{fd: fd}, nil
}

// loopbackUp sets the calling thread's namespace's "lo" up (a new
// namespace's loopback starts down).
func loopbackUp() error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket for ioctl: %w", err)
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("read lo's flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("set lo up: %w", err)
	}
	return nil
}

// onThread runs fn on an OS thread of its own, which fn may move into
// another network namespace: the thread is put back into the namespace it
// started in afterwards, or, if that fails, ends with fn's goroutine (Go
// then never reuses it).
func onThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open this thread's network namespace: %w", err)
			return
		}
		defer unix.Close(home)
		ferr := fn()
		if err := unix.Setns(home, unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("return to the harness's network namespace: %w", err))
			return // the thread stays locked and ends with this goroutine
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// do runs fn inside the namespace. Sockets fn creates belong to the
// namespace for good, and so do processes it starts: they inherit the
// creating thread's namespace.
func (ns *netns) do(fn func() error) error {
	return onThread(func() error {
		if err := unix.Setns(ns.fd, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("faults: enter a node's network namespace: %w", err)
		}
		return fn()
	})
}

// listen listens on addr inside the namespace.
func (ns *netns) listen(addr string) (net.Listener, error) {
	var ln net.Listener
	err := ns.do(func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	return ln, err
}

// dial connects to addr inside the namespace. addr must be an IP literal:
// a name would be resolved off this thread.
func (ns *netns) dial(ctx context.Context, addr string) (net.Conn, error) {
	var c net.Conn
	err := ns.do(func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	return c, err
}

// start starts cmd inside the namespace.
func (ns *netns) start(cmd *exec.Cmd) error {
	return ns.do(cmd.Start)
}

// close lets the namespace go once nothing else holds it (its sockets and
// processes do).
func (ns *netns) close() error {
	return unix.Close(ns.fd)
}
