package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// parseFlags parses args into fs, then sets every flag the command line
// left out from the environment: --data-dir from TROUPE_DATA_DIR,
// --node-id from TROUPE_NODE_ID, and so on (TROUPE_ and the flag's name
// in capitals, '-' as '_'). A container or a systemd unit configures a
// role by environment alone; a flag given wins.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		name := envName(f.Name)
		if v, ok := os.LookupEnv(name); ok {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("%s=%q: %w", name, v, serr)
			}
		}
	})
	return err
}

// envName is the environment variable of flag name.
func envName(name string) string {
	return "TROUPE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}
