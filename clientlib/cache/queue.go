package cache

import (
	"container/heap"
	"context"
	"math"
	"sync"
	"time"
)

// Clock is the time source of a WorkQueue (injected in tests).
type Clock interface {
	Now() time.Time
	// After behaves as time.After.
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// RealClock is the wall clock.
var RealClock Clock = realClock{}

// QueueConfig configures a WorkQueue's per-item backoff.
type QueueConfig struct {
	BaseDelay, MaxDelay time.Duration
	Clock               Clock
}

// DefaultQueueConfig backs off from 5 ms to 30 s.
func DefaultQueueConfig() QueueConfig {
	return QueueConfig{BaseDelay: 5 * time.Millisecond, MaxDelay: 30 * time.Second, Clock: RealClock}
}

// WorkQueue is a deduplicating queue of keys for controllers, as in
// client-go: a key added several times before a worker takes it is
// processed once; a key being processed is not handed to a second worker,
// and if it is added meanwhile it is queued again when Done is called.
// AddRateLimited re-adds a key after a per-key exponential backoff, until
// Forget. Safe for concurrent use.
type WorkQueue struct {
	cfg  QueueConfig
	mu   sync.Mutex
	cond *sync.Cond

	queue      []string
	dirty      map[string]bool // queued or to be re-queued after Done
	processing map[string]bool
	failures   map[string]int
	waiting    delayHeap
	wake       chan struct{} // nudges the delay loop when waiting changes
	shutdown   bool
}

// NewWorkQueue starts a queue; ShutDown stops it.
func NewWorkQueue(cfg QueueConfig) *WorkQueue {
	if cfg.Clock == nil {
		cfg.Clock = RealClock
	}
	q := &WorkQueue{cfg: cfg, dirty: map[string]bool{}, processing: map[string]bool{}, failures: map[string]int{}, wake: make(chan struct{}, 1)}
	q.cond = sync.NewCond(&q.mu)
	go q.delayLoop()
	return q
}

// Add queues key unless it is already queued.
func (q *WorkQueue) Add(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.add(key)
}

func (q *WorkQueue) add(key string) {
	if q.shutdown || q.dirty[key] {
		return
	}
	q.dirty[key] = true
	if q.processing[key] {
		return // Done queues it again
	}
	q.queue = append(q.queue, key)
	q.cond.Signal()
}

// AddAfter queues key after d.
func (q *WorkQueue) AddAfter(key string, d time.Duration) {
	if d <= 0 {
		q.Add(key)
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown {
		return
	}
	heap.Push(&q.waiting, delayed{key: key, at: q.cfg.Clock.Now().Add(d)})
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// AddRateLimited queues key after its backoff: BaseDelay * 2^failures,
// capped at MaxDelay.
func (q *WorkQueue) AddRateLimited(key string) {
	q.mu.Lock()
	n := q.failures[key]
	q.failures[key] = n + 1
	q.mu.Unlock()
	d := time.Duration(float64(q.cfg.BaseDelay) * math.Pow(2, float64(n)))
	if d > q.cfg.MaxDelay || d <= 0 {
		d = q.cfg.MaxDelay
	}
	q.AddAfter(key, d)
}

// Forget resets key's backoff (call it when key was processed
// successfully).
func (q *WorkQueue) Forget(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.failures, key)
}

// Failures is how many times key was rate-limited since it was last
// forgotten.
func (q *WorkQueue) Failures(key string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.failures[key]
}

// Get blocks until a key is available and marks it processing; shutdown
// is true once the queue is shut down and drained.
func (q *WorkQueue) Get() (key string, shutdown bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.queue) == 0 && !q.shutdown {
		q.cond.Wait()
	}
	if len(q.queue) == 0 {
		return "", true
	}
	key, q.queue = q.queue[0], q.queue[1:]
	q.processing[key] = true
	delete(q.dirty, key)
	return key, false
}

// Done marks key processed; if it was added meanwhile it is queued again.
func (q *WorkQueue) Done(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.processing, key)
	if q.dirty[key] {
		q.queue = append(q.queue, key)
		q.cond.Signal()
	}
}

// Len is the number of keys waiting to be taken.
func (q *WorkQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue)
}

// Serve hands the queue's keys to handle one at a time, each marked Done
// after it, until ctx ends (which shuts the queue down) and the queue is
// drained; it returns ctx's error.
func (q *WorkQueue) Serve(ctx context.Context, handle func(key string)) error {
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	for {
		key, shutdown := q.Get()
		if shutdown {
			return ctx.Err()
		}
		handle(key)
		q.Done(key)
	}
}

// ShutDown stops the queue: Get returns shutdown once it is drained.
func (q *WorkQueue) ShutDown() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown {
		return
	}
	q.shutdown = true
	q.cond.Broadcast()
	close(q.wake)
}

// NextDelayed returns when the earliest key added with AddAfter is due;
// false when none waits.
func (q *WorkQueue) NextDelayed() (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.waiting.Len() == 0 {
		return time.Time{}, false
	}
	return q.waiting[0].at, true
}

// AddDue queues at once the delayed keys whose time has come by the
// queue's clock, in the order they fall due. The queue does so by itself
// when its clock's timers fire; a driver of virtual time calls it after
// moving its clock, so that it knows the keys are queued.
func (q *WorkQueue) AddDue() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.addDue(q.cfg.Clock.Now())
}

// addDue queues the delayed keys due at now; q.mu is held.
func (q *WorkQueue) addDue(now time.Time) {
	for q.waiting.Len() > 0 && !q.waiting[0].at.After(now) {
		q.add(heap.Pop(&q.waiting).(delayed).key)
	}
}

// delayLoop moves delayed keys to the queue when their time comes.
func (q *WorkQueue) delayLoop() {
	for {
		q.mu.Lock()
		now := q.cfg.Clock.Now()
		q.addDue(now)
		var next <-chan time.Time
		if q.waiting.Len() > 0 {
			next = q.cfg.Clock.After(q.waiting[0].at.Sub(now))
		}
		q.mu.Unlock()
		select {
		case _, ok := <-q.wake:
			if !ok {
				return
			}
		case <-next:
		}
	}
}

type delayed struct {
	key string
	at  time.Time
}

type delayHeap []delayed

func (h delayHeap) Len() int           { return len(h) }
func (h delayHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h delayHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *delayHeap) Push(x any)        { *h = append(*h, x.(delayed)) }
func (h *delayHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
