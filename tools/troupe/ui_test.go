package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/tools/cell"
)

// httpGet fetches url with client c: its status and body.
func httpGet(c *http.Client, url string) (int, string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// `troupe up`'s HTTP address serves the store's metrics and health and,
// on loopback, the web view of the cell, read with the local viewer's
// certificate; away from loopback, metrics alone.
func TestUpServesTheWebView(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	c, err := cell.Start(ctx, cell.Config{DataDir: t.TempDir(), GRPCAddr: "127.0.0.1:0", Hollow: 2, HollowCapacity: map[string]int64{"cpu": 4000, "memory": 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	web, err := serveUp(ctx, "127.0.0.1:0", c, false, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer web.Close()
	if !web.View {
		t.Fatal("no web view on loopback")
	}
	base := "http://" + web.Addr.String()
	// A hollow machine is registered, then reports itself ready.
	wait.Until(ctx, t, "the cell page to show 2 machines, hollow-0001 ready", func() error {
		for path, want := range map[string]string{"/ui/": `id="machine-count">2<`, "/ui/machine/hollow-0001": "READY"} {
			code, body, err := httpGet(http.DefaultClient, base+path)
			if err == nil && (code != http.StatusOK || !strings.Contains(body, want)) {
				err = fmt.Errorf("%s: %d: %.300s", path, code, body)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	for path, want := range map[string]string{"/metrics": "troupe_ui_streams", "/metrics?": "troupe_store_", "/healthz": "ok", "/": `id="machine-count"`} {
		if code, body, err := httpGet(http.DefaultClient, base+path); err != nil || code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("%s: %d %v, no %q in %.300s", path, code, err, want, body)
		}
	}

	away, err := serveUp(ctx, "0.0.0.0:0", c, false, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer away.Close()
	_, port, _ := net.SplitHostPort(away.Addr.String())
	if code, _, err := httpGet(http.DefaultClient, "http://127.0.0.1:"+port+"/ui/"); away.View || err != nil || code != http.StatusNotFound {
		t.Errorf("away from loopback: view %v, /ui/ %d %v", away.View, code, err)
	}
	if code, body, err := httpGet(http.DefaultClient, "http://127.0.0.1:"+port+"/metrics"); err != nil || code != http.StatusOK || !strings.Contains(body, "troupe_store_") {
		t.Errorf("away from loopback, /metrics: %d %v", code, err)
	}
}

// `troupe ui` away from loopback serves HTTPS with its certificate to
// clients of the cell's CA only; without TLS, or with a certificate that
// names no host, it refuses to.
func TestUIListener(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	lc := clienttest.Start(ctx, t)
	viewer, err := lc.Credentials(pki.Identity{Role: pki.RoleViewer, Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := lc.Credentials(pki.Identity{Role: pki.RoleAdmin, Name: "me"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := uiListener("0.0.0.0:0", nil); err == nil || !strings.Contains(err.Error(), "serves loopback only") {
		t.Errorf("insecure away from loopback: %v", err)
	}
	dir := t.TempDir()
	if err := lc.CA().IssueTo(dir, "nohosts", pki.Leaf{Identity: pki.Identity{Role: pki.RoleViewer, Name: "nohosts"}, Validity: time.Hour}, time.Now()); err != nil {
		t.Fatal(err)
	}
	files := pki.DirFiles(dir, "nohosts")
	files.CA = pki.DirFiles(lc.PKIDir(), "ca").CA
	nohosts, err := pki.NewSource(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := uiListener("0.0.0.0:0", nohosts); err == nil || !strings.Contains(err.Error(), "names no host") {
		t.Errorf("a certificate without hosts: %v", err)
	}
	if ln, scheme, err := uiListener("127.0.0.1:0", viewer); err != nil || scheme != "http" {
		t.Errorf("loopback: %s %v", scheme, err)
	} else {
		ln.Close()
	}

	ln, scheme, err := uiListener("0.0.0.0:0", viewer)
	if err != nil || scheme != "https" {
		t.Fatalf("away from loopback: %s %v", scheme, err)
	}
	srv := serveOn(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "the view") }), "ui", zap.NewNop())
	defer srv.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	url := "https://127.0.0.1:" + port + "/ui/"
	client := func(tc *tls.Config) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
	}
	if code, body, err := httpGet(client(admin.ClientConfig("127.0.0.1", nil)), url); err != nil || code != http.StatusOK || body != "the view" {
		t.Errorf("a client of the cell's CA: %d %q %v", code, body, err)
	}
	anonymous := admin.ClientConfig("127.0.0.1", nil)
	anonymous.GetClientCertificate = nil
	if _, _, err := httpGet(client(anonymous), url); err == nil {
		t.Errorf("a client without a certificate was served")
	}
}

// `troupe ui` as a process: with a viewer's certificate it serves the
// cell's pages at the address its banner gives; with an admin's it
// refuses to start.
func TestUIRole(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the troupe binary")
	}
	bin := buildTroupe(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	lc := clienttest.Start(ctx, t)
	c := lc.Client()
	if _, err := clientlib.Create(ctx, c, clientlib.Machines, &troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: "m1"},
		Spec: &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 2000, "memory": 1 << 30}}}); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, bin, append([]string{"ui", "--endpoint", lc.EndpointList(), "--http-addr", "127.0.0.1:0"},
		lc.AdminFlags()...)...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not a viewer") {
		t.Errorf("troupe ui with an admin's certificate: %v, %s", err, out)
	}

	cmd := exec.Command(bin, append([]string{"ui", "--endpoint", lc.EndpointList(), "--http-addr", "127.0.0.1:0"},
		lc.Flags(pki.Identity{Role: pki.RoleViewer, Name: "ops"})...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	banner, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("banner: %v", err)
	}
	url := regexp.MustCompile(`http://\S+/ui/`).FindString(banner)
	if url == "" {
		t.Fatalf("no web view address in %q", banner)
	}
	wait.Until(ctx, t, "the cell page with machine m1", func() error {
		code, body, err := httpGet(http.DefaultClient, url)
		if err == nil && (code != http.StatusOK || !strings.Contains(body, `id="machine-count">1<`)) {
			err = fmt.Errorf("%d: %.300s", code, body)
		}
		return err
	})
	if code, body, err := httpGet(http.DefaultClient, strings.TrimSuffix(url, "/ui/")+"/healthz"); err != nil || code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Errorf("/healthz: %d %q %v", code, body, err)
	}
}
