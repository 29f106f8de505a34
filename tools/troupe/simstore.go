package main

import (
	"context"
	"flag"
	"strings"

	"github.com/troupe-cluster/troupe/cellstore/node"
	"github.com/troupe-cluster/troupe/tools/sim"
	"github.com/troupe-cluster/troupe/tools/sim/experiment"
	"github.com/troupe-cluster/troupe/tools/sim/storerun"
	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

// simStoreRunner registers -store and -store-compress on fs and returns
// the runner that plays a simulation against a real store as they say
// once fs is parsed (tools/sim/storerun: hollow agents, the real
// schedulers and controllers, in real time compressed), whose measures
// compare with the in-memory runner's field by field.
func (a *app) simStoreRunner(fs *flag.FlagSet) experiment.Runner {
	store := fs.String("store", "embedded", "the store runner's store: 'embedded' (a one-node store in a temporary directory) "+
		"or the gRPC address(es), comma-separated, of a store holding no machines or jobs")
	compress := fs.Float64("store-compress", 10, "the store runner's compression: the seconds of virtual time one second of wall time plays")
	var tf tlsFlags
	tf.register(fs)
	return func(ctx context.Context, cfg sim.Config, src workload.Source) (*sim.Stats, error) {
		o := storerun.Options{Compress: *compress}
		if *store != "embedded" {
			o.Store = strings.Split(*store, ",")
			var err error
			if o.TLS, err = tf.source("sim", a.errOut); err != nil {
				return nil, err
			}
		} else {
			node.RaiseGOMAXPROCS()
		}
		return o.Run(ctx, cfg, src)
	}
}
