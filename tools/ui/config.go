package ui

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// Config is what the aggregator and the server take.
type Config struct {
	// Now is the time ages and lease expiries are counted to.
	Now func() time.Time
	// Window is how far back the schedulers' charts go.
	Window time.Duration
	// MinInterval is the least time between two updates sent to one
	// page, however often the cell changes.
	MinInterval time.Duration
	// Refresh is how often a page's view is built again even if the cell
	// did not change, so that ages move on (0: only on changes).
	Refresh time.Duration
	// TasksPerPage is how many of a job's tasks a page shows; ListLimit
	// bounds the other lists (a machine's tasks, events, pending jobs);
	// JobsPerPage the cell page's jobs.
	TasksPerPage, ListLimit, JobsPerPage int
	// LocalOnly refuses requests whose Host is not a loopback name or
	// address: for a plain-HTTP listener on loopback, which a web page
	// elsewhere could otherwise reach through DNS rebinding.
	LocalOnly bool
	Logger    *zap.Logger
}

// DefaultConfig returns the configuration of `troupe up` and `troupe ui`.
func DefaultConfig() Config {
	return Config{
		Now:          time.Now,
		Window:       10 * time.Minute,
		MinInterval:  250 * time.Millisecond,
		Refresh:      5 * time.Second,
		TasksPerPage: 100,
		ListLimit:    200,
		JobsPerPage:  50,
		LocalOnly:    true,
		Logger:       zap.NewNop(),
	}
}

// Validate says what is wrong with c, every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.Now == nil {
		errs = append(errs, errors.New("ui: Now is nil"))
	}
	if c.Logger == nil {
		errs = append(errs, errors.New("ui: Logger is nil"))
	}
	if c.Window < time.Minute {
		errs = append(errs, fmt.Errorf("ui: Window %v is under a minute", c.Window))
	}
	if c.MinInterval < 0 || c.Refresh < 0 {
		errs = append(errs, fmt.Errorf("ui: MinInterval %v and Refresh %v must not be negative", c.MinInterval, c.Refresh))
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"TasksPerPage", c.TasksPerPage}, {"ListLimit", c.ListLimit}, {"JobsPerPage", c.JobsPerPage}} {
		if n.v <= 0 {
			errs = append(errs, fmt.Errorf("ui: %s %d must be positive", n.name, n.v))
		}
	}
	return errors.Join(errs...)
}
