package clientlib_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

const sampleManifests = `# a service and a machine
apiVersion: troupe/v1
kind: Job
metadata:
  name: web
  namespace: prod
  labels: {team: infra}
spec:
  type: JOB_TYPE_SERVICE
  count: 3
  priority: 100
  template:
    command: /bin/web
    args: ["-p", "80"]
    requests: {cpu: 500, memory: 1048576}
  constraints:
    matchLabels: {zone: a}
    cel: "machine.spec.capacity['gpu'] > 0"
  retry_backoff: 5s
---
apiVersion: troupe/v1
kind: Machine
metadata: {name: m1}
spec:
  capacity: {cpu: 8000, memory: 34359738368}
  taints:
  - {key: dedicated, value: ml, effect: TAINT_EFFECT_NO_SCHEDULE}
---
`

func TestDecodeManifests(t *testing.T) {
	ms, err := clientlib.DecodeManifests([]byte(sampleManifests))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].Kind != "Job" || ms[1].Kind != "Machine" || ms[0].Line != 2 || ms[1].Line != 21 {
		t.Fatalf("decoded %d manifests: %+v", len(ms), ms)
	}
	job := ms[0].Object.(*troupev1.Job)
	if job.GetSpec().GetType() != troupev1.JobType_JOB_TYPE_SERVICE || job.GetSpec().GetTemplate().GetRequests()["cpu"] != 500 ||
		job.GetSpec().GetRetryBackoff().AsDuration() != 5*time.Second || job.GetMetadata().GetLabels()["team"] != "infra" ||
		job.GetSpec().GetConstraints().GetMatchLabels()["zone"] != "a" {
		t.Fatalf("job: %v", job)
	}
	if err := clientlib.Validate(clientlib.Jobs, job); err != nil {
		t.Fatalf("decoded job does not validate: %v", err)
	}
	m := ms[1].Object.(*troupev1.Machine)
	if m.GetSpec().GetCapacity()["memory"] != 32<<30 || m.GetSpec().GetTaints()[0].GetEffect() != troupev1.TaintEffect_TAINT_EFFECT_NO_SCHEDULE {
		t.Fatalf("machine: %v", m)
	}
	// JSON is YAML too.
	js := `{"apiVersion": "troupe/v1", "kind": "Lease", "metadata": {"name": "m1"}, "holder": "agent", "duration": "10s"}`
	if ms, err := clientlib.DecodeManifests([]byte(js)); err != nil || ms[0].Object.(*troupev1.Lease).GetHolder() != "agent" {
		t.Fatalf("json manifest: %v %v", ms, err)
	}
}

// Each of these documents has one problem, on its line.
func TestManifestErrors(t *testing.T) {
	for _, tc := range []struct {
		name, doc   string
		line        int
		field, want string
	}{
		{"unknown top-level field", "apiVersion: troupe/v1\nkind: Job\nmetadata: {name: a, namespace: b}\nspecs: {}\n", 4, "specs", "unknown field of troupe.v1.Job"},
		{"unknown nested field", "apiVersion: troupe/v1\nkind: Job\nmetadata: {name: a}\nspec:\n  template:\n    comand: x\n", 6, "spec.template.comand", "unknown field"},
		{"unknown field in a list", "apiVersion: troupe/v1\nkind: Machine\nmetadata: {name: a}\nspec:\n  taints:\n  - key: a\n    effekt: x\n", 7, "spec.taints[0].effekt", "unknown field"},
		{"wrong apiVersion", "kind: Job\napiVersion: v1\nmetadata: {name: a}\n", 2, "apiVersion", `want "troupe/v1", got "v1"`},
		{"unknown kind", "apiVersion: troupe/v1\nkind: Pod\nmetadata: {name: a}\n", 2, "kind", `unknown kind "Pod": want one of Binding, Job, Lease`},
		{"no metadata", "apiVersion: troupe/v1\nkind: Job\nspec: {count: 1}\n", 1, "metadata", "must be set"},
		{"bad enum", "apiVersion: troupe/v1\nkind: Job\nmetadata: {name: a}\nspec: {type: JOB_TYPE_NOPE}\n", 4, "spec.type", `want one of JOB_TYPE_BATCH, JOB_TYPE_SERVICE, got "JOB_TYPE_NOPE"`},
		{"string for an integer", "apiVersion: troupe/v1\nkind: Job\nmetadata: {name: a}\nspec:\n  count: three\n", 5, "spec.count", `want an integer, got "three"`},
		{"integer for a string", "apiVersion: troupe/v1\nkind: Lease\nmetadata: {name: a}\nholder: 12\n", 4, "holder", "want a string, got 12"},
		{"bad quantity", "apiVersion: troupe/v1\nkind: Machine\nmetadata: {name: a}\nspec:\n  capacity:\n    cpu: 8000\n    memory: 1Gi\n", 7, "spec.capacity[memory]",
			`want an integer, got "1Gi" (memory is in bytes: 1073741824 for 1Gi)`},
		{"bad duration", "apiVersion: troupe/v1\nkind: Job\nmetadata: {name: a}\nspec:\n  retryBackoff: 1m\n", 5, "spec.retry_backoff", `want a duration in seconds, such as "30s" or "0.5s", got "1m"`},
		{"scalar for a list", "apiVersion: troupe/v1\nkind: Job\nmetadata: {name: a}\nspec:\n  template:\n    args: -v\n", 6, "spec.template.args", `want a list, got "-v"`},
		{"null in a list", "apiVersion: troupe/v1\nkind: Job\nmetadata: {name: a}\nspec:\n  template:\n    args:\n    - ~\n", 7, "spec.template.args[0]", "want a string, got null"},
		{"field twice", "apiVersion: troupe/v1\nkind: Job\nmetadata: {name: a}\nspec:\n  gang_min: 1\n  gangMin: 2\n", 6, "spec.gang_min", "given twice (first on line 5)"},
		{"map key twice", "apiVersion: troupe/v1\nkind: Job\nmetadata:\n  name: a\n  labels: {a: x, a: y}\n", 5, "metadata.labels[a]", "given twice (first on line 5)"},
		{"not a mapping", "- 1\n- 2\n", 1, "", "a manifest is a mapping"},
		{"bad yaml", "apiVersion: troupe/v1\nkind: Job\nmetadata: {name: a}\nspec: [\n", 4, "", "did not find expected node content"},
		{"alias", "apiVersion: troupe/v1\nkind: Job\nmetadata: &m {name: a}\nspec: {template: *m}\n", 4, "", "aliases"},
		{"scalar for a message", "apiVersion: troupe/v1\nkind: Job\nmetadata: {name: a}\nspec: 3\n", 4, "spec", "want a mapping of troupe.v1.JobSpec, got 3"},
	} {
		ms, err := clientlib.DecodeManifests([]byte(tc.doc))
		var me *clientlib.ManifestError
		if !errors.As(err, &me) || !errors.Is(err, clientlib.ErrInvalid) || len(ms) != 1 || ms[0].Err == nil || len(me.Problems) != 1 {
			t.Errorf("%s: %v (%d manifests), want one problem", tc.name, err, len(ms))
			continue
		}
		if p := me.Problems[0]; p.Line != tc.line || p.Field != tc.field || !strings.Contains(p.Message, tc.want) ||
			!strings.HasPrefix(err.Error(), fmt.Sprintf("line %d: ", tc.line)) {
			t.Errorf("%s: %v, want line %d, %s: %q", tc.name, err, tc.line, tc.field, tc.want)
		}
	}
}

// oneOfEach is a job with one problem of every sort on its lines (the
// decoder's on lines 9, 12 and 14, the validation rules' on the others;
// the negative count makes gang_min out of range too), and a valid
// machine.
const oneOfEach = `apiVersion: troupe/v1
kind: Job
metadata:
  name: web
  namespace: prod
  labels: {team: "a b"}
spec:
  count: -2
  retryBackoff: 1m
  template:
    command: /bin/web
    comand: /bin/web
    requests:
      cpu: 500m
      memory: 1048576
  constraints:
    matchExpressions:
    - key: zone
      operator: LABEL_OPERATOR_IN
    cel: "machine.spec.capacity['gpu'] >"
---
apiVersion: troupe/v1
kind: Machine
metadata: {name: m1}
spec:
  capacity: {cpu: 8000, memory: 34359738368}
`

// problems writes ps one a line as "LINE FIELD RULE".
func problems(ps []clientlib.Problem) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "%d %s %s\n", p.Line, p.Field, p.Rule)
	}
	return b.String()
}

// Every problem of an object at once: the decoder's, then with Check
// the validation rules', each on its line, the valid objects decoded
// alongside.
func TestManifestProblems(t *testing.T) {
	ms, err := clientlib.DecodeManifestFile("web.yaml", []byte(oneOfEach+"---\n"+strings.Replace(oneOfEach, "name: web", "name: api", 1)))
	if len(ms) != 4 || ms[0].Err == nil || ms[1].Err != nil || ms[2].Err == nil || ms[3].Err != nil || ms[1].Object == nil || ms[2].Line != 28 {
		t.Fatalf("decoded %d manifests: %+v", len(ms), ms)
	}
	var me *clientlib.ManifestError
	if !errors.As(err, &me) || me != ms[0].Err || !strings.Contains(err.Error(), `web.yaml:28: invalid Job "prod/api": 3 problems:`) {
		t.Fatalf("error: %v, want the two jobs' problems", err)
	}
	const decoded = "9 spec.retry_backoff type\n12 spec.template.comand unknown-field\n14 spec.template.requests[cpu] type\n"
	if got := problems(me.Problems); got != decoded || me.Kind != "Job" || me.Name != "prod/web" || me.Line != 1 {
		t.Fatalf("decoder's problems of %s %q on line %d:\n%s\nwant:\n%s", me.Kind, me.Name, me.Line, got, decoded)
	}
	// What of the job is right is decoded.
	if job := ms[0].Object.(*troupev1.Job); job.GetSpec().GetCount() != -2 || job.GetSpec().GetTemplate().GetRequests()["memory"] != 1<<20 || job.GetSpec().GetTemplate().GetCommand() != "/bin/web" {
		t.Fatalf("partial job: %v", job)
	}

	err = ms[0].Check(nil)
	if !errors.As(err, &me) || !errors.Is(err, clientlib.ErrInvalid) {
		t.Fatalf("check: %v", err)
	}
	const all = "6 metadata.labels[team] label-value\n7 spec.gang_min range\n8 spec.count range\n9 spec.retry_backoff type\n12 spec.template.comand unknown-field\n" +
		"14 spec.template.requests[cpu] type\n18 spec.constraints.match_expressions[0].values required\n20 spec.constraints.cel cel-compiles\n"
	if got := problems(me.Problems); got != all {
		t.Fatalf("problems:\n%s\nwant:\n%s", got, all)
	}
	var ve *clientlib.ValidationError
	if !errors.As(err, &ve) || len(ve.Errors) != 5 {
		t.Fatalf("check: %v, want the validation error of its 5 field errors", err)
	}
	want := `web.yaml:1: invalid Job "prod/web": 8 problems:
  web.yaml:6: metadata.labels[team]: value "a b" must be at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric (label-value)
  web.yaml:7: spec.gang_min: must be in [0, count], got 0 (range)
  web.yaml:8: spec.count: must be in [1, 1000000], got -2 (range)
  web.yaml:9: spec.retry_backoff: want a duration in seconds, such as "30s" or "0.5s", got "1m" (type)
  web.yaml:12: spec.template.comand: unknown field of troupe.v1.TaskTemplate (unknown-field)
  web.yaml:14: spec.template.requests[cpu]: want an integer, got "500m" (cpu is in millicores: 500 for half a core) (type)
  web.yaml:18: spec.constraints.match_expressions[0].values: In and NotIn need values (required)
  web.yaml:20: spec.constraints.cel: `
	if !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("error:\n%v\nwant it to start:\n%s", err, want)
	}
	if err := ms[1].Check(nil); err != nil {
		t.Fatalf("check of a valid machine: %v", err)
	}
}

// A problem in a field hides the validation problems within it (they
// come of it): a count that is not an integer is not also out of range.
func TestCheckLeavesOutProblemsOfRefusedFields(t *testing.T) {
	ms, _ := clientlib.DecodeManifests([]byte("apiVersion: troupe/v1\nkind: Machine\nmetadata: {name: m1}\nspec:\n  capacity: {cpu: 8 cores, memory: 1073741824}\n"))
	var me *clientlib.ManifestError
	if err := ms[0].Check(nil); !errors.As(err, &me) || problems(me.Problems) != "5 spec.capacity[cpu] type\n" {
		t.Fatalf("check: %v", err)
	}
	ms, _ = clientlib.DecodeManifests([]byte("apiVersion: troupe/v1\nkind: Job\nspec: {count: 1, template: {command: x}}\n"))
	if err := ms[0].Check(nil); !errors.As(err, &me) || problems(me.Problems) != "1 metadata required\n" {
		t.Fatalf("check: %v", err)
	}
	// A document without an object: its decoder's problems alone.
	ms, _ = clientlib.DecodeManifests([]byte("apiVersion: troupe/v1\nkind: Pod\n"))
	if err := ms[0].Check(nil); err != ms[0].Err || ms[0].Object != nil || ms[0].Kind != "" {
		t.Fatalf("check of a Pod: %v", err)
	}
}

// Field paths as validation rules write them, to lines of the document:
// snake_case or camelCase, map keys plain or quoted, list indexes; a
// field the document lacks is on its nearest parent's line.
func TestFieldLine(t *testing.T) {
	ms, err := clientlib.DecodeManifests([]byte(sampleManifests))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		m    int
		path string
		line int
	}{
		{0, "", 2},
		{0, "metadata.labels[team]", 7},
		{0, "metadata.labels", 7},
		{0, "spec.count", 10},
		{0, "spec.template.requests[cpu]", 15},
		{0, "spec.template.requests['memory']", 15},
		{0, `spec.template.requests["cpu"]`, 15},
		{0, "spec.template.args[1]", 14},
		{0, "spec.template.args[2]", 14},
		{0, "spec.template.requests[gpu]", 15},
		{0, "spec.constraints.match_labels[zone]", 17},
		{0, "spec.constraints.matchLabels[zone]", 17},
		{0, "spec.constraints.match_expressions[0].values", 16},
		{0, "spec.retry_backoff", 19},
		{0, "spec.retryBackoff", 19},
		{0, "spec.gang_min", 8},
		{0, "status.phase", 2},
		{0, "metadata.labels[Team]", 7},
		{1, "spec.taints[0].effect", 27},
		{1, "spec.taints[0].value", 27},
		{1, "spec.capacity[cpu]", 25},
		{1, "spec.capacity.cpu", 25},
		{1, "metadata.name", 23},
		{1, "spec.taints[x]", 26},
	} {
		if got := ms[tc.m].FieldLine(tc.path); got != tc.line {
			t.Errorf("manifest %d: line of %q: %d, want %d", tc.m, tc.path, got, tc.line)
		}
	}
	// A multi-line value: a field's line is its key's, a list item's its
	// own.
	ms, _ = clientlib.DecodeManifests([]byte("apiVersion: troupe/v1\nkind: Job\nmetadata: {name: a}\nspec:\n  template:\n    args:\n    - a\n    -\n      b\n"))
	for path, line := range map[string]int{"spec.template.args": 6, "spec.template.args[0]": 7, "spec.template.args[1]": 9} {
		if got := ms[0].FieldLine(path); got != line {
			t.Errorf("line of %q: %d, want %d", path, got, line)
		}
	}
}

// Locate puts the field errors of a write's validation error on their
// lines and keeps it; other errors stay as they are.
func TestLocate(t *testing.T) {
	ms, err := clientlib.DecodeManifestFile("web.yaml", []byte(sampleManifests))
	if err != nil {
		t.Fatal(err)
	}
	job := ms[0].Object.(*troupev1.Job)
	job.Spec.Count = 0
	verr := fmt.Errorf("create Job: %w", clientlib.Validate(clientlib.Jobs, job))
	err = ms[0].Locate(verr)
	var me *clientlib.ManifestError
	var ve *clientlib.ValidationError
	if !errors.As(err, &me) || !errors.As(err, &ve) || !errors.Is(err, clientlib.ErrInvalid) || !errors.Is(err, verr) {
		t.Fatalf("located: %v", err)
	}
	if want := `web.yaml:10: invalid Job "prod/web": spec.count: must be in [1, 1000000], got 0 (range)`; err.Error() != want {
		t.Fatalf("located: %q, want %q", err, want)
	}
	if again := ms[0].Locate(err); again != err {
		t.Fatalf("located twice: %v", again)
	}
	other := errors.New("no store answers")
	if got := ms[0].Locate(other); got != other {
		t.Fatalf("located %v", got)
	}
}

func FuzzDecodeManifests(f *testing.F) {
	f.Add([]byte(sampleManifests))
	f.Add([]byte("apiVersion: troupe/v1\nkind: Run\nmetadata: {name: ns/j/0}\nmachine: m1\nphase: RUN_PHASE_RUNNING\n"))
	f.Add([]byte(`{"apiVersion": "troupe/v1", "kind": "ValidationPolicy", "metadata": {"name": "p"}, "spec": {"kinds": ["Job"], "rules": [{"expression": "true"}]}}`))
	f.Add([]byte("a: &x [*x]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ms, err := clientlib.DecodeManifests(data)
		var me *clientlib.ManifestError
		if err != nil && !errors.As(err, &me) {
			t.Fatalf("error of type %T: %v", err, err)
		}
		for _, m := range ms {
			switch {
			case m.Err == nil && (m.Object == nil || m.Object.GetMetadata() == nil):
				t.Fatalf("manifest without problems, an object or metadata: %+v", m)
			case m.Err != nil && err == nil:
				t.Fatalf("manifest with problems, and no error: %+v", m)
			}
			// What of a document decoded checks.
			if err := m.Check(nil); err != nil && !errors.As(err, &me) {
				t.Fatalf("check: error of type %T: %v", err, err)
			}
			m.FieldLine("spec.template.requests[cpu]")
		}
	})
}
