package faults

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/troupe-cluster/troupe/clientlib"
)

// Never is the return time of an operation whose outcome is unknown: it
// may take effect at any point after its call, or not at all (a
// linearization can always put it last, where nothing observes it).
const Never = int64(math.MaxInt64)

// History records a round's operations: what each client called, when,
// and what came back, with times in nanoseconds since the history began;
// and the faults, for the visualization. It is safe for concurrent use.
type History struct {
	start   time.Time
	mu      sync.Mutex
	ops     []porcupine.Operation
	faults  []porcupine.Annotation
	clients int // client ids handed out
	values  atomic.Uint64
}

// NewHistory returns an empty history that starts now.
func NewHistory() *History { return &History{start: time.Now()} }

// now is the time since the history began (monotonic).
func (h *History) now() int64 { return int64(time.Since(h.start)) }

// newClientID hands out a client id.
func (h *History) newClientID() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clients++
	return h.clients - 1
}

// NewClient returns a client that calls s and records here.
func (h *History) NewClient(s clientlib.Store, rng *rand.Rand) *Client {
	return &Client{Store: s, Rand: rng, h: h, id: h.newClientID()}
}

// Fault records a fault that lasted from start (a time from now) until
// now.
func (h *History) Fault(start int64, what string) {
	end := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults = append(h.faults, porcupine.Annotation{Tag: "faults", Start: start, End: end, Description: what,
		BackgroundColor: "#ffd7d7"})
}

// Operations returns the operations recorded so far.
func (h *History) Operations() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]porcupine.Operation(nil), h.ops...)
}

// Faults returns the faults recorded so far.
func (h *History) Faults() []porcupine.Annotation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]porcupine.Annotation(nil), h.faults...)
}

func (h *History) add(op porcupine.Operation) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, op)
}

// A Client is one client of a round as a workload sees it: the store to
// call, its own random numbers, and where its operations are recorded. A
// Client is used by one goroutine.
type Client struct {
	Store clientlib.Store
	Rand  *rand.Rand
	h     *History
	id    int
}

// Unique returns a value no other call of its history returns.
func (c *Client) Unique() string {
	return strconv.FormatUint(c.h.values.Add(1), 10)
}

// Call records that the client calls input now. Exactly one of the
// Call's methods must follow.
func (c *Client) Call(input any) *Call {
	return &Call{c: c, input: input, call: c.h.now()}
}

// A Call is an operation under way.
type Call struct {
	c     *Client
	input any
	call  int64
}

// Return records that the call returned output now.
func (o *Call) Return(output any) {
	o.c.h.add(porcupine.Operation{ClientId: o.c.id, Input: o.input, Call: o.call, Output: output, Return: o.c.h.now()})
}

// Ambiguous records that the call ended without telling its outcome (a
// commit that timed out or lost its node): output must let the model
// accept both. The operation stays open (returns Never), so the client
// goes on under a new id, as a client that never got its answer cannot
// call again.
func (o *Call) Ambiguous(output any) {
	o.c.h.add(porcupine.Operation{ClientId: o.c.id, Input: o.input, Call: o.call, Output: output, Return: Never})
	o.c.id = o.c.h.newClientID()
}

// Discard forgets the call: one that failed and can have had no effect,
// such as a read.
func (o *Call) Discard() {}

// historyLine is one line of a history file: an operation or a fault.
type historyLine struct {
	Client *int   `json:"client,omitempty"` // absent for a fault
	Call   int64  `json:"call"`
	Return *int64 `json:"return,omitempty"` // absent: never returned (ambiguous)
	Input  any    `json:"input,omitempty"`
	Output any    `json:"output,omitempty"`
	Fault  string `json:"fault,omitempty"`
}

// writeHistory writes ops and faults to path, one JSON object a line in
// order of call (a fault's start), times in nanoseconds.
func writeHistory(path string, ops []porcupine.Operation, faults []porcupine.Annotation) error {
	var lines []historyLine
	for _, op := range ops {
		line := historyLine{Client: &op.ClientId, Call: op.Call, Input: op.Input, Output: op.Output}
		if op.Return != Never {
			line.Return = &op.Return
		}
		lines = append(lines, line)
	}
	for _, f := range faults {
		lines = append(lines, historyLine{Call: f.Start, Return: &f.End, Fault: f.Description})
	}
	slices.SortStableFunc(lines, func(a, b historyLine) int { return cmp.Compare(a.Call, b.Call) })
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, line := range lines {
		if err := enc.Encode(line); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// WriteHistory writes ops and faults into dir for people to study:
// <name>.history.jsonl (see writeHistory) and <name>.html, porcupine's
// visualization of the longest linearizations it found (within timeout)
// with the faults drawn along them. It returns the files' paths.
func WriteHistory(dir, name string, model porcupine.Model, ops []porcupine.Operation, faults []porcupine.Annotation, timeout time.Duration) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("faults: %w", err)
	}
	hist := filepath.Join(dir, name+".history.jsonl")
	if err := writeHistory(hist, ops, faults); err != nil {
		return nil, fmt.Errorf("faults: write history: %w", err)
	}
	_, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	info.AddAnnotations(faults)
	html := filepath.Join(dir, name+".html")
	if err := porcupine.VisualizePath(model, info, html); err != nil {
		return []string{hist}, fmt.Errorf("faults: write visualization: %w", err)
	}
	return []string{hist, html}, nil
}
