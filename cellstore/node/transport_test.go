package node

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dbconfig "github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"

	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// received records what a transport handed to Dragonboat.
type received struct {
	mu      sync.Mutex
	batches []pb.MessageBatch
	chunks  []pb.Chunk
	refuse  func(pb.Chunk) bool // nil: take every chunk
	changed chan struct{}       // a receive happened (buffered, 1)
}

func newReceived() *received { return &received{changed: make(chan struct{}, 1)} }

func (r *received) batch(b pb.MessageBatch) {
	r.mu.Lock()
	r.batches = append(r.batches, b)
	r.mu.Unlock()
	r.notify()
}

func (r *received) chunk(c pb.Chunk) bool {
	r.mu.Lock()
	r.chunks = append(r.chunks, c)
	ok := r.refuse == nil || !r.refuse(c)
	r.mu.Unlock()
	r.notify()
	return ok
}

func (r *received) notify() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// waitBatches waits until n batches came, or fails the test after 10s.
func (r *received) waitBatches(t *testing.T, n int) []pb.MessageBatch {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		r.mu.Lock()
		got := append([]pb.MessageBatch(nil), r.batches...)
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-r.changed:
		case <-deadline:
			t.Fatalf("%d message batches arrived, want %d", len(got), n)
		}
	}
}

func (r *received) counts() (batches, chunks int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.batches), len(r.chunks)
}

// startTransport starts a transport on a free loopback port.
func startTransport(t *testing.T, tt *TransportTLS, log *zap.Logger, r *received) (*raftTransport, string) {
	t.Helper()
	tr := newTransportFactory(tt, log).Create(dbconfig.NodeHostConfig{RaftAddress: "127.0.0.1:0"}, r.batch, r.chunk).(*raftTransport)
	if err := tr.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr, tr.lis.Addr().String()
}

// testPKI is a throwaway cell CA, made with cellstore/pki.
type testPKI struct {
	t    testing.TB
	ca   *pki.CA
	pool *x509.CertPool
}

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	ca, err := pki.NewCA("test-cell", 24*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return &testPKI{t: t, ca: ca, pool: pool}
}

// issue returns a certificate for role/name, serving at 127.0.0.1.
func (p *testPKI) issue(role, name string) *tls.Certificate {
	p.t.Helper()
	certPEM, keyPEM, err := p.ca.Issue(pki.Leaf{Identity: pki.Identity{Role: role, Name: name}, Hosts: []string{"127.0.0.1"}, Validity: time.Hour}, time.Now())
	if err != nil {
		p.t.Fatal(err)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		p.t.Fatal(err)
	}
	return &c
}

// requireStore is the role check: the client certificate's URI SAN
// names a store node.
func requireStore(cs tls.ConnectionState) error {
	for _, u := range cs.PeerCertificates[0].URIs {
		if u.Scheme == "spiffe" && u.Host == "troupe.cell" && strings.HasPrefix(u.Path, "/store/") && len(u.Path) > len("/store/") {
			return nil
		}
	}
	return fmt.Errorf("client certificate %v does not name a store node", cs.PeerCertificates[0].URIs)
}

// serverTLS is a server configuration presenting *cert (read per
// handshake, as a reloading one would), taking store nodes of p's CA.
func (p *testPKI) serverTLS(cert *atomic.Pointer[tls.Certificate]) *tls.Config {
	return &tls.Config{
		ClientAuth:       tls.RequireAndVerifyClientCert,
		ClientCAs:        p.pool,
		GetCertificate:   func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert.Load(), nil },
		VerifyConnection: requireStore,
	}
}

// clientTLS presents cert and trusts p's CA; seen, if set, gets the
// server's certificate of each handshake.
func (p *testPKI) clientTLS(cert *tls.Certificate, seen func(*x509.Certificate)) func(string) (*tls.Config, error) {
	return func(string) (*tls.Config, error) {
		return &tls.Config{
			RootCAs:      p.pool,
			Certificates: []tls.Certificate{*cert},
			VerifyConnection: func(cs tls.ConnectionState) error {
				if seen != nil {
					seen(cs.PeerCertificates[0])
				}
				return nil
			},
		}, nil
	}
}

// storeTLS is both sides of a store node of p's CA.
func (p *testPKI) storeTLS(name string) *TransportTLS {
	var cert atomic.Pointer[tls.Certificate]
	cert.Store(p.issue(pki.RoleStore, name))
	return &TransportTLS{Server: p.serverTLS(&cert), Client: p.clientTLS(cert.Load(), nil)}
}

// dialer is a transport that only dials (never started).
func dialer(tt *TransportTLS) *raftTransport {
	return newTransportFactory(tt, nil).Create(dbconfig.NodeHostConfig{}, nil, nil).(*raftTransport)
}

func testBatch(i int, size int) pb.MessageBatch {
	cmd := make([]byte, size)
	for j := range cmd {
		cmd[j] = byte(i + j)
	}
	return pb.MessageBatch{SourceAddress: "127.0.0.1:1", BinVer: raftio.TransportBinVersion, DeploymentId: 1,
		Requests: []pb.Message{{Type: pb.Replicate, ShardID: 1, From: 1, To: 2, Term: uint64(i),
			Entries: []pb.Entry{{Index: uint64(i), Term: 1, Cmd: cmd}}}}}
}

// A snapshot of n chunks of size bytes of data each.
func testChunks(n, size int) []pb.Chunk {
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([]pb.Chunk, n)
	for i := range out {
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		out[i] = pb.Chunk{BinVer: raftio.TransportBinVersion, ShardID: 1, ReplicaID: 2, From: 1, ChunkId: uint64(i),
			ChunkCount: uint64(n), FileChunkId: uint64(i), FileChunkCount: uint64(n), ChunkSize: uint64(size),
			FileSize: uint64(n * size), Index: 100, Term: 3, Filepath: "snapshot.gbsnap", Data: data,
			Membership: pb.Membership{Addresses: map[uint64]string{1: "127.0.0.1:1", 2: "127.0.0.1:2"}}}
	}
	return out
}

// Message batches and snapshot chunks arrive in order and intact, in
// plaintext and over TLS; a snapshot of several full-size chunks has
// been handled entirely when its connection's Close returns.
func TestTransportDelivers(t *testing.T) {
	for _, secure := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "tls"}[secure], func(t *testing.T) {
			var tt *TransportTLS
			if secure {
				tt = newTestPKI(t).storeTLS("n1")
			}
			r := newReceived()
			_, addr := startTransport(t, tt, nil, r)
			ctx := t.Context()
			conn, err := dialer(tt).GetConnection(ctx, addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// Mostly small, one beyond the read buffer, one beyond the
			// buffer a connection keeps.
			sizes := make([]int, 200)
			for i := range sizes {
				sizes[i] = 1 + i%300
			}
			sizes[50], sizes[120] = readBufferSize+1, keepBufferSize+1
			for i, sz := range sizes {
				if err := conn.SendMessageBatch(testBatch(i, sz)); err != nil {
					t.Fatalf("batch %d: %v", i, err)
				}
			}
			got := r.waitBatches(t, len(sizes))
			for i, b := range got {
				want := testBatch(i, sizes[i])
				if len(b.Requests) != 1 || b.Requests[0].Term != uint64(i) || !bytes.Equal(b.Requests[0].Entries[0].Cmd, want.Requests[0].Entries[0].Cmd) ||
					b.SourceAddress != want.SourceAddress || b.DeploymentId != 1 {
					t.Fatalf("batch %d arrived as %+v", i, b.Requests[0].Term)
				}
			}

			chunks := testChunks(5, 2<<20)
			sc, err := dialer(tt).GetSnapshotConnection(ctx, addr)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range chunks {
				if err := sc.SendChunk(c); err != nil {
					t.Fatal(err)
				}
			}
			sc.Close()
			r.mu.Lock()
			defer r.mu.Unlock()
			if len(r.chunks) != len(chunks) {
				t.Fatalf("%d chunks handled when Close returned, want %d", len(r.chunks), len(chunks))
			}
			for i, c := range r.chunks {
				if c.ChunkId != uint64(i) || !bytes.Equal(c.Data, chunks[i].Data) || c.Membership.Addresses[2] != "127.0.0.1:2" {
					t.Fatalf("chunk %d arrived as chunk %d (data equal: %t)", i, c.ChunkId, bytes.Equal(c.Data, chunks[i].Data))
				}
			}
		})
	}
}

// logs returns a logger whose Warn and Error entries the test can read.
func logs() (*zap.Logger, *observer.ObservedLogs) {
	core, obs := observer.New(zapcore.WarnLevel)
	return zap.New(core), obs
}

// logged returns the messages and errors logged at level or above.
func logged(obs *observer.ObservedLogs, level zapcore.Level) string {
	var b strings.Builder
	for _, e := range obs.All() {
		if e.Level >= level {
			fmt.Fprintf(&b, "%s: %s %v\n", e.Level, e.Message, e.ContextMap())
		}
	}
	return b.String()
}

// The listener admits only store nodes of its CA over TLS 1.3: a
// certificate of the CA for another role, a store certificate of another
// CA, TLS 1.2 and plaintext are refused at the dial, and nothing they
// send reaches Dragonboat. A dialer refuses a server of another CA.
func TestTransportTLSAdmitsOnlyStoreNodes(t *testing.T) {
	p := newTestPKI(t)
	log, obs := logs()
	r := newReceived()
	server := p.storeTLS("n1")
	_, addr := startTransport(t, server, log, r)
	other := newTestPKI(t)
	for name, tc := range map[string]struct {
		tt          *TransportTLS
		client, log string // what the dialer's error and the server's log say
	}{
		"scheduler of the CA": {&TransportTLS{Client: p.clientTLS(p.issue(pki.RoleScheduler, "s1"), nil)}, "bad certificate", "does not name a store node"},
		"admin of the CA":     {&TransportTLS{Client: p.clientTLS(p.issue(pki.RoleAdmin, "root"), nil)}, "bad certificate", "does not name a store node"},
		"store of another CA": {&TransportTLS{Client: p.clientTLS(other.issue(pki.RoleStore, "n2"), nil)}, "unknown certificate authority", "unknown authority"},
		"plaintext":           {nil, "hello ack", "TLS handshake"},
	} {
		obs.TakeAll()
		_, err := dialer(tc.tt).GetConnection(t.Context(), addr)
		if err == nil || !strings.Contains(err.Error(), tc.client) {
			t.Errorf("%s: dial: %v, want an error mentioning %q", name, err, tc.client)
		}
		// The TLS alert may reach the dialer before the server logs.
		waitLogged(t, obs, zapcore.WarnLevel, "refused a peer", tc.log)
	}
	// A server configuration that forgot to ask for client certificates
	// still admits none without one.
	var cert atomic.Pointer[tls.Certificate]
	cert.Store(p.issue(pki.RoleStore, "n3"))
	lax := &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert.Load(), nil }}
	_, laxAddr := startTransport(t, &TransportTLS{Server: lax}, log, newReceived())
	obs.TakeAll()
	if _, err := dialer(&TransportTLS{Client: p.clientTLS(&tls.Certificate{}, nil)}).GetConnection(t.Context(), laxAddr); err == nil {
		t.Error("a dialer without a certificate was admitted")
	}
	waitLogged(t, obs, zapcore.WarnLevel, "refused a peer", "0 client certificates")
	// Our dialer insists on TLS 1.3; another might not.
	obs.TakeAll()
	c12, err := p.clientTLS(p.issue(pki.RoleStore, "n2"), nil)("")
	if err != nil {
		t.Fatal(err)
	}
	c12.ServerName, c12.MaxVersion = "127.0.0.1", tls.VersionTLS12
	if c, err := tls.Dial("tcp", addr, c12); err == nil {
		c.Close()
		t.Error("a TLS 1.2 handshake succeeded")
	}
	waitLogged(t, obs, zapcore.WarnLevel, "refused a peer", "unsupported versions")
	// A store node of another CA refuses this server.
	_, err = dialer(other.storeTLS("n9")).GetConnection(t.Context(), addr)
	if err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("dial to a server of another CA: %v", err)
	}
	// A store node of the CA is admitted.
	conn, err := dialer(p.storeTLS("n2")).GetConnection(t.Context(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SendMessageBatch(testBatch(1, 10)); err != nil {
		t.Fatal(err)
	}
	if got := r.waitBatches(t, 1); len(got) != 1 {
		t.Fatalf("%d batches arrived, want only the store node's", len(got))
	}
}

// A certificate renewed under the server (GetCertificate returns a new
// one) is what new connections see; established ones go on.
func TestTransportServerCertRenewal(t *testing.T) {
	p := newTestPKI(t)
	var cert atomic.Pointer[tls.Certificate]
	cert.Store(p.issue(pki.RoleStore, "n1"))
	r := newReceived()
	_, addr := startTransport(t, &TransportTLS{Server: p.serverTLS(&cert)}, nil, r)
	var seen atomic.Pointer[x509.Certificate]
	client := dialer(&TransportTLS{Client: p.clientTLS(p.issue(pki.RoleStore, "n2"), func(c *x509.Certificate) { seen.Store(c) })})

	old, err := client.GetConnection(t.Context(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	first := seen.Load().SerialNumber
	cert.Store(p.issue(pki.RoleStore, "n1"))
	renewed, err := client.GetConnection(t.Context(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer renewed.Close()
	if got, want := seen.Load().SerialNumber, cert.Load().Leaf.SerialNumber; got.Cmp(want) != 0 || got.Cmp(first) == 0 {
		t.Fatalf("new connection saw certificate %v, want the renewed %v (old %v)", got, want, first)
	}
	for i, c := range []raftio.IConnection{old, renewed} {
		if err := c.SendMessageBatch(testBatch(i, 10)); err != nil {
			t.Fatal(err)
		}
	}
	r.waitBatches(t, 2)
}

// newTestCA makes a CA valid for a day in a new directory, and returns
// them with the time it was made at.
func newTestCA(t *testing.T) (string, *pki.CA, time.Time) {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	ca, err := pki.NewCA("test-cell", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.WriteCA(dir, ca); err != nil {
		t.Fatal(err)
	}
	return dir, ca, now
}

// With cellstore/pki's reloading configurations: a certificate renewed on
// disk is presented to new connections without a restart, and the role
// check refuses a scheduler.
func TestTransportPKIReloadsFromDisk(t *testing.T) {
	dir, ca, now := newTestCA(t)
	issue := func(name, role string, at time.Time) *pki.Source {
		t.Helper()
		l := pki.Leaf{Identity: pki.Identity{Role: role, Name: name}, Hosts: []string{"127.0.0.1"}, Validity: 30 * time.Minute}
		if err := ca.IssueTo(dir, name, l, now); err != nil {
			t.Fatal(err)
		}
		f := pki.DirFiles(dir, name)
		for _, p := range []string{f.Cert, f.Key} { // a change the Source sees, whatever the clock's grain
			if err := os.Chtimes(p, at, at); err != nil {
				t.Fatal(err)
			}
		}
		s, err := pki.NewSource(f, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	stores := pki.AcceptRoles(pki.RoleStore)
	tlsOf := func(s *pki.Source) *TransportTLS {
		return &TransportTLS{Server: s.ServerConfig(stores, false), Client: s.DialConfig(stores)}
	}
	server := issue("store-1", pki.RoleStore, now)
	log, obs := logs()
	r := newReceived()
	_, addr := startTransport(t, tlsOf(server), log, r)
	client := tlsOf(issue("store-2", pki.RoleStore, now))
	var seen atomic.Pointer[x509.Certificate]
	dial := client.Client
	client.Client = func(target string) (*tls.Config, error) {
		c, err := dial(target)
		if err != nil {
			return nil, err
		}
		verify := c.VerifyConnection
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			seen.Store(cs.PeerCertificates[0])
			return verify(cs)
		}
		return c, nil
	}
	conn, err := dialer(client).GetConnection(t.Context(), addr)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	first := seen.Load().SerialNumber
	issue("store-1", pki.RoleStore, now.Add(time.Minute))
	conn, err = dialer(client).GetConnection(t.Context(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got := seen.Load().SerialNumber; got.Cmp(first) == 0 || got.Cmp(server.Leaf().SerialNumber) != 0 {
		t.Fatalf("after renewal on disk the server presented %v, want the renewed %v (old %v)", got, server.Leaf().SerialNumber, first)
	}
	if err := conn.SendMessageBatch(testBatch(0, 10)); err != nil {
		t.Fatal(err)
	}
	r.waitBatches(t, 1)

	if _, err := dialer(tlsOf(issue("sched-1", pki.RoleScheduler, now))).GetConnection(t.Context(), addr); err == nil {
		t.Fatal("a scheduler's certificate was admitted")
	}
	waitLogged(t, obs, zapcore.WarnLevel, "refused a peer", "may not connect here")
}

// rawPeer speaks the framing by hand, in plaintext: it has sent its
// hello and read the ack.
func rawPeer(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(frame(frameHello, nil)); err != nil {
		t.Fatal(err)
	}
	ack := make([]byte, frameHeaderSize)
	if _, err := io.ReadFull(c, ack); err != nil {
		t.Fatal(err)
	}
	if h, err := parseHeader(ack, true); err != nil || h.typ != frameHelloAck {
		t.Fatalf("hello ack: %v %v", h, err)
	}
	return c
}

// frame is a plaintext frame of type t with payload p.
func frame(t frameType, p []byte) []byte {
	b := append(make([]byte, frameHeaderSize), p...)
	putHeader(b, t, true)
	return b
}

// waitClosed waits until the server closes c (a reset if the server
// left bytes unread).
func waitClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var ne net.Error
	if n, err := c.Read(make([]byte, 1)); err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("read after a bad frame: %d bytes, %v; want the connection closed", n, err)
	}
}

// waitLogged waits until one entry logged at level or above says all of
// what, or fails the test after 10s.
func waitLogged(t *testing.T, obs *observer.ObservedLogs, level zapcore.Level, what ...string) {
	t.Helper()
	wait.Until(t.Context(), t, fmt.Sprintf("an entry logged at %v mentioning %q", level, what), func() (bool, string) {
		all := logged(obs, level)
		for _, line := range strings.Split(all, "\n") {
			if !slices.ContainsFunc(what, func(w string) bool { return !strings.Contains(line, w) }) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("logged %q", all)
	})
}

// A frame over its type's size limit, a corrupt payload, a bad magic
// number or an unknown type ends the connection, with an error logged,
// before anything is allocated for or handed to Dragonboat; other
// connections go on.
func TestTransportRefusesBadFrames(t *testing.T) {
	log, obs := logs()
	r := newReceived()
	_, addr := startTransport(t, nil, log, r)
	over := frame(frameBatch, nil)
	setLength(over, maxBatchPayload+1)
	good := testBatch(1, 100)
	payload, err := good.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	corrupt := frame(frameBatch, payload)
	corrupt[len(corrupt)-1] ^= 1
	badMagic := frame(frameBatch, payload)
	badMagic[0] = 0xAE
	unknown := frame(frameType(42), nil)
	bigChunk := frame(frameChunk, nil)
	setLength(bigChunk, maxChunkPayload+1)
	for name, tc := range map[string]struct {
		data []byte
		log  string
	}{
		"batch over the limit": {over, "over the size limit"},
		"chunk over the limit": {bigChunk, "over the size limit"},
		"corrupt payload":      {corrupt, "payload checksum mismatch"},
		"bad magic":            {badMagic, "not a Troupe Raft peer"},
		"unknown type":         {unknown, "unknown frame type 42"},
	} {
		obs.TakeAll()
		c := rawPeer(t, addr)
		if _, err := c.Write(tc.data); err != nil {
			t.Fatal(err)
		}
		waitClosed(t, c)
		if got := logged(obs, zapcore.ErrorLevel); !strings.Contains(got, tc.log) {
			t.Errorf("%s: logged %q, want an error mentioning %q", name, got, tc.log)
		}
	}
	if b, _ := r.counts(); b != 0 {
		t.Fatalf("%d bad batches reached Dragonboat", b)
	}
	c := rawPeer(t, addr)
	if _, err := c.Write(frame(frameBatch, payload)); err != nil {
		t.Fatal(err)
	}
	r.waitBatches(t, 1)

	// The sender checks the limit too, before it writes anything.
	w := &frameWriter{conn: c, plain: true}
	b := testBatch(1, 100)
	if err := w.write(frameBatch, &b, b.SizeUpperLimit(), 64); err == nil || !strings.Contains(err.Error(), "over the size limit") {
		t.Fatalf("sending a batch over the limit: %v", err)
	}
}

// setLength sets a plaintext frame header's length field, and its
// checksum to match.
func setLength(h []byte, n int) {
	binary.BigEndian.PutUint32(h[4:], uint32(n))
	binary.BigEndian.PutUint32(h[12:], crc32.Checksum(h[:12], castagnoli))
}

// A chunk the chunk handler refuses ends the snapshot connection.
func TestTransportRefusedChunkClosesConnection(t *testing.T) {
	log, obs := logs()
	r := newReceived()
	r.refuse = func(c pb.Chunk) bool { return c.ChunkId == 1 }
	_, addr := startTransport(t, nil, log, r)
	sc, err := dialer(nil).GetSnapshotConnection(t.Context(), addr)
	if err != nil {
		t.Fatal(err)
	}
	s := sc.(*snapshotConn)
	defer s.w.conn.Close()
	for _, c := range testChunks(2, 1000) {
		if err := sc.SendChunk(c); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.r.next(time.Now().Add(10 * time.Second)); !errors.Is(err, io.EOF) {
		t.Fatalf("after a refused chunk: %v, want the connection closed", err)
	}
	if got := logged(obs, zapcore.WarnLevel); !strings.Contains(got, "snapshot chunk 1 of shard 1 from replica 1 refused") {
		t.Fatalf("logged %q", got)
	}
	if _, n := r.counts(); n != 2 {
		t.Fatalf("%d chunks handled, want 2", n)
	}
}

// transportGoroutines lists the stacks of goroutines in the transport's
// server code.
func transportGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		if k := runtime.Stack(buf, true); k < len(buf) {
			buf = buf[:k]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "node.(*raftTransport)") {
			out = append(out, g)
		}
	}
	return out
}

// Close stops the listener and every served connection, whatever it is
// doing (idle, in a frame, in a TLS handshake), and returns when their
// goroutines have ended.
func TestTransportCloseEndsGoroutines(t *testing.T) {
	tt := newTestPKI(t).storeTLS("n1")
	r := newReceived()
	tr, addr := startTransport(t, tt, nil, r)
	conn, err := dialer(tt).GetConnection(t.Context(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SendMessageBatch(testBatch(1, 10)); err != nil {
		t.Fatal(err)
	}
	r.waitBatches(t, 1)
	sc, err := dialer(tt).GetSnapshotConnection(t.Context(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.(*snapshotConn).w.conn.Close()
	raw, err := net.Dial("tcp", addr) // never says hello: in the handshake
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	wait.Until(t.Context(), t, "3 connections served", func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return len(tr.conns) == 3
	})
	if len(transportGoroutines()) != 4 {
		t.Fatalf("want 4 transport goroutines (accept, 3 connections):\n%s", strings.Join(transportGoroutines(), "\n\n"))
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	// Close waited for them; one may still be returning.
	wait.Until(t.Context(), t, "the transport goroutines to end", func() bool { return len(transportGoroutines()) == 0 })
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Fatal("the listener accepts after Close")
	}
	if err := conn.SendMessageBatch(testBatch(2, 10)); err == nil {
		// The first write after the peer closed may still succeed.
		if err := conn.SendMessageBatch(testBatch(3, 10)); err == nil {
			t.Fatal("sends go on after the server closed")
		}
	}
}

// A dial gives up when its context ends, as Dragonboat's transport
// cancels it on Close.
func TestTransportDialCanceled(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := dialer(nil).GetConnection(ctx, l.Addr().String())
		done <- err
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("dial after cancel: %v", err)
	}
}

func TestTransportValidate(t *testing.T) {
	f := newTransportFactory(nil, nil)
	for addr, want := range map[string]bool{
		"127.0.0.1:7100": true, "store-1.cell:7100": true, "[::1]:7100": true,
		"127.0.0.1": false, ":7100": false, "127.0.0.1:0": false, "127.0.0.1:65536": false, "127.0.0.1:x": false,
	} {
		if got := f.Validate(addr); got != want {
			t.Errorf("Validate(%q) = %t, want %t", addr, got, want)
		}
	}
}

// A three-node cell whose Raft traffic is mutual TLS with cellstore/pki's
// configurations replicates commits.
func TestNodesOverMutualTLS(t *testing.T) {
	dir, ca, now := newTestCA(t)
	members := map[uint64]string{}
	for id := uint64(1); id <= 3; id++ {
		members[id] = freeAddr(t)
	}
	var nodes []*Node
	var wg sync.WaitGroup
	errs := make([]error, 3)
	nodes = make([]*Node, 3)
	for i := range 3 {
		name := fmt.Sprintf("store-%d", i+1)
		if err := ca.IssueTo(dir, name, pki.Leaf{Identity: pki.Identity{Role: pki.RoleStore, Name: name}, Hosts: []string{"127.0.0.1"}, Validity: time.Hour}, now); err != nil {
			t.Fatal(err)
		}
		src, err := pki.NewSource(pki.DirFiles(dir, name), nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg := testConfig(t, t.TempDir())
		cfg.NodeID, cfg.RaftAddr, cfg.InitialMembers, cfg.Shards = uint64(i+1), members[uint64(i+1)], members, 1
		cfg.TLS = src
		wg.Go(func() { nodes[i], errs[i] = Start(cfg) })
	}
	wg.Wait()
	for i, n := range nodes {
		if n != nil {
			defer n.Close()
		}
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, n := range nodes {
		if err := n.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := ca.IssueTo(dir, "admin", pki.Leaf{Identity: pki.Identity{Role: pki.RoleAdmin, Name: "t"}, Validity: time.Hour}, now); err != nil {
		t.Fatal(err)
	}
	admin, err := pki.NewSource(pki.DirFiles(dir, "admin"), nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(nodes[0].GRPCAddr(), grpc.WithTransportCredentials(pki.StoreCredentials(admin)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := storev1.NewStoreClient(conn).Commit(ctx, &storev1.CommitRequest{TxnId: "t1", Groups: []*storev1.Group{{
		Ops: []*storev1.Op{{Op: &storev1.Op_Put{Put: &storev1.Put{Key: "/machines/m1", Value: []byte("v")}}}},
	}}})
	if err != nil || !resp.GetGroups()[0].GetCommitted() {
		t.Fatalf("commit: %v %v", resp, err)
	}
	rev := resp.GetGroups()[0].GetRevision()
	for _, n := range nodes {
		wait.Until(t.Context(), t, fmt.Sprintf("node %d to apply the commit", n.ID()), func() bool { m := n.StateMachine(0); return m != nil && m.Revision() >= rev })
	}
}

// Message batches of one 1 KiB entry through one connection, as a
// leader's replication stream sends them: the cost per batch, plain
// and over TLS.
func BenchmarkTransportBatches(b *testing.B) {
	for _, secure := range []bool{false, true} {
		b.Run(map[bool]string{false: "plain", true: "tls"}[secure], func(b *testing.B) {
			var tt *TransportTLS
			if secure {
				tt = newTestPKI(b).storeTLS("n1")
			}
			var n atomic.Int64
			all := make(chan struct{})
			want := int64(b.N)
			tr := newTransportFactory(tt, nil).Create(dbconfig.NodeHostConfig{RaftAddress: "127.0.0.1:0"},
				func(pb.MessageBatch) {
					if n.Add(1) == want {
						close(all)
					}
				}, func(pb.Chunk) bool { return true }).(*raftTransport)
			if err := tr.Start(); err != nil {
				b.Fatal(err)
			}
			defer tr.Close()
			conn, err := dialer(tt).GetConnection(context.Background(), tr.lis.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			batch := testBatch(1, 1024)
			b.SetBytes(1024)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := conn.SendMessageBatch(batch); err != nil {
					b.Fatal(err)
				}
			}
			<-all
		})
	}
}
