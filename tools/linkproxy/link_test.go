package linkproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// script is a src for a delay line: each Read returns the next chunk and
// sets the fake clock to the chunk's read time; after the last, io.EOF.
type script struct {
	chunks []scripted
	now    time.Time
	reads  chan int // each Read's index, if set
}

type scripted struct {
	data  string
	at    time.Duration // read time, from the clock's zero
	delay time.Duration // the link's delay then
}

var epoch = time.Unix(1_000_000, 0)

func (s *script) Read(p []byte) (int, error) {
	if len(s.chunks) == 0 {
		return 0, io.EOF
	}
	c := s.chunks[0]
	s.chunks = s.chunks[1:]
	s.now = epoch.Add(c.at)
	if s.reads != nil {
		s.reads <- len(s.chunks)
	}
	return copy(p, c.data), nil
}

// recorder is a dst that notes, for each write, the due time the delay
// line waited for before it.
type recorder struct {
	mu      sync.Mutex
	lastDue time.Time
	writes  []written
	fail    bool
}

type written struct {
	data string
	due  time.Duration // since epoch
}

func (r *recorder) wait(until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastDue = until
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail {
		return 0, errors.New("broken")
	}
	r.writes = append(r.writes, written{data: string(p), due: r.lastDue.Sub(epoch)})
	return len(p), nil
}

// lineFor makes a delay line reading src's script, waiting through rec.
func lineFor(src *script, rec *recorder, wait func(time.Time)) delayLine {
	i := 0
	delays := make([]time.Duration, len(src.chunks))
	for j, c := range src.chunks {
		delays[j] = c.delay
	}
	return delayLine{
		now: func() time.Time { return src.now },
		// delay is asked once per chunk, after its Read.
		delay: func() time.Duration { d := delays[i]; i++; return d },
		wait:  wait,
		queue: 16,
	}
}

func TestDelayLineHoldsEachChunkForTheDelayInOrder(t *testing.T) {
	src := &script{chunks: []scripted{
		{"a", 0, 10 * time.Millisecond},
		{"b", 1 * time.Millisecond, 10 * time.Millisecond},
		{"c", 3 * time.Millisecond, 2 * time.Millisecond},  // the delay shrank: c must not pass b
		{"d", 20 * time.Millisecond, 2 * time.Millisecond}, // after b left: its own delay
		{"e", 21 * time.Millisecond, 0},
	}}
	rec := &recorder{}
	lineFor(src, rec, rec.wait).run(rec, src, func() {})
	want := []written{
		{"a", 10 * time.Millisecond},
		{"b", 11 * time.Millisecond},
		{"c", 11 * time.Millisecond},
		{"d", 22 * time.Millisecond},
		{"e", 22 * time.Millisecond},
	}
	if len(rec.writes) != len(want) {
		t.Fatalf("wrote %v, want %v", rec.writes, want)
	}
	for i := range want {
		if rec.writes[i] != want[i] {
			t.Errorf("write %d: %+v, want %+v", i, rec.writes[i], want[i])
		}
	}
}

// While the first chunk waits out its delay, the line goes on reading:
// a delay adds latency, it does not serialise the link's throughput.
func TestDelayLineReadsWhileChunksWait(t *testing.T) {
	const n = 5
	src := &script{reads: make(chan int, n)}
	for i := range n {
		src.chunks = append(src.chunks, scripted{data: string(rune('a' + i)), delay: time.Hour})
	}
	rec := &recorder{}
	waiting, release := make(chan struct{}, n), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		lineFor(src, rec, func(until time.Time) {
			rec.wait(until)
			waiting <- struct{}{}
			<-release
		}).run(rec, src, func() {})
	}()
	<-waiting // the first chunk is held
	for range n {
		<-src.reads // every chunk is read meanwhile
	}
	rec.mu.Lock()
	held := len(rec.writes)
	rec.mu.Unlock()
	if held != 0 {
		t.Fatalf("%d chunks written before their delay passed", held)
	}
	close(release)
	<-done
	var got bytes.Buffer
	for _, w := range rec.writes {
		got.WriteString(w.data)
	}
	if got.String() != "abcde" {
		t.Errorf("wrote %q, want %q", got.String(), "abcde")
	}
}

// A write that fails stops the reading side, and run returns.
func TestDelayLineStopsOnWriteError(t *testing.T) {
	pr, pw := io.Pipe()
	rec := &recorder{fail: true}
	line := delayLine{delay: func() time.Duration { return 0 }, now: time.Now, wait: rec.wait, queue: 4}
	done := make(chan struct{})
	go func() {
		defer close(done)
		line.run(rec, pr, func() { pr.CloseWithError(errors.New("stopped")) })
	}()
	if _, err := pw.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	<-done // run returned: the failed write closed its source
	if _, err := pw.Write([]byte("y")); err == nil {
		t.Error("the source is still read after a write failed")
	}
}

// Through a real link on loopback, a round trip takes at least twice the
// delay (a lower bound only: the machine may add any amount).
func TestForwardDelaysEachDirection(t *testing.T) {
	const delay = 20 * time.Millisecond
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	l, err := Forward("test", "127.0.0.1:0", echo.Addr().String(), delay)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	for _, msg := range []string{"first", "second"} {
		start := time.Now()
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
		if string(buf) != msg {
			t.Fatalf("read %q, want %q", buf, msg)
		}
		if took := time.Since(start); took < 2*delay {
			t.Errorf("a round trip took %v, want at least %v (delayed each way)", took, 2*delay)
		}
	}
	if n := l.Open(); n != 2 {
		t.Errorf("%d open connections, want 2 (both sides of one)", n)
	}
}
