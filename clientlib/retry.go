package clientlib

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/troupe-cluster/troupe/cellstore/storeerr"
)

// RetryPolicy says how a call is retried: attempt n+1 (n >= 1) waits
// Initial * Multiplier^(n-1), capped at Max, then scaled by a random factor
// in [1-Jitter, 1+Jitter]. MaxAttempts bounds the attempts of one call,
// the first included; for a Watcher it bounds consecutive failed
// reconnections.
type RetryPolicy struct {
	Initial     time.Duration
	Max         time.Duration
	Multiplier  float64
	Jitter      float64 // in [0, 1); 0: no jitter
	MaxAttempts int
}

// defaultRetryPolicy: 20ms, 40ms, ... up to 1s, ±20%, 10 attempts (about
// 4 s of waiting in all).
func defaultRetryPolicy() RetryPolicy {
	return RetryPolicy{Initial: 20 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.2, MaxAttempts: 10}
}

// validate says what is wrong with p; field names are prefixed with what.
func (p RetryPolicy) validate(what string) []error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("clientlib: "+what+"."+format, args...))
	}
	if p.Initial <= 0 {
		add("Initial is %v, want a positive duration", p.Initial)
	}
	if p.Max < p.Initial {
		add("Max (%v) is less than Initial (%v)", p.Max, p.Initial)
	}
	if !(p.Multiplier >= 1) || math.IsInf(p.Multiplier, 0) {
		add("Multiplier is %v, want a finite number >= 1", p.Multiplier)
	}
	if !(p.Jitter >= 0 && p.Jitter < 1) {
		add("Jitter is %v, want a fraction in [0, 1)", p.Jitter)
	}
	if p.MaxAttempts < 1 {
		add("MaxAttempts is %d, want at least 1", p.MaxAttempts)
	}
	return errs
}

// backoff is the wait before retry n (n >= 1: the wait before attempt
// n+1). r is a random number in [0, 1).
func (p RetryPolicy) backoff(n int, r float64) time.Duration {
	d := float64(p.Initial) * math.Pow(p.Multiplier, float64(max(n-1, 0)))
	d = min(d, float64(p.Max))
	d *= 1 + p.Jitter*(2*r-1)
	return time.Duration(d)
}

// retryableCode reports whether a call that failed with code may be tried
// again: the node could not be reached or could not carry the request out
// (Unavailable), the attempt's deadline passed (DeadlineExceeded: for a
// commit the outcome is unknown, and the store's txn_id dedupe makes a
// retry safe), or the node refused it for overload (ResourceExhausted).
// Everything else is an answer: a malformed or refused request, or a
// client-side cancellation. The policy keys on codes, not on the store's
// error definitions (storeerr): gRPC itself fails calls with these codes
// and no definition, and every definition of the store keeps its code.
func retryableCode(c codes.Code) bool {
	switch c {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted:
		return true
	}
	return false
}

// movesEndpoint reports whether an attempt that failed with code should
// make the client leave the endpoint: it is down, cut off, or too slow.
// Overload (ResourceExhausted) is waited out on the same node.
func movesEndpoint(c codes.Code) bool {
	return c == codes.Unavailable || c == codes.DeadlineExceeded
}

// codeOf is the gRPC code of a call's final error, context errors
// included.
func codeOf(err error) codes.Code {
	switch {
	case err == nil:
		return codes.OK
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return status.Code(err)
}

// sleepCtx waits d or until ctx ends, whichever comes first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// callInfo describes one call of the Client for the retry loop.
type callInfo struct {
	// method is the RPC's name: the metrics' label.
	method string
	// what names the call in errors, such as `commit "txn-1"`.
	what string
	// mayApply marks a write: an attempt that failed other than by a
	// refusal may still have taken effect, and errors say so.
	mayApply bool
	// route, if set, picks the endpoint of the first attempt (a shard's
	// leader); ok false leaves it to the current endpoint.
	route func() (ep int, ok bool)
}

// do runs fn against an endpoint, attempt after attempt, until it
// succeeds, fails with an error that is an answer, the policy's attempts
// are spent, or ctx ends. Each attempt gets its own deadline
// (AttemptTimeout). The first attempt may go to info.route's endpoint;
// every other goes to the current endpoint, which moves on to the next one
// when an attempt finds it unavailable or slow. The returned error says
// which call failed, where and after how many attempts, and wraps the last
// gRPC error (so status.Code works on it, and errors.Is against the
// store's definitions, storeerr) or ctx's error.
func (c *Client) do(ctx context.Context, info callInfo, fn func(ctx context.Context, ep *endpoint) error) (err error) {
	start := time.Now()
	defer func() {
		c.metrics.requests.WithLabelValues(info.method, codeOf(err).String()).Inc()
		c.metrics.seconds.WithLabelValues(info.method).Observe(time.Since(start).Seconds())
	}()
	var (
		lastErr  error
		lastAddr string
		attempts int
		unknown  bool // some attempt may have been applied
	)
	policy := c.cfg.Retry
	for attempts < policy.MaxAttempts && ctx.Err() == nil {
		if attempts > 0 {
			c.metrics.retries.WithLabelValues(info.method).Inc()
			if sleepCtx(ctx, policy.backoff(attempts, rand.Float64())) != nil {
				break
			}
		}
		i, routed := c.current(), false
		if attempts == 0 && info.route != nil {
			if li, ok := info.route(); ok {
				i, routed = li, true
			}
		}
		ep := c.eps[i]
		actx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout)
		aerr := storeerr.FromError(fn(actx, ep))
		cancel()
		attempts++
		if aerr == nil {
			return nil
		}
		lastErr, lastAddr = aerr, ep.addr
		code := status.Code(aerr)
		if code != codes.ResourceExhausted {
			unknown = true
		}
		if ctx.Err() != nil {
			break
		}
		if !retryableCode(code) {
			return fmt.Errorf("clientlib: %s on %s (attempt %d): %w", info.what, ep.addr, attempts, aerr)
		}
		if movesEndpoint(code) {
			if routed {
				c.invalidateLeaders()
			}
			c.failover(i, aerr)
		}
		c.log.Debug("store call failed; retrying", zap.String("call", info.what), zap.String("endpoint", ep.addr),
			zap.Int("attempt", attempts), zap.Error(aerr))
	}
	outcome := ""
	if info.mayApply && unknown {
		outcome = "; the outcome is unknown (it may have been applied): retry with the same txn_id to learn it"
	}
	if ctx.Err() != nil {
		if attempts == 0 {
			return fmt.Errorf("clientlib: %s: %w before it was sent", info.what, ctx.Err())
		}
		return fmt.Errorf("clientlib: %s: %w after %d attempt(s), last on %s: %v%s", info.what, ctx.Err(), attempts, lastAddr, lastErr, outcome)
	}
	return fmt.Errorf("clientlib: %s: gave up after %d attempts, last on %s: %w%s", info.what, attempts, lastAddr, lastErr, outcome)
}
