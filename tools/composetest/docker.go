package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// compose drives one docker-compose project: the cell under test.
type compose struct {
	// cmd is docker-compose, or docker compose.
	cmd           []string
	file, project string
	// env is what the compose file reads: CELL_IMAGE and the host ports.
	env map[string]string
	// logDir gets the output of long commands (image builds).
	logDir string
}

// run runs a command with extra environment, returning its combined
// output; an error carries the output's tail.
func run(ctx context.Context, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, tail(out.String(), 40))
	}
	return out.String(), nil
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// envList is c.env with image as CELL_IMAGE.
func (c *compose) envList(image string) []string {
	var out []string
	for k, v := range c.env {
		out = append(out, k+"="+v)
	}
	return append(out, "CELL_IMAGE="+image)
}

// do runs docker-compose on the project with the cell's image set to image.
func (c *compose) do(ctx context.Context, image string, args ...string) (string, error) {
	a := append(append([]string{}, c.cmd[1:]...), "-p", c.project, "-f", c.file)
	return run(ctx, c.envList(image), c.cmd[0], append(a, args...)...)
}

// container is the ID of the service's container (running or not), ""
// if there is none.
func (c *compose) container(ctx context.Context, service string) (string, error) {
	out, err := run(ctx, nil, "docker", "ps", "-aq", "--no-trunc",
		"--filter", "label=com.docker.compose.project="+c.project,
		"--filter", "label=com.docker.compose.service="+service)
	if err != nil {
		return "", err
	}
	ids := strings.Fields(out)
	if len(ids) > 1 {
		return "", fmt.Errorf("service %s has %d containers", service, len(ids))
	}
	if len(ids) == 0 {
		return "", nil
	}
	return ids[0], nil
}

// state is what docker says of a container.
type state struct {
	status, health, image string
	exitCode              int
	started               time.Time
}

func inspect(ctx context.Context, id string) (state, error) {
	out, err := run(ctx, nil, "docker", "inspect", "-f",
		"{{.State.Status}}|{{if .State.Health}}{{.State.Health.Status}}{{end}}|{{.Image}}|{{.State.ExitCode}}|{{.State.StartedAt}}", id)
	if err != nil {
		return state{}, err
	}
	f := strings.Split(strings.TrimSpace(out), "|")
	if len(f) != 5 {
		return state{}, fmt.Errorf("docker inspect %s: unexpected %q", id, out)
	}
	code, _ := strconv.Atoi(f[3])
	started, _ := time.Parse(time.RFC3339Nano, f[4])
	return state{status: f[0], health: f[1], image: f[2], exitCode: code, started: started}, nil
}

// imageID is the ID of an image reference.
func imageID(ctx context.Context, ref string) (string, error) {
	out, err := run(ctx, nil, "docker", "image", "inspect", "-f", "{{.Id}}", ref)
	return strings.TrimSpace(out), err
}

// freePorts returns n distinct TCP ports free on 127.0.0.1 now.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// validTag makes s a valid Docker tag: [A-Za-z0-9_.-], not starting with
// '.' or '-', at most 128 characters.
func validTag(s string) string {
	b := []byte(s)
	for i, ch := range b {
		ok := ch == '_' || ch == '.' || ch == '-' || (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')
		if !ok {
			b[i] = '-'
		}
	}
	s = strings.TrimLeft(string(b), ".-")
	if s == "" {
		s = "dev"
	}
	if len(s) > 120 {
		s = s[:120]
	}
	return s
}
