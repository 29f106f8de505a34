// Command troupe is Troupe's single binary: every role and the CLI.
//
//	troupe up         run a whole cell in one process
//	troupe store      run one cell store node; store members|backup|restore
//	troupe certs      make a cell's CA and issue its certificates
//	troupe agent      run a machine's node agent (or hollow machines)
//	troupe scheduler  run scheduler instances
//	troupe controller run the job, node-lifecycle and gc controllers
//	troupe apply      create or update objects from manifests
//	troupe get        list machines, jobs, tasks or schedulers, or get some by name
//	troupe describe   show a job, task or machine in detail, with its events
//	troupe watch      print changes of machines, jobs, tasks and events
//	troupe delete     delete the objects of manifests, or jobs by name
//	troupe job        run a job file, stop a job
//	troupe logs       print a task's output, from its machine's agent
//	troupe status     show the store nodes' status
//	troupe config     list, switch and set the CLI's contexts
//	troupe bench      run benchmarks
//	troupe sim        simulate schedulers on a trace or a synthetic workload
//	troupe version    print the version, commit and build date
//	troupe completion print a shell completion script (bash, zsh, fish, powershell)
//
// The command tree is cobra's (root.go); flags are pflag's and go anywhere
// on the line, and come from the environment too (flags.go). The CLI
// reaches a cell by --endpoint, TROUPE_ENDPOINT or a context of its
// configuration file (clientconfig.go, connect.go).
package main

import (
	"context"
	"os"
)

func main() {
	os.Exit(newApp().execute(context.Background(), os.Args[1:]))
}
