package authz

import (
	"strings"
	"testing"

	"github.com/troupe-cluster/troupe/cellstore/pki"
)

var (
	agentM1   = pki.Identity{Role: pki.RoleAgent, Name: "m1"}
	hollow    = pki.Identity{Role: pki.RoleAgent, Name: "hollow-*"}
	sched     = pki.Identity{Role: pki.RoleScheduler, Name: "batch-0"}
	ctl       = pki.Identity{Role: pki.RoleController, Name: "local"}
	viewer    = pki.Identity{Role: pki.RoleViewer, Name: "ops"}
	admin     = pki.Identity{Role: pki.RoleAdmin, Name: "ops"}
	storeNode = pki.Identity{Role: pki.RoleStore, Name: "1"}
)

func TestDefaultKeys(t *testing.T) {
	r := Default()
	for _, c := range []struct {
		id   pki.Identity
		key  string
		op   Op
		want bool
	}{
		// Node restriction.
		{agentM1, "/machines/m1", OpPut, true},
		{agentM1, "/machines/m2", OpPut, false},
		{agentM1, "/machines/m10", OpRead, false},
		{agentM1, "/leases/m1", OpUpdate, true},
		{agentM1, "/leases/m2", OpUpdate, false},
		{agentM1, "/runs/m1/ns/job/0", OpCreate, true},
		{agentM1, "/runs/m2/ns/job/0", OpCreate, false},
		{agentM1, "/runs/m1/ns/job/0", OpDelete, false},
		{agentM1, "/bindings/m1/ns/job/0", OpRead, true},
		{agentM1, "/bindings/m1/ns/job/0", OpCreate, false},
		{agentM1, "/bindings/m2/ns/job/0", OpRead, false},
		{agentM1, "/tasks/ns/job/0", OpRead, false},
		{agentM1, "/jobs/ns/job", OpRead, false},
		{agentM1, "/alloc/m1/cpu", OpAdd, false},
		{agentM1, "/machineevents/m1/e1", OpCreate, true},
		{agentM1, "/machineevents/m2/e1", OpCreate, false},
		{agentM1, "/events/ns/job/e1", OpCreate, false},
		{agentM1, "/runas/ns", OpRead, true},
		// A task starts only while its job runs: agents check the
		// jobs' stop keys, and cannot stop a job.
		{agentM1, "/jobstops/ns/job", OpRead, true},
		{agentM1, "/jobstops/ns/job", OpAdd, false},
		{agentM1, "/jobstops/ns/job", OpPut, false},
		{hollow, "/machines/hollow-0001", OpPut, true},
		{hollow, "/runs/hollow-0001/ns/j/0", OpUpdate, true},
		{hollow, "/machines/m1", OpRead, false},
		// Schedulers bind but do not create or delete jobs or tasks.
		{sched, "/tasks/ns/job/0", OpUpdate, true},
		{sched, "/tasks/ns/job/0", OpCreate, false},
		{sched, "/tasks/ns/job/0", OpPut, false},
		{sched, "/tasks/ns/job/0", OpDelete, false},
		{sched, "/jobs/ns/job", OpDelete, false},
		{sched, "/jobs/ns/job", OpCreate, false},
		{sched, "/jobs/ns/job", OpRead, true},
		{sched, "/bindings/m1/ns/job/0", OpCreate, true},
		{sched, "/alloc/m1/cpu", OpAdd, true},
		{sched, "/jobstops/ns/job", OpRead, true},
		{sched, "/jobstops/ns/job", OpPut, false},
		{sched, "/runs/m1/ns/job/0", OpUpdate, false},
		{sched, "/schedulers/batch-0", OpPut, true},
		// A scheduler says why a job waits in its JobScheduling, never
		// in the job; whoever reads jobs reads it; the job controller
		// only collects a deleted job's.
		{sched, "/jobs/ns/job", OpUpdate, false},
		{sched, "/scheduling/ns/job", OpPut, true},
		{sched, "/scheduling/ns/job", OpDelete, true},
		{ctl, "/scheduling/ns/job", OpRead, true},
		{ctl, "/scheduling/ns/job", OpDelete, true},
		{ctl, "/scheduling/ns/job", OpPut, false},
		{viewer, "/scheduling/ns/job", OpRead, true},
		{viewer, "/scheduling/ns/job", OpPut, false},
		{admin, "/scheduling/ns/job", OpRead, true},
		{agentM1, "/scheduling/ns/job", OpRead, false},
		// Controllers: tasks and status, never a job's creation.
		{ctl, "/tasks/ns/job/0", OpCreate, true},
		{ctl, "/tasks/ns/job/0", OpDelete, true},
		{ctl, "/jobs/ns/job", OpUpdate, true},
		{ctl, "/jobs/ns/job", OpCreate, false},
		{ctl, "/jobs/ns/job", OpDelete, false},
		{ctl, "/leases/m1", OpUpdate, false},
		// Quota: only admins write a namespace's Quota (writing its jobs
		// does not raise it); the job controller reads it and alone
		// moves the usage counters; everyone who reads quotas reads them.
		{admin, "/quotas/ns", OpPut, true},
		{ctl, "/quotas/ns", OpRead, true},
		{ctl, "/quotas/ns", OpPut, false},
		{ctl, "/quotas/ns", OpDelete, false},
		{ctl, "/quotaused/ns/production/cpu", OpAdd, true},
		{ctl, "/quotaused/ns/production/cpu", OpPut, false},
		{ctl, "/quotaused/ns/production/cpu", OpDelete, false},
		{sched, "/quotas/ns", OpPut, false},
		{sched, "/quotaused/ns/production/cpu", OpAdd, false},
		{sched, "/quotaused/ns/production/cpu", OpRead, true},
		{viewer, "/quotas/ns", OpRead, true},
		{viewer, "/quotaused/ns/non-production/tasks", OpRead, true},
		{viewer, "/quotas/ns", OpPut, false},
		{viewer, "/quotaused/ns/production/cpu", OpAdd, false},
		{agentM1, "/quotas/ns", OpRead, false},
		{agentM1, "/quotaused/ns/production/cpu", OpAdd, false},
		// Viewers read.
		{viewer, "/jobs/ns/job", OpRead, true},
		{viewer, "/jobs/ns/job", OpCreate, false},
		{viewer, "/alloc/m1/cpu", OpAdd, false},
		{admin, "/anything/at/all", OpPut, true},
		{admin, "no-slash", OpDelete, true},
		{storeNode, "/jobs/ns/job", OpRead, false},
		{pki.Identity{}, "/jobs/ns/job", OpRead, false},
	} {
		if got := r.AllowKey(c.id, c.key, c.op); got != c.want {
			t.Errorf("%s %s %s: got %v, want %v", c.id, c.op, c.key, got, c.want)
		}
	}
}

func TestDefaultPrefixes(t *testing.T) {
	r := Default()
	for _, c := range []struct {
		id     pki.Identity
		prefix string
		op     Op
		want   bool
	}{
		{agentM1, "/bindings/m1/", OpWatch, true},
		{agentM1, "/bindings/m1/ns/", OpWatch, true},
		{agentM1, "/bindings/m1", OpWatch, false}, // also /bindings/m10/...
		{agentM1, "/bindings/", OpWatch, false},
		{agentM1, "/bindings/m2/", OpRead, false},
		{hollow, "/bindings/hollow-0003/", OpWatch, true},
		{hollow, "/bindings/hollow-", OpWatch, false},
		{agentM1, "", OpRead, false},
		{sched, "/tasks/", OpWatch, true},
		{sched, "", OpWatch, true},
		{viewer, "/", OpRead, true},
		{viewer, "/jobs/", OpWatch, true},
		{viewer, "/scheduling/", OpRead, true},
		{viewer, "/scheduling/ns/", OpRead, true},
		{ctl, "/quotas/", OpWatch, true},
		{viewer, "/quotaused/", OpRead, true},
		{viewer, "/quotaused/ns/", OpRead, true},
		{storeNode, "/jobs/", OpRead, false},
	} {
		if got := r.AllowPrefix(c.id, c.prefix, c.op); got != c.want {
			t.Errorf("%s %s prefix %q: got %v, want %v", c.id, c.op, c.prefix, got, c.want)
		}
	}
}

func TestDefaultCalls(t *testing.T) {
	r := Default()
	for _, id := range []pki.Identity{agentM1, sched, ctl, viewer, admin, storeNode} {
		if !r.AllowCall(id, CallStatus) {
			t.Errorf("%s may not ask for status", id)
		}
		if got, want := r.AllowCall(id, CallBackup), id.Role == pki.RoleAdmin; got != want {
			t.Errorf("%s backup: got %v, want %v", id, got, want)
		}
		if got, want := r.AllowCall(id, CallChangeMembers), id.Role == pki.RoleAdmin || id.Role == pki.RoleStore; got != want {
			t.Errorf("%s change members: got %v, want %v", id, got, want)
		}
	}
}

func TestParseErrorsNameLines(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"roles:\n  root:\n    calls: [status]\n", `rules.yaml:2: unknown role "root"`},
		{"roles:\n  agent:\n    calls: [status, reboot]\n", `rules.yaml:3: role agent: unknown call "reboot"`},
		{"roles:\n  agent:\n    keys:\n      - match: /a/**/b\n        allow: [read]\n", "rules.yaml:4: role agent: pattern \"/a/**/b\": ** may only be the last segment"},
		{"roles:\n  agent:\n    keys:\n      - match: /a/x*\n        allow: [read]\n", "rules.yaml:4: role agent: pattern \"/a/x*\""},
		{"roles:\n  agent:\n    keys:\n      - match: /a\n        allow: [read,\n          write]\n", `rules.yaml:6: role agent: unknown operation "write"`},
		{"roles:\n  agent:\n    keys:\n      - match: /a\n", `rules.yaml:4: role agent: rule "/a" allows nothing`},
		{"roles:\n  agent:\n    keys:\n      - allow: [read]\n", `rules.yaml:2: role agent: a key rule without 'match'`},
		{"roles:\n  agent:\n    key: []\n", "rules.yaml: yaml: unmarshal errors:\n  line 3: field key not found"},
		{"", "rules.yaml: empty rules file"},
		{"roles: [\n", "rules.yaml: yaml: line 1"},
	} {
		_, err := Parse([]byte(c.text), "rules.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.text, err, c.want)
		}
	}
}

func TestFileReplacesDefaults(t *testing.T) {
	r, err := Parse([]byte("roles:\n  viewer:\n    keys:\n      - match: /jobs/**\n        allow: [read]\n"), "rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !r.AllowKey(viewer, "/jobs/ns/a", OpRead) || r.AllowKey(viewer, "/tasks/ns/a/0", OpRead) || r.AllowCall(viewer, CallStatus) {
		t.Fatal("viewer's rules are not the file's")
	}
	if r.AllowKey(admin, "/jobs/ns/a", OpRead) {
		t.Fatal("a role the file leaves out may do something")
	}
	if _, err := Parse(DefaultRulesYAML(), "default"); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkAllowKey is the cost of authorizing one key of a placement
// (the scheduler's task update, binding, and counter).
func BenchmarkAllowKey(b *testing.B) {
	r := Default()
	keys := []struct {
		k  string
		op Op
	}{{"/tasks/default/job-17/3", OpUpdate}, {"/bindings/m-0042/default/job-17/3", OpCreate}, {"/alloc/m-0042/cpu", OpAdd}}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := keys[i%len(keys)]
		if !r.AllowKey(sched, k.k, k.op) {
			b.Fatal("refused")
		}
	}
}
