package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// watchCommand is `troupe watch [KIND]`: a line for every change of
// machines, jobs, tasks or events (or all of them) until Ctrl-C.
func (a *app) watchCommand() *cobra.Command {
	var (
		selector string
		cf       *connFlags
	)
	cmd := &cobra.Command{
		Use:   "watch [machines|jobs|tasks|events|all]",
		Short: "Print changes of machines, jobs, tasks and events",
		Long: `Print a line for every change of machines, jobs, tasks or events (default:
all of them) until Ctrl-C. The first lists must come within --timeout; the
watch then goes on.`,
		Example: `  troupe watch tasks -l app=web`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("give at most one kind: machines, jobs, tasks, events or all")
			}
			return nil
		},
		ValidArgsFunction: completeKinds([]string{"machines", "jobs", "tasks", "events", "all"}),
		RunE: func(cmd *cobra.Command, args []string) error {
			what := "all"
			if len(args) > 0 {
				what = args[0]
			}
			if !slices.Contains([]string{"all", "machine", "machines", "job", "jobs", "task", "tasks", "event", "events"}, what) {
				return usagef("unknown kind %q (machines, jobs, tasks, events or all)", what)
			}
			sel, err := clientlib.ParseSelector(selector)
			if err != nil {
				return err
			}
			c, _, syncCtx, cancel, err := a.connect(cmd, cf)
			if err != nil {
				return err
			}
			defer cancel()
			defer c.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return watch(ctx, syncCtx, c, what, sel, a.out, a.errOut)
		},
	}
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector of machines, jobs and tasks (events carry no labels: none match one)")
	cf = a.addConnFlags(cmd, 10*time.Second, "how long the first lists may take")
	return cmd
}

// watch follows the kinds asked for with informers (list, then watch from
// the list's cursor; a compacted cursor relists, and the differences are
// printed like any change) and prints one line per change after the first
// list, until ctx ends; the first lists must come before syncCtx ends. It
// tells errOut when it is watching.
func watch(ctx, syncCtx context.Context, c *clientlib.Client, what string, sel clientlib.Selector, out, errOut io.Writer) error {
	p := &linePrinter{out: out, now: time.Now}
	var followed []cache.Syncer
	add := func(kind string, s ...cache.Syncer) {
		if what == "all" || what == kind || what == kind+"s" {
			followed = append(followed, s...)
		}
	}
	add("machine", follow(c, p, sel, "machine", clientlib.Machines, named(machineStatus)))
	add("job", follow(c, p, sel, "job", clientlib.Jobs, named(jobLine)))
	add("task", follow(c, p, sel, "task", clientlib.Tasks, named(taskLine)))
	add("event", follow(c, p, sel, "event", clientlib.Events, eventLine), follow(c, p, sel, "event", clientlib.MachineEvents, eventLine))
	for _, s := range followed {
		go s.Run(ctx)
	}
	for _, s := range followed {
		if err := s.WaitForSync(syncCtx); err != nil {
			return err
		}
	}
	fmt.Fprintf(errOut, "Watching %s; Ctrl-C to stop.\n", what)
	<-ctx.Done()
	if errors.Is(ctx.Err(), context.Canceled) {
		return nil // Ctrl-C: the normal end
	}
	return ctx.Err()
}

// linePrinter prints change lines from several informers, one at a time.
type linePrinter struct {
	mu  sync.Mutex
	out io.Writer
	now func() time.Time
}

// line prints "15:04:05  MODIFIED  task     default/web-1   RUNNING on m1".
func (p *linePrinter) line(change, kind, name, summary string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, "%s  %-8s  %-7s  %-24s  %s\n", p.now().Format("15:04:05"), change, kind, name, summary)
}

// follow returns an informer of kind k whose changes after its first list
// are printed (the name and summary line says), for the objects sel
// matches.
func follow[T clientlib.Object](c *clientlib.Client, p *linePrinter, sel clientlib.Selector, kind string, k clientlib.Kind[T],
	line func(T) (name, summary string)) *cache.Informer[T] {
	in := clientlib.NewInformer(c, k, "", nil)
	report := func(change string, obj T) {
		if in.HasSynced() && sel.Matches(obj.GetMetadata().GetLabels()) {
			name, summary := line(obj)
			p.line(change, kind, name, summary)
		}
	}
	in.AddHandler(cache.Handler[T]{
		OnAdd:    func(_ string, obj T) { report("ADDED", obj) },
		OnUpdate: func(_ string, _, obj T) { report("MODIFIED", obj) },
		OnDelete: func(key string, obj T) {
			if in.Unreadable(key) == nil { // else OnUnreadable says why it is gone
				report("DELETED", obj)
			}
		},
		// Whatever the selector: an unreadable value has no labels to
		// match.
		OnUnreadable: func(key string, err error) { p.line("UNREADABLE", kind, key, err.Error()) },
	})
	return in
}

// named makes a line of an object's name and summary.
func named[T clientlib.Object](summary func(T) string) func(T) (string, string) {
	return func(obj T) (string, string) { return displayName(obj), summary(obj) }
}

func jobLine(j *troupev1.Job) string {
	st := j.GetStatus()
	return fmt.Sprintf("%s  %d pending, %d running, %d succeeded, %d failed", phase(st.GetPhase(), "JOB_PHASE_"),
		st.GetPending(), st.GetRunning(), st.GetSucceeded(), st.GetFailed())
}

func taskLine(t *troupev1.Task) string {
	st := t.GetStatus()
	s := phase(st.GetPhase(), "TASK_PHASE_")
	if m := taskMachine(t); m != "" {
		s += "  on " + m
	}
	if a := t.GetSpec().GetAttempt(); a > 0 {
		s += fmt.Sprintf("  attempt %d", a)
	}
	if st.GetPhase() == troupev1.TaskPhase_TASK_PHASE_FAILED {
		s += fmt.Sprintf("  exit %d", st.GetExitCode())
	}
	return s
}

// eventLine names the event's object: "default/web-3",
// "Warning  Failed  (task) Attempt 0 failed on m1 with exit code 1 (x2)".
func eventLine(e *troupev1.Event) (string, string) {
	name := e.GetInvolvedName()
	if ns := e.GetMetadata().GetNamespace(); ns != "" {
		name = ns + "/" + name
	}
	s := fmt.Sprintf("%s  %s  (%s) %s", e.GetType(), e.GetReason(), strings.ToLower(e.GetInvolvedKind()), e.GetMessage())
	if e.GetCount() > 1 {
		s += fmt.Sprintf(" (x%d)", e.GetCount())
	}
	return name, s
}
