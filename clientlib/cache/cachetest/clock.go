// Package cachetest helps test code that takes a cache.Clock: Clock is
// time that moves only when the test moves it.
package cachetest

import (
	"sync"
	"time"
)

// Clock is a manual clock: Now stays where Set or Advance put it, and the
// channels After returned fire when it reaches their deadline. It is safe
// for concurrent use.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []timer
}

type timer struct {
	at time.Time
	ch chan time.Time
}

// NewClock returns a clock at now.
func NewClock(now time.Time) *Clock { return &Clock{now: now} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives the clock's time once it has
// moved d on (at once for d <= 0).
func (c *Clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.timers = append(c.timers, timer{at: c.now.Add(d), ch: ch})
	return ch
}

// Set moves the clock to now and fires the timers due by then.
func (c *Clock) Set(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = now
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(now) {
			kept = append(kept, t)
			continue
		}
		t.ch <- now
	}
	c.timers = kept
}

// Advance moves the clock d on.
func (c *Clock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// Timers is how many channels from After have not fired yet: a test
// waits for it to know that code under test is waiting on the clock.
func (c *Clock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}
