package node

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	dbconfig "github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
	"go.uber.org/zap"
)

// The Raft transport carries Dragonboat's messages between store nodes
// over TCP, plain or mutual TLS 1.3. Dragonboat's own TCP transport
// loads its TLS certificate once and admits any certificate its CA
// signed; this one takes tls.Configs whose callbacks reload certificates
// and check the peer's role, per handshake (TransportTLS). Dragonboat's
// layer above (internal/transport) keeps a queue, a connection and a
// circuit breaker per target; it sends message batches on one connection
// per target and each snapshot on a connection of its own.
//
// A connection carries frames, each a 16-byte header and a payload:
//
//	magic "TR" | version | type | payload length | payload CRC | header CRC
//	  2 bytes    1 byte   1 byte   4 bytes (BE)     4 bytes       4 bytes
//
// The CRCs (CRC-32C) are computed and checked in plaintext only: TLS has
// integrity of its own. The dialer sends a hello and waits for its ack
// before it hands the connection over, so a refused certificate fails
// the dial, not some later send. Then the dialer sends message batches
// (raftpb.MessageBatch) or snapshot chunks (raftpb.Chunk), and a snapshot
// connection ends with a close frame the server acknowledges after it
// has handled every chunk before it. A payload beyond its type's limit,
// a bad header or checksum, or a chunk the chunk handler refuses ends
// the connection.

// TransportTLS secures Raft traffic; nil fields mean plain TCP.
type TransportTLS struct {
	// Server is for the listener: it must request and verify client
	// certificates itself (ClientAuth, or GetConfigForClient and
	// VerifyConnection callbacks), which is where a certificate renewed
	// on disk and the peer's role are checked. The transport insists on
	// TLS 1.3 and a client certificate, and turns session tickets off
	// (a config from GetConfigForClient should too): every connection
	// makes a full handshake, checked against the files as they are.
	Server *tls.Config
	// Client returns the configuration of one dial to the peer at target
	// (host:port). Each connection makes a full handshake.
	Client func(target string) (*tls.Config, error)
}

type frameType uint8

const (
	frameHello    frameType = 1 + iota // dialer: first frame
	frameHelloAck                      // listener: the dialer is admitted
	frameBatch                         // a raftpb.MessageBatch
	frameChunk                         // a raftpb.Chunk
	frameClose                         // dialer: a snapshot connection ends
	frameCloseAck                      // listener: every frame before the close is handled
)

func (t frameType) String() string {
	switch t {
	case frameHello:
		return "hello"
	case frameHelloAck:
		return "hello ack"
	case frameBatch:
		return "message batch"
	case frameChunk:
		return "snapshot chunk"
	case frameClose:
		return "close"
	case frameCloseAck:
		return "close ack"
	}
	return "frame type " + strconv.Itoa(int(t))
}

const (
	frameMagic      = 0x5452 // "TR"
	frameVersion    = 1
	frameHeaderSize = 16

	// Payload limits, so that a peer cannot make us allocate more. A
	// batch holds at most Dragonboat's MaxMessageBatchSize (64 MiB,
	// settings.LargeEntitySize) of messages, or one message whose
	// entries are at most that (settings.Soft.MaxEntrySize): room is
	// left for the batch's and the message's own fields. A chunk holds
	// at most settings.SnapshotChunkSize (2 MiB) of data and its
	// metadata (the snapshot's membership, file names).
	maxBatchPayload = 64<<20 + 1<<20
	maxChunkPayload = 2<<20 + 1<<20

	// Timeouts, as Dragonboat's TCP transport has them.
	dialTimeout      = 5 * time.Second  // settings.Soft.GetConnectedTimeoutSecond
	handshakeTimeout = 10 * time.Second // TLS handshake and hello
	headerTimeout    = 2 * time.Second  // a header, once its first byte came
	ioTimeout        = 5 * time.Second  // per ioBlock of a payload
	ioBlock          = 2 << 20
	closeAckTimeout  = 10 * time.Second
	keepAlivePeriod  = 10 * time.Second

	readBufferSize = 64 << 10 // a listener's; a dialer only reads acks
	ackBufferSize  = 64
	// keepBufferSize: a connection keeps a frame buffer up to this size
	// for its next frame (one chunk's); a larger one is dropped.
	keepBufferSize = frameHeaderSize + maxChunkPayload
)

var (
	castagnoli  = crc32.MakeTable(crc32.Castagnoli)
	errBadFrame = errors.New("bad frame")
)

// maxPayload is the payload limit of frames of type t.
func maxPayload(t frameType) int {
	switch t {
	case frameBatch:
		return maxBatchPayload
	case frameChunk:
		return maxChunkPayload
	}
	return 0
}

// frameHeader is a decoded header.
type frameHeader struct {
	typ    frameType
	length int
	crc    uint32
}

// putHeader writes the header of a frame of type t into buf[:16], whose
// payload is buf[16:]; the checksums only if plain.
func putHeader(buf []byte, t frameType, plain bool) {
	payload := buf[frameHeaderSize:]
	binary.BigEndian.PutUint16(buf[0:], frameMagic)
	buf[2] = frameVersion
	buf[3] = byte(t)
	binary.BigEndian.PutUint32(buf[4:], uint32(len(payload)))
	var pcrc, hcrc uint32
	if plain {
		pcrc = crc32.Checksum(payload, castagnoli)
	}
	binary.BigEndian.PutUint32(buf[8:], pcrc)
	if plain {
		hcrc = crc32.Checksum(buf[:12], castagnoli)
	}
	binary.BigEndian.PutUint32(buf[12:], hcrc)
}

// parseHeader decodes and checks a header: magic, version, a known type,
// the header checksum if plain, and the length against the type's limit.
func parseHeader(b []byte, plain bool) (frameHeader, error) {
	if m := binary.BigEndian.Uint16(b[0:]); m != frameMagic {
		return frameHeader{}, fmt.Errorf("%w: magic %#04x, not a Troupe Raft peer", errBadFrame, m)
	}
	if b[2] != frameVersion {
		return frameHeader{}, fmt.Errorf("%w: version %d, this node speaks %d", errBadFrame, b[2], frameVersion)
	}
	if plain && crc32.Checksum(b[:12], castagnoli) != binary.BigEndian.Uint32(b[12:]) {
		return frameHeader{}, fmt.Errorf("%w: header checksum mismatch", errBadFrame)
	}
	h := frameHeader{typ: frameType(b[3]), length: int(binary.BigEndian.Uint32(b[4:])), crc: binary.BigEndian.Uint32(b[8:])}
	if h.typ < frameHello || h.typ > frameCloseAck {
		return frameHeader{}, fmt.Errorf("%w: unknown %v", errBadFrame, h.typ)
	}
	if limit := maxPayload(h.typ); h.length > limit {
		return frameHeader{}, fmt.Errorf("%w: %v of %d bytes is over the size limit of %d", errBadFrame, h.typ, h.length, limit)
	}
	return h, nil
}

// ioDeadline is the deadline of moving n bytes: ioTimeout per started
// ioBlock.
func ioDeadline(n int) time.Time {
	return time.Now().Add(ioTimeout * time.Duration(1+n/ioBlock))
}

// frameWriter writes the frames of one connection, each with one Write
// from a buffer kept for the next (so a batch costs one system call, or
// one TLS record per 16 KiB). It is for one goroutine.
type frameWriter struct {
	conn  net.Conn
	plain bool
	buf   []byte
}

// write marshals m (at most size bytes, at most limit) into a frame of
// type t and writes it.
func (w *frameWriter) write(t frameType, m interface{ MarshalTo([]byte) (int, error) }, size, limit int) error {
	need := frameHeaderSize + size
	buf := w.buf
	if cap(buf) < need {
		buf = make([]byte, need)
	}
	buf = buf[:need]
	n := 0
	if m != nil {
		var err error
		if n, err = m.MarshalTo(buf[frameHeaderSize:]); err != nil {
			return fmt.Errorf("marshal %v: %w", t, err)
		}
	}
	if n > limit {
		return fmt.Errorf("%v of %d bytes is over the size limit of %d", t, n, limit)
	}
	buf = buf[:frameHeaderSize+n]
	putHeader(buf, t, w.plain)
	if cap(buf) <= keepBufferSize {
		w.buf = buf[:0]
	}
	if err := w.conn.SetWriteDeadline(ioDeadline(n)); err != nil {
		return err
	}
	_, err := w.conn.Write(buf)
	return err
}

// writeEmpty writes a frame without payload.
func (w *frameWriter) writeEmpty(t frameType) error { return w.write(t, nil, 0, 0) }

// frameReader reads the frames of one connection. It sets a read
// deadline only before a read that may block: the caller's while waiting
// for a frame, headerTimeout for the rest of a header, ioDeadline for a
// payload. It is for one goroutine.
type frameReader struct {
	conn        net.Conn
	r           *bufio.Reader
	plain       bool
	hdr         [frameHeaderSize]byte
	buf         []byte
	deadlineSet bool
}

func newFrameReader(conn net.Conn, plain bool, size int) *frameReader {
	return &frameReader{conn: conn, r: bufio.NewReaderSize(conn, size), plain: plain}
}

func (r *frameReader) setDeadline(t time.Time) error {
	r.deadlineSet = !t.IsZero()
	return r.conn.SetReadDeadline(t)
}

// next reads the next frame, waiting for it until wait (zero: as long as
// it takes). Its payload is valid until the next call.
func (r *frameReader) next(wait time.Time) (frameHeader, []byte, error) {
	if r.r.Buffered() == 0 {
		if r.deadlineSet || !wait.IsZero() {
			if err := r.setDeadline(wait); err != nil {
				return frameHeader{}, nil, err
			}
		}
		if _, err := r.r.Peek(1); err != nil {
			return frameHeader{}, nil, err
		}
	}
	if r.r.Buffered() < frameHeaderSize {
		if err := r.setDeadline(time.Now().Add(headerTimeout)); err != nil {
			return frameHeader{}, nil, err
		}
	}
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		return frameHeader{}, nil, err
	}
	h, err := parseHeader(r.hdr[:], r.plain)
	if err != nil {
		return frameHeader{}, nil, err
	}
	if r.r.Buffered() < h.length {
		if err := r.setDeadline(ioDeadline(h.length)); err != nil {
			return frameHeader{}, nil, err
		}
	}
	buf := r.buf
	if cap(buf) < h.length {
		buf = make([]byte, h.length)
		if h.length <= keepBufferSize {
			r.buf = buf
		}
	}
	buf = buf[:h.length]
	if _, err := io.ReadFull(r.r, buf); err != nil {
		return frameHeader{}, nil, err
	}
	if r.plain && crc32.Checksum(buf, castagnoli) != h.crc {
		return frameHeader{}, nil, fmt.Errorf("%w: %v payload checksum mismatch", errBadFrame, h.typ)
	}
	return h, buf, nil
}

// expect reads the next frame, waiting until wait, and fails unless it
// is an empty one of type t.
func (r *frameReader) expect(t frameType, wait time.Time) error {
	h, _, err := r.next(wait)
	if err != nil {
		return err
	}
	if h.typ != t || h.length != 0 {
		return fmt.Errorf("%w: got %v of %d bytes, want %v", errBadFrame, h.typ, h.length, t)
	}
	return nil
}

// transportFactory makes the Raft transport of a NodeHost.
type transportFactory struct {
	tls *TransportTLS
	log *zap.Logger
}

var _ dbconfig.TransportFactory = (*transportFactory)(nil)

// newTransportFactory returns the factory of Troupe's Raft transport:
// mutual TLS with t's configurations, plain TCP where they are nil.
func newTransportFactory(t *TransportTLS, log *zap.Logger) dbconfig.TransportFactory {
	if t == nil {
		t = &TransportTLS{}
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &transportFactory{tls: t, log: log}
}

// Create implements config.TransportFactory.
func (f *transportFactory) Create(nhc dbconfig.NodeHostConfig, mh raftio.MessageHandler, ch raftio.ChunkHandler) raftio.ITransport {
	t := &raftTransport{
		addr:      nhc.GetListenAddress(),
		tls:       f.tls,
		log:       f.log.With(zap.String("raft", nhc.RaftAddress)),
		onBatch:   mh,
		onChunk:   ch,
		conns:     map[net.Conn]struct{}{},
		done:      make(chan struct{}),
		serverTLS: f.tls.Server,
	}
	if t.serverTLS != nil {
		t.serverTLS = t.serverTLS.Clone()
		t.serverTLS.MinVersion = tls.VersionTLS13
		t.serverTLS.SessionTicketsDisabled = true
	}
	return t
}

// Validate implements config.TransportFactory: addresses are host:port.
func (f *transportFactory) Validate(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	p, err := strconv.Atoi(port)
	return err == nil && p > 0 && p <= 65535
}

// raftTransport implements raftio.ITransport. Dragonboat calls Start
// once, then GetConnection and GetSnapshotConnection from any goroutine,
// then Close once; each connection it gets is used by one goroutine.
type raftTransport struct {
	addr      string
	tls       *TransportTLS
	serverTLS *tls.Config // nil: plain
	log       *zap.Logger
	onBatch   raftio.MessageHandler
	onChunk   raftio.ChunkHandler

	lis  net.Listener
	done chan struct{} // closed by Close
	wg   sync.WaitGroup
	mu   sync.Mutex
	// conns: the served connections, closed by Close; nil once closed.
	conns map[net.Conn]struct{}
}

var _ raftio.ITransport = (*raftTransport)(nil)

// Name implements raftio.ITransport.
func (t *raftTransport) Name() string {
	if t.serverTLS != nil {
		return "troupe-mtls"
	}
	return "troupe-tcp"
}

// Start implements raftio.ITransport: it listens on the NodeHost's
// listen address and serves peers' connections.
func (t *raftTransport) Start() error {
	lc := net.ListenConfig{KeepAlive: keepAlivePeriod}
	lis, err := lc.Listen(context.Background(), "tcp", t.addr)
	if err != nil {
		return fmt.Errorf("raft transport: %w", err)
	}
	t.lis = lis
	t.wg.Add(1)
	go t.accept()
	return nil
}

// Close implements raftio.ITransport: it stops the listener and every
// served connection, and returns once their goroutines have ended.
// Connections this node dialed belong to Dragonboat, which closes them.
func (t *raftTransport) Close() error {
	t.mu.Lock()
	conns := t.conns
	t.conns = nil
	t.mu.Unlock()
	if conns == nil {
		return nil
	}
	close(t.done)
	if t.lis != nil {
		t.lis.Close()
	}
	for c := range conns {
		c.Close()
	}
	t.wg.Wait()
	return nil
}

func (t *raftTransport) accept() {
	defer t.wg.Done()
	var delay time.Duration
	for {
		c, err := t.lis.Accept()
		if err != nil {
			select {
			case <-t.done:
				return
			default:
			}
			// Out of file descriptors, say: try again a little later,
			// as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			t.log.Warn("raft transport: accept failed", zap.Error(err), zap.Duration("retry_in", delay))
			select {
			case <-t.done:
				return
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		t.mu.Lock()
		if t.conns == nil {
			t.mu.Unlock()
			c.Close()
			return
		}
		t.conns[c] = struct{}{}
		t.wg.Add(1)
		t.mu.Unlock()
		go t.serve(c)
	}
}

// serve serves one peer's connection until it ends, fails or the
// transport closes.
func (t *raftTransport) serve(raw net.Conn) {
	defer t.wg.Done()
	defer func() {
		t.mu.Lock()
		if t.conns != nil {
			delete(t.conns, raw)
		}
		t.mu.Unlock()
	}()
	log := t.log.With(zap.Stringer("peer", raw.RemoteAddr()))
	conn, r, w, err := t.handshake(raw)
	if err != nil {
		select {
		case <-t.done:
		default:
			if errors.Is(err, io.EOF) { // a port probe, say
				log.Debug("raft transport: connection closed in the handshake", zap.Error(err))
			} else {
				log.Warn("raft transport: refused a peer", zap.Error(err))
			}
		}
		raw.Close()
		return
	}
	defer conn.Close()
	if tc, ok := conn.(*tls.Conn); ok {
		log = log.With(zap.String("identity", certIdentity(tc.ConnectionState())))
	}
	err = t.serveFrames(r, w)
	select {
	case <-t.done:
		return
	default:
	}
	switch {
	case err == nil || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed):
		log.Debug("raft transport: connection ended", zap.Error(err))
	case errors.Is(err, errBadFrame):
		log.Error("raft transport: closing a connection", zap.Error(err))
	default:
		log.Warn("raft transport: closing a connection", zap.Error(err))
	}
}

// handshake makes the TLS handshake, if any, and answers the dialer's
// hello, within handshakeTimeout.
func (t *raftTransport) handshake(raw net.Conn) (net.Conn, *frameReader, *frameWriter, error) {
	deadline := time.Now().Add(handshakeTimeout)
	if err := raw.SetDeadline(deadline); err != nil {
		return nil, nil, nil, err
	}
	conn := raw
	if t.serverTLS != nil {
		tc := tls.Server(raw, t.serverTLS)
		if err := tc.Handshake(); err != nil {
			return nil, nil, nil, fmt.Errorf("TLS handshake: %w", err)
		}
		st := tc.ConnectionState()
		if st.Version != tls.VersionTLS13 || len(st.PeerCertificates) == 0 {
			return nil, nil, nil, fmt.Errorf("TLS version %s with %d client certificates; need TLS 1.3 and one",
				tls.VersionName(st.Version), len(st.PeerCertificates))
		}
		conn = tc
	}
	r := newFrameReader(conn, t.serverTLS == nil, readBufferSize)
	if err := r.expect(frameHello, deadline); err != nil {
		return nil, nil, nil, fmt.Errorf("hello: %w", err)
	}
	w := &frameWriter{conn: conn, plain: t.serverTLS == nil}
	if err := w.writeEmpty(frameHelloAck); err != nil {
		return nil, nil, nil, fmt.Errorf("hello ack: %w", err)
	}
	return conn, r, w, r.setDeadline(time.Time{})
}

// serveFrames hands the frames that come on a connection to Dragonboat
// until the connection ends or a frame is bad.
func (t *raftTransport) serveFrames(r *frameReader, w *frameWriter) error {
	for {
		h, payload, err := r.next(time.Time{})
		if err != nil {
			return err
		}
		switch h.typ {
		case frameBatch:
			var b pb.MessageBatch
			if err := b.Unmarshal(payload); err != nil {
				return fmt.Errorf("%w: message batch: %v", errBadFrame, err)
			}
			t.onBatch(b)
		case frameChunk:
			var c pb.Chunk
			if err := c.Unmarshal(payload); err != nil {
				return fmt.Errorf("%w: snapshot chunk: %v", errBadFrame, err)
			}
			if !t.onChunk(c) {
				return fmt.Errorf("snapshot chunk %d of shard %d from replica %d refused", c.ChunkId, c.ShardID, c.From)
			}
		case frameClose:
			return w.writeEmpty(frameCloseAck)
		default:
			return fmt.Errorf("%w: unexpected %v", errBadFrame, h.typ)
		}
	}
}

// certIdentity names the peer a TLS connection's client certificate
// speaks for: its URI SAN (spiffe://troupe.cell/<role>/<name>), or its
// subject.
func certIdentity(st tls.ConnectionState) string {
	if len(st.PeerCertificates) == 0 {
		return ""
	}
	c := st.PeerCertificates[0]
	if len(c.URIs) > 0 {
		return c.URIs[0].String()
	}
	return c.Subject.String()
}

// GetConnection implements raftio.ITransport.
func (t *raftTransport) GetConnection(ctx context.Context, target string) (raftio.IConnection, error) {
	w, _, err := t.dial(ctx, target)
	if err != nil {
		return nil, err
	}
	return &messageConn{w: w}, nil
}

// GetSnapshotConnection implements raftio.ITransport.
func (t *raftTransport) GetSnapshotConnection(ctx context.Context, target string) (raftio.ISnapshotConnection, error) {
	w, r, err := t.dial(ctx, target)
	if err != nil {
		return nil, err
	}
	return &snapshotConn{w: w, r: r}, nil
}

// dial connects to target and exchanges hellos, within dialTimeout and
// handshakeTimeout, or until ctx ends.
func (t *raftTransport) dial(ctx context.Context, target string) (*frameWriter, *frameReader, error) {
	d := net.Dialer{Timeout: dialTimeout, KeepAlive: keepAlivePeriod}
	raw, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		return nil, nil, err
	}
	stop := context.AfterFunc(ctx, func() { raw.Close() })
	r, w, err := t.clientHandshake(raw, target)
	if !stop() {
		err = errors.Join(err, ctx.Err())
	}
	if err == nil {
		err = r.setDeadline(time.Time{})
	}
	if err != nil {
		raw.Close()
		return nil, nil, fmt.Errorf("raft transport: %s: %w", target, err)
	}
	return w, r, nil
}

func (t *raftTransport) clientHandshake(raw net.Conn, target string) (*frameReader, *frameWriter, error) {
	deadline := time.Now().Add(handshakeTimeout)
	if err := raw.SetDeadline(deadline); err != nil {
		return nil, nil, err
	}
	if tc, ok := raw.(*net.TCPConn); ok {
		if err := tc.SetNoDelay(true); err != nil {
			return nil, nil, err
		}
	}
	conn := raw
	plain := t.tls.Client == nil
	if !plain {
		cfg, err := t.tls.Client(target)
		if err != nil {
			return nil, nil, fmt.Errorf("TLS configuration: %w", err)
		}
		cfg = cfg.Clone()
		cfg.MinVersion = tls.VersionTLS13
		cfg.ClientSessionCache = nil // a full handshake every time
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(target)
		}
		tc := tls.Client(raw, cfg)
		if err := tc.Handshake(); err != nil {
			return nil, nil, fmt.Errorf("TLS handshake: %w", err)
		}
		conn = tc
	}
	w := &frameWriter{conn: conn, plain: plain}
	if err := w.writeEmpty(frameHello); err != nil {
		return nil, nil, fmt.Errorf("hello: %w", err)
	}
	// In TLS 1.3 the server checks our certificate after our side of the
	// handshake ended: a refusal comes as an alert here.
	r := newFrameReader(conn, plain, ackBufferSize)
	if err := r.expect(frameHelloAck, deadline); err != nil {
		return nil, nil, fmt.Errorf("hello ack: %w", err)
	}
	return r, w, nil
}

// messageConn implements raftio.IConnection.
type messageConn struct{ w *frameWriter }

var _ raftio.IConnection = (*messageConn)(nil)

// SendMessageBatch implements raftio.IConnection.
func (c *messageConn) SendMessageBatch(b pb.MessageBatch) error {
	return c.w.write(frameBatch, &b, b.SizeUpperLimit(), maxBatchPayload)
}

// Close implements raftio.IConnection.
func (c *messageConn) Close() { c.w.conn.Close() }

// snapshotConn implements raftio.ISnapshotConnection.
type snapshotConn struct {
	w *frameWriter
	r *frameReader
}

var _ raftio.ISnapshotConnection = (*snapshotConn)(nil)

// SendChunk implements raftio.ISnapshotConnection.
func (c *snapshotConn) SendChunk(ch pb.Chunk) error {
	return c.w.write(frameChunk, &ch, ch.Size(), maxChunkPayload)
}

// Close implements raftio.ISnapshotConnection: it sends a close frame and
// waits, up to closeAckTimeout, until the peer has handled every chunk
// before it.
func (c *snapshotConn) Close() {
	defer c.w.conn.Close()
	if err := c.w.writeEmpty(frameClose); err != nil {
		return
	}
	_ = c.r.expect(frameCloseAck, time.Now().Add(closeAckTimeout))
}
