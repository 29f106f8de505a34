package clientlib_test

import (
	"errors"
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

func TestManifestErrors(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		line      int
		want      string
	}{
		{"unknown top-level field", "apiVersion: troupe/v1\nkind: Job\nmetadata: {name: a, namespace: b}\nspecs: {}\n", 4, `unknown field "specs"`},
		{"unknown nested field", "apiVersion: troupe/v1\nkind: Job\nmetadata: {name: a}\nspec:\n  template:\n    comand: x\n", 6, `unknown field "spec.template.comand"`},
		{"unknown field in a list", "apiVersion: troupe/v1\nkind: Machine\nmetadata: {name: a}\nspec:\n  taints:\n  - key: a\n    effekt: x\n", 7, `unknown field "spec.taints[0].effekt"`},
		{"wrong apiVersion", "apiVersion: v1\nkind: Job\nmetadata: {name: a}\n", 1, "apiVersion"},
		{"unknown kind", "apiVersion: troupe/v1\nkind: Pod\nmetadata: {name: a}\n", 1, `unknown kind "Pod"`},
		{"no metadata", "apiVersion: troupe/v1\nkind: Job\nspec: {count: 1}\n", 1, "metadata is required"},
		{"bad enum", "apiVersion: troupe/v1\nkind: Job\nmetadata: {name: a}\nspec: {type: JOB_TYPE_NOPE}\n", 1, "JOB_TYPE_NOPE"},
		{"not a mapping", "- 1\n- 2\n", 1, "mapping"},
		{"bad yaml", "apiVersion: troupe/v1\nkind: [\n", 0, "yaml"},
		{"alias", "apiVersion: troupe/v1\nkind: Job\nmetadata: &m {name: a}\nspec: {template: *m}\n", 4, "aliases"},
		{"scalar for a message", "apiVersion: troupe/v1\nkind: Job\nmetadata: {name: a}\nspec: 3\n", 4, "want a mapping"},
	} {
		_, err := clientlib.DecodeManifests([]byte(tc.doc))
		var me *clientlib.ManifestError
		if !errors.As(err, &me) || !strings.Contains(err.Error(), tc.want) || (tc.line > 0 && me.Line != tc.line) {
			t.Errorf("%s: %v, want line %d and %q", tc.name, err, tc.line, tc.want)
		}
	}
}

func FuzzDecodeManifests(f *testing.F) {
	f.Add([]byte(sampleManifests))
	f.Add([]byte("apiVersion: troupe/v1\nkind: Run\nmetadata: {name: ns/j/0}\nmachine: m1\nphase: RUN_PHASE_RUNNING\n"))
	f.Add([]byte(`{"apiVersion": "troupe/v1", "kind": "ValidationPolicy", "metadata": {"name": "p"}, "spec": {"kinds": ["Job"], "rules": [{"expression": "true"}]}}`))
	f.Add([]byte("a: &x [*x]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ms, err := clientlib.DecodeManifests(data)
		if err != nil {
			var me *clientlib.ManifestError
			if !errors.As(err, &me) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		for _, m := range ms {
			if m.Object == nil || m.Object.GetMetadata() == nil {
				t.Fatalf("manifest without an object or metadata: %+v", m)
			}
		}
	})
}
