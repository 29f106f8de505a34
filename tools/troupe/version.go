package main

import (
	"fmt"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
)

// Set at build time (make build, make image: -ldflags -X main.version=...).
var (
	version   = "dev"
	commit    = "unknown"
	buildDate = "unknown"
)

// versionCommand is `troupe version`: the binary's version, commit and
// build date.
func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and build date",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprintf(a.out, "troupe %s\ncommit:  %s\nbuilt:   %s\ngo:      %s %s/%s\n", version, commit, buildDate, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}

// buildInfo is the troupe_build_info gauge every process serves in
// /metrics: 1, labelled with what the binary is.
func buildInfo() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "troupe_build_info", Help: "The running binary: always 1, labelled with its version, commit, build date and Go version.",
	}, []string{"version", "commit", "build_date", "go_version"})
	g.WithLabelValues(version, commit, buildDate, runtime.Version()).Set(1)
	return g
}
