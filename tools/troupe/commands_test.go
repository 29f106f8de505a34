package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// expect runs troupe args with c and fails the test unless it exits with
// code and prints each of out on stdout and each of errOut on stderr
// (blanks between words aside). It returns stdout.
func (c cli) expect(ctx context.Context, t *testing.T, code int, out, errOut []string, args ...string) string {
	t.Helper()
	stdout, stderr, got := c.run(ctx, args...)
	bad := got != code
	for _, w := range out {
		bad = bad || !strings.Contains(squeeze(stdout), squeeze(w))
	}
	for _, w := range errOut {
		bad = bad || !strings.Contains(squeeze(stderr), squeeze(w))
	}
	if bad {
		t.Fatalf("troupe %s: exit status %d, want %d; want %q on stdout and %q on stderr\nstdout:\n%s\nstderr:\n%s",
			strings.Join(args, " "), got, code, out, errOut, stdout, stderr)
	}
	return stdout
}

func lines(s ...string) []string { return s }

// The commands as a user types them against a test cell: flags before and
// after arguments, with one dash or two; from the environment; contexts
// of a configuration file (and the file troupe up wrote before them); an
// object that does not exist; a store that does not answer.
func TestCommandsAsTyped(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cell := clienttest.Start(ctx, t)
	c := cell.Client()
	ep := cell.EndpointList()
	admin := cell.AdminFlags() // --ca CA --cert CERT --key KEY
	ca, cert, key := admin[1], admin[3], admin[5]
	for _, j := range []struct{ ns, name string }{{"default", "web"}, {"default", "batch"}, {"team-a", "api"}} {
		if _, err := clientlib.Create(ctx, c, clientlib.Jobs, &troupev1.Job{
			Metadata: &troupev1.ObjectMeta{Name: j.name, Namespace: j.ns, Labels: map[string]string{"app": j.name}},
			Spec: &troupev1.JobSpec{Count: 1, Template: &troupev1.TaskTemplate{Command: "/bin/true", SimDuration: durationpb.New(time.Hour),
				Requests: map[string]int64{"cpu": 500, "memory": 64 << 20}}}}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	none := cli{}.with("TROUPE_CONFIG=" + filepath.Join(dir, "none.yaml")) // no configuration
	flags := append([]string{"--endpoint", ep}, admin...)

	t.Run("flags anywhere", func(t *testing.T) {
		only := func(out string) {
			t.Helper()
			ms, err := clientlib.DecodeManifests([]byte(out))
			if err != nil || len(ms) != 1 || ms[0].Object.GetMetadata().GetName() != "web" {
				t.Fatalf("want job web alone (%v):\n%s", err, out)
			}
		}
		only(none.expect(ctx, t, 0, nil, nil, append([]string{"get", "jobs", "web", "-o", "yaml"}, flags...)...))
		only(none.expect(ctx, t, 0, nil, nil, append(append([]string{"get"}, flags...), "-o", "yaml", "jobs", "web")...))
		only(none.expect(ctx, t, 0, nil, nil, "get", "jobs", "-o", "yaml", "web", "--endpoint", ep, "--ca", ca, "--cert", cert, "--key", key))
		only(none.expect(ctx, t, 0, nil, nil, "get", "jobs", "-endpoint", ep, "-ca", ca, "-cert="+cert, "-key", key, "-oyaml", "web"))
		none.expect(ctx, t, 0, lines("team-a api", "default batch", "default web", "cpu=500m,memory=64Mi"), nil,
			append([]string{"get", "jobs", "-o", "wide"}, flags...)...)
		if out := none.expect(ctx, t, 0, lines("team-a api"), nil, append([]string{"get", "jobs", "-n", "team-a"}, flags...)...); strings.Contains(out, "web") {
			t.Fatalf("get jobs -n team-a listed another namespace:\n%s", out)
		}
		none.expect(ctx, t, 0, lines("team-a api"), nil, append([]string{"get", "jobs", "team-a/api"}, flags...)...)
		none.expect(ctx, t, 0, lines("team-a api"), nil, append([]string{"get", "job", "api", "--namespace=team-a"}, flags...)...)
		none.expect(ctx, t, 0, lines("default web"), nil, append(append([]string{"get"}, flags...), "--", "jobs", "web")...)
	})

	t.Run("environment", func(t *testing.T) {
		env := none.with("TROUPE_ENDPOINT="+ep, "TROUPE_CA="+ca, "TROUPE_CERT="+cert, "TROUPE_KEY="+key)
		env.expect(ctx, t, 0, lines("default web"), nil, "get", "jobs")
		env.with("TROUPE_OUTPUT=json").expect(ctx, t, 0, lines(`"name": "web"`), nil, "get", "jobs", "web")
		env.with("TROUPE_O=json").expect(ctx, t, 0, lines(`"name": "web"`), nil, "get", "jobs", "web") // -o's name before it had a long one
		// A flag given wins over its variable.
		env.expect(ctx, t, 1, nil, lines("no store answers at 127.0.0.1:1 (from --endpoint: connection refused)"),
			"get", "jobs", "--endpoint", "127.0.0.1:1")
		env.with("TROUPE_TIMEOUT=soon").expect(ctx, t, 1, nil, lines(`TROUPE_TIMEOUT="soon"`), "get", "jobs")
	})

	t.Run("contexts", func(t *testing.T) {
		cfg := none.with("TROUPE_CONFIG=" + filepath.Join(dir, "config.yaml"))
		cfg.expect(ctx, t, 1, nil, lines("no credentials", "troupe config set-context"), "get", "jobs")
		cfg.expect(ctx, t, 0, lines(`Context "test" created`, `Switched to context "test"`), nil,
			"config", "set-context", "test", "--endpoint", ep, "--ca", ca, "--cert", cert, "--key", key)
		cfg.expect(ctx, t, 0, lines("default web"), nil, "get", "jobs")
		cfg.expect(ctx, t, 0, lines(`Context "dead" created`), nil, "config", "set-context", "dead", "--endpoint", "127.0.0.1:1", "--ca", ca, "--cert", cert, "--key", key)
		cfg.expect(ctx, t, 0, lines("CURRENT NAME ENDPOINT CREDENTIALS", "* test "+ep+" "+cert, "dead 127.0.0.1:1"), nil, "config", "get-contexts")
		cfg.expect(ctx, t, 0, lines("test", "dead"), nil, "__complete", "get", "jobs", "--context", "")
		cfg.expect(ctx, t, 0, lines(`Switched to context "dead"`), nil, "config", "use-context", "dead")
		cfg.expect(ctx, t, 0, lines("dead"), nil, "config", "current-context")
		cfg.expect(ctx, t, 1, nil, lines(`no store answers at 127.0.0.1:1 (from context "dead": connection refused): is the cell running?`), "get", "jobs")
		cfg.expect(ctx, t, 0, lines("default web"), nil, "get", "jobs", "--context", "test")
		cfg.with("TROUPE_CONTEXT=test").expect(ctx, t, 0, lines("default web"), nil, "get", "jobs")
		// The environment beats the current context; a --context on the
		// command line beats the environment.
		cfg.with("TROUPE_ENDPOINT="+ep).expect(ctx, t, 0, lines("default web"), nil, "get", "jobs")
		cfg.with("TROUPE_ENDPOINT="+ep).expect(ctx, t, 1, nil, lines(`from context "dead"`), "get", "jobs", "--context", "dead")
		cfg.expect(ctx, t, 1, nil, lines(`no context "nosuch"`), "config", "use-context", "nosuch")
		cfg.expect(ctx, t, 1, nil, lines(`no context "nosuch"`), "get", "jobs", "--context", "nosuch")
		cfg.expect(ctx, t, 2, nil, lines("give a context's NAME"), "config", "use-context")
		// set-context changes only the fields given, and never takes them
		// from the environment.
		cfg.with("TROUPE_ENDPOINT=127.0.0.2:1").expect(ctx, t, 0, lines(`Context "dead" modified`), nil, "config", "set-context", "dead", "--insecure")
		cfg.expect(ctx, t, 0, lines("* dead 127.0.0.1:1 insecure"), nil, "config", "get-contexts")
		cfg.expect(ctx, t, 0, lines(`Context "dead" deleted`), nil, "config", "delete-context", "dead")
		cfg.expect(ctx, t, 1, nil, lines("no credentials"), "get", "jobs") // no current context
		cfg.expect(ctx, t, 1, nil, lines(`no context "dead"`), "get", "jobs", "--context", "dead")
		cfg.expect(ctx, t, 0, nil, nil, "config", "use-context", "test")
		cfg.expect(ctx, t, 0, lines("default web"), nil, "get", "jobs")

		// The file troupe up wrote before contexts: one cell, the context
		// "local".
		legacy := filepath.Join(dir, "legacy.yaml")
		if err := os.WriteFile(legacy, []byte("# Written by troupe up\nendpoints:\n- "+ep+"\nca: "+ca+"\ncert: "+cert+"\nkey: "+key+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		old := none.with("TROUPE_CONFIG=" + legacy)
		old.expect(ctx, t, 0, lines("default web"), nil, "get", "jobs")
		old.expect(ctx, t, 0, lines("* local "+ep), nil, "config", "get-contexts")
		old.expect(ctx, t, 0, lines("default web"), nil, "get", "jobs", "--config", legacy, "--context", "local")
	})

	t.Run("not found", func(t *testing.T) {
		none.expect(ctx, t, 1, nil, lines("troupe get: job default/nosuch not found"), append([]string{"get", "jobs", "nosuch"}, flags...)...)
		none.expect(ctx, t, 1, lines("default web"), lines("job default/nosuch not found"), append([]string{"get", "jobs", "web", "nosuch"}, flags...)...)
		none.expect(ctx, t, 1, nil, lines("task default/web-7 not found"), append([]string{"get", "tasks", "web-7"}, flags...)...)
		none.expect(ctx, t, 1, nil, lines("machine m9 not found"), append([]string{"get", "machine", "m9", "-o", "yaml"}, flags...)...)
		none.expect(ctx, t, 1, nil, lines("troupe describe: job default/nosuch not found"), append([]string{"describe", "job", "nosuch"}, flags...)...)
		out := none.expect(ctx, t, 1, nil, lines("troupe delete: job default/nosuchjob not found"), append([]string{"delete", "job", "nosuchjob"}, flags...)...)
		if out != "" {
			t.Fatalf("delete of a missing job printed %q", out)
		}
		none.expect(ctx, t, 1, nil, lines("troupe job stop: job default/nosuchjob not found"), append([]string{"job", "stop", "nosuchjob"}, flags...)...)
		none.expect(ctx, t, 0, lines("job/default/batch deleted"), nil, append([]string{"delete", "job", "batch"}, flags...)...)
		none.expect(ctx, t, 1, nil, lines("job default/batch not found"), append([]string{"get", "jobs", "batch"}, flags...)...)
	})

	t.Run("manifests", func(t *testing.T) {
		// A job without a namespace goes to "default" (-n: another).
		manifest := filepath.Join(dir, "job.yaml")
		if err := os.WriteFile(manifest, []byte("apiVersion: troupe/v1\nkind: Job\nmetadata: {name: bare}\nspec:\n  count: 1\n  template: {command: /bin/true}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		none.expect(ctx, t, 0, lines("job/default/bare created"), nil, append([]string{"apply", "-f", manifest}, flags...)...)
		none.expect(ctx, t, 0, lines("job/default/bare unchanged"), nil, append(append([]string{"apply"}, flags...), "-f", manifest)...)
		none.expect(ctx, t, 0, lines("job/default/bare unchanged"), nil, append([]string{"job", "run", manifest}, flags...)...)
		none.expect(ctx, t, 0, lines("job/team-b/bare created"), nil, append([]string{"apply", "-n", "team-b", "--filename", manifest}, flags...)...)
		none.expect(ctx, t, 0, lines("job/default/bare stopped"), nil, append([]string{"job", "stop", "bare"}, flags...)...)
		none.expect(ctx, t, 0, lines("job/default/bare deleted"), nil, append([]string{"delete", "-f", manifest}, flags...)...)
		none.expect(ctx, t, 1, nil, lines("job default/bare not found"), append([]string{"delete", "-f", manifest}, flags...)...)
		none.expect(ctx, t, 0, lines("job/team-b/bare deleted"), nil, append([]string{"delete", "job", "team-b/bare"}, flags...)...)
	})

	t.Run("unreachable", func(t *testing.T) {
		// Nothing listens: refused at once.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := ln.Addr().String()
		ln.Close()
		start := time.Now()
		none.expect(ctx, t, 1, nil, lines("troupe get: no store answers at "+closed+" (from --endpoint: connection refused): is the cell running? "+
			"set --endpoint, TROUPE_ENDPOINT or a context"), "get", "jobs", "--endpoint", closed, "--insecure")
		// Something accepts connections and never answers: the first
		// contact gives up after the dial timeout, not the client's retries.
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				defer conn.Close()
			}
		}()
		quick := none
		quick.dialTimeout = 200 * time.Millisecond
		quick.expect(ctx, t, 1, nil, lines("no store answers at "+ln.Addr().String()+" (from --endpoint: no answer within 200ms)"),
			"status", "--insecure", "--timeout", "200ms", "--endpoint="+ln.Addr().String())
		quick.with("TROUPE_ENDPOINT="+ln.Addr().String()).expect(ctx, t, 1, nil,
			lines("no store answers at "+ln.Addr().String()+" (from TROUPE_ENDPOINT: no answer within 200ms)"), "get", "jobs", "--insecure")
		if d := time.Since(start); d > 4*time.Second {
			t.Errorf("the unreachable cases took %v", d)
		}
	})

	t.Run("usage", func(t *testing.T) {
		none.expect(ctx, t, 2, nil, lines("troupe get: unknown flag: --bogus", "Run 'troupe get --help' for usage."), "get", "jobs", "--bogus")
		none.expect(ctx, t, 2, nil, lines("troupe get: give machines, jobs, tasks or schedulers"), "get")
		none.expect(ctx, t, 2, nil, lines(`unknown kind "pods"`), append([]string{"get", "pods"}, flags...)...)
		none.expect(ctx, t, 2, nil, lines(`unknown command "nosuch" for "troupe"`), "nosuch")
		none.expect(ctx, t, 2, nil, lines(`troupe certs: unknown subcommand "nosuch" (init, issue, show)`), "certs", "nosuch")
		none.expect(ctx, t, 0, lines("Usage:", "troupe get machines|jobs|tasks|schedulers [NAME...] [flags]", "--endpoint string", "-o, --output"), nil, "get", "-h")
		none.expect(ctx, t, 0, lines("Usage:", "--data-dir string", "--node-id uint", "Available Commands:", "members"), nil, "store", "-help")
		none.expect(ctx, t, 0, lines("troupe "+version), nil, "--version")
		// troupe version: the whole of what it prints, on stdout alone,
		// with no cell needed.
		if out, errOut, code := none.run(ctx, "version"); code != 0 || errOut != "" ||
			out != fmt.Sprintf("troupe %s\ncommit:  %s\nbuilt:   %s\ngo:      %s %s/%s\n", version, commit, buildDate, runtime.Version(), runtime.GOOS, runtime.GOARCH) {
			t.Fatalf("troupe version: exit status %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		none.expect(ctx, t, 2, nil, lines(`troupe version: unexpected argument "now"`), "version", "now")
		none.expect(ctx, t, 0, lines("complete -o default -F __start_troupe troupe"), nil, "completion", "bash")
		none.expect(ctx, t, 0, lines("jobs", "tasks"), nil, "__complete", "get", "")
	})
}
