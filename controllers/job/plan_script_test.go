package job_test

// Data-driven scripts for the job controller's pure core, Observe and
// Plan, on github.com/cockroachdb/datadriven. Each testdata/*.txt is one
// script: it sets up a job and its tasks in a compact text form, plays
// the other components (a scheduler binding tasks, agents reporting
// runs, the node controller losing a machine), moves the clock, and
// syncs; a sync prints the changes Observe and Plan return and applies
// them to the script's state as the controller would commit them.
//
//	# comment
//	command key=value flag ...
//	----
//	expected output
//
// Run
//
//	go test ./controllers/job -run TestPlanScripts -rewrite
//
// to replace every expected output with what the code does now, then
// review the diff.
//
// Commands (times print as offsets from the script's epoch, "+10s"):
//
//	job [name=web] [type=batch|service] [count=N] [max-retries=N] [backoff=DUR]
//	    [restart=never|on-failure|always] [gang-min=N] [stopped[=false]]
//	    [command=CMD] [health-check=CMD] [cause=TEXT]
//	    The job: the first creates it with the defaults a write through
//	    clientlib gives it; later ones change the fields given (command
//	    and health-check change its task template: a new version; cause
//	    sets its change-cause annotation).
//	update [max-unavailable=N] [max-surge=N] [canary=N] [min-healthy=DUR]
//	    [deadline=DUR] [auto-revert]
//	    Sets the job's update strategy (not a new version).
//	promote
//	    Promotes the canaries of the job's rollout (troupe job promote).
//	delete-job
//	    The job is gone.
//	bind index=I machine=M
//	    A scheduler binds task I to machine M (phase BOUND).
//	run index=I phase=starting|running|succeeded|failed|killed [exit=N] [restarts=N]
//	    [reason=WORD] [attempt=N] [healthy] [legacy]
//	    Task I's agent reports its Run (of the task's placement: its
//	    attempt, unless attempt= says otherwise, and its binding's
//	    bound_at, printed as bound=); a final phase has finished now;
//	    healthy: its health check passes; legacy: the agent is older than
//	    Run.bound_at, and its run names no bound_at.
//	preempt index=I by=KEY [unreported]
//	    A scheduler evicts task I for task KEY, as its commit does (the
//	    task back to PENDING, "preempted by KEY", unbound, its attempt
//	    kept), and its machine's agent reports the evicted placement's Run
//	    KILLED (exit 137, "stopped"); unreported: not yet.
//	lose machine=M
//	    The node controller releases the tasks bound to M: unbound, LOST.
//	task index=I [phase=P] [attempt=N] [exit=N] [reason=WORD] [finished=DUR]
//	    Sets fields of task I directly (finished: an offset from the epoch).
//	delete-task index=I
//	    Task I is deleted (by someone else).
//	unreadable index=I
//	    Task I's stored value cannot be read: it leaves the cache.
//	limits count=N
//	    The cell stores a job-limits policy allowing at most N tasks per
//	    job (until then: none, and DefaultJobLimits hold). The job is
//	    judged under it, as the controller does (State.Refused),
//	    whatever client wrote it.
//	advance DUR
//	    Moves the clock on.
//	sync [dry]
//	    Observe for each bound task (in index order), then Plan, at now,
//	    with the controller's verdict on the job under the cell's
//	    policies (judged before every Plan: Plan heeds it only for a job
//	    without tasks): prints the changes and applies them (dry: prints
//	    only).
//	state [spec]
//	    The job's status and its tasks (spec: with their specs).
//
// Every sync also checks what must hold whatever the script does:
// Observe and Plan change none of their arguments, and Plan gives the
// same changes when asked twice.

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/controllers/internal/scripttest"
	"github.com/troupe-cluster/troupe/controllers/job"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

func TestPlanScripts(t *testing.T) {
	scripttest.Run(t, func() *jobScript {
		v, err := clientlib.NewValidator()
		if err == nil {
			err = v.SetPolicies(nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		return &jobScript{clock: scripttest.NewClock(), tasks: map[int32]*troupev1.Task{}, runs: map[string]*troupev1.Run{},
			unreadable: map[int32]bool{}, policies: v}
	}, jobCommands)
}

// jobScript is the state of one script: what the controller's caches
// would hold.
type jobScript struct {
	clock      *scripttest.Clock
	rev        uint64 // the store's revision: each write applied takes the next
	job        *troupev1.Job
	tasks      map[int32]*troupev1.Task
	runs       map[string]*troupev1.Run // by "<machine>/<index>"
	unreadable map[int32]bool
	policies   *clientlib.Validator // the cell's ValidationPolicies, as the controller follows them
}

var jobCommands = map[string]func(*jobScript, *scripttest.Args) string{
	"job":         (*jobScript).cmdJob,
	"update":      (*jobScript).cmdUpdate,
	"promote":     (*jobScript).cmdPromote,
	"delete-job":  (*jobScript).cmdDeleteJob,
	"bind":        (*jobScript).cmdBind,
	"run":         (*jobScript).cmdRun,
	"preempt":     (*jobScript).cmdPreempt,
	"lose":        (*jobScript).cmdLose,
	"task":        (*jobScript).cmdTask,
	"delete-task": (*jobScript).cmdDeleteTask,
	"unreadable":  (*jobScript).cmdUnreadable,
	"limits":      (*jobScript).cmdLimits,
	"advance":     func(s *jobScript, a *scripttest.Args) string { return s.clock.Advance(a) },
	"sync":        (*jobScript).cmdSync,
	"state":       (*jobScript).cmdState,
}

func (s *jobScript) now() *timestamppb.Timestamp { return timestamppb.New(s.clock.Now) }

func (s *jobScript) nextVersion() uint64 {
	s.rev++
	return s.rev
}

var restartPolicies = map[string]troupev1.RestartPolicy{
	"never": troupev1.RestartPolicy_RESTART_POLICY_NEVER, "on-failure": troupev1.RestartPolicy_RESTART_POLICY_ON_FAILURE,
	"always": troupev1.RestartPolicy_RESTART_POLICY_ALWAYS,
}

func (s *jobScript) cmdJob(a *scripttest.Args) string {
	j := s.job
	if j == nil {
		j = &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: a.Str("name", "web"), Namespace: "ns"},
			Spec: &troupev1.JobSpec{RetryBackoff: durationpb.New(0),
				Template: &troupev1.TaskTemplate{Command: "/bin/true", Requests: map[string]int64{"cpu": 1000}}}}
	} else {
		j = proto.Clone(j).(*troupev1.Job)
		if a.Has("name") {
			a.Fatalf("the job exists: its name stays")
		}
	}
	spec := j.Spec
	switch a.Enum("type", "", "batch", "service") {
	case "batch":
		spec.Type = troupev1.JobType_JOB_TYPE_BATCH
	case "service":
		spec.Type = troupev1.JobType_JOB_TYPE_SERVICE
	}
	spec.Count = a.Int("count", spec.Count)
	spec.MaxRetries = a.Int("max-retries", spec.MaxRetries)
	if a.Has("backoff") {
		spec.RetryBackoff = durationpb.New(a.Duration("backoff", 0))
	}
	if p := a.Enum("restart", "", slices.Sorted(maps.Keys(restartPolicies))...); p != "" {
		spec.RestartPolicy = restartPolicies[p]
	}
	spec.GangMin = a.Int("gang-min", spec.GangMin)
	if a.Has("stopped") {
		spec.Stopped = a.Flag("stopped")
	}
	if a.Has("command") || a.Has("health-check") {
		spec.Template = proto.Clone(spec.Template).(*troupev1.TaskTemplate)
		spec.Template.Command = a.Str("command", spec.Template.Command)
		if a.Has("health-check") {
			spec.Template.HealthCheck = &troupev1.HealthCheck{Command: a.Str("health-check", "")}
		}
	}
	if a.Has("cause") {
		j.Metadata.Annotations = map[string]string{job.ChangeCauseAnnotation: a.Str("cause", "")}
	}
	if s.job == nil {
		clientlib.Default(j) // as a write through clientlib
		if err := clientlib.Validate(clientlib.Jobs, j); err != nil {
			a.Fatalf("%v", err)
		}
	}
	j.Metadata.Version = s.nextVersion()
	s.job = j
	return describeJob(j)
}

func (s *jobScript) cmdUpdate(a *scripttest.Args) string {
	j := proto.Clone(s.job).(*troupev1.Job)
	u := &troupev1.UpdateStrategy{MaxUnavailable: a.Int("max-unavailable", 0), MaxSurge: a.Int("max-surge", 0),
		Canary: a.Int("canary", 0), AutoRevert: a.Flag("auto-revert")}
	if a.Has("min-healthy") {
		u.MinHealthy = durationpb.New(a.Duration("min-healthy", 0))
	}
	if a.Has("deadline") {
		u.ProgressDeadline = durationpb.New(a.Duration("deadline", 0))
	}
	j.Spec.Update = u
	j.Metadata.Version = s.nextVersion()
	s.job = j
	return fmt.Sprintf("update %v", u)
}

func (s *jobScript) cmdPromote(a *scripttest.Args) string {
	j := proto.Clone(s.job).(*troupev1.Job)
	if j.GetStatus().GetRollout() == nil {
		a.Fatalf("no rollout to promote")
	}
	j.Status.Rollout.Promoted = true
	j.Metadata.Version = s.nextVersion()
	s.job = j
	return describeJob(j)
}

func (s *jobScript) cmdDeleteJob(a *scripttest.Args) string {
	if s.job == nil {
		a.Fatalf("no job")
	}
	s.job = nil
	return "job deleted"
}

// task returns the task at index=, which must exist.
func (s *jobScript) task(a *scripttest.Args) *troupev1.Task {
	i := a.Int("index", -1)
	t, ok := s.tasks[i]
	if !ok {
		a.Fatalf("no task at index %d", i)
	}
	return proto.Clone(t).(*troupev1.Task)
}

func (s *jobScript) put(t *troupev1.Task) string {
	t.Metadata.Version = s.nextVersion()
	s.tasks[t.GetSpec().GetIndex()] = t
	return describeTask(t)
}

func (s *jobScript) cmdBind(a *scripttest.Args) string {
	t := s.task(a)
	t.Binding = &troupev1.TaskBinding{Machine: a.Required("machine"), Scheduler: t.GetSpec().GetScheduler(), BoundAt: s.now()}
	t.Status = &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_BOUND}
	return s.put(t)
}

var runPhases = map[string]troupev1.RunPhase{
	"starting": troupev1.RunPhase_RUN_PHASE_STARTING, "running": troupev1.RunPhase_RUN_PHASE_RUNNING,
	"succeeded": troupev1.RunPhase_RUN_PHASE_SUCCEEDED, "failed": troupev1.RunPhase_RUN_PHASE_FAILED,
	"killed": troupev1.RunPhase_RUN_PHASE_KILLED,
}

func (s *jobScript) cmdRun(a *scripttest.Args) string {
	t := s.task(a)
	m := t.GetBinding().GetMachine()
	if m == "" {
		a.Fatalf("task %s is not bound", t.GetMetadata().GetName())
	}
	phase := runPhases[a.Enum("phase", "", slices.Sorted(maps.Keys(runPhases))...)]
	if phase == troupev1.RunPhase_RUN_PHASE_UNSPECIFIED {
		a.Fatalf("run needs phase=")
	}
	key := fmt.Sprintf("%s/%d", m, t.GetSpec().GetIndex())
	r := &troupev1.Run{Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskRef("ns", t.GetSpec().GetJob(), t.GetSpec().GetIndex())},
		Machine: m, Phase: phase, ExitCode: a.Int("exit", 0), Reason: a.Str("reason", ""), Restarts: a.Int("restarts", 0),
		Attempt: a.Int("attempt", t.GetSpec().GetAttempt()), Started: s.now(), Healthy: a.Flag("healthy"),
		BoundAt: t.GetBinding().GetBoundAt()}
	if a.Flag("legacy") {
		r.BoundAt = nil
	}
	if old, ok := s.runs[key]; ok && old.GetAttempt() == r.GetAttempt() && proto.Equal(old.GetBoundAt(), r.GetBoundAt()) {
		r.Started = old.GetStarted()
	}
	switch phase {
	case troupev1.RunPhase_RUN_PHASE_SUCCEEDED, troupev1.RunPhase_RUN_PHASE_FAILED, troupev1.RunPhase_RUN_PHASE_KILLED:
		r.Finished = s.now()
	}
	r.Metadata.Version = s.nextVersion()
	s.runs[key] = r
	return describeRun(r)
}

func (s *jobScript) cmdPreempt(a *scripttest.Args) string {
	t := s.task(a)
	m := t.GetBinding().GetMachine()
	if m == "" {
		a.Fatalf("task %s is not bound", t.GetMetadata().GetName())
	}
	key := fmt.Sprintf("%s/%d", m, t.GetSpec().GetIndex())
	var out []string
	if r, ok := s.runs[key]; ok && job.OfPlacement(r, t) && !a.Flag("unreported") {
		r = proto.Clone(r).(*troupev1.Run)
		r.Phase, r.ExitCode, r.Reason, r.Finished = troupev1.RunPhase_RUN_PHASE_KILLED, 137, "stopped", s.now()
		r.Metadata.Version = s.nextVersion()
		s.runs[key] = r
		out = append(out, describeRun(r))
	}
	t.Binding = nil
	t.Status = &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_PENDING, Reason: "preempted by " + a.Required("by")}
	return strings.Join(append([]string{s.put(t)}, out...), "\n")
}

func (s *jobScript) cmdLose(a *scripttest.Args) string {
	m := a.Required("machine")
	var out []string
	for _, i := range slices.Sorted(maps.Keys(s.tasks)) {
		t := s.tasks[i]
		if t.GetBinding().GetMachine() != m {
			continue
		}
		t = proto.Clone(t).(*troupev1.Task)
		t.Binding = nil
		t.Status = &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_LOST, Reason: "machine " + m + " lost", Finished: s.now()}
		out = append(out, s.put(t))
	}
	return strings.Join(out, "\n")
}

var taskPhases = map[string]troupev1.TaskPhase{
	"pending": troupev1.TaskPhase_TASK_PHASE_PENDING, "bound": troupev1.TaskPhase_TASK_PHASE_BOUND,
	"running": troupev1.TaskPhase_TASK_PHASE_RUNNING, "succeeded": troupev1.TaskPhase_TASK_PHASE_SUCCEEDED,
	"failed": troupev1.TaskPhase_TASK_PHASE_FAILED, "lost": troupev1.TaskPhase_TASK_PHASE_LOST,
	"preempted": troupev1.TaskPhase_TASK_PHASE_PREEMPTED, "stopped": troupev1.TaskPhase_TASK_PHASE_STOPPED,
}

func (s *jobScript) cmdTask(a *scripttest.Args) string {
	t := s.task(a)
	if t.Status == nil {
		t.Status = &troupev1.TaskStatus{}
	}
	if p := a.Enum("phase", "", slices.Sorted(maps.Keys(taskPhases))...); p != "" {
		t.Status.Phase = taskPhases[p]
	}
	t.Spec.Attempt = a.Int("attempt", t.Spec.Attempt)
	t.Status.ExitCode = a.Int("exit", t.Status.ExitCode)
	t.Status.Reason = a.Str("reason", t.Status.Reason)
	if a.Has("finished") {
		t.Status.Finished = timestamppb.New(scripttest.Epoch.Add(a.Duration("finished", 0)))
	}
	return s.put(t)
}

func (s *jobScript) cmdDeleteTask(a *scripttest.Args) string {
	t := s.task(a)
	delete(s.tasks, t.GetSpec().GetIndex())
	return "deleted " + t.GetMetadata().GetName()
}

func (s *jobScript) cmdUnreadable(a *scripttest.Args) string {
	i := a.Int("index", -1)
	if i < 0 {
		a.Fatalf("unreadable needs index=")
	}
	delete(s.tasks, i)
	s.unreadable[i] = true
	return fmt.Sprintf("task %d unreadable", i)
}

func (s *jobScript) cmdLimits(a *scripttest.Args) string {
	n := a.Int("count", -1)
	if n < 0 {
		a.Fatalf("limits needs count=N")
	}
	p := &troupev1.ValidationPolicy{Metadata: &troupev1.ObjectMeta{Name: clientlib.JobLimitsPolicy, Version: s.nextVersion()},
		Spec: &troupev1.ValidationPolicySpec{Kinds: []string{clientlib.Jobs.Name}, Rules: []*troupev1.ValidationRule{{
			Expression: fmt.Sprintf("object.spec.count <= %d", n), FieldPath: "spec.count", Message: fmt.Sprintf("at most %d tasks here", n)}}}}
	if err := clientlib.Validate(clientlib.ValidationPolicies, p); err != nil {
		a.Fatalf("%v", err)
	}
	if err := s.policies.SetPolicies([]*troupev1.ValidationPolicy{p}); err != nil {
		a.Fatalf("%v", err)
	}
	return fmt.Sprintf("policy job-limits: %s", p.GetSpec().GetRules()[0].GetExpression())
}

// refused is the controller's verdict on the job under the cell's
// policies: the rules it breaks.
func (s *jobScript) refused() []clientlib.FieldError {
	var invalid *clientlib.ValidationError
	if err := clientlib.ValidateWith(s.policies, clientlib.Jobs, s.job); errors.As(err, &invalid) {
		return invalid.Errors
	}
	return nil
}

func (s *jobScript) cmdSync(a *scripttest.Args) string {
	dry := a.Flag("dry")
	saved, savedRev := maps.Clone(s.tasks), s.rev
	var out []string
	// Observe, as the controller does, in index order; each write is
	// applied before Plan reads the tasks.
	for _, i := range slices.Sorted(maps.Keys(s.tasks)) {
		t := s.tasks[i]
		var run *troupev1.Run
		if m := t.GetBinding().GetMachine(); m != "" {
			run = s.runs[fmt.Sprintf("%s/%d", m, i)]
		}
		tIn, runIn := proto.Clone(t), proto.Clone(run)
		u := job.Observe(t, run)
		if !proto.Equal(tIn, t) || !proto.Equal(runIn, run) {
			a.Fatalf("Observe changed its arguments")
		}
		if u == nil {
			continue
		}
		out = append(out, describeUpdate(*u)...)
		s.put(proto.Clone(u.To).(*troupev1.Task))
	}
	st := job.State{Job: s.job, Tasks: slices.Collect(maps.Values(s.tasks)), Unreadable: func(i int32) bool { return s.unreadable[i] }}
	if s.job != nil {
		st.Refused = s.refused()
	}
	in := cloneState(st)
	ch := job.Plan(st, s.clock.Now)
	if !sameState(in, st) {
		a.Fatalf("Plan changed its arguments")
	}
	if again := describeChanges(job.Plan(st, s.clock.Now)); !slices.Equal(again, describeChanges(ch)) {
		a.Fatalf("Plan is not deterministic:\n%s\n---\n%s", strings.Join(describeChanges(ch), "\n"), strings.Join(again, "\n"))
	}
	out = append(out, describeChanges(ch)...)
	if dry {
		s.tasks, s.rev = saved, savedRev
	} else {
		s.apply(ch)
	}
	if len(out) == 0 {
		return "no changes"
	}
	return strings.Join(out, "\n")
}

// apply makes ch's writes, as the controller commits them.
func (s *jobScript) apply(ch job.Changes) {
	for _, t := range ch.Delete {
		delete(s.tasks, t.GetSpec().GetIndex())
	}
	for _, u := range ch.Update {
		s.put(proto.Clone(u.To).(*troupev1.Task))
	}
	for _, batch := range ch.Create {
		v := s.nextVersion() // one request: one revision
		for _, t := range batch {
			t = proto.Clone(t).(*troupev1.Task)
			t.Metadata.Version = v
			s.tasks[t.GetSpec().GetIndex()] = t
		}
	}
	if ch.Status != nil {
		j := proto.Clone(s.job).(*troupev1.Job)
		j.Status = ch.Status
		j.Metadata.Version = s.nextVersion()
		s.job = j
	}
}

func (s *jobScript) cmdState(a *scripttest.Args) string {
	spec := a.Flag("spec")
	var out []string
	if s.job == nil {
		out = append(out, "no job")
	} else {
		out = append(out, describeJob(s.job))
	}
	for _, i := range slices.Sorted(maps.Keys(s.tasks)) {
		out = append(out, describeTask(s.tasks[i]))
		if spec {
			out = append(out, "  "+describeSpec(s.tasks[i].GetSpec()))
		}
	}
	return strings.Join(out, "\n")
}

func cloneState(st job.State) job.State {
	out := job.State{Job: proto.Clone(st.Job).(*troupev1.Job), Refused: slices.Clone(st.Refused)}
	for _, t := range st.Tasks {
		out.Tasks = append(out.Tasks, proto.Clone(t).(*troupev1.Task))
	}
	return out
}

func sameState(a, b job.State) bool {
	return proto.Equal(a.Job, b.Job) && slices.EqualFunc(a.Tasks, b.Tasks, func(x, y *troupev1.Task) bool { return proto.Equal(x, y) }) &&
		slices.Equal(a.Refused, b.Refused)
}

func lower(s, prefix string) string { return strings.ToLower(strings.TrimPrefix(s, prefix)) }

func describeJob(j *troupev1.Job) string {
	s := j.GetSpec()
	line := fmt.Sprintf("job %s/%s: %s count=%d scheduler=%s restart=%s max-retries=%d backoff=%v",
		j.GetMetadata().GetNamespace(), j.GetMetadata().GetName(), lower(s.GetType().String(), "JOB_TYPE_"), s.GetCount(), s.GetScheduler(),
		strings.ReplaceAll(lower(s.GetRestartPolicy().String(), "RESTART_POLICY_"), "_", "-"), s.GetMaxRetries(), s.GetRetryBackoff().AsDuration())
	if s.GetGangMin() > 0 {
		line += fmt.Sprintf(" gang-min=%d", s.GetGangMin())
	}
	if s.GetStopped() {
		line += " stopped"
	}
	return line + "\n  " + describeStatus(j.GetStatus())
}

func describeStatus(st *troupev1.JobStatus) string {
	if st == nil {
		return "status: none"
	}
	line := fmt.Sprintf("status: %s pending=%d running=%d succeeded=%d failed=%d retries=%d", lower(st.GetPhase().String(), "JOB_PHASE_"),
		st.GetPending(), st.GetRunning(), st.GetSucceeded(), st.GetFailed(), st.GetRetries())
	if st.GetFinished() != nil {
		line += " finished=" + scripttest.At(st.GetFinished())
	}
	if st.GetMessage() != "" {
		line += fmt.Sprintf(" message=%q", st.GetMessage())
	}
	if st.GetAdmission() != "" {
		line += fmt.Sprintf(" admission=%q", st.GetAdmission())
	}
	if st.GetVersion() > 1 || st.GetRollout() != nil {
		line += fmt.Sprintf("\n  version=%d stable=%d history:", st.GetVersion(), st.GetStableVersion())
		for _, h := range st.GetHistory() {
			line += fmt.Sprintf(" %d(%s", h.GetVersion(), h.GetCause())
			if h.GetFailed() {
				line += ", failed"
			}
			line += ")"
		}
	}
	if r := st.GetRollout(); r != nil {
		line += fmt.Sprintf("\n  rollout: %s %d->%d updated=%d healthy=%d", lower(r.GetState().String(), "ROLLOUT_STATE_"),
			r.GetFromVersion(), r.GetToVersion(), r.GetUpdated(), r.GetHealthy())
		if r.GetPromoted() {
			line += " promoted"
		}
		if r.GetMessage() != "" {
			line += fmt.Sprintf(" message=%q", r.GetMessage())
		}
	}
	return line
}

// describeTask is one line: name, attempt, phase, then what is set.
func describeTask(t *troupev1.Task) string {
	return t.GetMetadata().GetName() + " " + describeTaskState(t)
}

// describeTaskState is describeTask without the name.
func describeTaskState(t *troupev1.Task) string {
	st := t.GetStatus()
	line := fmt.Sprintf("attempt=%d %s", t.GetSpec().GetAttempt(), lower(st.GetPhase().String(), "TASK_PHASE_"))
	if v := t.GetSpec().GetJobVersion(); v > 1 {
		line += fmt.Sprintf(" v%d", v)
	}
	if st.GetHealthy() {
		line += " healthy"
	}
	if m := t.GetBinding().GetMachine(); m != "" {
		line += " on=" + m
	}
	if st.GetExitCode() != 0 {
		line += fmt.Sprintf(" exit=%d", st.GetExitCode())
	}
	if st.GetRestarts() != 0 {
		line += fmt.Sprintf(" restarts=%d", st.GetRestarts())
	}
	if st.GetReason() != "" {
		line += fmt.Sprintf(" reason=%q", st.GetReason())
	}
	if st.GetFinished() != nil {
		line += " finished=" + scripttest.At(st.GetFinished())
	}
	if st.GetMachine() != "" {
		line += " last-machine=" + st.GetMachine()
	}
	return line
}

// describeSpec is what a task carries from its job for its scheduler
// and agent.
func describeSpec(s *troupev1.TaskSpec) string {
	line := fmt.Sprintf("spec: %s scheduler=%s restart=%s max-retries=%d backoff=%v submitted=%s", lower(s.GetType().String(), "JOB_TYPE_"),
		s.GetScheduler(), strings.ReplaceAll(lower(s.GetRestartPolicy().String(), "RESTART_POLICY_"), "_", "-"), s.GetMaxRetries(),
		s.GetRetryBackoff().AsDuration(), scripttest.At(s.GetSubmitted()))
	if s.GetGangMin() > 0 {
		line += fmt.Sprintf(" gang-min=%d", s.GetGangMin())
	}
	return line
}

func describeRun(r *troupev1.Run) string {
	line := fmt.Sprintf("run %s on %s attempt=%d", r.GetMetadata().GetName(), r.GetMachine(), r.GetAttempt())
	if r.GetBoundAt() != nil {
		line += " bound=" + scripttest.At(r.GetBoundAt())
	}
	line += " " + lower(r.GetPhase().String(), "RUN_PHASE_")
	if r.GetExitCode() != 0 {
		line += fmt.Sprintf(" exit=%d", r.GetExitCode())
	}
	if r.GetRestarts() != 0 {
		line += fmt.Sprintf(" restarts=%d", r.GetRestarts())
	}
	if r.GetReason() != "" {
		line += fmt.Sprintf(" reason=%q", r.GetReason())
	}
	if r.GetFinished() != nil {
		line += " finished=" + scripttest.At(r.GetFinished())
	}
	return line
}

func describeEvent(e job.Event) string {
	return fmt.Sprintf("event %s %s %s %s: %s", e.Type, e.Reason, e.InvolvedKind, e.Name, e.Message)
}

func describeUpdate(u job.TaskUpdate) []string {
	line := fmt.Sprintf("%s %s: %s -> %s", u.Action, u.From.GetMetadata().GetName(), describeTaskState(u.From), describeTaskState(u.To))
	if u.Unbinds() {
		line += " (unbinds from " + u.From.GetBinding().GetMachine() + ")"
	}
	out := []string{line}
	if u.Action == job.Replaced {
		out = append(out, "  "+describeSpec(u.To.GetSpec()))
	}
	for _, e := range u.Events {
		out = append(out, "  "+describeEvent(e))
	}
	return out
}

// describeChanges lists ch in the order the controller commits it.
func describeChanges(ch job.Changes) []string {
	var out []string
	for _, t := range ch.Delete {
		line := "delete " + describeTask(t)
		if m := t.GetBinding().GetMachine(); m != "" {
			line += " (unbinds from " + m + ")"
		}
		out = append(out, line)
	}
	for _, u := range ch.Update {
		out = append(out, describeUpdate(u)...)
	}
	created := 0
	for i, batch := range ch.Create {
		names := make([]string, len(batch))
		for j, t := range batch {
			names[j] = t.GetMetadata().GetName()
		}
		list := strings.Join(names, " ")
		if len(names) > 6 {
			list = fmt.Sprintf("%s %s %s ... %s (%d tasks)", names[0], names[1], names[2], names[len(names)-1], len(names))
		}
		out = append(out, fmt.Sprintf("create (request %d of %d): %s", i+1, len(ch.Create), list))
		if i == 0 {
			out = append(out, "  "+describeSpec(batch[0].GetSpec()))
		}
		created += len(batch)
	}
	if ch.Status != nil {
		out = append(out, describeStatus(ch.Status))
	}
	for _, e := range ch.StatusEvents {
		out = append(out, "  "+describeEvent(e))
	}
	for _, e := range ch.Summary(len(ch.Update), created) {
		out = append(out, describeEvent(e))
	}
	if ch.RetryIn > 0 {
		out = append(out, fmt.Sprintf("look again in %v", ch.RetryIn))
	}
	return out
}
