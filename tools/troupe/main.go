// Command troupe is Troupe's single binary: every role and the CLI.
//
//	troupe up       run a whole cell in one process
//	troupe store    run one cell store node; store members|backup|restore
//	troupe certs    make a cell's CA and issue its certificates
//	troupe agent    run a machine's node agent (or hollow machines)
//	troupe scheduler  run scheduler instances
//	troupe controller run the job, node-lifecycle and gc controllers
//	troupe apply    create or update objects from manifests
//	troupe get      list machines, jobs, tasks or schedulers
//	troupe describe show a job, task or machine in detail, with its events
//	troupe watch    print changes of machines, jobs, tasks and events
//	troupe delete   delete the objects of manifests, or a job
//	troupe job      run a job file, stop a job
//	troupe logs     print a task's output, from its machine's agent
//	troupe status   show a store node's status
//	troupe bench    run benchmarks
//	troupe sim      simulate schedulers on a trace or a synthetic workload
//	troupe version  print the version, commit and build date
package main

import (
	"fmt"
	"os"
)

type command struct {
	name, summary string
	run           func(args []string) error
}

func commands() []command {
	return []command{
		{"up", "run a whole cell in one process", runUp},
		{"store", "run one cell store node; store members|backup|restore FLAGS", runStore},
		{"certs", "make a cell's CA and certificates: certs init|issue|show", runCerts},
		{"agent", "run a machine's node agent (or --hollow simulated ones)", runAgent},
		{"scheduler", "run scheduler instances (batch, service, gang)", runScheduler},
		{"controller", "run the job, node-lifecycle and gc controllers", runController},
		{"apply", "create or update objects from manifest files", runApply},
		{"get", "list machines, jobs, tasks or schedulers", runGet},
		{"describe", "show a job, task or machine in detail, with its events", runDescribe},
		{"watch", "print changes of machines, jobs, tasks and events", runWatch},
		{"delete", "delete the objects of manifests, or a job by name", runDelete},
		{"job", "run FILE (apply) or stop NAME", runJob},
		{"logs", "print a task's output", runLogs},
		{"status", "show a store node's status", runStatus},
		{"bench", "run benchmarks (store workloads, cache, schedule)", runBench},
		{"sim", "simulate schedulers on a trace or synthetic workload", runSim},
		{"version", "print the version, commit and build date", runVersion},
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: troupe <command> [flags]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(os.Stderr, "\nrun 'troupe <command> -h' for a command's flags")
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	for _, c := range commands() {
		if c.name == os.Args[1] {
			if err := c.run(os.Args[2:]); err != nil {
				fmt.Fprintf(os.Stderr, "troupe %s: %v\n", c.name, err)
				os.Exit(1)
			}
			return
		}
	}
	if os.Args[1] != "-h" && os.Args[1] != "--help" && os.Args[1] != "help" {
		fmt.Fprintf(os.Stderr, "troupe: unknown command %q\n\n", os.Args[1])
	}
	usage()
	os.Exit(2)
}
