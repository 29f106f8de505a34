package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/cellstore/localcell"
)

// readyPoll is how often a starting Troupe cell is asked whether it is
// ready.
const readyPoll = 50 * time.Millisecond

// StartLocalTroupe starts a Troupe cell of replicas replicas and shards
// shards in this process, under dir, and connects to it. close stops both.
func StartLocalTroupe(ctx context.Context, dir string, replicas, shards int, logger *zap.Logger) (sys *Troupe, close func() error, err error) {
	cell, err := localcell.Start(ctx, localcell.Config{Dir: dir, Replicas: replicas, Shards: shards, Logger: logger})
	if err != nil {
		return nil, nil, fmt.Errorf("start troupe cell: %w", err)
	}
	t, err := ConnectTroupe(ctx, cell.Endpoints())
	if err != nil {
		return nil, nil, errors.Join(err, cell.Close())
	}
	return t, func() error { return errors.Join(t.Close(), cell.Close()) }, nil
}

// ConnectTroupe connects to the cell at endpoints and waits until it
// serves.
func ConnectTroupe(ctx context.Context, endpoints []string) (*Troupe, error) {
	t, err := DialTroupe(DefaultTroupeConfig(endpoints))
	if err != nil {
		return nil, err
	}
	if err := t.WaitReady(ctx, readyPoll); err != nil {
		return nil, errors.Join(err, t.Close())
	}
	return t, nil
}
